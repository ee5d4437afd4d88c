//! The `http` capability, whole: `wasi:http` for toolhost plugins, outgoing
//! requests to the origins a plugin is granted
//! (`plugins.grants.<plugin>.http`), and nowhere else.
//!
//! One home, as a Spin factor is: the grant ([`grant`]: resolved from the
//! config, reported, described, matched against a manifest's asks), the
//! linking, the per-call state and the hooks. Installed on the runtime as a
//! [`toolhost_runtime::Extension`] by the layer that assembles it, so that
//! `toolhost-runtime` carries no hyper and no TLS stack. The origins'
//! vocabulary ([`toolhost_types::origin`]) is shared with the manifest.
//! Every request a guest sends passes through [`Hooks::send_request`]:
//!
//! 1. Its scheme, host and port must match a granted origin; otherwise it
//!    fails with a WASI HTTP error whose message names the origin and says
//!    it is not granted. Redirects are the guest's to follow: each hop is a
//!    new request, checked the same way.
//! 2. At most `limits.http_requests_per_call` requests per call.
//! 3. The name is resolved once ([`connect`]): a pin from
//!    `plugins.http_resolve` wins over DNS; each address is checked against
//!    the address policy (loopback, private, link-local, CGNAT, multicast
//!    and unspecified addresses only where the grant names that literal
//!    address, or the operator pinned the name), and the connection goes to
//!    the address that was checked: nothing resolves the name again.
//! 4. TLS with rustls, the platform's roots and `plugins.http_ca_files`.
//! 5. Everything under the call's deadline: connect, first byte and every
//!    frame of the body; the response body is cut at
//!    `limits.http_response_bytes` while it is read, the request body at
//!    `limits.http_request_bytes`.

#![deny(unsafe_code)]

mod body;
mod connect;
pub mod dns;
pub mod grant;
mod pool;

use bytes::Bytes;
use http_body_util::BodyExt;
use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use toolhost_runtime::{Extension, ExtensionCall, ExtensionGrant, GrantConfig, GrantError, State};
use toolhost_types::origin::{HttpGrant, HttpScheme};

pub use grant::HttpGrants;
use toolhost_types::Capability;
use wasmtime::component::Linker;
use wasmtime_wasi_http::{RequestOptions, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks};

pub use wasmtime_wasi_http::Error as WasiHttpError;

/// What the operator sets for every plugin's HTTP: name pins and CAs.
#[derive(Debug, Clone, Default)]
pub struct HttpSettings {
    /// `host:port` -> the address to connect to instead of resolving the
    /// name (`plugins.http_resolve`, as curl's `--resolve`). A pinned
    /// address counts as granted by name.
    pub resolve: HashMap<String, SocketAddr>,
    /// PEM files of CAs trusted besides the platform's
    /// (`plugins.http_ca_files`).
    pub ca_files: Vec<PathBuf>,
    /// The name servers plugins' names are resolved with
    /// (`plugins.http_nameservers`); empty for the system's configuration.
    pub nameservers: Vec<SocketAddr>,
    /// The plugins whose requests carry the call's trace context as
    /// `traceparent` / `tracestate` headers (`plugins.trace_propagation`):
    /// the header tells the origin that a call happened, so it is the
    /// operator's choice per plugin.
    pub trace_propagation: std::collections::HashSet<String>,
}

/// Why the extension could not be built.
#[derive(Debug, thiserror::Error)]
pub enum HttpSetupError {
    /// A CA file could not be read.
    #[error("plugins.http_ca_files: {path}: {reason}")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A `plugins.http_resolve` entry is not `host:port` -> `IP:port`.
    #[error("plugins.http_resolve: {entry:?}: {reason}")]
    Resolve {
        /// The entry.
        entry: String,
        /// Why.
        reason: String,
    },
    /// The TLS configuration could not be built.
    #[error("TLS: {0}")]
    Tls(String),
}

/// The `wasi:http` extension: one per runtime.
pub struct HttpExtension {
    shared: Arc<Shared>,
}

/// What every call's hooks share.
pub(crate) struct Shared {
    /// The operator's extra CA certificates (`plugins.http_ca_files`),
    /// read at start so a bad file is an error then.
    extra_roots: Vec<rustls_pki_types::CertificateDer<'static>>,
    /// The TLS configuration, or why there is none: made at the first
    /// HTTPS request, not at start (the platform's CA certificates take
    /// milliseconds to load, and most hosts never need them).
    tls: std::sync::OnceLock<Result<Arc<rustls::ClientConfig>, String>>,
    /// (lowercase host, port) -> pinned address.
    pub(crate) pins: HashMap<(String, u16), SocketAddr>,
    /// Each plugin's kept-alive connections.
    pub(crate) pool: Arc<pool::Pool>,
    /// The plugins' resolver and their shares of it.
    pub(crate) dns: dns::Dns,
    /// `plugins.trace_propagation`.
    propagate: std::collections::HashSet<String>,
}

impl std::fmt::Debug for HttpExtension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpExtension").field("pins", &self.shared.pins.len()).finish_non_exhaustive()
    }
}

impl HttpExtension {
    /// Builds the extension: the TLS roots (the platform's and the
    /// operator's CA files) and the name pins.
    pub fn new(settings: &HttpSettings) -> Result<HttpExtension, HttpSetupError> {
        use rustls_pki_types::CertificateDer;
        use rustls_pki_types::pem::PemObject;
        let mut extra = Vec::new();
        for path in &settings.ca_files {
            let err = |reason: String| HttpSetupError::CaFile { path: path.clone(), reason };
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .map_err(|e| err(e.to_string()))?
                .collect::<Result<_, _>>()
                .map_err(|e| err(e.to_string()))?;
            if certs.is_empty() {
                return Err(err("no PEM certificate in it".into()));
            }
            extra.extend(certs);
        }
        let mut pins = HashMap::new();
        for (entry, addr) in &settings.resolve {
            let err = |reason: &str| HttpSetupError::Resolve { entry: entry.clone(), reason: reason.into() };
            let (host, port) = entry.rsplit_once(':').ok_or_else(|| err("expected host:port"))?;
            let port: u16 = port.parse().map_err(|_| err("the port must be 1 to 65535"))?;
            if host.is_empty() {
                return Err(err("expected host:port"));
            }
            pins.insert((host.to_ascii_lowercase(), port), *addr);
        }
        Ok(HttpExtension {
            shared: Arc::new(Shared {
                extra_roots: extra,
                tls: Default::default(),
                pins,
                pool: Default::default(),
                dns: dns::Dns::new(settings.nameservers.clone()),
                propagate: settings.trace_propagation.clone(),
            }),
        })
    }
}

impl Shared {
    /// The TLS configuration (made on first use), or why there is none.
    pub(crate) fn tls(&self) -> Result<Arc<rustls::ClientConfig>, String> {
        self.tls
            .get_or_init(|| {
                let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
                // A machine with no CA certificates at all (and none
                // configured) still runs every plugin: only its HTTPS
                // requests fail, saying why.
                match rustls_platform_verifier::Verifier::new_with_extra_roots(
                    self.extra_roots.iter().cloned(),
                    provider.clone(),
                ) {
                    Ok(verifier) => {
                        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
                            .with_safe_default_protocol_versions()
                            .map_err(|e| e.to_string())?
                            .dangerous()
                            .with_custom_certificate_verifier(Arc::new(verifier))
                            .with_no_client_auth();
                        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
                        Ok(Arc::new(tls))
                    }
                    Err(e) => {
                        tracing::debug!("plugins' HTTPS requests will fail: {e}");
                        Err(format!(
                            "no CA certificate to verify servers with ({e}): install the system's CA certificates, or list CAs in plugins.http_ca_files"
                        ))
                    }
                }
            })
            .clone()
    }
}

impl Extension for HttpExtension {
    fn capability(&self) -> Capability {
        Capability::Http
    }

    fn resolve(&self, plugin: &str, config: &GrantConfig) -> Result<Arc<dyn ExtensionGrant>, GrantError> {
        Ok(Arc::new(HttpGrants::resolve(plugin, config)?))
    }

    fn link(&self, linker: &mut Linker<State>) -> wasmtime::Result<()> {
        use wasmtime_wasi_http::WasiHttp;
        use wasmtime_wasi_http::p2::bindings;
        let options = bindings::LinkOptions::default();
        bindings::sync::http::outgoing_handler::add_to_linker::<State, WasiHttp>(linker, view)?;
        bindings::sync::http::types::add_to_linker::<State, WasiHttp>(linker, &options.into(), view)?;
        Ok(())
    }

    fn contacts(&self, call: &(dyn Any + Send)) -> Vec<toolhost_types::HostContact> {
        let Some(call) = call.downcast_ref::<CallHttp>() else { return Vec::new() };
        call.hooks
            .tallies
            .iter()
            .map(|(origin, t)| toolhost_types::HostContact {
                origin: origin.clone(),
                requests: t.requests,
                bytes_out: t.bytes_out.load(Ordering::Relaxed),
                bytes_in: t.bytes_in.load(Ordering::Relaxed),
            })
            .collect()
    }

    fn refusals(&self, call: &(dyn Any + Send)) -> Vec<String> {
        call.downcast_ref::<CallHttp>().map_or_else(Vec::new, |call| call.hooks.refused.clone())
    }

    fn limit_hit(&self, error: &wasmtime::Error, limits: &toolhost_runtime::Limits) -> Option<String> {
        let too_big = error.chain().any(|c| {
            matches!(
                c.downcast_ref::<wasmtime_wasi_http::FieldMapError>(),
                Some(wasmtime_wasi_http::FieldMapError::TotalSizeTooBig)
            )
        });
        too_big.then(|| {
            format!(
                "made a set of HTTP headers over {} bytes (a quarter of its memory shared among limits.host_resources_per_call)",
                limits.http_field_bytes()
            )
        })
    }

    fn instance(&self, call: ExtensionCall<'_>) -> Box<dyn Any + Send> {
        let plugin: Arc<str> = Arc::from(call.plugin);
        let mut ctx = WasiHttpCtx::new();
        ctx.set_field_size_limit(call.limits.http_field_bytes());
        Box::new(CallHttp {
            ctx,
            hooks: Hooks {
                shared: Some(self.shared.clone()),
                lookups: Some(self.shared.dns.for_call(plugin.clone(), call.caller)),
                trace: call.trace.cloned(),
                propagate: self.shared.propagate.contains(&*plugin),
                plugin,
                grants: call
                    .grants
                    .extensions
                    .get_as::<HttpGrants>(Capability::Http)
                    .map_or_else(|| Arc::from(Vec::new()), |g| g.0.clone()),
                deadline: call.deadline,
                requests_left: call.limits.http_requests_per_call,
                requests_limit: call.limits.http_requests_per_call,
                response_bytes: call.limits.http_response_bytes,
                request_bytes: call.limits.http_request_bytes,
                body_buffers_left: call.limits.http_request_bytes,
                tallies: BTreeMap::new(),
                refused: Vec::new(),
            },
        })
    }
}

/// One call's `wasi:http` state.
struct CallHttp {
    ctx: WasiHttpCtx,
    hooks: Hooks,
}

impl CallHttp {
    /// For a store with no HTTP state (a plugin not holding the
    /// capability cannot import it, so this is a guard, not a path): every
    /// request refused.
    fn denied() -> CallHttp {
        CallHttp {
            ctx: WasiHttpCtx::new(),
            hooks: Hooks {
                shared: None,
                lookups: None,
                plugin: Arc::from(""),
                trace: None,
                propagate: false,
                grants: Arc::from(Vec::new()),
                deadline: Instant::now(),
                requests_left: 0,
                requests_limit: 0,
                response_bytes: 0,
                request_bytes: 0,
                body_buffers_left: 0,
                tallies: BTreeMap::new(),
                refused: Vec::new(),
            },
        }
    }
}

/// The `wasi:http` view of a store: its table and the call's HTTP state.
fn view(state: &mut State) -> WasiHttpCtxView<'_> {
    let (table, ext) = state.extension();
    if !ext.as_ref().is_some_and(|e| e.is::<CallHttp>()) {
        *ext = Some(Box::new(CallHttp::denied()));
    }
    let call = ext.as_mut().and_then(|e| e.downcast_mut::<CallHttp>()).expect("set just above");
    WasiHttpCtxView { ctx: &mut call.ctx, table, hooks: &mut call.hooks }
}

/// The checks every request of one call passes.
struct Hooks {
    shared: Option<Arc<Shared>>,
    /// This call's share of DNS lookups (none without a grant).
    lookups: Option<dns::Lookups>,
    plugin: Arc<str>,
    /// The call's span: each request's span goes under it.
    trace: Option<toolhost_types::trace::Context>,
    /// Whether requests carry the trace context (`plugins.trace_propagation`).
    propagate: bool,
    grants: Arc<[HttpGrant]>,
    deadline: Instant,
    requests_left: u32,
    requests_limit: u32,
    response_bytes: usize,
    request_bytes: usize,
    /// What the call's outgoing bodies may still buffer in the host,
    /// together (each body buffers two chunks): see
    /// [`WasiHttpHooks::p2_outgoing_body_chunk_size`] below.
    body_buffers_left: usize,
    /// Origin -> what this call sent it and read from it, for the audit.
    tallies: BTreeMap<String, Tally>,
    /// The host's reasons for the requests it refused this call (at most
    /// [`MAX_REFUSALS`], distinct): see [`Extension::refusals`].
    refused: Vec<String>,
}

/// How many distinct refusals one call keeps for its error message.
const MAX_REFUSALS: usize = 3;
/// The longest refusal kept, in characters (a guest's URL is in it).
const MAX_REFUSAL_CHARS: usize = 400;

/// What one call exchanged with one origin.
#[derive(Default)]
struct Tally {
    requests: u32,
    bytes_out: Arc<AtomicU64>,
    bytes_in: Arc<AtomicU64>,
}

type Sent = Box<
    dyn Future<
            Output = Result<
                (http::Response<WasiBody>, Box<dyn Future<Output = Result<(), WasiHttpError>> + Send>),
                WasiHttpError,
            >,
        > + Send,
>;

/// A request's failure, as the guest reads it: a WASI HTTP
/// `internal-error` carrying toolhost's words.
pub(crate) fn refused(message: String) -> WasiHttpError {
    WasiHttpError::InternalError(Some(format!("toolhost: {message}")))
}

/// The largest and smallest write into an outgoing body's stream.
const BODY_CHUNK_MAX: usize = 64 << 10;
const BODY_CHUNK_MIN: usize = 4 << 10;

impl WasiHttpHooks for Hooks {
    /// Asked once per outgoing body the guest makes: its write chunk
    /// (wasmtime buffers up to two). The call's bodies share
    /// `limits.http_request_bytes` of buffers; past it each new body gets
    /// the smallest chunk, so however many bodies a guest makes, they hold
    /// at most that budget plus 8 KiB each (and the number of bodies is
    /// bounded by `limits.host_resources_per_call`).
    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        let chunk = (self.body_buffers_left / 2).clamp(BODY_CHUNK_MIN, BODY_CHUNK_MAX);
        self.body_buffers_left = self.body_buffers_left.saturating_sub(2 * chunk);
        chunk
    }

    fn send_request(
        &mut self,
        mut request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), WasiHttpError>> + Send>,
    ) -> Sent {
        match self.check(&request) {
            Ok((shared, lookups, target)) => {
                let origin = format!("{}://{}:{}", target.scheme.as_str(), target.host, target.port);
                let tally = self.tallies.entry(origin).or_default();
                tally.requests += 1;
                let deadline = self.deadline;
                let limits = body::Bounds {
                    response_bytes: self.response_bytes,
                    request_bytes: self.request_bytes,
                    bytes_out: tally.bytes_out.clone(),
                    bytes_in: tally.bytes_in.clone(),
                };
                let grants = self.grants.clone();
                let span = self.span(&mut request, &target);
                Box::new(async move {
                    let sent =
                        connect::send(&shared, &lookups, &grants, target, request, options, deadline, limits).await;
                    if span.is_some() {
                        ended(span.as_ref(), &sent);
                    }
                    sent
                })
            }
            Err(e) => {
                if let WasiHttpError::InternalError(Some(message)) = &e {
                    let reason = message.strip_prefix("toolhost: ").unwrap_or(message);
                    // The guest chose the origin in it: kept short.
                    let reason = match reason.char_indices().nth(MAX_REFUSAL_CHARS) {
                        Some((at, _)) => format!("{}...", &reason[..at]),
                        None => reason.to_string(),
                    };
                    if self.refused.len() < MAX_REFUSALS && !self.refused.contains(&reason) {
                        self.refused.push(reason);
                    }
                }
                Box::new(async move { Err(e) })
            }
        }
    }
}

/// Where a checked request goes.
pub(crate) struct Target {
    pub(crate) scheme: HttpScheme,
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl Hooks {
    /// The request's span (under the call's), and its trace context in
    /// its headers where the operator lets this plugin pass it on.
    fn span(&self, request: &mut http::Request<WasiBody>, target: &Target) -> Option<toolhost_types::trace::Context> {
        use toolhost_types::trace;
        let span = trace::start(trace::Kind::Client, self.trace.as_ref(), || {
            (
                request.method().as_str().to_string(),
                vec![
                    trace::attr("http.request.method", request.method().as_str().to_string()),
                    trace::attr("url.scheme", target.scheme.as_str()),
                    trace::attr("server.address", target.host.clone()),
                    trace::attr("server.port", i64::from(target.port)),
                    trace::attr("toolhost.plugin", self.plugin.to_string()),
                ],
            )
        });
        if self.propagate
            && let Some(cx) = span.as_ref().or(self.trace.as_ref())
        {
            trace::inject_headers(cx, request.headers_mut());
        }
        span
    }

    /// The grant and count checks, before anything leaves the host.
    fn check(
        &mut self,
        request: &http::Request<WasiBody>,
    ) -> Result<(Arc<Shared>, dns::Lookups, Target), WasiHttpError> {
        let (Some(shared), Some(lookups)) = (self.shared.clone(), self.lookups.clone()) else {
            return Err(refused("this plugin holds no http grant".into()));
        };
        let uri = request.uri();
        // `user:password@host`: never sent on (it would reach the origin,
        // or its Host header), and never a way to dress up a host name.
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(refused(
                "a user name or password in the URL's authority (user@host) is not sent: put credentials in a header"
                    .into(),
            ));
        }
        let scheme = uri
            .scheme_str()
            .and_then(|s| HttpScheme::from_name(&s.to_ascii_lowercase()))
            .ok_or_else(|| refused("only http and https requests are sent".into()))?;
        let host = uri.host().ok_or(WasiHttpError::HttpRequestUriInvalid)?.to_ascii_lowercase();
        let host = host.trim_end_matches('.').to_string();
        let port = uri.port_u16().unwrap_or(scheme.default_port());
        let shown = format!("{}://{}:{port}", scheme.as_str(), host);
        if !self.grants.iter().any(|g| g.allows(scheme, &host, port)) {
            tracing::debug!(plugin = %self.plugin, origin = %shown, "http request refused: not granted");
            return Err(refused(format!(
                "{shown} is not granted to plugin {p} (plugins.grants.{p}.http lists the origins it may reach)",
                p = self.plugin
            )));
        }
        if self.requests_left == 0 {
            return Err(refused(format!(
                "more than {} HTTP requests in one call (limits.http_requests_per_call)",
                self.requests_limit
            )));
        }
        self.requests_left -= 1;
        if Instant::now() >= self.deadline {
            return Err(WasiHttpError::ConnectionTimeout);
        }
        Ok((shared, lookups, Target { scheme, host, port }))
    }
}

/// Ends a request's span with what came back: the status and the
/// declared body size, or the error.
fn ended<T>(
    span: Option<&toolhost_types::trace::Context>,
    sent: &Result<(http::Response<WasiBody>, T), WasiHttpError>,
) {
    use toolhost_types::trace;
    match sent {
        Ok((response, _)) => {
            let mut attributes = vec![trace::attr("http.response.status_code", i64::from(response.status().as_u16()))];
            if let Some(n) = response
                .headers()
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<i64>().ok())
            {
                attributes.push(trace::attr("http.response.body.size", n));
            }
            trace::annotate(span, attributes);
            trace::end(span, response.status().is_server_error().then_some("server error"));
        }
        Err(e) => trace::end(span, Some(&e.to_string())),
    }
}

/// A response body as the guest reads it.
pub(crate) fn boxed<B>(body: B) -> WasiBody
where
    B: http_body::Body<Data = Bytes, Error = WasiHttpError> + Send + 'static,
{
    body.boxed_unsync()
}
