//! Live sessions over every endpoint: the cap, making room by closing the
//! least recently used idle one, and closing idle sessions.

use super::*;

/// Live sessions over every endpoint, with when each was last used.
pub(super) struct Sessions {
    pub(super) max: usize,
    pub(super) idle: Duration,
    /// How long a session must have been idle before a new one may take
    /// its place at the cap: a minute, or half `idle` when that is shorter.
    pub(super) evictable_after: Duration,
    pub(super) live: Mutex<HashMap<String, (Identity, Instant)>>,
    /// When each live session was last touched in the fleet's share.
    pub(super) shared_at: Mutex<HashMap<String, Instant>>,
    /// Where a fleet's hosts share their sessions ([`SessionShare`]).
    pub(super) share: Option<Arc<dyn SessionShare>>,
    /// Sessions restored here whose event stream has not been opened here
    /// yet: the `Last-Event-ID` it comes with is another host's.
    pub(super) fresh: Mutex<HashSet<String>>,
    /// The JSON-RPC ids of the requests each session has in flight.
    pub(super) ids: Arc<Mutex<HashMap<String, HashSet<String>>>>,
}

/// A request's JSON-RPC id, claimed in its session until its answer ends.
pub(super) struct ClaimedId {
    ids: Arc<Mutex<HashMap<String, HashSet<String>>>>,
    session: String,
    id: String,
}

impl Drop for ClaimedId {
    fn drop(&mut self) {
        let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(set) = ids.get_mut(&self.session) {
            set.remove(&self.id);
            if set.is_empty() {
                ids.remove(&self.session);
            }
        }
    }
}

/// The share's name for `who`'s endpoint: the agent's, `""` the operator's.
fn endpoint_of(who: &Identity) -> &str {
    match who {
        Identity::Operator => "",
        Identity::Agent(a) => a,
    }
}

impl Sessions {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Identity, Instant)>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn touch(&self, id: &str) {
        if let Some((_, at)) = self.lock().get_mut(id) {
            *at = Instant::now();
        }
    }

    pub(super) fn opened(&self, id: &str, who: Identity) {
        self.lock().insert(id.to_string(), (who, Instant::now()));
    }

    pub(super) fn closed(&self, id: &str) {
        self.lock().remove(id);
        self.fresh.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
        self.shared_at.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    }

    /// A request naming session `id` of `target`'s endpoint: touched. In a
    /// fleet, a session this host does not hold is admitted as a new one
    /// would be, since rmcp is about to restore it from the share (`true`).
    pub(super) async fn continuing(
        &self,
        id: &str,
        target: &Identity,
        manager: &LocalSessionManager,
        services: &Services,
    ) -> Result<bool, Response> {
        let held = self.lock().contains_key(id) || manager.has_session(&id.into()).await.unwrap_or(true);
        if held || self.share.is_none() {
            self.touch(id);
            return Ok(false);
        }
        self.admit(target, services).await?;
        Ok(true)
    }

    /// Session `id` of `target`'s endpoint answered a request: counted
    /// when this host `restored` it, and touched in the fleet's share now
    /// and then ([`super::shared::touch_every`]).
    pub(super) fn used(
        &self,
        id: &str,
        target: &Identity,
        restored: bool,
        manager: &Arc<LocalSessionManager>,
        is_get: bool,
    ) {
        if restored {
            tracing::info!(session = %id, "a session begun on another host of the fleet goes on here");
            self.opened(id, target.clone());
            if !is_get {
                self.fresh.lock().unwrap_or_else(|p| p.into_inner()).insert(id.to_string());
            }
        }
        let Some(share) = &self.share else { return };
        let due = {
            let mut at = self.shared_at.lock().unwrap_or_else(|p| p.into_inner());
            let due = at.get(id).is_none_or(|t| t.elapsed() >= super::shared::touch_every(self.idle));
            if due && self.lock().contains_key(id) {
                at.insert(id.to_string(), Instant::now());
            }
            due
        };
        if due && !restored {
            let touch = share.touch(endpoint_of(target), id, self.idle);
            let (manager, id) = (manager.clone(), id.to_string());
            tokio::spawn(async move {
                match touch.await {
                    Ok(true) => {}
                    // Ended through another host (or expired there): here too.
                    Ok(false) => {
                        tracing::info!(session = %id, "a session ended through another host of the fleet ends here too");
                        let _ = manager.close_session(&id.into()).await;
                    }
                    Err(e) => tracing::warn!("a session could not be touched in the fleet's share: {e}"),
                }
            });
        }
    }

    /// The first event stream of a session restored here (by this request,
    /// or by an earlier one) is opened afresh: its `Last-Event-ID` names an
    /// event of the host that began it, which this host never had (rmcp
    /// would answer an empty stream, and the client stop listening). The
    /// stream then starts with what this host has for it (a restored
    /// session's `list_changed`).
    pub(super) fn first_stream(&self, request: &mut Request, session: Option<&str>, restoring: bool) {
        let Some(id) = session else { return };
        if request.method() != axum::http::Method::GET || !request.headers().contains_key("last-event-id") {
            return;
        }
        if restoring || self.fresh.lock().unwrap_or_else(|p| p.into_inner()).remove(id) {
            request.headers_mut().remove("last-event-id");
        }
    }

    /// Claims the JSON-RPC id of the request in `body` in `session`: a
    /// second request with an id still in flight there is refused (-32600),
    /// since its answer could never be told from the first's (rmcp would
    /// leave one of them open for good).
    pub(super) fn claim(&self, session: Option<&str>, request: &Request) -> Result<Option<ClaimedId>, Box<Response>> {
        let (Some(session), Some(BodyBytes(body))) = (session, request.extensions().get::<BodyBytes>()) else {
            return Ok(None);
        };
        let Ok(serde_json::Value::Object(message)) = serde_json::from_slice::<serde_json::Value>(body) else {
            return Ok(None);
        };
        let (Some(_), Some(id)) = (message.get("method"), message.get("id")) else { return Ok(None) };
        let id = id.to_string();
        let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        if !ids.entry(session.to_string()).or_default().insert(id.clone()) {
            let body = serde_json::json!({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32600,
                "message": format!("request id {} is already in use by a request in flight in this session: give each request its own id", crate::tool::log_safe(&id))}});
            return Err(Box::new((StatusCode::BAD_REQUEST, axum::Json(body)).into_response()));
        }
        Ok(Some(ClaimedId { ids: self.ids.clone(), session: session.to_string(), id }))
    }

    /// Whether the fleet's share holds session `id` of `target`'s endpoint.
    pub(super) async fn shared(&self, target: &Identity, id: &str) -> bool {
        let Some(share) = &self.share else { return false };
        matches!(share.load(endpoint_of(target), id, self.idle).await, Ok(Some(_)))
    }

    /// Room for one more session of `who`. An agent holds at most a
    /// quarter of the cap (at its share, its own least recently used idle
    /// session makes room). At the cap, the least recently used idle
    /// session of whoever holds the most is closed; an agent's churn never
    /// closes the operator's sessions. Without room, 503.
    pub(super) async fn admit(&self, who: &Identity, services: &Services) -> Result<(), Response> {
        let victim = {
            let live = self.lock();
            let mut held: HashMap<&Identity, usize> = HashMap::new();
            for (owner, _) in live.values() {
                *held.entry(owner).or_default() += 1;
            }
            let share = (self.max / 4).max(1);
            let mine = held.get(who).copied().unwrap_or(0);
            let from = if *who != Identity::Operator && mine >= share {
                Some(who.clone())
            } else if live.len() >= self.max {
                held.iter()
                    .filter(|(owner, _)| *who == Identity::Operator || ***owner != Identity::Operator)
                    .max_by_key(|(_, n)| **n)
                    .map(|(owner, _)| (*owner).clone())
            } else {
                return Ok(());
            };
            from.and_then(|from| {
                live.iter()
                    .filter(|(_, (owner, at))| *owner == from && at.elapsed() >= self.evictable_after)
                    .min_by_key(|(_, (_, at))| *at)
                    .map(|(id, (owner, _))| (id.clone(), owner.clone()))
            })
        };
        let Some((id, owner)) = victim else {
            let mut r = error(
                StatusCode::SERVICE_UNAVAILABLE,
                "capacity_exceeded",
                &format!(
                    "capacity exceeded: no room for another session (server.max_sessions {}, an agent at most a quarter), all in use; retry later",
                    self.max
                ),
            );
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(self.evictable_after.as_secs().max(1)));
            return Err(r);
        };
        tracing::info!(session = %id, "closing the least recently used idle session to make room (server.max_sessions)");
        self.closed(&id);
        if let Some((_, manager, _)) = services.get(&owner) {
            let _ = manager.close_session(&id.into()).await;
        }
        Ok(())
    }
}

/// Closes sessions idle for `server.session_idle_secs`, and forgets
/// sessions rmcp has closed, until the front is dropped.
pub(super) async fn sweep_sessions(front: Weak<Front>) {
    let period = {
        let Some(f) = front.upgrade() else { return };
        (f.sessions.idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(15))
    };
    let mut reloads = front.upgrade().and_then(|f| f.reloader.as_ref().map(|r| r.subscribe()));
    loop {
        let reloaded = async {
            let ended = match &mut reloads {
                Some(r) => r.changed().await.is_err(),
                None => true,
            };
            if ended {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            () = reloaded => {}
        }
        let Some(front) = front.upgrade() else { return };
        // A reload that removed an agent closes its sessions now.
        front.current();
        let expired: Vec<(String, Identity)> = front
            .sessions
            .lock()
            .iter()
            .filter(|(_, (_, at))| at.elapsed() >= front.sessions.idle)
            .map(|(id, (who, _))| (id.clone(), who.clone()))
            .collect();
        for (id, who) in expired {
            tracing::debug!(session = %id, "closing an idle session (server.session_idle_secs)");
            front.sessions.closed(&id);
            if let Some((_, manager, _)) = front.current().services.get(&who) {
                let _ = manager.close_session(&id.into()).await;
            }
        }
    }
}
