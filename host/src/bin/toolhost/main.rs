//! The `toolhost` command line. One file per command under `commands/`;
//! arguments shared by several commands in `args.rs`, printing in
//! `output.rs`. `anyhow` lives here, at the edge.

mod args;
mod commands;
#[cfg(test)]
mod consistency;
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
#[command(args = args::leading(), after_help = args::LEADING_HELP)]
struct Cli {
    #[command(subcommand)]
    command: commands::Command,
}

/// The log filter: `TOOLHOST_LOG` (`tracing` directives), or warnings,
/// what a config reload did (SIGHUP has no other voice) and each plugin
/// compile, started and done (one can take many seconds).
///
/// rmcp logs every message an MCP peer sends at `info` and `debug`, verbatim:
/// a peer sending notifications as fast as it can would fill the disk at
/// `TOOLHOST_LOG=info`. Its lines stay at `warn` unless the filter names
/// `rmcp` itself.
fn log_filter(setting: Option<&str>) -> tracing_subscriber::EnvFilter {
    let setting =
        setting.map(str::trim).filter(|s| !s.is_empty()).unwrap_or("warn,toolhost::reload=info,toolhost::compile=info");
    let directives = if setting.contains("rmcp") { setting.to_string() } else { format!("{setting},rmcp=warn") };
    tracing_subscriber::EnvFilter::try_new(&directives).unwrap_or_else(|e| {
        eprintln!("toolhost: TOOLHOST_LOG={setting:?} is not a valid filter ({e}); logging warnings");
        tracing_subscriber::EnvFilter::new("warn,rmcp=warn")
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(args::hoist_leading(std::env::args_os().collect()));
    // Descriptors as a server takes them (the soft limit up to the hard
    // one); plugins then share three quarters of them, fairly among their
    // callers, and the rest is the host's own (`toolhost_base::descriptors`).
    toolhost_base::descriptors::raise_limit();
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
    fn cli() -> clap::Command {
        <super::Cli as clap::CommandFactory>::command()
    }

    /// Unique names, flags and subcommands, and relations (`requires`,
    /// `conflicts_with`, ...) that name arguments the command has: `sign
    /// --version` once clashed with the built-in flag. clap checks these
    /// only where it is built with debug assertions (`debug_assert`, last);
    /// the suite builds with `--release`, so `consistency` checks them too.
    #[test]
    fn the_command_line_is_consistent() {
        let found = crate::consistency::problems(cli());
        assert!(found.is_empty(), "{}", found.join("\n"));
        // The relations were read, of each kind the command line uses.
        let serve = cli().find_subcommand("serve").unwrap().clone();
        let relations = crate::consistency::relations(&serve);
        for (arg, relation, name) in [("agent", "requires", "stdio"), ("stdio", "conflicts with", "http")] {
            assert!(relations.contains(&(arg.into(), relation, name.into())), "serve: {relations:?}");
        }
        let add = cli().find_subcommand("server").unwrap().find_subcommand("add").unwrap().clone();
        let relations = crate::consistency::relations(&add);
        assert!(relations.contains(&("command".into(), "is required unless", "url".into())), "{relations:?}");
        cli().debug_assert();
    }

    /// The checks find each kind of mistake, planted in the real command line.
    #[test]
    fn the_consistency_checks_find_a_planted_mistake() {
        use clap::{Arg, ArgAction, Command};
        let planted: [(&str, Command); 5] = [
            ("--version is both", cli().mut_subcommand("sign", |c| c.arg(Arg::new("v").long("version")))),
            (
                "--json is both",
                cli().mut_subcommand("tools", |c| {
                    c.arg(Arg::new("j").long("j").alias("json").action(ArgAction::SetTrue))
                }),
            ),
            ("requires \"nothing\"", cli().mut_subcommand("serve", |c| c.mut_arg("agent", |a| a.requires("nothing")))),
            (
                "is required unless \"nothing\"",
                cli().mut_subcommand("serve", |c| c.mut_arg("agent", |a| a.required_unless_present("nothing"))),
            ),
            ("name \"ls\" is both", cli().mut_subcommand("secret", |c| c.subcommand(Command::new("ls")))),
        ];
        for (want, cmd) in planted {
            // Where clap has its debug assertions, it panics first.
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| crate::consistency::problems(cmd))) {
                Ok(found) => assert!(found.iter().any(|p| p.contains(want)), "{want}: {found:?}"),
                Err(_) => {
                    let debug = cfg!(debug_assertions);
                    assert!(debug, "{want}: the checks panicked");
                }
            }
        }
    }

    /// Each line, with its options before the subcommand, parses to what
    /// the same line with them after it does, or is refused alike.
    #[test]
    fn options_before_the_subcommand_mean_what_they_mean_after_it() {
        use clap::Parser as _;
        let parse = |line: &str| {
            let words: Vec<std::ffi::OsString> = line.split_whitespace().map(Into::into).collect();
            match super::Cli::try_parse_from(crate::args::hoist_leading(words)) {
                Ok(cli) => Ok(format!("{:?}", cli.command)),
                Err(e) => Err(e.kind()),
            }
        };
        for (before, after) in [
            ("toolhost --config f.yaml tools", "toolhost tools --config f.yaml"),
            (
                "toolhost --config=f.yaml --no-builtins tools --json",
                "toolhost tools --config=f.yaml --no-builtins --json",
            ),
            (
                "toolhost --no-builtins --plugin a.wasm call roll {}",
                "toolhost call roll {} --no-builtins --plugin a.wasm",
            ),
            ("toolhost --plugin a.wasm serve --plugin b.wasm", "toolhost serve --plugin a.wasm --plugin b.wasm"),
            ("toolhost --config f.yaml inspect x.wasm", "toolhost inspect x.wasm --config f.yaml"),
            ("toolhost --config f.yaml grants", "toolhost grants --config f.yaml"),
            ("toolhost --config f.yaml doctor", "toolhost doctor --config f.yaml"),
            ("toolhost --config f.yaml secret list", "toolhost secret list --config f.yaml"),
            ("toolhost --config f.yaml plugin add x.wasm", "toolhost plugin add x.wasm --config f.yaml"),
            ("toolhost --config f.yaml --plugin a.wasm lock", "toolhost lock --config f.yaml --plugin a.wasm"),
            ("toolhost --config f.yaml verify x.wasm", "toolhost verify x.wasm --config f.yaml"),
            // Refused before as after: commands that take no such option.
            ("toolhost --plugin a.wasm secret list", "toolhost secret list --plugin a.wasm"),
            ("toolhost --no-builtins status", "toolhost status --no-builtins"),
            ("toolhost --plugin a.wasm inspect x.wasm", "toolhost inspect x.wasm --plugin a.wasm"),
            ("toolhost --config f.yaml keygen me", "toolhost keygen me --config f.yaml"),
            ("toolhost --config a.yaml tools --config b.yaml", "toolhost tools --config a.yaml --config b.yaml"),
        ] {
            assert_eq!(parse(before), parse(after), "{before:?} and {after:?}");
        }
        assert!(parse("toolhost --plugin a.wasm secret list").is_err());
        assert!(parse("toolhost --config f.yaml keygen me").is_err());
        // Anything else before the subcommand is clap's to refuse.
        assert_eq!(parse("toolhost --config f.yaml --bogus tools"), Err(clap::error::ErrorKind::UnknownArgument));
        assert_eq!(parse("toolhost --config f.yaml"), Err(clap::error::ErrorKind::MissingSubcommand));
    }

    /// The top level's `--help` names the commands taking `--plugin`: each
    /// of them and only those.
    #[test]
    fn the_top_level_help_names_the_commands_of_its_options() {
        let cli = <super::Cli as clap::CommandFactory>::command();
        let help_of = |long: &str| {
            let arg = cli.get_arguments().find(|a| a.get_long() == Some(long)).unwrap();
            arg.get_help().unwrap().to_string()
        };
        let takes = |c: &clap::Command, long: &str| c.get_arguments().any(|a| a.get_long() == Some(long));
        let plugin_help = help_of("plugin");
        let (_, list) = plugin_help.split_once("load plugins:").unwrap();
        // Up to the note on `audit`, which takes `--plugin` as a filter.
        let list = list.split('(').next().unwrap();
        let named: Vec<&str> = list
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| cli.get_subcommands().any(|c| c.get_name() == *w))
            .collect();
        // `audit --plugin NAME` filters its records by plugin: it loads none.
        let mut taking: Vec<&str> = cli
            .get_subcommands()
            .filter(|c| takes(c, "plugin") && c.get_name() != "audit")
            .map(|c| c.get_name())
            .collect();
        let mut named_sorted = named.clone();
        named_sorted.sort_unstable();
        taking.sort_unstable();
        assert_eq!(named_sorted, taking, "--plugin's help: {plugin_help}");
        for c in cli.get_subcommands().filter(|c| !["lock", "audit"].contains(&c.get_name())) {
            assert_eq!(
                takes(c, "no-builtins"),
                takes(c, "plugin"),
                "{}: --no-builtins goes with --plugin",
                c.get_name()
            );
        }
    }
}
