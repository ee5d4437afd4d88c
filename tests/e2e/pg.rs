//! A throwaway PostgreSQL cluster for the tests: `initdb` from
//! `/usr/lib/postgresql/<version>/bin` in a temporary directory, run as the
//! unprivileged `toolhost-peer` user (PostgreSQL refuses root; the user is
//! made by `scripts/install-peers`), on a Unix socket, and on a loopback
//! port for TLS only (a throwaway CA made with `openssl`; a password; a
//! plain TCP connection is refused: [`Cluster::tls_url`]). One cluster per
//! test process, started on first use; each test takes a database of its
//! own ([`database`]).
//!
//! The server is started by a thread that lives as long as the process,
//! through `setpriv --pdeathsig SIGINT`: when the test process ends, however
//! it ends, the server gets a fast shutdown. Directories of earlier runs
//! whose process is gone are removed at the next start.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const USER: &str = "toolhost-peer";
const PREFIX: &str = "toolhost-test-pg-";

/// The cluster of this test process.
pub struct Cluster {
    /// The directory holding `data/` and the socket.
    pub dir: PathBuf,
    bin: PathBuf,
    /// The loopback port (TLS only).
    pub port: u16,
    /// The password of the user `toolhost` over TCP.
    pub password: String,
    /// The throwaway CA that signed the server's certificate (PEM).
    pub ca: PathBuf,
}

static CLUSTER: LazyLock<Cluster> = LazyLock::new(start);
static NEXT: AtomicU32 = AtomicU32::new(1);

/// PostgreSQL's server binaries: the newest `/usr/lib/postgresql/<v>/bin`.
pub fn bin_dir() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.flatten()
                .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
                .filter(|(_, p): &(u32, PathBuf)| p.join("initdb").exists())
                .collect()
        })
        .unwrap_or_default();
    versions.sort();
    versions.pop().map(|(_, p)| p).expect("no /usr/lib/postgresql/<version>/bin/initdb: run scripts/install-peers")
}

/// A command run as `toolhost-peer` when this process is root (as CI is),
/// as this user otherwise.
fn as_peer(program: &Path) -> Command {
    let mut c = Command::new("setpriv");
    if is_root() {
        c.args(["--reuid", USER, "--regid", USER, "--clear-groups"]);
    }
    c.arg("--").arg(program);
    c
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

fn remove_stale() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else { continue };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn start() -> Cluster {
    remove_stale();
    let bin = bin_dir();
    let dir = std::env::temp_dir().join(format!("{PREFIX}{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    if is_root() {
        let ok = Command::new("chown").arg(format!("{USER}:{USER}")).arg(&dir).status().unwrap().success();
        assert!(ok, "no Unix user {USER}: run scripts/install-peers as root");
    }
    let out = as_peer(&bin.join("initdb"))
        .args(["-D", "data", "-U", "toolhost", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"])
        .current_dir(&dir)
        .output()
        .expect("setpriv and initdb");
    assert!(
        out.status.success(),
        "initdb: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let ca = tls_files(&dir);
    // The socket trusts (it is the test's own); TCP takes TLS and a
    // password, and nothing else.
    std::fs::write(
        dir.join("data/pg_hba.conf"),
        "local all all trust\nhostssl all toolhost 127.0.0.1/32 scram-sha-256\n",
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let log = std::fs::File::create(dir.join("server.log")).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (server, socket_dir) = (bin.join("postgres"), dir.clone());
    std::thread::Builder::new()
        .name("scratch-postgres".into())
        .spawn(move || {
            let mut c = Command::new("setpriv");
            c.args(["--pdeathsig", "SIGINT"]);
            if is_root() {
                c.args(["--reuid", USER, "--regid", USER, "--clear-groups"]);
            }
            let child = c
                .arg("--")
                .arg(&server)
                .arg("-D")
                .arg(socket_dir.join("data"))
                .arg("-k")
                .arg(&socket_dir)
                .args(["-c", "listen_addresses=127.0.0.1", "-c", &format!("port={port}")])
                .args(["-c", "ssl=on", "-c", "ssl_cert_file=../server.pem", "-c", "ssl_key_file=../server.key"])
                .args(["-c", "max_connections=300", "-c", "shared_buffers=32MB"])
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn();
            let _ = tx.send(child.map(|c| c.id()));
            // The server's parent-death signal follows this thread: it
            // lives until the process ends.
            loop {
                std::thread::park();
            }
        })
        .unwrap();
    rx.recv().unwrap().expect("starting postgres");
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).unwrap();
    let password = hex::encode(bytes);
    let cluster = Cluster { dir, bin, port, password, ca };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cluster.psql("postgres", "SELECT 1").0 {
        let log = std::fs::read_to_string(cluster.dir.join("server.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "postgres did not start within 30 s:\n{log}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (ok, said) = cluster.psql("postgres", &format!("ALTER USER toolhost PASSWORD '{}'", cluster.password));
    assert!(ok, "{said}");
    cluster
}

/// A throwaway CA and a server certificate it signed for `localhost` and
/// `127.0.0.1`, in `dir` (the key readable by the server's user only);
/// the CA's PEM file.
fn tls_files(dir: &Path) -> PathBuf {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let ca = ["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=toolhost test CA"];
    openssl(&[&["req", "-x509"][..], &ec, &ca].concat());
    openssl(&[&["req"][..], &ec, &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"]].concat());
    std::fs::write(dir.join("server.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n").unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(dir.join("server.key"), std::fs::Permissions::from_mode(0o600)).unwrap();
    if is_root() {
        let ok = Command::new("chown")
            .arg(format!("{USER}:{USER}"))
            .args([dir.join("server.key"), dir.join("server.pem")])
            .status()
            .unwrap()
            .success();
        assert!(ok, "chown of the server's key");
    }
    dir.join("ca.pem")
}

impl Cluster {
    /// Runs one statement with psql as the cluster's superuser: success,
    /// and what it printed.
    pub fn psql(&self, db: &str, sql: &str) -> (bool, String) {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.dir)
            .args(["-p", &self.port.to_string(), "-U", "toolhost", "-d", db, "-c", sql])
            .output()
            .expect("psql");
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), said)
    }

    /// The URL of database `db` over TCP on loopback, with `query` (such
    /// as `sslmode=verify-full&sslrootcert=...`).
    pub fn tls_url(&self, db: &str, query: &str) -> String {
        format!("postgresql://toolhost:{}@localhost:{}/{db}?{query}", self.password, self.port)
    }

    /// The URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgresql://toolhost@/{db}?host={}&port={}", self.dir.display(), self.port)
    }
}

/// The shared cluster, started on first use.
pub fn cluster() -> &'static Cluster {
    &CLUSTER
}

/// A new, empty database in the shared cluster: its name and URL.
pub fn database() -> (String, String) {
    let c = cluster();
    let name = format!("t{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let (ok, said) = c.psql("postgres", &format!("CREATE DATABASE {name}"));
    assert!(ok, "CREATE DATABASE {name}: {said}");
    let url = c.url(&name);
    (name, url)
}
