//! The upstream's function calls: which are the relay's to run, how many
//! run and wait at once, and their answers on their way back upstream.

use super::{Close, Session};
use crate::{Bridge, Format};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::mpsc;

/// The calls one session runs at once; later ones wait their turn.
pub(super) const CALLS_AT_ONCE: usize = 8;

/// The most calls a session holds started and not yet answered (running
/// or waiting their turn); an upstream asking for more closes it (1014).
const CALLS_QUEUED: usize = 64;

/// The most call ids a session remembers as the relay's (older ones are
/// forgotten: a client's late answer to one then reaches the upstream,
/// which refuses it as answered).
const REMEMBERED_CALLS: usize = 4096;

/// A relayed call's events for the upstream, and its place in the
/// session's count of calls in flight (given back when dropped: once
/// queued upstream, or with the channel of a session that ended).
pub(super) struct Answered(pub(super) Vec<Value>, pub(super) InFlight);

/// One call counted in a session's calls in flight until dropped.
pub(super) struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn count(n: &Arc<AtomicUsize>) -> InFlight {
        n.fetch_add(1, Ordering::AcqRel);
        InFlight(n.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Session {
    /// A function call event: run by the relay unless it is the client's.
    pub(super) fn call(&mut self, event: &Value, calls: &mpsc::UnboundedSender<Answered>) -> Result<(), Close> {
        let mine = |name: &str| !self.client_names.contains(name);
        match self.bridge.format() {
            Format::OpenAiRealtime => {
                let call = match event.get("item") {
                    Some(item) => item,
                    None => event,
                };
                let is_call = event.get("type").and_then(Value::as_str)
                    == Some("response.function_call_arguments.done")
                    || call.get("type").and_then(Value::as_str) == Some("function_call");
                let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
                if !is_call || !mine(name) {
                    return Ok(());
                }
                if let Some(id) = call.get("call_id").and_then(Value::as_str) {
                    self.remember(id);
                }
            }
            Format::GeminiLive => {
                let Some(list) = event.get("toolCall").and_then(|c| c.get("functionCalls")).and_then(Value::as_array)
                else {
                    return Ok(());
                };
                let ours: Vec<Value> = list
                    .iter()
                    .filter(|c| mine(c.get("name").and_then(Value::as_str).unwrap_or_default()))
                    .cloned()
                    .collect();
                if ours.is_empty() {
                    return Ok(());
                }
                for id in ours.iter().filter_map(|c| c.get("id").and_then(Value::as_str)) {
                    self.remember(id);
                }
                let event = json!({"toolCall": {"functionCalls": ours}});
                return self.run_call(event, calls);
            }
        }
        self.run_call(event.clone(), calls)
    }

    /// Remembers `id` as a call the relay answers.
    pub(super) fn remember(&mut self, id: &str) {
        if self.ours.len() >= REMEMBERED_CALLS {
            self.ours.clear();
        }
        self.ours.insert(id.to_string());
    }

    fn run_call(&self, event: Value, calls: &mpsc::UnboundedSender<Answered>) -> Result<(), Close> {
        // An upstream asking for call after call queues them behind the
        // session's CALLS_AT_ONCE, each holding its event: at most
        // CALLS_QUEUED of them, or the session ends.
        if self.in_flight.load(Ordering::Acquire) >= CALLS_QUEUED {
            return Err(Close::new(
                1014,
                format!(
                    "the upstream voice API asked for more than {CALLS_QUEUED} function calls at once; session closed"
                ),
            ));
        }
        let (bridge, calls, running) = (self.bridge.clone(), calls.clone(), self.running.clone());
        // Counted until answered: a stopping session waits for it.
        let counted = InFlight::count(&self.in_flight);
        tokio::spawn(async move {
            let events = match running.acquire_owned().await {
                Ok(_permit) => {
                    let answered = tokio::task::spawn_blocking(move || {
                        let out = bridge.handle_event(&event);
                        (out, bridge)
                    })
                    .await;
                    match answered {
                        Ok((Ok(Some(mut events)), bridge)) => {
                            if bridge.format() == Format::GeminiLive {
                                schedule(&bridge, &mut events);
                            }
                            events
                        }
                        Ok((Ok(None), _)) => Vec::new(),
                        Ok((Err(e), _)) => {
                            tracing::warn!("a function call the relay could not answer: {e}");
                            Vec::new()
                        }
                        Err(e) => {
                            tracing::error!("a relayed call failed: {e}");
                            Vec::new()
                        }
                    }
                }
                Err(_) => Vec::new(),
            };
            // Counted until the session has queued it upstream (or the
            // session is gone and the answer dropped with its channel).
            let _ = calls.send(Answered(events, counted));
        });
        Ok(())
    }
}

/// Gemini `toolResponse`s of NON_BLOCKING functions get their scheduling:
/// `INTERRUPT` in a FAST turn, `WHEN_IDLE` otherwise.
fn schedule(bridge: &Bridge, events: &mut [Value]) {
    let fast = bridge.tier().tier == toolhost_core::budget::Tier::Fast;
    let slow = bridge.non_blocking();
    for e in events {
        let Some(list) =
            e.get_mut("toolResponse").and_then(|r| r.get_mut("functionResponses")).and_then(Value::as_array_mut)
        else {
            continue;
        };
        for r in list {
            let name = r.get("name").and_then(Value::as_str).unwrap_or_default();
            if slow.contains(name) {
                r["scheduling"] = json!(if fast { "INTERRUPT" } else { "WHEN_IDLE" });
            }
        }
    }
}
