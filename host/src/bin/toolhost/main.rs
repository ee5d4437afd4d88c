//! The `toolhost` command line. One file per command under `commands/`;
//! arguments shared by several commands in `args.rs`, printing in
//! `output.rs`. `anyhow` lives here, at the edge.

mod args;
mod commands;
mod output;

use clap::Parser;
use std::process::ExitCode;

/// A WebAssembly plugin host for sandboxed LLM tools.
///
/// toolhost runs tools compiled to WASI preview-2 components (the built-in
/// dice roller, SRD rules lookup, file and memory tools, plus any plugin you
/// load) under hard limits: fuel, an epoch deadline, memory and output caps,
/// deny-by-default capabilities. Tools are sorted into FAST / STANDARD / DEEP
/// latency tiers; agents (NPCs) see only the tools on their allow-list that
/// fit their tier.
///
/// Configuration comes from toolhost.yaml in the working directory (or
/// --config); command-line flags override it.
#[derive(Debug, Parser)]
#[command(name = "toolhost", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: commands::Command,
}

/// The log filter: `TOOLHOST_LOG` (`tracing` directives), or warnings and
/// what a config reload did (SIGHUP has no other voice).
///
/// rmcp logs every message an MCP peer sends at `info` and `debug`, verbatim:
/// a peer sending notifications as fast as it can would fill the disk at
/// `TOOLHOST_LOG=info`. Its lines stay at `warn` unless the filter names
/// `rmcp` itself.
fn log_filter(setting: Option<&str>) -> tracing_subscriber::EnvFilter {
    let setting = setting.map(str::trim).filter(|s| !s.is_empty()).unwrap_or("warn,toolhost::reload=info");
    let directives = if setting.contains("rmcp") { setting.to_string() } else { format!("{setting},rmcp=warn") };
    tracing_subscriber::EnvFilter::try_new(&directives).unwrap_or_else(|e| {
        eprintln!("toolhost: TOOLHOST_LOG={setting:?} is not a valid filter ({e}); logging warnings");
        tracing_subscriber::EnvFilter::new("warn,rmcp=warn")
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = log_filter(std::env::var("TOOLHOST_LOG").ok().as_deref());
    // Logs go to stderr, always: on stdio transports stdout carries protocol
    // messages and nothing else. They are written by a thread of their own:
    // an MCP client that pipes our stderr and never reads it would otherwise
    // stop the host at the first log line past the pipe's 64 KiB (the
    // thread that logs blocks in `write`). Past `LOG_LINES_QUEUED` lines
    // waiting, new ones are dropped rather than waited for.
    let (stderr, logs) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(LOG_LINES_QUEUED)
        .thread_name("toolhost-log")
        .finish(std::io::stderr());
    let dropped = stderr.error_counter();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let ran = cli.command.run();
    if dropped.dropped_lines() == 0 {
        // What is queued is written before the last word (waiting at most a
        // second for a stderr nobody reads).
        drop(logs);
    } else {
        // Lines were dropped: nobody reads stderr, and the queue may be
        // full, in which case the guard's drop would print its complaint
        // to stdout (the protocol stream).
        std::mem::forget(logs);
    }
    match ran {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Log lines queued for stderr at most (see `main`).
const LOG_LINES_QUEUED: usize = 65_536;

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_consistent() {
        // clap's own checks (unique names, valid defaults), which a release
        // build skips: `sign --version` once clashed with the built-in flag.
        <super::Cli as clap::CommandFactory>::command().debug_assert();
    }
}
