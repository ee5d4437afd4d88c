//! rmcp's `ServerHandler` for [`McpFront`]: every request of a session.

use super::*;

/// `notifications/resources/updated` for `uri`.
fn resource_updated(uri: &str) -> ServerNotification {
    ServerNotification::ResourceUpdatedNotification(rmcp::model::ResourceUpdatedNotification::new(
        rmcp::model::ResourceUpdatedNotificationParam::new(uri),
    ))
}

/// The requests rmcp knows: one that reaches [`ServerHandler::on_custom_request`]
/// had params it could not read.
const KNOWN_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
];

/// The most tools on one page of `tools/list`.
pub const TOOLS_PER_PAGE: usize = 500;

impl ServerHandler for McpFront {
    fn get_info(&self) -> ServerConfig {
        // Tasks (2026-07-28's extension) for long tools: [`super::tasks`].
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_logging()
            .enable_tasks()
            .build();
        let mut resources = ResourcesCapability::default();
        resources.list_changed = Some(true);
        resources.subscribe = Some(true);
        capabilities.resources = Some(resources);
        let mut prompts = PromptsCapability::default();
        prompts.list_changed = Some(true);
        capabilities.prompts = Some(prompts);
        capabilities.completions = Some(JsonObject::new());
        let mut info = ServerConfig::new(capabilities);
        info.server_info.name = "toolhost".into();
        info.server_info.version = env!("CARGO_PKG_VERSION").into();
        let profile = self.agent.as_deref().and_then(|a| self.host.budget().agent(a).ok());
        info.instructions = Some(match profile.and_then(|p| p.instructions.clone()) {
            Some(i) => i,
            None => match &self.agent {
                Some(a) => format!(
                    "Tools for {a}. Every tool answers within its latency tier ({}); failures come back as results with isError so you can correct the call.",
                    self.tier()
                ),
                None => "toolhost: sandboxed WebAssembly tools (dice, D&D 5e SRD rules, ...). Failures come back as results with isError so you can correct the call.".into(),
            },
        });
        info
    }

    /// What a 2026-07-28 client discovers: [`Self::get_info`], less
    /// `resources.subscribe` (`resources/subscribe` is 2025-11-25's; the
    /// newer revision has no such request).
    async fn discover(&self, _context: RequestContext<RoleServer>) -> Result<rmcp::model::DiscoverResult, ErrorData> {
        let mut info = self.get_info();
        if let Some(r) = info.capabilities.resources.as_mut() {
            r.subscribe = None;
        }
        Ok(rmcp::model::DiscoverResult::from_server_info(self.supported_protocol_versions().into_owned(), info))
    }

    /// One page of the session's tools, [`TOOLS_PER_PAGE`] at most, with
    /// a cursor to the next; a turn starts only with the first page.
    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let start = match request.as_ref().and_then(|r| r.cursor.as_deref()) {
            None => 0,
            Some(c) => c.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
                ErrorData::invalid_params("invalid cursor: pass the nextCursor of a previous page", None)
            })?,
        };
        self.await_first_list().await;
        // A client may list before its `initialized` is handled: the
        // session joins its room here too (idempotent).
        if let Some(id) = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok())
            && !self.room.has(id)
        {
            self.room.join(id, &self.conversation, &self.nudge);
        }
        let turn = match turn_request(&context.meta.0.0)? {
            Some((utterance, cues)) if start == 0 => self.begin_turn(&utterance, cues),
            _ => self.turn_tier(),
        };
        let mut tools = self.visible_tools();
        *self.shown.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(tools.iter().map(|t| t.name.to_string()).collect());
        // The cursor is an offset: a list that changed between pages was
        // announced with list_changed, and the client lists again.
        let end = start.saturating_add(TOOLS_PER_PAGE).min(tools.len());
        let next = (end < tools.len()).then(|| end.to_string());
        let mut tools: Vec<Tool> = if start < tools.len() { tools.drain(start..end).collect() } else { Vec::new() };
        crate::content::shape_tools(&mut tools, Dialect::of(context.protocol_version().as_ref()));
        let mut result = ListToolsResult::with_all_items(tools);
        result.next_cursor = next;
        result.meta = Some(meta(json!({"tier": turn.tier.as_str(), "reason": turn.reason, "turn": turn.turn})));
        Ok(result)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.await_first_list().await;
        Ok(ListResourcesResult::with_all_items(self.visible_resources()))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.await_first_list().await;
        Ok(ListResourceTemplatesResult::with_all_items(self.visible_resource_templates()))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        if uri.len() > toolhost_mcp_wire::upstream::MAX_URI_BYTES {
            return Err(ErrorData::invalid_params(
                format!(
                    "a resource URI of {} bytes (at most {})",
                    uri.len(),
                    toolhost_mcp_wire::upstream::MAX_URI_BYTES
                ),
                None,
            ));
        }
        self.spend_upstream_request(&context)?;
        let upstreams = self.upstreams();
        let (server, remote) = route_resource(&upstreams, &uri)?;
        let (timeout, cap) = self.upstream_limits();
        let mut result = server.read(&remote, timeout, cap).await?;
        // Contents name the URI the client asked for.
        if remote != uri {
            for c in &mut result.contents {
                match c {
                    rmcp::model::ResourceContents::TextResourceContents { uri: u, .. }
                    | rmcp::model::ResourceContents::BlobResourceContents { uri: u, .. }
                        if *u == remote =>
                    {
                        *u = uri.clone();
                    }
                    _ => {}
                }
            }
        }
        Ok(ReadResourceResponse::Complete(result))
    }

    /// Keeps the session's subscription to `uri` and, when an upstream
    /// this session may use offers it, subscribes there (under the
    /// server's own URI) and relays its `notifications/resources/updated`.
    /// A URI nobody offers is accepted: nothing will report on it.
    #[allow(deprecated)] // resources/subscribe: MCP before 2026-07-28.
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = request.uri;
        if uri.len() > toolhost_mcp_wire::upstream::MAX_URI_BYTES {
            return Err(ErrorData::invalid_params(
                format!(
                    "a resource URI of {} bytes (at most {})",
                    uri.len(),
                    toolhost_mcp_wire::upstream::MAX_URI_BYTES
                ),
                None,
            ));
        }
        let upstreams = self.upstreams();
        let Ok((server, remote)) = route_resource(&upstreams, &uri) else { return Ok(()) };
        let session: Arc<str> = self.session_of(&context).into();
        let notify: toolhost_mcp_wire::subscribe::Notify = match &self.replies {
            Some(replies) => {
                let replies = replies.clone();
                Arc::new(move |uri: &str| replies.send(&[ServerJsonRpcMessage::notification(resource_updated(uri))]))
            }
            None => {
                let peer = context.peer.clone();
                let rt = tokio::runtime::Handle::current();
                Arc::new(move |uri: &str| {
                    if peer.is_transport_closed() {
                        return false;
                    }
                    let (peer, n) = (peer.clone(), resource_updated(uri));
                    rt.spawn(async move {
                        let _ = peer.send_notification(n).await;
                    });
                    true
                })
            }
        };
        let (timeout, _) = self.upstream_limits();
        server.subscribe(session, &remote, &uri, notify, timeout).await
    }

    /// Ends the session's subscription to `uri`.
    #[allow(deprecated)] // resources/unsubscribe: MCP before 2026-07-28.
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let upstreams = self.upstreams();
        if let Ok((server, remote)) = route_resource(&upstreams, &request.uri) {
            let (timeout, _) = self.upstream_limits();
            server.unsubscribe(&self.session_of(&context), &remote, &request.uri, timeout).await;
        }
        Ok(())
    }

    /// A second `initialize` in a live session is refused, as the
    /// reference servers do: the session's protocol version and
    /// capabilities were agreed once.
    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::InitializeResult, ErrorData> {
        if self.initialized.swap(true, Ordering::AcqRel) {
            return Err(ErrorData::invalid_request(
                "this session is already initialized: initialize comes once, first; start a new session to initialize again",
                None,
            ));
        }
        context.peer.set_peer_info(request.clone());
        // Counted as the agent's open session while any clone of this
        // session's front lives.
        if let Some(agent) = &self.agent {
            let _ = self.live.set(self.host.activity().session_opened(agent));
        }
        self.negotiate_initialize(&request)
    }

    /// A method toolhost does not serve: -32601, naming it and what is served.
    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, ErrorData> {
        let method = crate::tool::log_safe(&request.method).into_owned();
        // rmcp reads a request of a method it knows whose params it cannot
        // read as one it does not know: the params are what is wrong.
        if KNOWN_METHODS.contains(&request.method.as_str()) {
            return Err(ErrorData::invalid_params(
                format!("invalid params for {method}: see the MCP specification for its shape"),
                Some(json!({"method": method})),
            ));
        }
        Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!(
                "method not found: {method:?} is not an MCP method toolhost serves (it serves initialize, ping, tools, resources, prompts, completion, logging and tasks)"
            ),
            Some(json!({"method": method})),
        ))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.await_first_list().await;
        Ok(ListPromptsResult::with_all_items(self.visible_prompts()))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.spend_upstream_request(&context)?;
        let upstreams = self.upstreams();
        let (server, remote) = route_prompt(&upstreams, &request.name)?;
        let (timeout, cap) = self.upstream_limits();
        let mut result = server.get_prompt(remote, request.arguments, timeout, cap).await?;
        crate::content::shape_prompt(&mut result, Dialect::of(context.protocol_version().as_ref()));
        Ok(GetPromptResponse::Complete(result))
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.spend_upstream_request(&context)?;
        let upstreams = self.upstreams();
        let mut params = request;
        params.meta = None;
        let server = match &params.r#ref {
            Reference::Prompt(p) => {
                let (server, remote) = route_prompt(&upstreams, &p.name)?;
                let remote = PromptReference::new(remote);
                params.r#ref = Reference::Prompt(remote);
                server
            }
            Reference::Resource(r) => {
                // A template as offered: its own text at the first server
                // that has it, or `<server>+<template>`.
                let owner = upstreams.iter().find(|u| u.offered_uri(&r.uri) == r.uri && u.has_template(&r.uri));
                let qualified = upstreams.iter().find_map(|u| {
                    let rest = r.uri.strip_prefix(u.name())?.strip_prefix('+')?;
                    (u.has_template(rest) && u.is_shadowed(rest)).then(|| (u, rest.to_string()))
                });
                match (owner, qualified) {
                    (Some(u), _) => u,
                    (None, Some((u, rest))) => {
                        params.r#ref = Reference::Resource(rmcp::model::ResourceTemplateReference::new(rest));
                        u
                    }
                    (None, None) => route_resource(&upstreams, &r.uri)?.0,
                }
            }
            _ => return Err(ErrorData::invalid_params("unknown kind of completion reference", None)),
        };
        let (timeout, cap) = self.upstream_limits();
        server.complete(params, timeout, cap).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        // A one-shot client may call before it lists: a tool not
        // registered yet (its plugin compiling, its upstream connecting) is
        // waited for, until it is registered or everything is ready.
        if !self.host.readiness().is_ready() && self.host.registry().snapshot().get(&name).is_none() {
            self.await_tool(&name).await;
        }
        let front = self.clone();
        // A client on MCP 2026-07-28 gets a plugin's questions as an
        // `input_required` result and tries again with the answers; an
        // older one gets them as requests of the server's, mid-call.
        let modern = context.protocol_version().is_some_and(|v| !v.has_initialize());
        let replay = match modern {
            true => Some(Arc::new(ask::ReplayAsker::new(
                context.meta.client_capabilities(),
                request.input_responses,
                request.request_state.as_deref(),
            )?)),
            false => None,
        };
        let args = Value::Object(request.arguments.unwrap_or_default());
        // A long tool, for a 2026-07-28 client that declared tasks: a task,
        // answered at once ([`super::tasks`]).
        if modern && context.client_capabilities().is_some_and(|c| c.supports_tasks()) && self.runs_as_task(&name) {
            let token = context
                .extensions
                .get::<http::request::Parts>()
                .and_then(|p| p.extensions.get::<crate::http::TokenId>())
                .map(|t| t.0.to_string());
            let parts = context.extensions.get::<http::request::Parts>();
            let who = Caller {
                session: Some(self.session_of(&context)),
                token,
                trace: crate::trace::incoming(Some(&context.meta.0.0), parts.map(|p| &p.headers)),
                model: crate::tool::ModelNote::from_meta(&context.meta.0.0).map(Arc::new),
            };
            let dialect = Dialect::of(context.protocol_version().as_ref());
            let view = self.tasks.start(self, &name, args, None, who, dialect).await?;
            return Ok(CallToolResponse::Task(rmcp::model::CreateTaskResult::new(view.modern())));
        }

        // The plugin reports from a blocking thread; a task forwards its
        // reports to the client in order, and is drained before the result
        // goes out, so every notification precedes the response.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<PluginEvent>();
        let progress_token = context.meta.get_progress_token();
        let peer = context.peer.clone();
        let min_level = self.log_level.load(Ordering::Relaxed);
        let logger = name.clone();
        let replies = self.replies.clone();
        let forward = async |event: PluginEvent| {
            let Some(n) = report(event, progress_token.as_ref(), min_level, &logger) else { return };
            match &replies {
                // Queued in the output now: the response, sent by rmcp once
                // this returns, comes after it.
                Some(replies) => {
                    replies.send(&[ServerJsonRpcMessage::notification(n)]);
                }
                None => {
                    let _ = peer.send_notification(n).await;
                }
            }
        };
        let sink: Arc<dyn Fn(PluginEvent) + Send + Sync> = Arc::new(move |e| {
            let _ = tx.send(e);
        });
        // The reports' channel closes here, after the result, never when the
        // call drops its context: closing it from a lane call (outside the
        // runtime) would wake this task through the runtime's eventfd.
        let _reports = sink.clone();
        // Wasm calls are synchronous and CPU-bound: they never run on an
        // async worker. This task forwards the plugin's reports while a pool
        // call runs (no extra task per call) and drains the rest before the
        // result goes out, so every notification precedes the response.
        // Over HTTP, rmcp hands the handler the request's parts: the
        // transport's session id and the token's audit id come from there.
        let parts = context.extensions.get::<http::request::Parts>();
        let session = self.session_of(&context);
        let token = parts.and_then(|p| p.extensions.get::<crate::http::TokenId>()).map(|t| t.0.to_string());
        let cancel = crate::tool::Cancel::default();
        let asker: Arc<dyn crate::tool::offer::Asker> = match &replay {
            Some(replay) => replay.clone(),
            None => Arc::new(ask::PeerAsker {
                peer: context.peer.clone(),
                runtime: tokio::runtime::Handle::current(),
                cancel: cancel.clone(),
            }),
        };
        let ctx = CallContext {
            events: Some(sink),
            session: Some(session),
            token,
            cancel: Some(cancel.clone()),
            asker: Some(asker),
            trace: crate::trace::incoming(Some(&context.meta.0.0), parts.map(|p| &p.headers)),
            model: crate::tool::ModelNote::from_meta(&context.meta.0.0).map(Arc::new),
            ..CallContext::default()
        };
        // Measured fast on the stdio session: on the thread driving it, no
        // hop ([`super::lane`]). Otherwise on the blocking pool.
        let tool = name.clone();
        let cost = Cost::asked(Some(&context.meta.0.0));
        let run = move || front.call_in(&tool, args, ctx, cost);
        let run = match &self.lane {
            Some(lane) => lane.try_run(&self.host, self.agent.as_deref(), &name, run),
            None => Err(run),
        };
        type Pending =
            std::pin::Pin<Box<dyn Future<Output = Result<Result<CallToolResult, ErrorData>, String>> + Send>>;
        let mut call: Pending = match run {
            Ok(answer) => Box::pin(async move { answer.await.map_err(|_| "the call panicked".to_string()) }),
            Err(run) => {
                let lane = self.lane.clone();
                let tool = name.clone();
                let task = tokio::task::spawn_blocking(move || {
                    // Beside a lane, the session's runtime is driven only
                    // between lane calls: a pool call's blocking host
                    // functions use the lane's runtime (the host's main one).
                    let _calls = lane.as_ref().map(|l| l.calls().enter());
                    let started = std::time::Instant::now();
                    let result = run();
                    if let Some(lane) = lane {
                        lane.record(&tool, started.elapsed());
                    }
                    result
                });
                Box::pin(async move { task.await.map_err(|e| e.to_string()) })
            }
        };
        let result = loop {
            tokio::select! {
                r = &mut call => break r.map_err(|e| ErrorData::internal_error(format!("call task failed: {e}"), None))?,
                // Never closed while `_reports` is held.
                Some(e) = rx.recv() => forward(e).await,
                () = context.ct.cancelled() => {
                    // The client gave up (notifications/cancelled): no response is
                    // expected. An upstream server's request is cancelled too
                    // (and audited `cancelled`); a wasm call ends at its deadline.
                    cancel.cancel();
                    return Err(ErrorData::internal_error("request cancelled by the client", None));
                }
            }
        };
        while let Ok(e) = rx.try_recv() {
            forward(e).await;
        }
        if let Some(input_required) = replay.as_ref().and_then(|r| r.input_required()) {
            return input_required.map(CallToolResponse::InputRequired);
        }
        let dialect = Dialect::of(context.protocol_version().as_ref());
        result.map(|mut r| {
            crate::content::shape_result(&mut r, dialect);
            r.into()
        })
    }

    /// 2026-07-28's `tasks/get` ([`super::tasks`]).
    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        Ok(rmcp::model::GetTaskResult::new(self.tasks.find(&request.task_id).await?.detailed()))
    }

    /// 2026-07-28's `tasks/cancel`: the task's call is stopped; a finished
    /// task is left as it is.
    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.cancel_any(&request.task_id, false).await.map(|_| ())
    }

    /// 2026-07-28's `tasks/update`: a task's call asks its client nothing
    /// (it has no request to ask on), so there is nothing to answer.
    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.find(&request.task_id).await?;
        Err(ErrorData::invalid_params(
            "this task asked nothing: a task's call cannot ask its client questions here",
            None,
        ))
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.log_level.store(level_rank(request.level), Ordering::Relaxed);
        Ok(())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Some(info) = context.peer.peer_info() {
            let _ = self.negotiated.set(info.protocol_version.clone());
        }
        // A session another host of a fleet began, restored here: it may
        // have missed an announcement while it moved, so its first look
        // is announced as a change (unless it lists first).
        let restored =
            context.extensions.get::<rmcp::transport::streamable_http_server::SessionRestoreMarker>().is_some();
        // Over HTTP, the session joins its endpoint's room under its
        // `Mcp-Session-Id`, for turns posted to `/mcp/<agent>/turn`.
        if let Some(id) = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok())
        {
            self.room.join(id, &self.conversation, &self.nudge);
        }
        let front = self.clone();
        let peer = context.peer;
        let mut changes = self.host.registry().subscribe();
        tokio::spawn(async move {
            // What joins while the host gets ready (plugins compiling,
            // upstreams connecting, up to server.first_list_wait_ms) is in
            // the session's first list, and announced only to a session
            // that listed before it joined.
            let readiness = front.host.readiness();
            readiness.ready_by(std::time::Instant::now() + readiness.first_list_wait()).await;
            front
                .shown
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert_with(|| if restored { Vec::new() } else { front.visible_names() });
            let (mut last_resources, mut last_prompts) = front.offer_signature();
            let mut poll = tokio::time::interval(VISIBILITY_POLL);
            poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { break },
                    _ = poll.tick() => {}
                    _ = front.nudge.notified() => {}
                }
                if peer.is_transport_closed() {
                    break;
                }
                let now = front.visible_names();
                let changed = {
                    let mut shown = front.shown.lock().unwrap_or_else(|p| p.into_inner());
                    let changed = shown.as_ref() != Some(&now);
                    *shown = Some(now);
                    changed
                };
                if changed {
                    tracing::debug!(agent = ?front.agent, "visible tools changed");
                    if peer.notify_tool_list_changed().await.is_err() {
                        break;
                    }
                }
                let (resources, prompts) = front.offer_signature();
                if resources != last_resources {
                    tracing::debug!(agent = ?front.agent, "visible resources changed");
                    last_resources = resources;
                    if peer.notify_resource_list_changed().await.is_err() {
                        break;
                    }
                }
                if prompts != last_prompts {
                    tracing::debug!(agent = ?front.agent, "visible prompts changed");
                    last_prompts = prompts;
                    if peer.notify_prompt_list_changed().await.is_err() {
                        break;
                    }
                }
            }
        });
    }
}

/// Who started a task, for its call's audit record and trace.
pub(crate) struct Caller {
    /// The MCP session.
    pub(crate) session: Option<String>,
    /// The token's id.
    pub(crate) token: Option<String>,
    /// The client's trace context.
    pub(crate) trace: Option<crate::trace::Context>,
    /// What the client said of its model.
    pub(crate) model: Option<Arc<crate::tool::ModelNote>>,
}
