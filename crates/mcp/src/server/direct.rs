//! Direct calls on stdio: a `tools/call` the lane admits, taken from the
//! transport and answered into its output, around rmcp's service.

use super::*;

/// `serve --stdio`'s calls taken around rmcp's service
/// ([`crate::stdio::DirectCalls`]): a `tools/call` the session's lane
/// admits is queued there straight from the transport, and answered from
/// the lane into the transport's output, the plugin's reports first. It is
/// the call `McpFront::call_tool` makes (same checks, audit, errors, and
/// the result shaped as rmcp shapes it for the agreed protocol version)
/// without the task, request context, cancellation token and channels
/// rmcp's service spends per request.
///
/// Left to rmcp (and `call_tool`): every call before the session is
/// initialized (and a session without `initialize`, which never is); a
/// call whose `_meta` carries protocol keys (`io.modelcontextprotocol/…`:
/// rmcp checks them); a call whose id is already in flight here (the
/// stdio transport refuses such a request first; this stays as a guard); and
/// whatever the lane does not admit. A plugin's reports are held while
/// its call runs in the lane (the session is not running then) and sent
/// as they come while it runs on the pool (a queued call sent there at its
/// turn), always before the response.
#[derive(Debug)]
pub struct DirectFront {
    front: McpFront,
    pending: Pending,
    /// Calls taken so far.
    taken: std::sync::atomic::AtomicU64,
}

impl DirectFront {
    /// Direct calls for `front`'s session (which must have a lane to take any).
    pub fn new(front: McpFront) -> DirectFront {
        DirectFront { front, pending: Arc::default(), taken: Default::default() }
    }

    /// How many calls were taken around rmcp's service.
    pub fn calls_taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }
}

/// Direct calls taken and not answered yet, by request id: a cancelled one
/// is flagged (it leaves the lane for the pool and is not answered).
pub(super) type Pending =
    Arc<std::sync::Mutex<std::collections::HashMap<RequestId, Arc<std::sync::atomic::AtomicBool>>>>;

/// A direct call's plugin reports: held while the call runs in the lane,
/// on the session's own thread (nothing is written then); sent as they
/// come from any other thread (the pool).
pub(super) struct Reports {
    /// The thread that drives the session (and runs its lane calls).
    lane_thread: std::thread::ThreadId,
    held: std::sync::Mutex<Vec<PluginEvent>>,
    replies: crate::stdio::Replies,
    progress_token: Option<ProgressToken>,
    /// The session's log level, read when a report goes out (a
    /// `logging/setLevel` read just before the call has been handled by then).
    log_level: Arc<AtomicU8>,
    tool: String,
    /// A cancelled call's reports go nowhere (nor does its response).
    cancelled: Arc<std::sync::atomic::AtomicBool>,
}

impl Reports {
    fn take(&self, event: PluginEvent) {
        if std::thread::current().id() == self.lane_thread {
            self.held.lock().unwrap_or_else(|p| p.into_inner()).push(event);
        } else if !self.cancelled.load(Ordering::Acquire)
            && let Some(n) = self.notification(event)
        {
            self.replies.send(&[n]);
        }
    }

    fn notification(&self, event: PluginEvent) -> Option<ServerJsonRpcMessage> {
        let min_level = self.log_level.load(Ordering::Relaxed);
        report(event, self.progress_token.as_ref(), min_level, &self.tool).map(ServerJsonRpcMessage::notification)
    }

    /// The held reports, as notifications.
    fn held(&self) -> Vec<ServerJsonRpcMessage> {
        let held = std::mem::take(&mut *self.held.lock().unwrap_or_else(|p| p.into_inner()));
        held.into_iter().filter_map(|e| self.notification(e)).collect()
    }
}

/// Where a direct call's result goes: the transport's output.
pub(super) struct DirectAnswer {
    owed: crate::stdio::Owed,
    id: RequestId,
    pending: Pending,
    /// Its reports, and its cancelled flag (the one in `pending`).
    reports: Arc<Reports>,
    dialect: Dialect,
    /// The agreed protocol version is 2026-07-28 or later.
    current: bool,
}

impl DirectAnswer {
    /// Frees its id in `pending` (if the entry there is still this call's).
    fn release(&self) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if pending.get(&self.id).is_some_and(|c| Arc::ptr_eq(c, &self.reports.cancelled)) {
            pending.remove(&self.id);
        }
    }
}

impl Drop for DirectAnswer {
    fn drop(&mut self) {
        self.release();
    }
}

impl crate::lane::Answer<Result<CallToolResult, ErrorData>> for DirectAnswer {
    fn wanted(&self) -> bool {
        !self.reports.cancelled.load(Ordering::Acquire)
    }

    fn give(self, result: Option<Result<CallToolResult, ErrorData>>) {
        if !self.wanted() {
            // Cancelled: no response is expected (the call itself ran, and
            // was audited).
            return;
        }
        let mut messages = self.reports.held();
        let id = self.id.clone();
        tracing::debug!(%id, tool = self.reports.tool, "answering a direct call");
        messages.push(match result {
            Some(Ok(mut r)) => {
                crate::content::shape_result(&mut r, self.dialect);
                let mut result = ServerResult::from(CallToolResponse::from(r));
                // What rmcp's request handler does to every result.
                if self.current {
                    result.fill_missing_cache_hints();
                } else {
                    result.strip_result_type_for_legacy_peer();
                    result.strip_non_object_output_for_legacy_peer();
                }
                ServerJsonRpcMessage::response(result, id)
            }
            Some(Err(mut e)) => {
                // rmcp's handler's one rewrite of errors.
                if self.current && e.code == rmcp::model::ErrorCode::RESOURCE_NOT_FOUND {
                    e.code = rmcp::model::ErrorCode::INVALID_PARAMS;
                }
                ServerJsonRpcMessage::error(e, Some(id))
            }
            None => ServerJsonRpcMessage::error(
                ErrorData::internal_error("call task failed: the call panicked", None),
                Some(id),
            ),
        });
        // The id is free before the client can read the answer (and reuse
        // it); the answer is settled when `self` drops, after its messages
        // are queued.
        self.release();
        self.owed.send(&messages);
    }
}

impl crate::stdio::DirectCalls for DirectFront {
    fn take(
        &self,
        request: JsonRpcRequest<CallToolRequest>,
        replies: &crate::stdio::Replies,
    ) -> Option<JsonRpcRequest<CallToolRequest>> {
        let front = &self.front;
        let (Some(lane), Some(negotiated)) = (&front.lane, front.negotiated.get()) else { return Some(request) };
        // Where rmcp's decoder leaves `params._meta` (its request context's
        // `meta`): protocol keys go to rmcp, which checks them.
        if let Some(meta) = request.request.extensions.get::<RequestMetaObject>()
            && meta.0.0.keys().any(|k| k.starts_with("io.modelcontextprotocol/"))
        {
            return Some(request);
        }
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if pending.contains_key(&request.id) {
            return Some(request);
        }
        // After the id check: a call given back to rmcp holds no place.
        let Some(ticket) = lane.reserve(&front.host, front.agent.as_deref(), &request.request.params.name) else {
            return Some(request);
        };
        let cancelled = Arc::new(std::sync::atomic::AtomicBool::new(false));
        pending.insert(request.id.clone(), cancelled.clone());
        drop(pending);
        self.queue(ticket, request, cancelled, negotiated, replies);
        None
    }

    fn legacy_task(&self, message: &Value, replies: &crate::stdio::Replies) -> bool {
        let front = self.front.clone();
        // Once `initialize` is answered (not only after `initialized`: a
        // client may send its task at once); before, rmcp refuses it.
        if !front.initialized.load(Ordering::Acquire) {
            return false;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return false };
        let owed = replies.owe();
        let message = message.clone();
        runtime.spawn(async move {
            let session = Some(front.session_id.to_string());
            let answer = front.legacy_task(&message, session, None).await;
            owed.send_value(&answer);
        });
        true
    }

    fn cancel(&self, id: &RequestId) {
        if let Some(flag) = self.pending.lock().unwrap_or_else(|p| p.into_inner()).get(id) {
            flag.store(true, Ordering::Release);
        }
    }

    fn in_flight(&self, id: &RequestId) -> bool {
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).contains_key(id)
    }
}

impl DirectFront {
    /// Queues a call taken (its id now pending) in its place in the lane.
    fn queue(
        &self,
        ticket: crate::lane::Ticket,
        request: JsonRpcRequest<CallToolRequest>,
        cancelled: Arc<std::sync::atomic::AtomicBool>,
        negotiated: &ProtocolVersion,
        replies: &crate::stdio::Replies,
    ) {
        let front = &self.front;
        let JsonRpcRequest { id, request, .. } = request;
        let request_meta = request.extensions.get::<RequestMetaObject>();
        let progress_token = request_meta.and_then(RequestMetaObject::get_progress_token);
        let cost = Cost::asked(request_meta.map(|m| &m.0.0));
        let params = request.params;
        let tool = params.name.to_string();
        tracing::debug!(%id, tool, "a direct call");
        let args = Value::Object(params.arguments.unwrap_or_default());
        let reports = Arc::new(Reports {
            // `take` runs in the session's runtime, on the thread driving it.
            lane_thread: std::thread::current().id(),
            held: std::sync::Mutex::default(),
            replies: replies.clone(),
            progress_token,
            log_level: front.log_level.clone(),
            tool: tool.clone(),
            cancelled,
        });
        let sink = reports.clone();
        let events: Arc<dyn Fn(PluginEvent) + Send + Sync> = Arc::new(move |e| sink.take(e));
        let ctx = CallContext {
            events: Some(events),
            session: Some(front.session_id.to_string()),
            trace: request_meta.and_then(|m| crate::trace::incoming(Some(&m.0.0), None)),
            model: request_meta.and_then(|m| crate::tool::ModelNote::from_meta(&m.0.0)).map(Arc::new),
            ..CallContext::default()
        };
        let answer = DirectAnswer {
            owed: replies.owe(),
            id,
            pending: self.pending.clone(),
            reports,
            dialect: Dialect::of(Some(negotiated)),
            current: negotiated.as_str() >= ProtocolVersion::V_2026_07_28.as_str(),
        };
        let front = front.clone();
        ticket.queue(move || front.call_in(&tool, args, ctx, cost), answer);
        self.taken.fetch_add(1, Ordering::Relaxed);
    }
}
