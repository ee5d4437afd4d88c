//! toolhost's benchmarks live under `benches/`; see BENCHMARKS.md for what each measures
//! and how to rerun it.

/// The machine a run measured: CPU model and core count, for a report's
/// heading.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cpu}, {} cores", cores())
}

/// The cores this process may use.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A child process, killed (and reaped) on drop.
pub struct Proc(pub std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A server process that an MCP client's transport owns (rmcp's kills it
/// from a spawned task): this makes sure it is gone even if that task never
/// runs. SIGKILL on drop, only while the pid is still this process's child.
pub struct PidGuard(pub Option<u32>);

impl Drop for PidGuard {
    fn drop(&mut self) {
        let Some(pid) = self.0 else { return };
        let ours = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().is_some_and(|s| {
            // pid (comm) state ppid ...; comm may hold spaces, so split after ')'.
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                .is_some_and(|ppid| ppid == std::process::id())
        });
        if ours {
            let _ = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

/// The 1, 5 and 15-minute load averages, for a report's heading.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// True when the comma-separated list in `$var` names `slug`, or `$var` is unset.
pub fn wanted(var: &str, slug: &str) -> bool {
    std::env::var(var).map_or(true, |v| v.split(',').any(|w| w.trim() == slug))
}

/// `$name` as a number, or `default` when unset; panics on anything else.
pub fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}
