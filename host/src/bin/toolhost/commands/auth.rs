use crate::args::ConfigArgs;
use anyhow::{Context, Result, bail};
use clap::Subcommand;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use toolhost::HostBuilder;
use toolhost::mcp_client::login;

/// Sign in to external MCP servers that want a user's authorization (OAuth
/// 2.1 authorization code with PKCE), and manage the stored logins.
#[derive(Debug, clap::Args)]
pub struct Auth {
    #[command(subcommand)]
    action: Action,
    #[command(flatten)]
    config: ConfigArgs,
    /// Where logins are stored (under oauth/) [default: $TOOLHOST_STATE_DIR, $XDG_STATE_HOME/toolhost or ~/.local/state/toolhost].
    #[arg(long, value_name = "DIR", global = true)]
    state_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Sign in to a server of mcp.servers: prints the authorization URL,
    /// waits for the browser's redirect to 127.0.0.1, stores the tokens.
    Login {
        /// The server's name in mcp.servers.
        server: String,
        /// Also try to open the URL in a browser (xdg-open or open).
        #[arg(long)]
        open: bool,
        /// Also write the authorization URL to this file (for scripts).
        #[arg(long, value_name = "FILE")]
        print_url_to: Option<PathBuf>,
        /// How long to wait for the sign-in, in seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 300)]
        timeout: u64,
    },
    /// Delete a server's stored login.
    Logout {
        /// The server's name.
        server: String,
    },
    /// Show which servers have stored logins and when their tokens expire
    /// (never a token).
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

impl Auth {
    pub fn run(self) -> Result<ExitCode> {
        let config = self.config.load()?;
        let state = HostBuilder::new(config.clone()).state_dir(self.state_dir.clone()).resolved_state_dir();
        match self.action {
            Action::Login { server, open, print_url_to, timeout } => {
                let Some(cfg) = config.mcp.servers.iter().find(|s| s.name == server) else {
                    bail!("no server named {server:?} in mcp.servers");
                };
                let name = server.clone();
                let show_url = Box::new(move |url: &str| {
                    println!("To sign in to {name}, open this URL in a browser:\n\n  {url}\n");
                    // Written whole, then renamed: a script polling for it never reads half.
                    if let Some(path) = &print_url_to
                        && let Err(e) = std::fs::write(path.with_extension("partial"), url)
                            .and_then(|()| std::fs::rename(path.with_extension("partial"), path))
                    {
                        eprintln!("warning: writing {}: {e}", path.display());
                    }
                    if open {
                        let opener = if cfg!(target_os = "macos") { "open" } else { "xdg-open" };
                        if let Err(e) = std::process::Command::new(opener).arg(url).spawn() {
                            eprintln!("warning: could not start {opener}: {e}");
                        }
                    }
                    println!("Waiting for the sign-in ...");
                });
                let options = login::LoginOptions { timeout: Duration::from_secs(timeout), show_url };
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .context("starting the async runtime")?;
                let stored = rt
                    .block_on(login::login(cfg, &state, options))
                    .map_err(|e| anyhow::anyhow!("signing in to {server}: {e}"))?;
                println!(
                    "signed in to {server} ({}){}; the login is stored in {}",
                    stored.issuer,
                    match stored.expires_at {
                        Some(at) => format!(", the token expires in {}", in_words(at)),
                        None => String::new(),
                    },
                    login::store_dir(&state).display()
                );
            }
            Action::Logout { server } => {
                if login::remove(&state, &server).map_err(anyhow::Error::msg)? {
                    println!("removed the stored login of {server}");
                } else {
                    println!("{server} has no stored login");
                }
            }
            Action::Status { json } => {
                let logins = login::status(&state);
                if json {
                    return crate::output::print_json(&logins);
                }
                if logins.is_empty() {
                    println!("no stored logins (toolhost auth login <server>)");
                    return Ok(ExitCode::SUCCESS);
                }
                let rows: Vec<[String; 4]> = logins
                    .iter()
                    .map(|l| {
                        [
                            l.server.clone(),
                            l.issuer.clone(),
                            l.expires_at.map_or_else(|| "unsaid".to_string(), in_words),
                            if l.refreshable { "yes" } else { "no" }.to_string(),
                        ]
                    })
                    .collect();
                crate::output::print_table(&["SERVER", "ISSUER", "EXPIRES", "REFRESHABLE"], &rows);
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// When `at` (Unix seconds) is, from now: `in 59 min`, `expired`.
fn in_words(at: u64) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    match at.checked_sub(now) {
        None | Some(0) => "expired".into(),
        Some(s) if s < 120 => format!("{s} s"),
        Some(s) if s < 7200 => format!("{} min", s / 60),
        Some(s) => format!("{} h", s / 3600),
    }
}
