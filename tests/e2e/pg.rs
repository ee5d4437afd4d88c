//! A throwaway PostgreSQL cluster for the tests: `initdb` from
//! `/usr/lib/postgresql/<version>/bin` in a temporary directory, run as the
//! unprivileged `toolhost-peer` user (PostgreSQL refuses root; the user is
//! made by `scripts/install-peers`), on a Unix socket only, no TCP. One
//! cluster per test process, started on first use; each test takes a
//! database of its own ([`database`]).
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
                .args(["-c", "listen_addresses=", "-c", "max_connections=300", "-c", "shared_buffers=32MB"])
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
    let cluster = Cluster { dir, bin };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cluster.psql("postgres", "SELECT 1").0 {
        let log = std::fs::read_to_string(cluster.dir.join("server.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "postgres did not start within 30 s:\n{log}");
        std::thread::sleep(Duration::from_millis(100));
    }
    cluster
}

impl Cluster {
    /// Runs one statement with psql as the cluster's superuser: success,
    /// and what it printed.
    pub fn psql(&self, db: &str, sql: &str) -> (bool, String) {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.dir)
            .args(["-U", "toolhost", "-d", db, "-c", sql])
            .output()
            .expect("psql");
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), said)
    }

    /// The URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgresql://toolhost@/{db}?host={}", self.dir.display())
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
