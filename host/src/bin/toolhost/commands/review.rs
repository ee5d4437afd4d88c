use crate::args::RuntimeArgs;
use crate::output::print_json;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use toolhost::oci::OciRef;
use toolhost::review::{Review, Version};
use toolhost::tool::log_safe;
use toolhost::tool::origin::HttpGrant;

/// Exit status of `review` when `plugin add` would not swap the new
/// version in: its trust policy refuses it, or it would hold it (it asks
/// for a capability or an origin its grant does not give).
pub const HELD: u8 = 3;

/// Show what upgrading a plugin would change, before a DM upgrades it
/// mid-game: the difference between the version serving and a new one.
///
/// Asks added and removed (capabilities, origins, secrets, memory), tools
/// added, removed, or changed (arguments added, removed, newly required or
/// retyped; declared tier and latency; idempotence; description), and the
/// publisher. Everything is read from the components themselves (imports,
/// signed manifest, `list-tools` in a sandbox with no grant), never from a
/// catalogue's claims. The version serving is the one the running host on
/// this state directory serves; with no host serving, pass --against.
/// The config's trust policy is applied too (unsigned, untrusted or revoked
/// signer). Exit status: 0 when the upgrade would load, 3 when `plugin add`
/// would refuse it or hold it until granted, 1 when a version cannot be
/// read.
#[derive(Debug, clap::Args)]
pub struct ReviewCmd {
    /// The plugin's name.
    name: String,
    /// The new version: a component file, or oci://HOST[:PORT]/REPO:TAG
    /// (or @sha256:...).
    new: String,
    /// Compare with this file or reference instead of the version serving.
    #[arg(long, value_name = "FILE|OCI")]
    against: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Speak plain HTTP to these registries (loopback registries always are).
    #[arg(long)]
    insecure: bool,
    /// The running host's state directory, where its admin endpoint record is
    /// [default: $TOOLHOST_STATE_DIR, $XDG_STATE_HOME/toolhost or ~/.local/state/toolhost].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// The running host's process id, when several serve with this state directory.
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
    #[command(flatten)]
    runtime: RuntimeArgs,
}

/// Reads one version from a file or a reference.
fn read_version(builder: &toolhost::HostBuilder, what: &str, insecure: bool) -> Result<Version> {
    Ok(read_version_bytes(builder, what, insecure)?.0)
}

/// [`read_version`], with the file's bytes.
fn read_version_bytes(builder: &toolhost::HostBuilder, what: &str, insecure: bool) -> Result<(Version, Vec<u8>)> {
    let runtime = builder.runtime()?;
    let limit = runtime.limits().max_component_bytes + (1 << 16);
    let (stem, bytes) = if toolhost::oci::is_reference(what) {
        let r = OciRef::parse(what)?;
        let mut store = builder.oci_store()?;
        if insecure {
            store.allow_insecure(r.registry());
        }
        let fetched = store.fetch(&r, None).with_context(|| format!("fetching {what}"))?;
        (r.short_name().to_string(), fetched.bytes)
    } else {
        let path = Path::new(what);
        let stem = toolhost::runtime::plugin_name_from_path(path);
        let bytes = toolhost::runtime::read_bounded(path, limit)
            .map_err(|kind| toolhost::runtime::LoadError { plugin: stem.clone(), kind })
            .with_context(|| format!("reading {what}"))?;
        (stem, bytes)
    };
    let package = toolhost::package::parse(&bytes)?;
    // A broken signature is an error, not an unsigned version.
    let verified = package.verify(&stem)?;
    let name = verified.as_ref().map_or(stem, |v| v.manifest.name.clone());
    let compiled = runtime.compile(&name, package.component)?;
    let defs = runtime.describe_compiled(&compiled).with_context(|| format!("reading the tools of {what}"))?;
    let v = Version::new(
        &name,
        &toolhost::package::component_digest(&bytes)?,
        compiled.imports.clone(),
        verified.as_ref().map(|v| (&v.manifest, v.fingerprint())),
        defs.iter().map(Into::into).collect(),
    );
    Ok((v, bytes))
}

impl ReviewCmd {
    pub fn run(self) -> Result<ExitCode> {
        let builder = self.runtime.builder()?.state_dir(self.state_dir.clone());
        let config = builder.config().clone();
        let (new, bytes) = read_version_bytes(&builder, &self.new, self.insecure)?;
        if new.name != self.name {
            bail!("{} is plugin {:?}, not {:?}", self.new, new.name, self.name);
        }
        let (old, serving) = match &self.against {
            Some(a) => (read_version(&builder, a, self.insecure)?, format!("compared with {a}")),
            None => {
                let state = builder.resolved_state_dir();
                let client = toolhost::admin::client::AdminClient::discover(&state, self.pid).map_err(|e| {
                    anyhow::anyhow!(
                        "{e}\nno version to compare with: start the host, or pass --against FILE|oci://... to compare two versions"
                    )
                })?;
                let pid = client.endpoint().pid;
                let plugins = client.plugins()?;
                let Some(entry) = plugins.plugins.into_iter().find(|p| p.name == self.name) else {
                    bail!(
                        "host pid {pid} serves no plugin {:?}: `toolhost install` or `plugin add` it (nothing to upgrade), or pass --against",
                        self.name
                    );
                };
                let grants = client.grants()?;
                let imports = grants.plugins.into_iter().find(|p| p.plugin == self.name).map(|g| g.imports);
                let signer = entry.provenance.as_ref().and_then(Version::signer);
                let v =
                    Version::new(&entry.name, &entry.sha256, imports.unwrap_or_default(), signer, entry.declarations);
                (v, format!("serving on host pid {pid}"))
            }
        };
        let mut review = Review::between(old, new);
        // The rule `plugin add` holds an upgrade by, under this config's grants.
        let granted = config.plugins.grants.get(&self.name).map(|g| g.capabilities()).unwrap_or_default();
        let origin_grants: Vec<HttpGrant> = config
            .plugins
            .grants
            .get(&self.name)
            .map(|g| g.http.iter().filter_map(|e| HttpGrant::parse(e).ok()).collect())
            .unwrap_or_default();
        let covered = |o: &str| HttpGrant::parse(o).is_ok_and(|ask| origin_grants.iter().any(|g| g.covers(&ask)));
        review.held = toolhost::upgrade_held(
            &self.name,
            (&review.old.imports, &review.old.http_hosts),
            (&review.new.imports, &review.new.http_hosts),
            |c| granted.contains(c),
            |asks| asks.iter().filter(|h| !covered(h)).cloned().collect(),
        )
        .map(|e| e.to_string());
        // Before the grants, the trust policy: unsigned, an unknown or
        // revoked signer, a key's window, the lock file.
        if let Err(e) = builder
            .trust()
            .map_err(|e| e.to_string())
            .and_then(|t| t.admit(&self.name, &bytes).map(|_| ()).map_err(|e| e.to_string()))
        {
            review.held = Some(format!("refused: the trust policy refuses it: {e}"));
        }
        let code = if review.held.is_some() { ExitCode::from(HELD) } else { ExitCode::SUCCESS };
        if self.json {
            print_json(&review)?;
            return Ok(code);
        }
        print(&review, &serving);
        Ok(code)
    }
}

fn print(r: &Review, serving: &str) {
    let safe = |s: &str| log_safe(s).into_owned();
    println!("review {}: {} → {}", r.new.name, safe(&r.old.label()), safe(&r.new.label()));
    println!("  old       {serving}");
    let who = |v: &Version| match (&v.author, &v.key_id) {
        (Some(a), Some(k)) => format!("{} ({k})", safe(a)),
        _ => "unsigned".into(),
    };
    if r.publisher_changed {
        println!("  publisher CHANGED: {} → {}", who(&r.old), who(&r.new));
    } else {
        println!("  publisher {} (unchanged)", who(&r.new));
    }
    if r.is_same() {
        println!("  nothing a DM decides by changes: same asks, same tools and schemas, same publisher");
    }
    for a in &r.asks_added {
        println!("  + asks    {}", safe(a));
    }
    for a in &r.asks_removed {
        println!("  - asks    {}", safe(a));
    }
    for t in &r.tools_added {
        println!("  + tool    {} ({}): {}", t.name, t.tier, safe(&t.description));
    }
    for t in &r.tools_removed {
        println!("  - tool    {} ({}): agents calling it get \"unknown tool\" after the upgrade", t.name, t.tier);
    }
    for c in &r.tools_changed {
        for change in &c.changes {
            println!("  ~ tool    {}: {}", c.tool, safe(change));
        }
    }
    match &r.held {
        Some(why) if why.starts_with("refused: ") => println!("{}", safe(why)),
        Some(why) => println!("held: `plugin add` would hold it until granted: {}", safe(why)),
        None => println!("loads: `plugin add` would swap it in atomically (calls under way finish on the old version)"),
    }
}
