//! How toolhost reaches PostgreSQL (the memory store's `memory.url`, a
//! fleet's `cluster.url`): the URL as libpq reads it, encrypted by rustls
//! when `sslmode` asks for it.
//!
//! `sslmode`, as libpq names it:
//! - absent or `disable`: no TLS (a Unix socket, or loopback);
//! - `prefer`: TLS when the server offers it;
//! - `require`, `verify-ca`, `verify-full`: TLS, or no connection.
//!
//! Whenever TLS is used, the server's certificate is verified, chain and
//! host name, against `sslrootcert` (a PEM file: the CA that a managed
//! PostgreSQL hands out, or the operator's own) or else the system's
//! roots. Unlike libpq, `require` does not accept a certificate that
//! cannot be verified: encryption to an unknown party protects nothing.

use std::sync::Arc;
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// A parsed URL: what to connect to, and how.
#[derive(Clone)]
pub struct PgTarget {
    /// The connection settings (`sslmode` in force, `sslrootcert` taken
    /// out: tokio-postgres does not read it).
    pub config: tokio_postgres::Config,
    /// The TLS connector (used only when `sslmode` asks for TLS).
    pub tls: MakeRustlsConnect,
    /// The URL without its password, for messages.
    pub shown: String,
}

impl std::fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTarget").field("shown", &self.shown).finish_non_exhaustive()
    }
}

/// Why [`PgTarget::parse`] refused a URL: the URL without its password,
/// then what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("{url}: {problem}")]
pub struct PgUrlError {
    /// The URL, without its password.
    pub url: String,
    /// What is wrong with it.
    pub problem: PgUrlProblem,
}

/// What is wrong with a PostgreSQL URL.
#[derive(Debug, thiserror::Error)]
pub enum PgUrlProblem {
    /// Neither `postgres://` nor `postgresql://`.
    #[error("not a postgres:// or postgresql:// URL")]
    Scheme,
    /// An unencoded `@` in the user name or password.
    #[error("more than one '@' before the host: percent-encode an '@' in the user name or password as %40")]
    TwoAts,
    /// An `sslmode` this host does not speak.
    #[error(
        "sslmode={0} is not supported: use disable, prefer, require, verify-ca or verify-full (each verifies the server's certificate, chain and host name, when TLS is used)"
    )]
    SslMode(String),
    /// tokio-postgres refused the rest of the URL.
    #[error("{0}")]
    Config(tokio_postgres::Error),
    /// `sslrootcert` is not an absolute path.
    #[error("sslrootcert={0}: give an absolute path (the URL is read from any directory)")]
    RelativeRootCert(String),
    /// The `sslrootcert` file holds no usable certificate.
    #[error("sslrootcert={path}: {why}")]
    RootCert {
        /// The file.
        path: String,
        /// Why it is of no use.
        why: String,
    },
    /// rustls could not be set up.
    #[error("TLS: {0}")]
    Tls(rustls::Error),
}

/// A connection's driver, as [`PgTarget::connect`] returns it.
pub type PgConnection = tokio_postgres::Connection<
    tokio_postgres::Socket,
    <MakeRustlsConnect as tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>>::Stream,
>;

impl PgTarget {
    /// Reads `url` (`postgres://` or `postgresql://`, libpq's form):
    /// `sslmode` and `sslrootcert` as the module says; everything else as
    /// tokio-postgres reads it. The error names what is wrong, never the
    /// password.
    pub fn parse(url: &str) -> Result<PgTarget, PgUrlError> {
        let shown = crate::redact(url);
        let refused = |problem| PgUrlError { url: shown.clone(), problem };
        // Split as tokio-postgres does: the userinfo ends at the first
        // `@`, the host at the next `/` or `?`, and the query starts at
        // the first `?` after the userinfo.
        let body = ["postgres://", "postgresql://"]
            .iter()
            .find_map(|p| url.strip_prefix(p))
            .ok_or_else(|| refused(PgUrlProblem::Scheme))?;
        let after_user = body.find('@').map_or(0, |at| at + 1);
        let host = &body[after_user..body[after_user..].find(['/', '?']).map_or(body.len(), |e| after_user + e)];
        if host.contains('@') {
            return Err(refused(PgUrlProblem::TwoAts));
        }
        let query_at = body[after_user..].find('?').map(|q| url.len() - body.len() + after_user + q);
        let (head, query) = match query_at {
            Some(q) => (&url[..q], &url[q + 1..]),
            None => (url, ""),
        };
        let decode = |s: &str| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned();
        let (mut mode, mut rootcert, mut kept) = (None, None, Vec::new());
        for kv in query.split('&').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            match decode(k).as_str() {
                "sslmode" => mode = Some(decode(v)),
                "sslrootcert" => rootcert = Some(decode(v)),
                _ => kept.push(kv),
            }
        }
        let ssl = match mode.as_deref() {
            None | Some("disable") => SslMode::Disable,
            Some("prefer") => {
                tracing::warn!(
                    url = %shown,
                    "sslmode=prefer: a man in the middle can answer that the server has no TLS, and the connection goes on in the clear; use require or verify-full"
                );
                SslMode::Prefer
            }
            Some("require" | "verify-ca" | "verify-full") => SslMode::Require,
            Some(other) => return Err(refused(PgUrlProblem::SslMode(other.to_string()))),
        };
        let rest = if kept.is_empty() { head.to_string() } else { format!("{head}?{}", kept.join("&")) };
        let mut config: tokio_postgres::Config = rest.parse().map_err(|e| refused(PgUrlProblem::Config(e)))?;
        config.ssl_mode(ssl);
        let roots = match (ssl, rootcert) {
            (SslMode::Disable, _) => rustls::RootCertStore::empty(),
            (_, Some(path)) if !path.starts_with('/') => return Err(refused(PgUrlProblem::RelativeRootCert(path))),
            (_, Some(path)) => roots_from(&path).map_err(|why| refused(PgUrlProblem::RootCert { path, why }))?,
            (_, None) => system_roots(),
        };
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| refused(PgUrlProblem::Tls(e)))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(PgTarget { config, tls: MakeRustlsConnect::new(tls), shown })
    }

    /// Whether connections use TLS (`sslmode` other than `disable`).
    pub fn encrypted(&self) -> bool {
        self.config.get_ssl_mode() != SslMode::Disable
    }

    /// Opens one connection, giving up after `timeout`.
    pub async fn connect(
        &self,
        timeout: std::time::Duration,
    ) -> Result<(tokio_postgres::Client, PgConnection), tokio_postgres::Error> {
        let mut config = self.config.clone();
        config.connect_timeout(timeout);
        config.connect(self.tls.clone()).await
    }
}

/// `e` and each of its causes that says something new, joined by `: `
/// (tokio-postgres and deadpool say "db error", "error connecting to
/// server" or "error performing TLS handshake" and keep why in the
/// causes), and what to do about a server certificate that does not check.
pub fn explain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.contains(&said) {
            text = if said.contains(&text) { said } else { format!("{text}: {said}") };
        }
        cause = c.source();
    }
    if text.contains("NotValidForName") || text.contains("not valid for name") {
        text.push_str(" (the server's certificate does not name the host in the URL: connect by a name it lists)");
    } else if text.contains("invalid peer certificate") {
        text.push_str(
            " (the server's certificate does not check against the roots this host trusts: name the CA that signed it with sslrootcert=/path/to/ca.pem in the URL)",
        );
    }
    text
}

/// The certificates of the PEM file at `path`.
fn roots_from(path: &str) -> Result<rustls::RootCertStore, String> {
    use rustls_pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    let certs = rustls_pki_types::CertificateDer::pem_file_iter(path).map_err(|e| e.to_string())?;
    for cert in certs {
        roots.add(cert.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    }
    if roots.is_empty() {
        return Err("no certificate in it (a PEM file of the CA that signed the server's certificate)".into());
    }
    Ok(roots)
}

/// The system's trusted roots (those that do not parse are skipped).
fn system_roots() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::debug!(error = %e, "a system root certificate was not read");
    }
    let (added, skipped) = roots.add_parsable_certificates(found.certs);
    tracing::debug!(added, skipped, "system root certificates for PostgreSQL");
    roots
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_and_sslrootcert_are_read_as_libpq_names_them() {
        // An `@` in the query is not the userinfo's: sslmode is still read.
        let t = PgTarget::parse("postgres://u:pw@db/app?application_name=toolhost@web1&sslmode=require").unwrap();
        assert!(t.encrypted(), "sslmode after an @ in the query");
        assert_eq!(t.config.get_application_name(), Some("toolhost@web1"));
        let t = PgTarget::parse("postgres://u@db/x?ssl%6dode=require").unwrap();
        assert!(t.encrypted(), "a percent-encoded key is the key tokio-postgres reads");
        let e = PgTarget::parse("postgres://u:p@ss@db/x").unwrap_err().to_string();
        assert!(e.contains("percent-encode an '@'") && !e.contains("p@ss"), "{e}");
        let e = PgTarget::parse("postgres://u@db/x?sslmode=require&sslrootcert=ca.pem").unwrap_err().to_string();
        assert!(e.contains("give an absolute path"), "{e}");
        let plain = PgTarget::parse("postgres://u:p?w@db/x").unwrap();
        assert!(!plain.encrypted(), "no sslmode: no TLS, as before");
        assert_eq!(plain.config.get_password(), Some(&b"p?w"[..]), "a ? in the password is not the query");
        let t = PgTarget::parse("postgres://u@db/x?sslmode=verify-full&connect_timeout=3").unwrap();
        assert!(t.encrypted());
        assert_eq!(t.config.get_connect_timeout(), Some(&std::time::Duration::from_secs(3)), "other keys kept");
        assert_eq!(PgTarget::parse("postgres://u@db/x?sslmode=prefer").unwrap().config.get_ssl_mode(), SslMode::Prefer);
        let e = PgTarget::parse("postgres://u:secret@db/x?sslmode=allow").unwrap_err().to_string();
        assert!(e.contains("sslmode=allow is not supported") && !e.contains("secret"), "{e}");
        assert!(e.starts_with("postgres://u:***@db/x?sslmode=allow: sslmode=allow"), "{e}");
        let e =
            PgTarget::parse("postgres://u:secret@db/x?sslmode=require&sslrootcert=/nonexistent/ca.pem").unwrap_err();
        let e = e.to_string();
        assert!(e.contains("sslrootcert=/nonexistent/ca.pem") && !e.contains("secret"), "{e}");
        let d = tempfile::tempdir().unwrap();
        let empty = d.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = PgTarget::parse(&format!("postgres://u@db/x?sslmode=require&sslrootcert={}", empty.display()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no certificate in it"), "{e}");
    }
}
