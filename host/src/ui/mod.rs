//! The DM's page: a small web page at `/ui` on the HTTP front, for the
//! operator only, and the JSON it reads under `/ui/api/`.
//!
//! | method and path | what |
//! |---|---|
//! | `GET /ui` (`/ui/app.js`, `/ui/style.css`) | the page: plain HTML, CSS and JS compiled into the binary |
//! | `GET /ui/api/state` | [`UiState`]: tools, agents, plugins, servers, the audit tail |
//! | `POST /ui/api/overrides` | the admin API's `POST /overrides`, as it is |
//! | `POST /ui/api/overrides/clear` | the admin API's `POST /overrides/clear`, as it is |
//! | `POST /ui/api/plugins` | a plugin file's bytes (`application/wasm`, its name in `X-Toolhost-File-Name`): installed as `toolhost plugin add` installs it |
//!
//! Who may: the HTTP front ([`crate::mcp::http`]) checks `Host` and
//! `Origin` for every request, then admits to `/ui` the operator only:
//! without `server.tokens`, the server's own Unix user (from the kernel's
//! socket table); with tokens, an operator token as a bearer token on the
//! API (the page asks for it and keeps it in `sessionStorage`; the page's
//! own files hold no data and are served to whoever passes `Host`). Agent
//! tokens get 403. Requests other than GET must carry `X-Toolhost-UI: 1`,
//! which no cross-origin page can send without a CORS preflight this server
//! never grants. Every reply carries a strict `Content-Security-Policy`;
//! the page renders all data with `textContent`.

use crate::Host;
use crate::admin::Admin;
use crate::admin::api::{ErrorReply, InstalledReply};
use crate::mcp_client::ServerStatus;
use crate::report::{AgentStatusReport, GrantsReport, ToolReport};
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tower::ServiceExt as _;

mod market;

const PAGE: &str = include_str!("page.html");
const APP_JS: &str = include_str!("app.js");
const STYLE_CSS: &str = include_str!("style.css");

/// The header every request but a GET must carry (with value `1`).
pub const CSRF_HEADER: &str = "x-toolhost-ui";
/// The header naming an uploaded file (`NAME.wasm`).
pub const FILE_NAME_HEADER: &str = "x-toolhost-file-name";
/// The page's Content-Security-Policy: nothing from elsewhere, no inline code.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
/// How many audit records the page gets, at most.
pub const AUDIT_LINES: usize = 200;
/// How much of the audit file's end is read, at most, looking for whole
/// records (one longer than this is skipped, never shown in part).
pub const AUDIT_BYTES: u64 = 4 << 20;

/// Whether `path` (as `/ui` sees it, with or without the `/ui` prefix) is
/// part of the page's API, which needs the operator's credentials even
/// where the page's static files do not.
pub fn is_api(path: &str) -> bool {
    let p = path.strip_prefix("/ui").unwrap_or(path);
    p == "/api" || p.starts_with("/api/")
}

#[derive(Clone)]
struct UiCtx {
    host: Arc<Host>,
    admin: Admin,
    admin_api: Router,
}

/// `GET /ui/api/state`: everything the page shows, in one reply.
#[derive(Debug, Clone, Serialize)]
pub struct UiState {
    /// The serving process.
    pub pid: u32,
    /// Every tool: its declaration (declared p50 and upper bound) and its
    /// budget figures (tier, badge, measured p50/p99, error rate, demotion).
    pub tools: Vec<ToolReport>,
    /// Every agent: ceiling, override, tier now, the tools it sees now.
    pub agents: Vec<AgentStatusReport>,
    /// Every wasm plugin: origin (signed by whom, version), digest, grants.
    pub plugins: Vec<GrantsReport>,
    /// Every external MCP server and its state.
    pub servers: Vec<ServerStatus>,
    /// The last audit records, oldest first.
    pub audit: AuditTail,
    /// Plugins being compiled now.
    pub compiling: Vec<Compiling>,
    /// Whether everything configured has loaded (plugins compiled,
    /// upstream servers connected or failed).
    pub ready: bool,
    /// Each agent's live sessions, last calls, and rate and capacity hits.
    pub activity: std::collections::BTreeMap<String, crate::activity::AgentActivity>,
    /// Tools that cannot work as configured, and why (a file tool with no
    /// directory granted).
    pub unusable: std::collections::BTreeMap<String, String>,
    /// The tier ceilings, milliseconds, for the latency pictures.
    pub ceilings_ms: Ceilings,
    /// Whether the page can upload plugins.
    pub uploads: bool,
    /// The largest plugin file an upload may be, bytes.
    pub max_upload_bytes: usize,
    /// Plugins held back: until granted, waiting for a secret, revoked.
    pub withheld: Vec<crate::HeldPlugin>,
    /// Each plugin's canary: under way, or how the last one ended.
    pub canaries: Vec<crate::canary::CanaryStatus>,
    /// Whether the config names catalogues (the marketplace panel).
    pub marketplace: bool,
}

/// A plugin being compiled.
#[derive(Debug, Clone, Serialize)]
pub struct Compiling {
    /// The plugin.
    pub plugin: String,
    /// For how long so far, seconds.
    pub seconds: f64,
}

/// The tier ceilings, milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Ceilings {
    /// FAST.
    pub fast: u64,
    /// STANDARD.
    pub standard: u64,
    /// DEEP.
    pub deep: u64,
}

/// Tools that cannot work as configured: those of a built-in plugin that
/// needs a capability it is not granted (fileio without a directory).
fn unusable(plugins: &[GrantsReport]) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    for p in plugins {
        let Some(builtin) = crate::builtin::BUILTINS.iter().find(|b| b.name == p.plugin) else { continue };
        if !matches!(p.provenance, Some(crate::package::Provenance::Builtin)) {
            continue;
        }
        for need in builtin.needs {
            let held = match p.granted.get(*need) {
                Some(serde_json::Value::Array(a)) => !a.is_empty(),
                Some(serde_json::Value::Object(o)) => !o.is_empty(),
                Some(serde_json::Value::Bool(b)) => *b,
                _ => false,
            };
            if !held {
                let why = format!("cannot work: {} needs a `{need}` grant (plugins.grants.{})", p.plugin, p.plugin);
                for t in &p.tools {
                    out.insert(t.clone(), why.clone());
                }
            }
        }
    }
    out
}

/// The end of the audit file.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AuditTail {
    /// The file, when the host writes one.
    pub path: Option<PathBuf>,
    /// Its last records (at most [`AUDIT_LINES`], from its last
    /// [`AUDIT_BYTES`]), oldest first, as written.
    pub records: Vec<serde_json::Value>,
    /// Why the file could not be read, if it could not.
    pub error: Option<String>,
    /// The audit gate refused the last call it gated (`audit.fail_closed`).
    pub gate_refusing: bool,
}

/// The last `max_lines` JSON records of the JSON-lines file at `path`,
/// oldest first, read backwards from its end in chunks, at most
/// `max_bytes` of it: only whole records, so a long line costs reading it
/// but never hides the records before it. A line that is not JSON, or
/// that began before the bytes read, is left out.
pub fn audit_tail(path: &Path, max_bytes: u64, max_lines: usize) -> std::io::Result<Vec<serde_json::Value>> {
    const CHUNK: u64 = 64 * 1024;
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let floor = len.saturating_sub(max_bytes);
    // `tail`: the bytes from `start` to the end, not yet split into lines
    // before its first newline.
    let mut start = len;
    let mut tail: Vec<u8> = Vec::new();
    let mut records: Vec<serde_json::Value> = Vec::new();
    while start > floor && records.len() < max_lines {
        let from = start.saturating_sub(CHUNK).max(floor);
        let mut chunk = vec![0u8; (start - from) as usize];
        f.seek(SeekFrom::Start(from))?;
        f.read_exact(&mut chunk)?;
        chunk.extend_from_slice(&tail);
        start = from;
        // Whole lines are those after a newline in what was read (or from
        // the very start of the file).
        let cut = if start == 0 { Some(0) } else { chunk.iter().position(|b| *b == b'\n').map(|i| i + 1) };
        let Some(cut) = cut else {
            tail = chunk;
            continue;
        };
        let mut found: Vec<serde_json::Value> = chunk[cut..]
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .filter_map(|l| serde_json::from_slice(l).ok())
            .collect();
        found.append(&mut records);
        records = found;
        tail = chunk[..cut].to_vec();
    }
    let skip = records.len().saturating_sub(max_lines);
    records.drain(..skip);
    Ok(records)
}

/// The largest upload `host` accepts: the component limit plus room for a
/// package section, as for `toolhost plugin add`.
fn max_upload(host: &Host) -> usize {
    host.pipeline().runtime().limits().max_component_bytes + (1 << 16)
}

/// The page's routes, to mount at `/ui` behind the front's operator check.
pub fn router(host: Arc<Host>, admin: Admin) -> Router {
    let limit = max_upload(&host);
    let ctx = UiCtx { admin_api: crate::admin::router(host.clone(), admin.clone()), host, admin };
    Router::new()
        .route("/", get(|| async { asset(PAGE, "text/html; charset=utf-8") }))
        .route("/app.js", get(|| async { asset(APP_JS, "text/javascript; charset=utf-8") }))
        .route("/style.css", get(|| async { asset(STYLE_CSS, "text/css; charset=utf-8") }))
        .route("/api/state", get(state))
        .route("/api/overrides", post(forward))
        .route("/api/overrides/clear", post(forward))
        .route("/api/pairings", get(forward).post(forward))
        .route("/api/pairings/{id}", axum::routing::delete(forward))
        .route("/api/plugins", post(upload).layer(DefaultBodyLimit::max(limit)))
        .route("/api/market/search", post(market::search))
        .route("/api/market/install", post(market::install))
        .fallback(|request: Request| async move {
            error(StatusCode::NOT_FOUND, "not_found", &format!("no page route {} {}", request.method(), request.uri()))
        })
        .layer(middleware::from_fn(same_origin_writes))
        .layer(middleware::from_fn(security_headers))
        .layer(DefaultBodyLimit::max(1 << 20))
        .with_state(ctx)
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, Json(ErrorReply::new(code, message))).into_response()
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// Every reply: the CSP, no sniffing, no framing, no caching, no referrer.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut r = next.run(request).await;
    let h = r.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Refuses writes without `X-Toolhost-UI: 1` (a cross-origin page cannot
/// set it without a preflight, which is never granted).
async fn same_origin_writes(request: Request, next: Next) -> Response {
    let safe = matches!(*request.method(), Method::GET | Method::HEAD);
    if !safe && request.headers().get(CSRF_HEADER).and_then(|v| v.to_str().ok()) != Some("1") {
        return error(
            StatusCode::FORBIDDEN,
            "forbidden",
            &format!("the page's writes must carry the header {CSRF_HEADER}: 1"),
        );
    }
    next.run(request).await
}

async fn state(State(ctx): State<UiCtx>) -> Response {
    let host = ctx.host.clone();
    let servers = ctx.admin.server_status();
    let uploads = ctx.admin.uploads.is_some();
    let marketplace =
        ctx.admin.reloader.as_ref().is_some_and(|r| !r.builder().config().marketplace.catalogues.is_empty());
    // Reading the audit file: off the async workers.
    let built = tokio::task::spawn_blocking(move || {
        let catalog = host.pipeline().registry().snapshot();
        let tools = catalog.tools().map(|t| ToolReport::of(&host, t)).collect();
        let path = host.pipeline().audit().path().map(Path::to_path_buf);
        // The refusals counted so far this second, as records.
        host.pipeline().audit().flush_refusals(true);
        let gate_refusing = host.pipeline().audit().gate_failing();
        let audit = match &path {
            None => AuditTail::default(),
            Some(p) => match audit_tail(p, AUDIT_BYTES, AUDIT_LINES) {
                Ok(records) => AuditTail { path: path.clone(), records, error: None, gate_refusing },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    AuditTail { path: path.clone(), records: Vec::new(), error: None, gate_refusing }
                }
                Err(e) => {
                    AuditTail { path: path.clone(), records: Vec::new(), error: Some(e.to_string()), gate_refusing }
                }
            },
        };
        let agents = crate::report::agents(&host);
        let plugins = crate::report::grants(&host);
        let compiling = host
            .pipeline()
            .runtime()
            .compiling_now()
            .into_iter()
            .map(|(plugin, so_far)| Compiling { plugin, seconds: so_far.as_secs_f64() })
            .collect();
        let ceilings = host.pipeline().budget().config().ceilings();
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        UiState {
            pid: std::process::id(),
            tools,
            activity: agents.iter().map(|a| (a.name.clone(), host.pipeline().activity().of(&a.name))).collect(),
            unusable: unusable(&plugins),
            agents,
            plugins,
            servers,
            compiling,
            ready: host.pipeline().readiness().is_ready(),
            ceilings_ms: Ceilings { fast: ms(ceilings.fast), standard: ms(ceilings.standard), deep: ms(ceilings.deep) },
            audit,
            uploads,
            max_upload_bytes: max_upload(&host),
            withheld: host.admission().withheld_plugins(),
            canaries: catalog.providers().filter_map(|p| host.admission().canary_status(p.name())).collect(),
            marketplace,
        }
    })
    .await;
    match built {
        Ok(s) => Json(s).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "handler_error", &e.to_string()),
    }
}

/// Hands an override request to the admin API's own handler (same
/// validation, same replies), with the admin token.
async fn forward(State(ctx): State<UiCtx>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path();
    // The admin route of the same name: `/api/overrides` -> `/overrides`.
    let to = path.rfind("/api/").map_or(path, |i| &path[i + 4..]);
    let mut inner = Request::new(body);
    *inner.method_mut() = parts.method.clone();
    *inner.uri_mut() = match to.parse() {
        Ok(u) => u,
        Err(_) => return error(StatusCode::INTERNAL_SERVER_ERROR, "handler_error", "bad internal route"),
    };
    if let Some(ct) = parts.headers.get(header::CONTENT_TYPE) {
        inner.headers_mut().insert(header::CONTENT_TYPE, ct.clone());
    }
    if let Ok(v) = HeaderValue::from_str(&page_actor(parts.extensions.get()).who) {
        inner.headers_mut().insert(crate::admin::ACTOR_HEADER, v);
        inner.headers_mut().insert(crate::admin::VIA_HEADER, HeaderValue::from_static("page"));
    }
    match HeaderValue::from_str(&format!("Bearer {}", ctx.admin.token)) {
        Ok(v) => inner.headers_mut().insert(header::AUTHORIZATION, v),
        Err(_) => return error(StatusCode::INTERNAL_SERVER_ERROR, "handler_error", "unusable admin token"),
    };
    match ctx.admin_api.oneshot(inner).await {
        Ok(r) => r.map(Body::new),
        Err(e) => match e {},
    }
}

/// The uploaded file's name, checked: `NAME.wasm`, `NAME` a valid plugin name.
fn upload_name(headers: &HeaderMap) -> Result<String, String> {
    let name = headers
        .get(FILE_NAME_HEADER)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| format!("name the file in the {FILE_NAME_HEADER} header (NAME.wasm)"))?
        .trim();
    let stem = name.strip_suffix(".wasm").unwrap_or("");
    if stem.is_empty() || !crate::tool::valid_tool_name(stem) {
        return Err(format!(
            "{:?} is not a plugin file name: NAME.wasm, NAME made of letters, digits, '_' and '-'",
            crate::tool::log_safe(name)
        ));
    }
    Ok(name.to_string())
}

/// `POST /ui/api/plugins`: the bytes go to a private file in the state
/// directory, then through [`crate::Admission::install_plugin_file`], the path of
/// `toolhost plugin add`: trust policy, signature, grants, atomic swap.
async fn upload(
    State(ctx): State<UiCtx>,
    token: Option<axum::Extension<crate::mcp::http::TokenId>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let who = page_actor(token.as_ref().map(|t| &t.0));
    let Some(dir) = ctx.admin.uploads.clone() else {
        return error(StatusCode::NOT_FOUND, "not_found", "this host takes no uploads (no state directory)");
    };
    let name = match upload_name(&headers) {
        Ok(n) => n,
        Err(e) => return error(StatusCode::BAD_REQUEST, "invalid_input", &e),
    };
    if body.is_empty() {
        return error(StatusCode::BAD_REQUEST, "invalid_input", "the file is empty");
    }
    let installer = ctx.admin.installer.clone();
    let install = move || -> Result<crate::Installed, (StatusCode, String)> {
        let internal = |e: std::io::Error| (StatusCode::INTERNAL_SERVER_ERROR, format!("staging the upload: {e}"));
        crate::runtime::private::create_dirs(&dir).map_err(internal)?;
        // A fresh 0700 directory per upload; the file in it 0600; both gone after.
        let staging = tempfile::Builder::new().prefix("upload-").tempdir_in(&dir).map_err(internal)?;
        let path = staging.path().join(&name);
        crate::runtime::private::write_private(&path, &body).map_err(internal)?;
        let installed = crate::audit::acting(who, || installer.install_plugin_file(&path));
        drop(staging);
        installed.map_err(|e| (StatusCode::UNPROCESSABLE_ENTITY, e.to_string()))
    };
    match tokio::task::spawn_blocking(install).await {
        Ok(Ok(i)) => {
            tracing::info!(plugin = %crate::tool::log_safe(&i.name), "plugin installed from the DM's page");
            Json(InstalledReply { provenance_text: i.provenance.describe(), installed: i }).into_response()
        }
        Ok(Err((status, message))) => error(status, "invalid_input", &message),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "handler_error", &e.to_string()),
    }
}

/// Who acts through the page: its operator token's id, or the server's own
/// user on loopback (no tokens).
pub(crate) fn page_actor(token: Option<&crate::mcp::http::TokenId>) -> crate::audit::Actor {
    match token {
        Some(t) => crate::audit::Actor::new(format!("page, token {}", t.0), "page"),
        None => crate::audit::Actor::new("page, the server's own user", "page"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn api_paths() {
        assert!(is_api("/api/state"));
        assert!(is_api("/ui/api/state"));
        assert!(!is_api("/"));
        assert!(!is_api("/app.js"));
        assert!(!is_api("/apix"));
    }

    #[test]
    fn upload_names() {
        let mut h = HeaderMap::new();
        assert!(upload_name(&h).is_err());
        for bad in ["x.txt", ".wasm", "../x.wasm", "a/b.wasm", "a b.wasm"] {
            h.insert(FILE_NAME_HEADER, HeaderValue::from_str(bad).unwrap());
            assert!(upload_name(&h).is_err(), "{bad}");
        }
        h.insert(FILE_NAME_HEADER, HeaderValue::from_static("echo_tool.wasm"));
        assert_eq!(upload_name(&h).unwrap(), "echo_tool.wasm");
    }

    #[test]
    fn the_audit_tail_is_bounded_and_skips_cut_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("audit.jsonl");
        let mut f = std::fs::File::create(&p).unwrap();
        for i in 0..200 {
            writeln!(f, "{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(40)).unwrap();
        }
        writeln!(f, "not json").unwrap();
        let all = audit_tail(&p, 1 << 20, 1000).unwrap();
        assert_eq!(all.len(), 200);
        let last = audit_tail(&p, 1 << 20, 5).unwrap();
        assert_eq!(last.iter().map(|v| v["n"].as_u64().unwrap()).collect::<Vec<_>>(), vec![195, 196, 197, 198, 199]);
        // A window that cuts a line: the cut line is left out, the rest parse.
        let cut = audit_tail(&p, 500, 1000).unwrap();
        assert!(!cut.is_empty() && cut.len() < 10, "{}", cut.len());
        assert_eq!(cut.last().unwrap()["n"], 199);
        assert!(audit_tail(&dir.path().join("none"), 100, 10).is_err());
    }

    #[test]
    fn long_records_at_the_end_do_not_hide_the_ones_before() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("audit.jsonl");
        let mut f = std::fs::File::create(&p).unwrap();
        for i in 0..10 {
            writeln!(f, "{{\"n\":{i}}}").unwrap();
        }
        for i in 10..13 {
            writeln!(f, "{{\"n\":{i},\"tool\":\"{}\"}}", "y".repeat(900 * 1024)).unwrap();
        }
        writeln!(f, "{{\"n\":13}}").unwrap();
        let all = audit_tail(&p, AUDIT_BYTES, AUDIT_LINES).unwrap();
        assert_eq!(all.iter().map(|v| v["n"].as_u64().unwrap()).collect::<Vec<_>>(), (0..14).collect::<Vec<_>>());
        // Within the bytes allowed, whole records only: the line that began
        // before them is left out, not shown in part.
        let some = audit_tail(&p, 1 << 20, AUDIT_LINES).unwrap();
        assert_eq!(some.iter().map(|v| v["n"].as_u64().unwrap()).collect::<Vec<_>>(), [12, 13]);
    }
}
