//! How a running plugin call reaches the MCP client that made it: the
//! [`Asker`] a `tools/call` gives its call. On 2025-11-25 the question
//! goes to the client as a request of the server's (`elicitation/create`,
//! `sampling/createMessage`): over streamable HTTP rmcp sends it on the
//! session's GET stream, not the call's own response stream (a client
//! without a GET stream open does not see it); the call's thread waits for
//! the answer, at most the wait it was given, or until the client cancels
//! the call or its session ends. On 2026-07-28 ([`ReplayAsker`]) the call
//! ends with an `input_required` result instead.

use super::*;
use crate::tool::offer::{AskError, Asker};
use rmcp::model::{ClientResult, ServerRequest};
use rmcp::service::Peer;

/// A session's client, asked on behalf of one call.
pub(crate) struct PeerAsker {
    pub(crate) peer: Peer<RoleServer>,
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) cancel: crate::tool::Cancel,
}

/// How often a waiting question looks whether its call was cancelled.
const CANCEL_POLL: Duration = Duration::from_millis(100);

impl PeerAsker {
    /// Whether the client declared what `method` with `params` needs.
    fn declared(&self, method: &str, params: &Value) -> Result<(), AskError> {
        let info = self.peer.peer_info();
        let caps = info.as_ref().map(|i| &i.capabilities);
        let missing = match method {
            "elicitation/create" => match caps.and_then(|c| c.elicitation.as_ref()) {
                None => Some("elicitation"),
                Some(e) if params["mode"] == "url" && e.url.is_none() => Some("URL elicitation"),
                Some(_) => None,
            },
            "sampling/createMessage" => caps.and_then(|c| c.sampling.as_ref()).is_none().then_some("sampling"),
            _ => Some(method),
        };
        match missing {
            Some(what) => Err(AskError::Unsupported(format!("the MCP client declared no {what} capability"))),
            None => Ok(()),
        }
    }
}

impl Asker for PeerAsker {
    fn ask(&self, method: &str, params: Value, wait: Duration) -> Result<Value, AskError> {
        self.declared(method, &params)?;
        let request: ServerRequest = serde_json::from_value(json!({"method": method, "params": params}))
            .map_err(|e| AskError::Failed(format!("the question is not a valid {method} request: {e}")))?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let peer = self.peer.clone();
        let task = self.runtime.spawn(async move {
            let _ = tx.send(peer.send_request(request).await);
        });
        let started = std::time::Instant::now();
        loop {
            match rx.recv_timeout(CANCEL_POLL.min(wait.saturating_sub(started.elapsed()))) {
                Ok(Ok(result)) => {
                    return match result {
                        ClientResult::ElicitResult(_) | ClientResult::CreateMessageResult(_) => {
                            serde_json::to_value(&result).map_err(|e| AskError::Failed(e.to_string()))
                        }
                        _ => Err(AskError::Failed(format!("the client answered {method} with another kind of result"))),
                    };
                }
                Ok(Err(e)) => {
                    return Err(AskError::Failed(format!(
                        "the client refused {method}: {}",
                        crate::tool::log_safe(&toolhost_mcp_wire::upstream::cut(&e.to_string()))
                    )));
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(AskError::Failed("the session ended before the client answered".into()));
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    // A session that ended (its client deleted it, or its
                    // transport closed) will never answer.
                    if self.peer.is_transport_closed() {
                        task.abort();
                        return Err(AskError::Failed("the session ended before the client answered".into()));
                    }
                    if self.cancel.is_cancelled() {
                        task.abort();
                        return Err(AskError::Failed("the client cancelled the call".into()));
                    }
                    if started.elapsed() >= wait {
                        task.abort();
                        return Err(AskError::Timeout(format!(
                            "no answer to {method} within {} ms (limits.input_wait_ms)",
                            wait.as_millis()
                        )));
                    }
                }
            }
        }
    }
}

/// Whether `key` names a question a call can ask: `<n>-elicit` or
/// `<n>-sample`, n from 1 to 1,000.
fn is_question_key(key: &str) -> bool {
    let Some((n, kind)) = key.split_once('-') else { return false };
    matches!(kind, "elicit" | "sample")
        && n.parse::<u32>().is_ok_and(|n| (1..=1000).contains(&n))
        && !n.starts_with('0')
}

/// Where a modern call's earlier answers travel: `requestState` is this
/// prefix and the answers as base64 JSON. The client echoes it; what it
/// holds are the client's own answers, so a client that changes it only
/// changes what it answered.
const STATE_PREFIX: &str = "toolhost-answers-v1:";
/// The largest `requestState` read back, in bytes.
pub(crate) const MAX_REQUEST_STATE: usize = 256 << 10;

/// A call from a client on MCP 2026-07-28 (stateless: no request of the
/// server's reaches it mid-call). Its questions are answered from the
/// answers its client sent (`inputResponses`, and those of earlier tries
/// carried in `requestState`); the first unanswered one ends the call
/// (`AskError::Suspended`) and is sent back as an `input_required` result.
/// The client then answers and tries again, and the plugin runs again from
/// the start: its n-th question of a kind is `<n>-<kind>` in every try.
pub(crate) struct ReplayAsker {
    capabilities: Option<rmcp::model::ClientCapabilities>,
    answers: std::collections::BTreeMap<String, Value>,
    asked: std::sync::atomic::AtomicU32,
    needed: std::sync::Mutex<Option<(String, Value)>>,
}

impl ReplayAsker {
    /// The asker of a call whose request carried `responses` and `state`.
    pub(crate) fn new(
        capabilities: Option<rmcp::model::ClientCapabilities>,
        responses: Option<rmcp::model::InputResponses>,
        state: Option<&str>,
    ) -> Result<ReplayAsker, ErrorData> {
        let mut answers = std::collections::BTreeMap::new();
        if let Some(state) = state {
            let bad = || ErrorData::invalid_params("requestState is not one this server sent", None);
            if state.len() > MAX_REQUEST_STATE {
                return Err(ErrorData::invalid_params(
                    format!("requestState is {} bytes; this server sends at most {MAX_REQUEST_STATE}", state.len()),
                    None,
                ));
            }
            use base64::Engine as _;
            let encoded = state.strip_prefix(STATE_PREFIX).ok_or_else(bad)?;
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(encoded).map_err(|_| bad())?;
            answers = serde_json::from_slice(&bytes).map_err(|_| bad())?;
        }
        answers.extend(responses.unwrap_or_default());
        // Only answers to questions a call can ask (`<n>-elicit`,
        // `<n>-sample`) travel on: nothing else rides the next state.
        answers.retain(|key, _| is_question_key(key));
        Ok(ReplayAsker { capabilities, answers, asked: Default::default(), needed: Default::default() })
    }

    /// The question the call ended on, as an `input_required` result
    /// carrying every answer so far; `None` when it asked nothing unanswered.
    pub(crate) fn input_required(&self) -> Option<Result<rmcp::model::InputRequiredResult, ErrorData>> {
        let (key, request) = self.needed.lock().unwrap_or_else(|p| p.into_inner()).take()?;
        Some((|| {
            let request: rmcp::model::InputRequest = serde_json::from_value(request)
                .map_err(|e| ErrorData::internal_error(format!("a plugin's question did not fit MCP: {e}"), None))?;
            use base64::Engine as _;
            let state = serde_json::to_vec(&self.answers).unwrap_or_default();
            let state = format!("{STATE_PREFIX}{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(state));
            if state.len() > MAX_REQUEST_STATE {
                // The answers are the client's: it sent too much.
                return Err(ErrorData::invalid_params(
                    format!("the answers to this call's questions exceed {MAX_REQUEST_STATE} bytes: answer with less"),
                    None,
                ));
            }
            let requests = std::collections::BTreeMap::from([(key, request)]);
            Ok(rmcp::model::InputRequiredResult::new(Some(requests), Some(state)))
        })())
    }
}

impl Asker for ReplayAsker {
    fn answers_later(&self) -> bool {
        true
    }

    fn ask(&self, method: &str, params: Value, _wait: Duration) -> Result<Value, AskError> {
        let kind = if method == "sampling/createMessage" { "sample" } else { "elicit" };
        let caps = self.capabilities.as_ref();
        let declared = match kind {
            "sample" => caps.is_some_and(|c| c.sampling.is_some()),
            _ => match caps.and_then(|c| c.elicitation.as_ref()) {
                Some(e) => params["mode"] != "url" || e.url.is_some(),
                None => false,
            },
        };
        if !declared {
            let what = match kind {
                "sample" => "sampling",
                _ if caps.is_some_and(|c| c.elicitation.is_some()) => "URL elicitation",
                _ => "elicitation",
            };
            return Err(AskError::Unsupported(format!("the MCP client declared no {what} capability")));
        }
        let n = self.asked.fetch_add(1, Ordering::Relaxed) + 1;
        let key = format!("{n}-{kind}");
        match self.answers.get(&key) {
            Some(answer) => Ok(answer.clone()),
            None => {
                *self.needed.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((key, json!({"method": method, "params": params})));
                Err(AskError::Suspended)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_answers_to_questions_a_call_can_ask_ride_the_state() {
        assert!(is_question_key("1-elicit") && is_question_key("8-sample") && is_question_key("1000-elicit"));
        for bad in ["0-elicit", "01-elicit", "1001-sample", "1-other", "elicit", "-1-elicit", "x-sample", ""] {
            assert!(!is_question_key(bad), "{bad}");
        }
        let responses = std::collections::BTreeMap::from([
            ("1-elicit".to_string(), json!({"action": "accept"})),
            ("junk".to_string(), json!("x".repeat(1000))),
        ]);
        let asker = ReplayAsker::new(None, Some(responses), None).unwrap();
        assert_eq!(asker.answers.keys().collect::<Vec<_>>(), ["1-elicit"]);
    }

    #[test]
    fn an_oversized_request_state_is_the_clients_error_and_says_its_size() {
        let state = format!("{STATE_PREFIX}{}", "A".repeat(MAX_REQUEST_STATE));
        let e = ReplayAsker::new(None, None, Some(&state)).err().unwrap();
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert!(e.message.contains(&format!("{} bytes", state.len())), "{}", e.message);
        let e = ReplayAsker::new(None, None, Some("forged")).err().unwrap();
        assert_eq!(e.message, "requestState is not one this server sent");
    }
}
