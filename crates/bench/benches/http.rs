//! Outgoing HTTP from plugins (issue #29), against a loopback HTTPS server
//! in this process (hyper and rustls, a certificate from a throwaway CA
//! made with openssl):
//!
//! - one GET through a plugin (`Host::call` of the `webclient` test
//!   plugin's `get`: a fresh instance, `wasi:http`, the grant check, the
//!   plugin's kept connection) against the same GET from native reqwest on
//!   a kept connection;
//! - a plugin's first call to the origin (a new TCP connection and TLS
//!   handshake) against its second (the per-plugin pool), and reqwest with
//!   a new connection per request for comparison.
//!
//! `cargo bench -p toolhost-bench --bench http` (`HTTP_BENCH_CALLS`, default
//! 2000; `HTTP_BENCH_FIRST`, default 40 first calls, one plugin each).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost::tool::CallContext;

const BODY: &[u8] = br#"{"current":{"temperature_2m":12.5,"wind_speed_10m":3.4}}"#;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A CA and a certificate for api.example.test in `dir`: (ca, cert, key).
fn certificates(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let run = |args: &[&str]| {
        let o = Command::new("openssl").current_dir(dir).args(args).output().expect("openssl (scripts/install-peers)");
        assert!(o.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    run(&[
        &["req", "-x509"][..],
        &ec,
        &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=bench CA"],
        &["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
    ]
    .concat());
    run(&[&["req"][..], &ec, &["-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=api.example.test"]].concat());
    std::fs::write(dir.join("leaf.ext"), "subjectAltName=DNS:api.example.test\nextendedKeyUsage=serverAuth\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "leaf.pem",
        "-days",
        "2",
        "-extfile",
        "leaf.ext",
    ]);
    (dir.join("ca.pem"), dir.join("leaf.pem"), dir.join("leaf.key"))
}

/// Serves `BODY` over HTTPS on a loopback port, keep-alive, on `rt`.
fn serve(rt: &tokio::runtime::Runtime, cert: &Path, key: &Path) -> SocketAddr {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(cert).unwrap().collect::<Result<_, _>>().unwrap();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { continue };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let service = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(
                        hyper::Response::builder()
                            .header("content-type", "application/json")
                            .body(http_body_util::Full::new(bytes::Bytes::from_static(BODY)))
                            .unwrap(),
                    )
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    addr
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn us(d: Duration) -> String {
    format!("{:.1} us", d.as_secs_f64() * 1e6)
}

fn main() {
    let calls = env_or("HTTP_BENCH_CALLS", 2000);
    let first = env_or("HTTP_BENCH_FIRST", 40);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (ca, cert, key) = certificates(d);
    let server_rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let addr = serve(&server_rt, &cert, &key);
    let origin = format!("https://api.example.test:{}", addr.port());
    let url = format!("{origin}/v1/forecast");

    // The host: `first + 1` copies of webclient, each its own plugin (its
    // own pool), each granted the origin, its tools behind `wc<i>_`.
    let mut yaml = format!(
        "plugins:\n  builtins: false\n  http_ca_files: [{ca:?}]\n  http_resolve: {{ \"api.example.test:{p}\": \"{addr}\" }}\n  files: [",
        p = addr.port()
    );
    for i in 0..=first {
        let file = d.join(format!("wc{i}.wasm"));
        std::fs::copy(toolhost_test_artifacts::WEBCLIENT_PATH, &file).unwrap();
        yaml += &format!("{file:?}, ");
    }
    yaml += "]\n  grants:\n";
    for i in 0..=first {
        yaml += &format!("    wc{i}: {{ http: [{origin:?}] }}\n");
    }
    yaml += "  prefix:\n";
    for i in 0..=first {
        yaml += &format!("    wc{i}: wc{i}_\n");
    }
    yaml += "budget:\n  pin: {";
    for i in 0..=first {
        yaml += &format!(" wc{i}_get: deep,");
    }
    yaml += " }\n";
    std::fs::write(d.join("toolhost.yaml"), yaml).unwrap();
    let config = toolhost::config::Config::load(&d.join("toolhost.yaml")).unwrap();
    let assembly = toolhost::HostBuilder::new(config)
        .state_dir(Some(d.join("state")))
        .cache(toolhost::CacheChoice::Dir(d.join("cache")))
        .allow_unsigned(true)
        .build()
        .unwrap();
    let host = assembly.host;
    let args = serde_json::json!({"url": url});
    let call = |tool: &str| {
        let t = Instant::now();
        let out = host.call(tool, &args, &CallContext::default()).unwrap();
        let took = t.elapsed();
        assert!(format!("{:?}", out.content).contains("12.5"), "{:?}", out.content);
        took
    };

    // Native reqwest: a kept connection, and a new one per request.
    let client_rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let ca_pem = std::fs::read(&ca).unwrap();
    let client = |pooled: bool| {
        let mut b = reqwest::Client::builder()
            .tls_certs_merge([reqwest::Certificate::from_pem(&ca_pem).unwrap()])
            .resolve("api.example.test", addr);
        if !pooled {
            b = b.pool_max_idle_per_host(0);
        }
        b.build().unwrap()
    };
    let native = |c: &reqwest::Client| {
        client_rt.block_on(async {
            let t = Instant::now();
            let body = c.get(&url).send().await.unwrap().bytes().await.unwrap();
            let took = t.elapsed();
            assert_eq!(&body[..], BODY);
            took
        })
    };

    // Warm up both paths (and the plugin's kept connection).
    let kept = client(true);
    for _ in 0..200 {
        call("wc0_get");
        native(&kept);
    }
    // Alternate, so drift hits both sides alike.
    let (mut plugin, mut reqw) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    for _ in 0..calls {
        plugin.push(call("wc0_get"));
        reqw.push(native(&kept));
    }
    let fresh = client(false);
    let (mut firsts, mut seconds, mut native_new) = (Vec::new(), Vec::new(), Vec::new());
    for i in 1..=first {
        let tool = format!("wc{i}_get");
        firsts.push(call(&tool));
        seconds.push(call(&tool));
        native_new.push(native(&fresh));
    }
    let (plugin, reqw) = (p50(plugin), p50(reqw));
    let (firsts, seconds, native_new) = (p50(firsts), p50(seconds), p50(native_new));
    println!("GET {url} (57-byte JSON body), loopback HTTPS, p50:");
    println!("  plugin (Host::call, fresh instance, kept connection)  {:>10}  ({calls} calls)", us(plugin));
    println!("  native reqwest, kept connection                       {:>10}  ({calls} calls)", us(reqw));
    println!(
        "  ratio plugin / native                                 {:>9.2}x",
        plugin.as_secs_f64() / reqw.as_secs_f64()
    );
    println!("  plugin, first call to the origin (TCP + TLS)          {:>10}  ({first} plugins)", us(firsts));
    println!("  plugin, second call (the pool)                        {:>10}  ({first} plugins)", us(seconds));
    println!(
        "  ratio first / second                                  {:>9.2}x",
        firsts.as_secs_f64() / seconds.as_secs_f64()
    );
    println!("  native reqwest, new connection per request            {:>10}  ({first} requests)", us(native_new));
}
