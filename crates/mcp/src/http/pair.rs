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
        inner.pending.insert(code.clone(), Pending { id: id.clone(), agent: agent.to_string(), created: now, expires });
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
        inner.paired.retain(|p| p.id != id);
        before != inner.pending.len() + inner.paired.len()
    }

    /// A request on `/mcp/pair/<code>`: who it acts as (`agent`, `id`), and
    /// the token to hand back when this request is the code's first use.
    /// `session` is the request's session id: once the code has opened a
    /// session, only that session is served on its URL.
    pub fn redeem(&self, code: &str, session: Option<&str>) -> Result<(String, String, Option<String>), PairError> {
        let mut inner = self.lock();
        if let Some(p) = inner.paired.iter().find(|p| same_secret(p.code.as_bytes(), code.as_bytes())) {
            return match (session, &p.session) {
                (Some(s), Some(bound)) if s == bound => Ok((p.agent.clone(), p.id.clone(), None)),
                _ => Err(PairError::Used),
            };
        }
        let Some(p) = inner.pending.remove(code) else { return Err(PairError::Unknown) };
        if p.expires <= SystemTime::now() {
            return Err(PairError::Expired);
        }
        let token = format!("pair_{}", random(b"abcdefghijklmnopqrstuvwxyz234567", 40));
        if inner.paired.len() >= MAX_PAIRED {
            inner.paired.remove(0);
        }
        inner.paired.push(Paired {
            id: p.id.clone(),
            agent: p.agent.clone(),
            token: token.clone(),
            created: SystemTime::now(),
            session: None,
            code: code.to_string(),
        });
        Ok((p.agent, p.id, Some(token)))
    }

    /// Binds the session `session` opened with `code` to it.
    pub fn opened(&self, code: &str, session: &str) {
        if let Some(p) = self.lock().paired.iter_mut().find(|p| p.code == code && p.session.is_none()) {
            p.session = Some(session.to_string());
        }
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
    /// token to hand back on first use, and the agent's endpoint path.
    #[allow(clippy::result_large_err)]
    pub(super) fn paired(
        &self,
        peer: &crate::peer::Peer,
        code: &str,
        session: Option<&str>,
    ) -> Result<(super::Identity, super::TokenId, Option<String>, String), axum::response::Response> {
        use axum::http::StatusCode;
        let source = crate::conns::source_network(peer.addr.ip());
        if let Some(wait) = self.auth_failures.wait(&source) {
            return Err(super::too_many("too many failed authentications", wait));
        }
        match self.pairings.redeem(code, session) {
            Ok((agent, id, token)) => {
                let path = format!("/mcp/{}", crate::agent_slug(&agent));
                Ok((super::Identity::Agent(agent), super::TokenId(format!("pair:{id}").into()), token, path))
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
        let p = Pairings::default();
        let minted = p.mint("lyra", Duration::from_secs(600)).unwrap();
        let code = minted.code.clone().unwrap();
        assert_eq!(code.len(), 11, "{code}");
        let (agent, id, token) = p.redeem(&code, None).unwrap();
        assert_eq!((agent.as_str(), id.as_str()), ("lyra", minted.id.as_str()));
        let token = token.expect("the first use hands out a token");
        p.opened(&code, "s1");
        assert_eq!(p.redeem(&code, Some("s1")).unwrap().2, None, "its own session goes on");
        assert_eq!(p.redeem(&code, None), Err(PairError::Used));
        assert_eq!(p.redeem(&code, Some("s2")), Err(PairError::Used));
        assert_eq!(p.token(&token), Some(("lyra".into(), id.clone())));
        assert_eq!(p.token("pair_wrong"), None);
        assert_eq!(p.list().iter().map(|v| v.state.as_str()).collect::<Vec<_>>(), ["paired"]);
        assert!(p.revoke(&id));
        assert_eq!(p.token(&token), None, "revoked");
        assert_eq!(p.redeem("NOPE-NOPE", None), Err(PairError::Unknown));
    }

    #[test]
    fn codes_expire_are_revocable_and_bounded() {
        let p = Pairings::default();
        let c = p.mint("lyra", Duration::ZERO).unwrap();
        assert_eq!(p.redeem(c.code.as_deref().unwrap(), None), Err(PairError::Expired));
        let c = p.mint("lyra", Duration::from_secs(60)).unwrap();
        assert!(p.revoke(c.code.as_deref().unwrap()));
        assert_eq!(p.redeem(c.code.as_deref().unwrap(), None), Err(PairError::Unknown));
        for _ in 0..MAX_PENDING {
            p.mint("lyra", Duration::from_secs(60)).unwrap();
        }
        assert_eq!(p.mint("lyra", Duration::from_secs(60)), Err(PairError::Full));
    }
}
