//! Pairing codes: the DM lets a player's own agent join the table as an NPC
//! without handing out a static token. `toolhost pair AGENT` (or the DM's
//! page) mints a one-time code; a client that opens `/mcp/pair/<code>` gets
//! a session bound to that agent, and in the answer to its first request
//! (`x-toolhost-token`) a token of its own for later requests on
//! `/mcp/<agent>`. A code works once and expires; codes and the tokens they
//! gave are listed and revocable, and live as long as the host process.
//!
//! Guessing a code spends the front's failed-authentication allowance, like
//! a wrong token; at most [`MAX_PENDING`] codes wait at once, and at most
//! [`MAX_PAIRED`] paired tokens are live.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};
use toolhost_base::seal::same_secret;

/// Codes waiting to be used, all agents together.
pub const MAX_PENDING: usize = 64;
/// Paired tokens live at once; the oldest is dropped past it.
pub const MAX_PAIRED: usize = 256;
/// The longest a code may wait.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// The header the first answer carries the paired token in.
pub const TOKEN_HEADER: &str = "x-toolhost-token";

/// A code or a paired token, as the operator sees it (never a secret but
/// a pending code itself, which the operator hands out).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PairingView {
    /// Names it for `revoke` and in the audit trail (`pair:<id>`).
    pub id: String,
    /// The agent it joins as.
    pub agent: String,
    /// `pending` (the code waits), `paired` (used; its token is live).
    pub state: String,
    /// The code, while pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// When it was minted (RFC 3339).
    pub created: String,
    /// When a pending code expires (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
}

struct Pending {
    id: String,
    agent: String,
    created: SystemTime,
    expires: SystemTime,
    /// A request is using it now ([`Claim`]).
    claimed: bool,
}

struct Paired {
    id: String,
    agent: String,
    token: String,
    created: SystemTime,
    /// The session the code opened: the pairing URL serves it alone.
    session: Option<String>,
    code: String,
}

/// Why a code is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PairError {
    /// No such code (never minted, revoked, or expired and swept).
    #[error("no such pairing code: ask the DM for a new one")]
    Unknown,
    /// Minted, but its time is over.
    #[error("this pairing code has expired: ask the DM for a new one")]
    Expired,
    /// Used already, by another session.
    #[error("this pairing code has been used; a code works once (the client that used it has a token of its own)")]
    Used,
    /// Too many waiting.
    #[error("{MAX_PENDING} pairing codes are waiting already: revoke some, or let them expire")]
    Full,
    /// A first request that is not a POST (a link preview, a browser):
    /// the code is left as it was.
    #[error("a pairing URL is for an MCP client (its first POST opens the session); nothing was used")]
    NotAClient,
    /// Its source has spent its failed-authentication allowance.
    #[error("too many failed authentications from here")]
    Throttled,
}

/// A pending code held by the request using it: [`Claim::settle`] makes
/// the pairing when the request succeeded; dropped unsettled (the request
/// failed or ended early), the code waits again.
pub struct Claim {
    pairings: std::sync::Arc<Pairings>,
    code: String,
    settled: bool,
}

impl Claim {
    /// Settles the claim: on `ok`, the code is used, bound to `session`
    /// (the session it opened, if any), and the token to hand back is
    /// returned; otherwise the code waits again.
    pub fn settle(mut self, ok: bool, session: Option<&str>) -> Option<String> {
        self.settled = true;
        self.pairings.settle(&self.code, ok, session)
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.settled {
            self.pairings.settle(&self.code, false, None);
        }
    }
}

/// The pairing codes of one host.
#[derive(Default)]
pub struct Pairings {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    pending: HashMap<String, Pending>,
    paired: Vec<Paired>,
}

fn random(alphabet: &[u8], n: usize) -> String {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).expect("the OS random source");
    // 32 letters: a byte's low 5 bits are uniform.
    bytes.iter().map(|b| alphabet[(*b as usize) % alphabet.len()] as char).collect()
}

/// Letters and digits without look-alikes (0/O, 1/I): 32 of them, so a
/// 10-letter code holds 50 bits.
const CODE_ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";

fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl Pairings {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new code for `agent`, good for `ttl` (at most [`MAX_TTL`]).
    pub fn mint(&self, agent: &str, ttl: Duration) -> Result<PairingView, PairError> {
        let mut inner = self.lock();
        let now = SystemTime::now();
        inner.pending.retain(|_, p| p.expires > now);
        if inner.pending.len() >= MAX_PENDING {
            return Err(PairError::Full);
        }
        let code = format!("{}-{}", random(CODE_ALPHABET, 5), random(CODE_ALPHABET, 5));
        let id = random(b"abcdefghijklmnopqrstuvwxyz234567", 8);
        let expires = now + ttl.min(MAX_TTL);
        inner.pending.insert(
            code.clone(),
            Pending { id: id.clone(), agent: agent.to_string(), created: now, expires, claimed: false },
        );
        Ok(PairingView {
            id,
            agent: agent.to_string(),
            state: "pending".into(),
            code: Some(code),
            created: rfc3339(now),
            expires: Some(rfc3339(expires)),
        })
    }

    /// The codes waiting and the tokens paired, oldest first.
    pub fn list(&self) -> Vec<PairingView> {
        let mut inner = self.lock();
        let now = SystemTime::now();
        inner.pending.retain(|_, p| p.expires > now);
        let mut out: Vec<(SystemTime, PairingView)> = inner
            .pending
            .iter()
            .map(|(code, p)| {
                (
                    p.created,
                    PairingView {
                        id: p.id.clone(),
                        agent: p.agent.clone(),
                        state: "pending".into(),
                        code: Some(code.clone()),
                        created: rfc3339(p.created),
                        expires: Some(rfc3339(p.expires)),
                    },
                )
            })
            .collect();
        out.extend(inner.paired.iter().map(|p| {
            (
                p.created,
                PairingView {
                    id: p.id.clone(),
                    agent: p.agent.clone(),
                    state: "paired".into(),
                    code: None,
                    created: rfc3339(p.created),
                    expires: None,
                },
            )
        }));
        out.sort_by_key(|a| a.0);
        out.into_iter().map(|(_, v)| v).collect()
    }

    /// Revokes the code or paired token `id` (or a pending code given as
    /// itself); false when there is none.
    pub fn revoke(&self, id: &str) -> bool {
        let mut inner = self.lock();
        let before = inner.pending.len() + inner.paired.len();
        inner.pending.retain(|code, p| p.id != id && code != id);
        inner.paired.retain(|p| p.id != id && p.code != id);
        before != inner.pending.len() + inner.paired.len()
    }

    /// A request on `/mcp/pair/<code>`: who it acts as (`agent`, `id`),
    /// and whether it is the code's first use (then the caller holds the
    /// code until it settles, [`Claim`]). `session` is the request's
    /// session id: once the code has opened a session, only that session
    /// is served on its URL. A first use must be a POST (`post`) from a
    /// source not throttled (`may_claim`).
    pub fn redeem(
        &self,
        code: &str,
        session: Option<&str>,
        post: bool,
        may_claim: bool,
    ) -> Result<(String, String, bool), PairError> {
        let mut inner = self.lock();
        if let Some(p) = inner.paired.iter().find(|p| same_secret(p.code.as_bytes(), code.as_bytes())) {
            return match (session, &p.session) {
                (Some(s), Some(bound)) if s == bound => Ok((p.agent.clone(), p.id.clone(), false)),
                _ => Err(PairError::Used),
            };
        }
        let Some(p) = inner.pending.get_mut(code) else { return Err(PairError::Unknown) };
        if p.expires <= SystemTime::now() {
            return Err(PairError::Expired);
        }
        if p.claimed {
            return Err(PairError::Used);
        }
        if !post || session.is_some() {
            return Err(PairError::NotAClient);
        }
        if !may_claim {
            return Err(PairError::Throttled);
        }
        p.claimed = true;
        Ok((p.agent.clone(), p.id.clone(), true))
    }

    /// Holds `code` (claimed by [`Self::redeem`]) for the request using it.
    pub fn claim(self: &std::sync::Arc<Self>, code: &str) -> Claim {
        Claim { pairings: self.clone(), code: code.to_string(), settled: false }
    }

    fn settle(&self, code: &str, ok: bool, session: Option<&str>) -> Option<String> {
        let mut inner = self.lock();
        if !ok {
            if let Some(p) = inner.pending.get_mut(code) {
                p.claimed = false;
            }
            return None;
        }
        let p = inner.pending.remove(code)?;
        let token = format!("pair_{}", random(b"abcdefghijklmnopqrstuvwxyz234567", 40));
        if inner.paired.len() >= MAX_PAIRED {
            let gone = inner.paired.remove(0);
            tracing::warn!(id = %gone.id, agent = %gone.agent, "{MAX_PAIRED} paired clients: the oldest one's token no longer works");
        }
        inner.paired.push(Paired {
            id: p.id,
            agent: p.agent,
            token: token.clone(),
            created: SystemTime::now(),
            session: session.map(str::to_string),
            code: code.to_string(),
        });
        Some(token)
    }

    /// The agent and id of a paired `token`, comparing every one.
    pub fn token(&self, token: &str) -> Option<(String, String)> {
        if !token.starts_with("pair_") {
            return None;
        }
        let inner = self.lock();
        inner
            .paired
            .iter()
            .fold(None, |found, p| if same_secret(p.token.as_bytes(), token.as_bytes()) { Some(p) } else { found })
            .map(|p| (p.agent.clone(), p.id.clone()))
    }
}

impl super::Front {
    /// A request on `/mcp/pair/<code>`: who it acts as, its audit id, the
    /// agent's endpoint path, and the code's claim on its first use.
    #[allow(clippy::result_large_err)]
    pub(super) fn paired(
        &self,
        peer: &crate::peer::Peer,
        code: &str,
        session: Option<&str>,
        post: bool,
    ) -> Result<(super::Identity, super::TokenId, String, Option<Claim>), axum::response::Response> {
        use axum::http::StatusCode;
        let source = crate::conns::source_network(peer.addr.ip());
        let throttled = self.auth_failures.wait(&source);
        match self.pairings.redeem(code, session, post, throttled.is_none()) {
            Ok((agent, id, first)) => {
                let path = format!("/mcp/{}", crate::agent_slug(&agent));
                let claim = first.then(|| self.pairings.claim(code));
                Ok((super::Identity::Agent(agent), super::TokenId(format!("pair:{id}").into()), path, claim))
            }
            Err(PairError::Throttled) => {
                Err(super::too_many("too many failed authentications", throttled.unwrap_or_default()))
            }
            Err(PairError::NotAClient) => {
                Err(super::error(StatusCode::METHOD_NOT_ALLOWED, "invalid_request", &PairError::NotAClient.to_string()))
            }
            Err(e) => {
                if e == PairError::Unknown
                    && let Err(wait) = self.auth_failures.take(&source)
                {
                    return Err(super::too_many("too many failed authentications", wait));
                }
                Err(super::error(StatusCode::FORBIDDEN, "forbidden", &e.to_string()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_works_once_for_its_session_and_its_token_until_revoked() {
        let p = std::sync::Arc::new(Pairings::default());
        let minted = p.mint("lyra", Duration::from_secs(600)).unwrap();
        let code = minted.code.clone().unwrap();
        assert_eq!(code.len(), 11, "{code}");
        assert_eq!(p.redeem(&code, None, false, true), Err(PairError::NotAClient), "a GET uses nothing");
        // A first request that fails leaves the code waiting.
        let (agent, id, first) = p.redeem(&code, None, true, true).unwrap();
        assert_eq!((agent.as_str(), id.as_str(), first), ("lyra", minted.id.as_str(), true));
        assert_eq!(p.redeem(&code, None, true, true), Err(PairError::Used), "held while in use");
        drop(p.claim(&code));
        let (_, _, first) = p.redeem(&code, None, true, true).unwrap();
        assert!(first, "released: it waits again");
        let token = p.claim(&code).settle(true, Some("s1")).expect("the first use hands out a token");
        assert_eq!(p.redeem(&code, Some("s1"), true, true).unwrap(), ("lyra".into(), id.clone(), false));
        assert_eq!(p.redeem(&code, None, true, true), Err(PairError::Used));
        assert_eq!(p.redeem(&code, Some("s2"), true, true), Err(PairError::Used));
        assert_eq!(p.token(&token), Some(("lyra".into(), id.clone())));
        assert_eq!(p.token("pair_wrong"), None);
        assert_eq!(p.list().iter().map(|v| v.state.as_str()).collect::<Vec<_>>(), ["paired"]);
        assert!(p.revoke(&code), "a used code revokes its pairing too");
        assert_eq!(p.token(&token), None, "revoked");
        assert_eq!(p.redeem("NOPE-NOPE", None, true, true), Err(PairError::Unknown));
    }

    #[test]
    fn codes_expire_are_revocable_and_bounded() {
        let p = Pairings::default();
        let c = p.mint("lyra", Duration::ZERO).unwrap();
        assert_eq!(p.redeem(c.code.as_deref().unwrap(), None, true, true), Err(PairError::Expired));
        let c = p.mint("lyra", Duration::from_secs(60)).unwrap();
        assert_eq!(p.redeem(c.code.as_deref().unwrap(), None, true, false), Err(PairError::Throttled));
        assert!(p.revoke(c.code.as_deref().unwrap()));
        assert_eq!(p.redeem(c.code.as_deref().unwrap(), None, true, true), Err(PairError::Unknown));
        for _ in 0..MAX_PENDING {
            p.mint("lyra", Duration::from_secs(60)).unwrap();
        }
        assert_eq!(p.mint("lyra", Duration::from_secs(60)), Err(PairError::Full));
    }
}
