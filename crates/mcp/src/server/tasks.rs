//! Tasks: a long tool called to run on its own, its result fetched later
//! (MCP's tasks, in both revisions: 2025-11-25's experimental `tasks` and
//! 2026-07-28's `io.modelcontextprotocol/tasks` extension).
//!
//! A tool runs as a task when it says it runs long
//! ([`crate::tool::ToolMeta::long_running`]), when it is one of the
//! operator's long tools for the agent, or when it is in the DEEP tier for
//! the agent, and the client asked for a task (2025-11-25: `params.task`)
//! or declared the extension (2026-07-28). The call itself is the one
//! `tools/call` makes (the same checks, deadline, limits and audit); only
//! its answer waits. Per agent (one [`Tasks`] per endpoint, shared by its
//! sessions): at most `limits.tasks_per_agent` running, at most
//! `limits.task_results_per_agent` finished ones kept (the oldest dropped
//! first), each kept at most `limits.task_ttl_ms` from its creation. Task
//! ids are 128 random bits: whoever may use the endpoint and holds an id
//! may read or cancel that task. A cancelled task's call stops (a plugin
//! within 50 ms of running code; an upstream server's request is
//! cancelled). A task's call cannot ask its client questions (it has no
//! request to ask on): a plugin's question gets the typed "cannot ask"
//! error, as for a client that declared no elicitation.

use super::*;
use std::collections::HashMap;
use std::time::Instant;

/// The status a task reports while its tool runs, and how often a client
/// is asked to poll.
const POLL_INTERVAL_MS: u64 = 250;

/// One endpoint's tasks (so one agent's).
#[derive(Debug, Default)]
pub struct Tasks {
    map: std::sync::Mutex<HashMap<String, Entry>>,
    /// Where the fleet's hosts share their tasks, and this endpoint's name
    /// there (its agent; empty for the operator's).
    share: Option<(Arc<dyn TaskShare>, String)>,
}

/// Why a fleet's shared tasks could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ShareError(pub String);

/// Where a fleet's hosts keep their tasks (the control plane's PostgreSQL,
/// `cluster.url`), so that a task made through one host is read, waited
/// for and cancelled through any other. A record is a task's state as
/// JSON: its status, status message, times, ttl, and result or error.
pub trait TaskShare: Send + Sync + std::fmt::Debug {
    /// Records task `id` of `endpoint`, made here; `ending`: its final
    /// state, which does not replace a cancellation asked through another
    /// host. Answers whether another host asked to cancel it.
    fn put(
        &self,
        endpoint: &str,
        id: &str,
        record: Value,
        ttl: Duration,
        ending: bool,
    ) -> futures::future::BoxFuture<'static, Result<bool, ShareError>>;
    /// Task `id` of `endpoint` as the host running it last recorded it.
    fn get(&self, endpoint: &str, id: &str) -> futures::future::BoxFuture<'static, Result<Option<Value>, ShareError>>;
    /// Asks the host running task `id` of `endpoint` to cancel it (marked
    /// cancelled at once while it works); the record after.
    fn cancel(
        &self,
        endpoint: &str,
        id: &str,
    ) -> futures::future::BoxFuture<'static, Result<Option<Value>, ShareError>>;
    /// Whether another host asked to cancel task `id` of `endpoint`.
    fn cancel_asked(&self, endpoint: &str, id: &str) -> futures::future::BoxFuture<'static, Result<bool, ShareError>>;
}

/// How often a running task looks whether another host asked to cancel it.
const SHARED_CANCEL_POLL: Duration = Duration::from_secs(1);

/// How long a finished task's result is kept at least, however short its
/// ttl: a task that outlives its ttl still has a result to fetch.
const FINISHED_KEEP: Duration = Duration::from_secs(60);

/// The longest a shared read or write is waited for.
const SHARE_WAIT: Duration = Duration::from_secs(3);

#[derive(Debug)]
struct Entry {
    created: chrono::DateTime<chrono::Utc>,
    updated: chrono::DateTime<chrono::Utc>,
    /// When it may be dropped: creation + its ttl, and at least
    /// [`FINISHED_KEEP`] after it ends (a running task is kept).
    expires: Instant,
    /// Who made it: the token's audit id, else the session. Only they see
    /// it in `tasks/list`.
    owner: Option<String>,
    ttl_ms: u64,
    state: State,
    message: Option<String>,
    cancel: crate::tool::Cancel,
    /// Set once the task ends: `tasks/result` waits on it.
    done: tokio::sync::watch::Sender<bool>,
}

#[derive(Debug, Clone)]
enum State {
    Working,
    /// The tool's result (an `isError` result included), as the client's
    /// revision shapes it.
    Completed(JsonObject),
    /// The JSON-RPC error the call was answered with.
    Failed(JsonObject),
    Cancelled,
}

/// What a client is shown of a task.
#[derive(Debug, Clone)]
pub(crate) struct View {
    pub(crate) id: String,
    state: State,
    message: Option<String>,
    created: String,
    updated: String,
    ttl_ms: u64,
}

impl View {
    fn status(&self) -> &'static str {
        match self.state {
            State::Working => "working",
            State::Completed(_) => "completed",
            State::Failed(_) => "failed",
            State::Cancelled => "cancelled",
        }
    }

    /// The record a fleet shares ([`TaskShare`]).
    fn record(&self) -> Value {
        let mut r = json!({
            "status": self.status(),
            "message": self.message,
            "created": self.created,
            "updated": self.updated,
            "ttl_ms": self.ttl_ms,
        });
        match &self.state {
            State::Completed(result) => r["result"] = Value::Object(result.clone()),
            State::Failed(error) => r["error"] = Value::Object(error.clone()),
            _ => {}
        }
        r
    }

    /// A task another host recorded.
    fn from_record(id: &str, r: &Value) -> Option<View> {
        let object = |k: &str| r.get(k).and_then(Value::as_object).cloned();
        let state = match r.get("status")?.as_str()? {
            "working" => State::Working,
            "completed" => State::Completed(object("result")?),
            "failed" => State::Failed(object("error")?),
            "cancelled" => State::Cancelled,
            _ => return None,
        };
        Some(View {
            id: id.to_string(),
            state,
            message: r.get("message").and_then(Value::as_str).map(str::to_string),
            created: r.get("created")?.as_str()?.to_string(),
            updated: r.get("updated")?.as_str()?.to_string(),
            ttl_ms: r.get("ttl_ms")?.as_u64()?,
        })
    }

    /// 2025-11-25's `Task`.
    pub(crate) fn legacy(&self) -> Value {
        let mut t = json!({
            "taskId": self.id,
            "status": self.status(),
            "createdAt": self.created,
            "lastUpdatedAt": self.updated,
            "ttl": self.ttl_ms,
            "pollInterval": POLL_INTERVAL_MS,
        });
        if let Some(m) = &self.message {
            t["statusMessage"] = json!(m);
        }
        t
    }

    /// 2026-07-28's `Task`.
    pub(crate) fn modern(&self) -> rmcp::model::Task {
        let status = match self.state {
            State::Working => rmcp::model::TaskStatus::Working,
            State::Completed(_) => rmcp::model::TaskStatus::Completed,
            State::Failed(_) => rmcp::model::TaskStatus::Failed,
            State::Cancelled => rmcp::model::TaskStatus::Cancelled,
        };
        let mut t = rmcp::model::Task::new(self.id.clone(), status, self.created.clone(), self.updated.clone())
            .with_ttl_ms(self.ttl_ms)
            .with_poll_interval_ms(POLL_INTERVAL_MS);
        if let Some(m) = &self.message {
            t = t.with_status_message(m.clone());
        }
        t
    }

    /// 2026-07-28's `DetailedTask`: the task with its result or error.
    pub(crate) fn detailed(&self) -> rmcp::model::DetailedTask {
        use rmcp::model::TaskPayload;
        let payload = match &self.state {
            State::Working => TaskPayload::Working,
            State::Completed(r) => TaskPayload::Completed { result: r.clone() },
            State::Failed(e) => TaskPayload::Failed { error: e.clone() },
            State::Cancelled => TaskPayload::Cancelled,
        };
        rmcp::model::DetailedTask::new(self.modern(), payload)
    }
}

/// `-32602` naming a task id this endpoint does not hold.
fn unknown(id: &str) -> ErrorData {
    let id = crate::tool::log_safe(crate::tool::cut_at(id, 64).0);
    ErrorData::invalid_params(
        format!(
            "no task {id:?} here: it never was, it expired (tasks are kept limits.task_ttl_ms from creation), or it was dropped for newer ones (limits.task_results_per_agent)"
        ),
        Some(json!({"taskId": id})),
    )
}

/// The fleet's shared tasks could not be read: an internal error that says so.
fn unshared(why: &str) -> ErrorData {
    ErrorData::internal_error(
        format!("the fleet's tasks could not be read ({why}): try again, or ask the host that made the task"),
        None,
    )
}

fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

fn stamp(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl Tasks {
    /// Tasks of the endpoint `endpoint` (its agent; empty for the
    /// operator's) shared through `share` with the fleet's other hosts.
    pub fn shared(share: Arc<dyn TaskShare>, endpoint: &str) -> Tasks {
        Tasks { map: Default::default(), share: Some((share, endpoint.to_string())) }
    }

    fn view(id: &str, e: &Entry) -> View {
        View {
            id: id.to_string(),
            state: e.state.clone(),
            message: e.message.clone(),
            created: stamp(&e.created),
            updated: stamp(&e.updated),
            ttl_ms: e.ttl_ms,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops finished tasks past their time; then, while more than `kept`
    /// finished ones remain, the oldest finished.
    fn sweep(map: &mut HashMap<String, Entry>, kept: usize) {
        let now = Instant::now();
        map.retain(|_, e| matches!(e.state, State::Working) || e.expires > now);
        let mut finished: Vec<(chrono::DateTime<chrono::Utc>, String)> = map
            .iter()
            .filter(|(_, e)| !matches!(e.state, State::Working))
            .map(|(id, e)| (e.updated, id.clone()))
            .collect();
        if finished.len() > kept {
            finished.sort();
            for (_, id) in finished.iter().take(finished.len() - kept) {
                map.remove(id);
            }
        }
    }

    /// Starts `tool` with `args` as a task of `front`'s agent, kept `ttl`
    /// (at most the operator's); refused past `limits.tasks_per_agent`.
    /// The result is shaped for `dialect`.
    pub(crate) async fn start(
        self: &Arc<Self>,
        front: &McpFront,
        tool: &str,
        args: Value,
        ttl_ms: Option<u64>,
        who: super::handler::Caller,
        dialect: Dialect,
    ) -> Result<View, ErrorData> {
        let limits = front.host.runtime().limits();
        let ttl_ms = ttl_ms.unwrap_or(u64::MAX).min(limits.task_ttl.as_millis() as u64).max(1000);
        let cancel = crate::tool::Cancel::default();
        let id = new_session_id().to_string();
        let view = {
            let mut map = self.lock();
            Self::sweep(&mut map, limits.task_results_per_agent as usize);
            let running = map.values().filter(|e| matches!(e.state, State::Working)).count();
            if running >= limits.tasks_per_agent as usize {
                return Err(ErrorData::new(
                    rmcp::model::ErrorCode(-32000),
                    format!(
                        "{} already has {running} tasks running (limits.tasks_per_agent): wait for one to finish, or cancel one",
                        front.agent.as_deref().unwrap_or("the operator")
                    ),
                    Some(json!({"code": "capacity_exceeded"})),
                ));
            }
            // The agent's rate is spent now: a task over it is refused here,
            // not accepted to fail at once.
            front.host.spend_call(front.agent.as_deref(), who.token.as_deref()).map_err(|e| {
                ErrorData::new(rmcp::model::ErrorCode(-32000), e.to_string(), Some(json!({"code": e.code()})))
            })?;
            let (done, _) = tokio::sync::watch::channel(false);
            let at = now();
            let entry = Entry {
                created: at,
                updated: at,
                expires: Instant::now() + Duration::from_millis(ttl_ms),
                owner: who.token.clone().or_else(|| who.session.clone()),
                ttl_ms,
                state: State::Working,
                message: None,
                cancel: cancel.clone(),
                done,
            };
            let view = Self::view(&id, &entry);
            map.insert(id.clone(), entry);
            view
        };
        let tasks = Arc::clone(self);
        let kept = limits.task_results_per_agent as usize;
        let front = front.clone();
        let tool = tool.to_string();
        let lane = front.lane.clone();
        let super::handler::Caller { session, token, trace, model } = who;
        let task_id = id.clone();
        // Progress messages become the task's status message.
        let reports = Arc::downgrade(self);
        let reports_id = id.clone();
        let events: Arc<dyn Fn(PluginEvent) + Send + Sync> = Arc::new(move |e| {
            if let PluginEvent::Progress { message: Some(m), .. } = e
                && let Some(tasks) = reports.upgrade()
                && let Some(entry) = tasks.lock().get_mut(&reports_id)
                && matches!(entry.state, State::Working)
            {
                entry.message = Some(crate::tool::cut_at(&m, 512).0.to_string());
                entry.updated = now();
            }
        });
        let ctx = CallContext {
            events: Some(events),
            session,
            token,
            cancel: Some(cancel),
            rate_spent: true,
            trace,
            model,
            ..CallContext::default()
        };
        let run = tokio::task::spawn_blocking(move || {
            let _calls = lane.as_ref().map(|l| l.calls().enter());
            front.call_in(&tool, args, ctx, Cost::Omitted)
        });
        // In a fleet, recorded before the client hears of it: another host
        // may be asked for it next.
        if let Some((share, endpoint)) = &self.share {
            let put = share.put(endpoint, &id, view.record(), Duration::from_millis(ttl_ms), false);
            if let Err(e) =
                tokio::time::timeout(SHARE_WAIT, put).await.unwrap_or_else(|_| Err(ShareError("no answer".into())))
            {
                tracing::warn!(task = %id, "the task is not shared with the fleet's other hosts: {e}");
            }
        }
        let shared = self.share.clone();
        tokio::spawn(async move {
            let mut run = std::pin::pin!(run);
            let outcome = loop {
                let Some((share, endpoint)) = &shared else { break run.await };
                tokio::select! {
                    outcome = &mut run => break outcome,
                    () = tokio::time::sleep(SHARED_CANCEL_POLL) => {
                        if let Ok(Ok(true)) = tokio::time::timeout(SHARE_WAIT, share.cancel_asked(endpoint, &task_id)).await {
                            let _ = tasks.cancel(&task_id, false);
                        }
                    }
                }
            };
            let ended = tasks.end(&task_id, outcome, dialect, kept);
            if let (Some((share, endpoint)), Some(view)) = (&shared, ended) {
                let put = share.put(endpoint, &task_id, view.record(), Duration::from_millis(view.ttl_ms), true);
                match tokio::time::timeout(SHARE_WAIT, put).await {
                    // Cancelled through another host as it ended: so it is here too.
                    Ok(Ok(true)) => tasks.cancelled_elsewhere(&task_id),
                    Ok(Ok(false)) => {}
                    Ok(Err(e)) => tracing::warn!(task = %task_id, "the task's end is not shared: {e}"),
                    Err(_) => tracing::warn!(task = %task_id, "the task's end is not shared: no answer"),
                }
            }
        });
        Ok(view)
    }

    /// Records how task `id`'s call ended (unless it was cancelled); its
    /// state after.
    fn end(
        &self,
        id: &str,
        outcome: Result<Result<CallToolResult, ErrorData>, tokio::task::JoinError>,
        dialect: Dialect,
        kept: usize,
    ) -> Option<View> {
        {
            let mut map = self.lock();
            let entry = map.get_mut(id)?;
            entry.expires = entry.expires.max(Instant::now() + FINISHED_KEEP);
            if matches!(entry.state, State::Working) {
                entry.state = match outcome {
                    Ok(Ok(mut r)) => {
                        crate::content::shape_result(&mut r, dialect);
                        match serde_json::to_value(&r) {
                            Ok(Value::Object(o)) => State::Completed(o),
                            _ => State::Failed(error_object(&ErrorData::internal_error(
                                "the result could not be written",
                                None,
                            ))),
                        }
                    }
                    Ok(Err(e)) => State::Failed(error_object(&e)),
                    Err(e) => State::Failed(error_object(&ErrorData::internal_error(
                        format!("the task's call failed: {e}"),
                        None,
                    ))),
                };
                entry.updated = now();
            }
            entry.done.send_replace(true);
        }
        let view = self.get(id).ok();
        // Finished results are held to their number at all times.
        Self::sweep(&mut self.lock(), kept);
        view
    }

    /// The task `id`.
    pub(crate) fn get(&self, id: &str) -> Result<View, ErrorData> {
        let map = self.lock();
        let live = |e: &&Entry| matches!(e.state, State::Working) || e.expires > Instant::now();
        map.get(id).filter(live).map(|e| Self::view(id, e)).ok_or_else(|| unknown(id))
    }

    /// Cancels the task `id`: its call is stopped. A finished task is
    /// left as it is (`Err` with `strict`: 2025-11-25 says so).
    pub(crate) fn cancel(&self, id: &str, strict: bool) -> Result<View, ErrorData> {
        let mut map = self.lock();
        let entry = map.get_mut(id).ok_or_else(|| unknown(id))?;
        match entry.state {
            State::Working => {
                entry.state = State::Cancelled;
                entry.message = Some("cancelled by the client".into());
                entry.updated = now();
                entry.cancel.cancel();
                entry.done.send_replace(true);
            }
            _ if strict => {
                let status = Self::view(id, entry).status();
                return Err(ErrorData::invalid_params(
                    format!("task {id} is already {status}: only a working task can be cancelled"),
                    None,
                ));
            }
            _ => {}
        }
        Ok(Self::view(id, entry))
    }

    /// Marks task `id` cancelled whatever its state: another host was
    /// asked to cancel it, and the fleet's record says so.
    fn cancelled_elsewhere(&self, id: &str) {
        if let Some(entry) = self.lock().get_mut(id) {
            entry.state = State::Cancelled;
            entry.message = Some("cancelled by the client".into());
            entry.updated = now();
        }
    }

    /// Task `id`: this host's, or in a fleet any host's.
    pub(crate) async fn find(&self, id: &str) -> Result<View, ErrorData> {
        let local = self.get(id);
        let Some((share, endpoint)) = &self.share else { return local };
        if local.is_ok() || id.len() > 64 {
            return local;
        }
        match tokio::time::timeout(SHARE_WAIT, share.get(endpoint, id)).await {
            Ok(Ok(Some(record))) => View::from_record(id, &record).ok_or_else(|| unknown(id)),
            Ok(Ok(None)) => Err(unknown(id)),
            Ok(Err(e)) => Err(unshared(&e.0)),
            Err(_) => Err(unshared("no answer")),
        }
    }

    /// Cancels task `id` ([`Tasks::cancel`]); in a fleet, a task of another
    /// host through the fleet's record (that host stops its call within
    /// about a second).
    pub(crate) async fn cancel_any(&self, id: &str, strict: bool) -> Result<View, ErrorData> {
        let local = self.cancel(id, strict);
        let Some((share, endpoint)) = &self.share else { return local };
        if self.lock().contains_key(id) || id.len() > 64 {
            return local;
        }
        let view = match tokio::time::timeout(SHARE_WAIT, share.cancel(endpoint, id)).await {
            Ok(Ok(Some(record))) => View::from_record(id, &record).ok_or_else(|| unknown(id))?,
            Ok(Ok(None)) => return Err(unknown(id)),
            Ok(Err(e)) => return Err(unshared(&e.0)),
            Err(_) => return Err(unshared("no answer")),
        };
        match view.state {
            State::Completed(_) | State::Failed(_) if strict => Err(ErrorData::invalid_params(
                format!("task {id} is already {}: only a working task can be cancelled", view.status()),
                None,
            )),
            _ => Ok(view),
        }
    }

    /// Every task `owner` made and is kept, newest first.
    pub(crate) fn list(&self, owner: Option<&str>) -> Vec<View> {
        let map = self.lock();
        let now = Instant::now();
        let mut all: Vec<(chrono::DateTime<chrono::Utc>, View)> = map
            .iter()
            .filter(|(_, e)| e.owner.as_deref() == owner && (matches!(e.state, State::Working) || e.expires > now))
            .map(|(id, e)| (e.created, Self::view(id, e)))
            .collect();
        all.sort_by_key(|a| std::cmp::Reverse(a.0));
        all.into_iter().map(|(_, v)| v).collect()
    }

    /// 2025-11-25's `tasks/result`: waits until the task ends, then its
    /// result (or the error it failed with).
    pub(crate) async fn result(&self, id: &str, wait: Duration) -> Result<JsonObject, ErrorData> {
        let done = self.lock().get(id).map(|e| e.done.subscribe());
        let view = match done {
            Some(mut done) => {
                let _ = done.wait_for(|d| *d).await;
                self.get(id)?
            }
            // Another host's: read again until it ends, at most `wait`.
            None => {
                let started = Instant::now();
                loop {
                    let view = self.find(id).await?;
                    if !matches!(view.state, State::Working) || started.elapsed() >= wait {
                        break view;
                    }
                    tokio::time::sleep(Duration::from_millis(POLL_INTERVAL_MS)).await;
                }
            }
        };
        match view.state {
            State::Completed(r) => Ok(r),
            State::Failed(e) => Err(serde_json::from_value(Value::Object(e))
                .unwrap_or_else(|_| ErrorData::internal_error("the task failed", None))),
            State::Cancelled => {
                Err(ErrorData::invalid_params(format!("task {id} was cancelled: it has no result"), None))
            }
            State::Working => Err(ErrorData::internal_error("the task is still working", None)),
        }
    }

    /// How many tasks are kept (running or finished).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no task is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn error_object(e: &ErrorData) -> JsonObject {
    match serde_json::to_value(e) {
        Ok(Value::Object(o)) => o,
        _ => JsonObject::new(),
    }
}

impl McpFront {
    /// Whether `name` may run as a task for this session's agent
    /// ([`runs_as_task`]).
    pub(crate) fn runs_as_task(&self, name: &str) -> bool {
        let catalog = self.host.registry().snapshot();
        let agent = self.agent.as_deref();
        // A tool this session may not see is no task's either (nor is its
        // existence told).
        catalog.get(name).is_some_and(|t| {
            self.host.budget().visible(agent, self.tier(), t).unwrap_or(false)
                && runs_as_task(&self.host, &t.def, agent, None)
        })
    }
}

/// Whether `def` may run as a task for `agent`: it says it runs long, it
/// is one of the agent's long tools, or it is DEEP for the agent (`tier`:
/// its tier, when known).
pub(crate) fn runs_as_task(
    host: &Pipeline,
    def: &crate::tool::ToolDef,
    agent: Option<&str>,
    tier: Option<Tier>,
) -> bool {
    def.meta.long_running
        || host.budget().long_deadline(&def.name, agent).is_some()
        || tier.or_else(|| host.budget().tool_tier(def, agent)) == Some(Tier::Deep)
}

/// The revision whose tasks are the experimental `tasks` capability.
const LEGACY_TASKS_REVISION: &str = "2025-11-25";

/// An `initialize` or `tools/list` answer of rmcp's with
/// [`declare_legacy_tasks`] applied, when that changed it.
pub fn with_legacy_declarations(message: &ServerJsonRpcMessage) -> Option<Value> {
    let ServerJsonRpcMessage::Response(r) = message else { return None };
    if !matches!(r.result, ServerResult::InitializeResult(_) | ServerResult::ListToolsResult(_)) {
        return None;
    }
    let mut v = serde_json::to_value(message).ok()?;
    declare_legacy_tasks(&mut v).then_some(v)
}

/// 2025-11-25's task declarations, added to an answer rmcp made (it knows
/// only 2026-07-28's tasks): the `tasks` capability in an `initialize`
/// result, and `execution.taskSupport: "optional"` on each tool of a
/// `tools/list` result that runs as a task (`_meta.toolhost.task`).
/// Whether it changed `message`.
pub fn declare_legacy_tasks(message: &mut Value) -> bool {
    let Some(result) = message.get_mut("result").and_then(Value::as_object_mut) else { return false };
    let legacy = result.get("protocolVersion").and_then(Value::as_str) == Some(LEGACY_TASKS_REVISION);
    if let Some(Value::Object(caps)) = result.get_mut("capabilities") {
        // 2026-07-28's extension is no `initialize` answer's (that revision
        // has none): 2025-11-25 has `tasks`, older revisions no tasks.
        if let Some(Value::Object(extensions)) = caps.get_mut("extensions") {
            extensions.remove(rmcp::model::TASKS_EXTENSION_ID);
            if extensions.is_empty() {
                caps.remove("extensions");
            }
        }
        if legacy {
            caps.insert("tasks".into(), json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}));
        }
        return true;
    }
    let Some(Value::Array(tools)) = result.get_mut("tools") else { return false };
    let mut changed = false;
    for tool in tools {
        if tool.pointer("/_meta/toolhost/task") == Some(&Value::Bool(true)) {
            tool["execution"] = json!({"taskSupport": "optional"});
            changed = true;
        }
    }
    changed
}

/// The `params._meta` key a 2026-07-28 request carries (its revision): a
/// request without it is a 2025-11-25 session's.
const MODERN_META: &str = "io.modelcontextprotocol/protocolVersion";

/// Whether `message` is a 2025-11-25 task request: a `tools/call` with
/// `params.task`, or `tasks/get`, `tasks/result`, `tasks/list`,
/// `tasks/cancel`. rmcp reads none of them as 2025-11-25 defines them
/// (it knows only 2026-07-28's tasks), so the transports answer them
/// through [`McpFront::legacy_task`].
pub fn is_legacy_task(message: &Value) -> bool {
    let Some(method) = message.get("method").and_then(Value::as_str) else { return false };
    if message.get("id").is_none()
        || message.pointer(&format!("/params/_meta/{}", MODERN_META.replace('/', "~1"))).is_some()
    {
        return false;
    }
    match method {
        "tools/call" => message.pointer("/params/task").is_some_and(|t| !t.is_null()),
        "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel" => true,
        _ => false,
    }
}

impl McpFront {
    /// The answer (a whole JSON-RPC response) to a 2025-11-25 task request
    /// ([`is_legacy_task`]) of this endpoint, made in `session` with the
    /// token `token` (its audit id).
    pub async fn legacy_task(&self, message: &Value, session: Option<String>, token: Option<String>) -> Value {
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        // The session's own turns and tier (an endpoint's front over HTTP
        // takes them from its room).
        let own = session.as_deref().and_then(|s| self.room.conversation(s));
        let front = match own {
            Some(conversation) if !Arc::ptr_eq(&conversation, &self.conversation) => {
                McpFront { conversation, ..self.clone() }
            }
            _ => self.clone(),
        };
        let answer = front.legacy_answer(message, session, token).await;
        match answer {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": e}),
        }
    }

    async fn legacy_answer(
        &self,
        message: &Value,
        session: Option<String>,
        token: Option<String>,
    ) -> Result<Value, ErrorData> {
        let method = message.get("method").and_then(Value::as_str).unwrap_or_default();
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        let task_id = || {
            params.get("taskId").and_then(Value::as_str).map(str::to_string).ok_or_else(|| {
                ErrorData::invalid_params(format!("{method} needs params.taskId, the id tools/call gave"), None)
            })
        };
        match method {
            "tools/call" => {
                let name = params
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| ErrorData::invalid_params("tools/call needs params.name, the tool to call", None))?;
                let args = match params.get("arguments") {
                    None | Some(Value::Null) => Value::Object(JsonObject::new()),
                    Some(a @ Value::Object(_)) => a.clone(),
                    Some(_) => return Err(ErrorData::invalid_params("params.arguments must be an object", None)),
                };
                let ttl = match params.get("task") {
                    Some(Value::Object(t)) => match t.get("ttl") {
                        None | Some(Value::Null) => None,
                        Some(v) => Some(v.as_u64().ok_or_else(|| {
                            ErrorData::invalid_params("params.task.ttl must be a whole number of milliseconds", None)
                        })?),
                    },
                    _ => return Err(ErrorData::invalid_params("params.task must be an object ({\"ttl\": ms})", None)),
                };
                if !self.host.readiness().is_ready() && self.host.registry().snapshot().get(name).is_none() {
                    self.await_tool(name).await;
                }
                if !self.runs_as_task(name) {
                    // The tool is not offered as a task (its `execution`
                    // says so): 2025-11-25 answers -32601.
                    return Err(ErrorData::new(
                        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                        format!(
                            "no tool {:?} runs as a task here (only long-running and DEEP-tier tools this agent may use do): call it without params.task",
                            crate::tool::log_safe(crate::tool::cut_at(name, 64).0)
                        ),
                        None,
                    ));
                }
                let meta = params.get("_meta").and_then(Value::as_object);
                let who = super::handler::Caller {
                    session,
                    token,
                    trace: meta.and_then(|m| crate::trace::incoming(Some(m), None)),
                    model: meta.and_then(crate::tool::ModelNote::from_meta).map(Arc::new),
                };
                let view = self.tasks.start(self, name, args, ttl, who, Dialect::LATEST).await?;
                // `content: []` beside `task`: the Python SDK reads every
                // `tools/call` answer as a tool result first (which needs
                // `content`); a client that knows tasks reads `task`.
                Ok(json!({"task": view.legacy(), "content": []}))
            }
            "tasks/get" => Ok(self.tasks.find(&task_id()?).await?.legacy()),
            "tasks/cancel" => Ok(self.tasks.cancel_any(&task_id()?, true).await?.legacy()),
            "tasks/list" => {
                let owner = token.or(session);
                Ok(json!({"tasks": self.tasks.list(owner.as_deref()).iter().map(View::legacy).collect::<Vec<_>>()}))
            }
            "tasks/result" => {
                let id = task_id()?;
                let wait = self.host.runtime().limits().task_ttl;
                let mut result = self.tasks.result(&id, wait).await?;
                // 2026-07-28's discriminator is no 2025-11-25 field.
                result.remove("resultType");
                let meta = result.entry("_meta").or_insert_with(|| json!({}));
                if let Value::Object(m) = meta {
                    m.insert("io.modelcontextprotocol/related-task".into(), json!({"taskId": id}));
                }
                Ok(Value::Object(result))
            }
            _ => Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                format!("method not found: {method}"),
                None,
            )),
        }
    }
}
