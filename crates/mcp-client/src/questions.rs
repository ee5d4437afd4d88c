//! An upstream server's questions (elicitation, sampling), relayed to the
//! client whose call caused them, in whichever revision each side speaks.
//!
//! - **A 2025-11-25 server** asks with a request of its own in the middle
//!   of the call. Over streamable HTTP, rmcp marks a request that came on
//!   a call's own response stream with that call's request id
//!   ([`InboundStreamOrigin`]): the question goes to that call. One that
//!   came elsewhere (stdio, the GET stream) goes to the server's one call
//!   in flight that can ask; with none, or several, it is refused.
//! - **A 2026-07-28 server** ends the call with an `input_required`
//!   result; the provider asks each question and tries again with the
//!   answers ([`super::provider`]).
//!
//! Either way the question goes through the call's [`Asker`]: to the
//! toolhost client as a request mid-call, or as an `input_required` of
//! toolhost's own (the call ends and, answered, runs again from the
//! start), or to the terminal of `toolhost call`. A call asks at most
//! `limits.asks_per_call` questions and waits at most
//! `limits.input_wait_ms` for each; the time it waits is not its
//! deadline's.

use crate::tool::offer::{AskError, Asker};
use rmcp::model::{ErrorData, NumberOrString, RequestId};
use rmcp::service::InboundStreamOrigin;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The largest question relayed, in bytes of JSON (as a plugin's).
const MAX_QUESTION_BYTES: usize = 64 << 10;

/// One call that can ask its client.
pub(super) struct Asking {
    asker: Arc<dyn Asker>,
    /// Longest wait for one answer.
    wait: Duration,
    /// Questions it may ask, and has asked.
    asks: u32,
    asked: AtomicU32,
    /// Time spent waiting for answers: done, and the one under way.
    waited: Mutex<(Duration, Option<Instant>)>,
}

impl Asking {
    pub(super) fn new(asker: Arc<dyn Asker>, wait: Duration, asks: u32) -> Arc<Asking> {
        Arc::new(Asking { asker, wait, asks, asked: AtomicU32::new(0), waited: Mutex::new((Duration::ZERO, None)) })
    }

    /// Whether its client answers only on its next try (MCP 2026-07-28).
    pub(super) fn answers_later(&self) -> bool {
        self.asker.answers_later()
    }

    /// How long the call has waited for its client, the wait under way included.
    pub(super) fn waited(&self) -> Duration {
        let w = self.waited.lock().unwrap_or_else(|p| p.into_inner());
        w.0 + w.1.map_or(Duration::ZERO, |since| since.elapsed())
    }

    /// Asks the call's client, bounded; blocks (call it off the async
    /// workers). [`AskError::Suspended`]: the call must end now.
    pub(super) fn ask(&self, method: &str, params: Value) -> Result<Value, AskError> {
        let size = serde_json::to_vec(&params).map_or(usize::MAX, |v| v.len());
        if size > MAX_QUESTION_BYTES {
            return Err(AskError::Failed(format!(
                "the server's {method} is {size} bytes (at most {MAX_QUESTION_BYTES})"
            )));
        }
        if params["mode"] == "url" && !crate::tool::offer::is_web_url(params["url"].as_str().unwrap_or_default()) {
            return Err(AskError::Failed("an elicitation URL is http: or https:".into()));
        }
        if self.asked.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.asks).then_some(n + 1)).is_err() {
            return Err(AskError::Failed(format!(
                "this call has asked its client {} times already (limits.asks_per_call)",
                self.asks
            )));
        }
        self.waited.lock().unwrap_or_else(|p| p.into_inner()).1 = Some(Instant::now());
        let answer = self.asker.ask(method, params, self.wait);
        let mut w = self.waited.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(since) = w.1.take() {
            w.0 += since.elapsed();
        }
        answer
    }
}

/// The calls of one server that can ask their clients, by the request id
/// each was sent under.
#[derive(Default)]
pub(super) struct Questions {
    calls: Mutex<HashMap<NumberOrString, Arc<Asking>>>,
}

impl std::fmt::Debug for Questions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Questions").finish_non_exhaustive()
    }
}

/// A call's registration; dropping it ends the relay for that call.
pub(super) struct Registration<'a> {
    questions: &'a Questions,
    id: RequestId,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.questions.calls.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id);
    }
}

impl Questions {
    /// Registers the call sent as request `id`.
    pub(super) fn register(&self, id: RequestId, asking: Arc<Asking>) -> Registration<'_> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone(), asking);
        Registration { questions: self, id }
    }

    /// The call sent as request `id`, if it can ask its client.
    pub(super) fn get(&self, id: &RequestId) -> Option<Arc<Asking>> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).get(id).cloned()
    }

    /// The call a server's request belongs to: the one whose response
    /// stream carried it, or else the only one in flight.
    fn call_for(&self, origin: Option<&InboundStreamOrigin>) -> Result<Arc<Asking>, AskError> {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(InboundStreamOrigin::OutboundRequest(id)) = origin {
            return calls.get(id).cloned().ok_or_else(|| {
                AskError::Unsupported("the call this question belongs to cannot ask its client".into())
            });
        }
        let mut them = calls.values();
        match (them.next(), them.next()) {
            (Some(only), None) => Ok(only.clone()),
            (None, _) => Err(AskError::Unsupported("no call in flight to this server can ask its client".into())),
            (Some(_), Some(_)) => Err(AskError::Unsupported(
                "several calls to this server are in flight and the question names none of them".into(),
            )),
        }
    }

    /// Relays a server's `method` request to the client of the call it
    /// belongs to and returns the answer (the MCP result object).
    pub(super) async fn relay(
        &self,
        origin: Option<&InboundStreamOrigin>,
        method: &'static str,
        params: Value,
    ) -> Result<Value, AskError> {
        let call = self.call_for(origin)?;
        // The asker blocks (it waits for a person): never on a worker.
        tokio::task::spawn_blocking(move || call.ask(method, params))
            .await
            .unwrap_or_else(|e| Err(AskError::Failed(format!("the question's task failed: {e}"))))
    }
}

/// A relayed question's failure as the server reads it. An elicitation
/// the caller cannot answer is declined (what a server without an answer
/// handles best); every other failure is an error that says why.
pub(super) fn to_mcp_error(method: &str, e: &AskError) -> ErrorData {
    match e {
        AskError::Suspended => ErrorData::internal_error(
            "the client that made this call answers on its next try (MCP 2026-07-28); the call ends now",
            None,
        ),
        other => ErrorData::internal_error(format!("toolhost could not relay {method}: {other}"), None),
    }
}
