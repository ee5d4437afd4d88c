use crate::args::RuntimeArgs;
use crate::output::{arg_summary, dur, marked, ms, print_json, tier_name};
use anyhow::{Result, bail};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use toolhost::Host;
use toolhost::budget::{Budget, Tier};
use toolhost::calibrate::{self, ProbeOutcome};
use toolhost::capabilities::CAPABILITIES;
use toolhost::package::Provenance;
use toolhost::report::{BudgetReport, ToolDeclaration};
use toolhost::runtime::Grants;
use toolhost::tool::origin::HttpGrant;
use toolhost::tool::{Capabilities, log_safe};

/// Exit status of `inspect` when the component was described in full but
/// this config would not load it (a capability it asks for is not granted).
/// 1 means it could not be described at all; 2 is clap's usage error.
pub const NOT_LOADABLE_HERE: u8 = 3;

/// Describe a component before granting it anything: its digests, who
/// signed it, imports, the capabilities they ask for, its tools, a speed
/// badge.
///
/// Two digests, labelled: `file sha256` (of the file as it is, what
/// `sha256sum` prints) and `component sha256` (without the signature
/// section: what the signed manifest, the lock file and `grants` name).
/// What it asks for is the component's own (read from its imports) and
/// does not change with the config: each capability is then marked granted
/// or not by this config's `plugins.grants.<name>`; those it imports but
/// that expose nothing without a grant are shown as inert, and the
/// badge is measured by probing its idempotent tools. It describes; it does
/// not load. Its tools are read from the component's
/// `list-tools` export in a sandbox with no grant at all, under the usual
/// limits; no tool runs unless the plugin loads without any grant and this
/// config would load it (then only idempotent tools, for the badge, still
/// without grants). It applies the config's trust policy as loading does:
/// an unsigned file, or one signed by a key the config does not trust, is
/// described but would not load. With a `toolhost serve` running on this
/// state directory that serves a plugin of the same name, it is judged as
/// `plugin add` would judge it there: an upgrade asking for a capability
/// or an origin the running version did not, and its grant does not give,
/// is held, so it does not load. Exit status: 0 when this config would
/// load it, 3 when it was described but this config would not load it
/// (trust, grants, a held upgrade), 1 when it cannot be
/// described (not a toolhost component, an import this host does not
/// provide, list-tools failing).
#[derive(Debug, clap::Args)]
pub struct Inspect {
    /// The component file.
    file: PathBuf,
    /// Probes per idempotent tool for the speed badge (0: declared values only).
    #[arg(long, default_value_t = 5, value_name = "N")]
    probes: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    runtime: RuntimeArgs,
    #[command(flatten)]
    trust: crate::args::TrustArgs,
}

#[derive(Serialize)]
struct InspectedTool {
    #[serde(flatten)]
    declaration: ToolDeclaration,
    budget: BudgetReport,
    /// The deadline a call of it gets under this config, in ms: its
    /// declared maximum, never above its tier's ceiling
    /// (`budget.<tier>_ms`) nor `limits.timeout_ceiling_ms`.
    deadline_ms: u64,
    probe_note: Option<String>,
}

#[derive(Serialize)]
struct Report {
    file: String,
    name: String,
    /// sha256 of the file as it is (signature section included).
    file_sha256: String,
    /// sha256 of the component without its signature section: what the
    /// signed manifest, the lock file and `grants` name.
    component_sha256: String,
    size: usize,
    imports: Vec<String>,
    exports: Vec<String>,
    /// Whether this config would load it.
    loadable: bool,
    /// Why it cannot be described, or why this config would not load it.
    error: Option<String>,
    /// Whether its tools could be read.
    described: bool,
    /// Capabilities it asks for: those its imports need a grant for to
    /// load. The component's own; the config does not change them.
    asks_for: Capabilities,
    /// Capabilities it imports that expose nothing without a grant (the
    /// component's own, whatever the config grants).
    inert: Capabilities,
    /// What `plugins.grants.<name>` grants (or the host's default for the name).
    granted_by_config: Capabilities,
    /// Asked for and not granted: why this config would not load it.
    denied: Capabilities,
    /// Granted but not imported: grants it can never use.
    over_granted: Capabilities,
    /// In plain words, what is wrong between its imports and its grants.
    findings: Vec<String>,
    /// Who signed it, as the trust policy sees it (or why it refuses it).
    signed: String,
    /// The signature's signer and version, whatever the trust policy says
    /// (absent when it is not signed, or its signature does not verify).
    #[serde(skip_serializing_if = "Option::is_none")]
    signer: Option<Signer>,
    /// What its signed manifest asks of the operator beyond capabilities
    /// (absent when it is not signed, or its signature does not verify).
    #[serde(skip_serializing_if = "Option::is_none")]
    manifest_asks: Option<ManifestAsks>,
    tools: Vec<InspectedTool>,
    /// Its resources, resource templates and prompts, as MCP lists them
    /// (absent when it exports no `offer`).
    #[serde(skip_serializing_if = "Option::is_none")]
    offers: Option<Offers>,
    /// Whether it imports `toolhost:plugin/client`: it may ask the user
    /// and the model through each call's MCP client.
    asks_client: bool,
}

/// Who signed a package, from its verified signature.
#[derive(Serialize)]
struct Signer {
    /// The manifest's author.
    author: String,
    /// The signing key's fingerprint (`ed25519:<16 hex digits>`).
    key_id: String,
    /// The key's name in this config's trust.keys, when it trusts it.
    key_name: Option<String>,
    /// The signed version.
    version: String,
}

/// A signed manifest's asks, against this config.
#[derive(Serialize)]
struct ManifestAsks {
    /// Origins it asks to reach, each with whether `plugins.grants.<name>.http` covers it.
    http_hosts: Vec<AskedHost>,
    /// Secrets it needs.
    secrets: Vec<String>,
    /// Memory per call it asks for, MiB.
    memory_mib: Option<usize>,
    /// Memory per call this config gives it, MiB.
    memory_mib_in_force: usize,
}

/// What a plugin offers besides tools.
#[derive(Serialize)]
struct Offers {
    resources: Vec<serde_json::Value>,
    resource_templates: Vec<serde_json::Value>,
    prompts: Vec<serde_json::Value>,
}

#[derive(Serialize)]
struct AskedHost {
    origin: String,
    granted: bool,
}

impl Inspect {
    pub fn run(self) -> Result<ExitCode> {
        let builder = self.runtime.builder()?.allow_unsigned(self.trust.allow_unsigned);
        let runtime = builder.runtime()?;
        let name = toolhost::runtime::plugin_name_from_path(&self.file);
        let bytes = toolhost::runtime::read_bounded(&self.file, runtime.limits().max_component_bytes)
            .map_err(|kind| toolhost::runtime::LoadError { plugin: name.clone(), kind })?;
        let compiled = runtime.compile(&name, &bytes)?;
        let (digest, size) = (compiled.digest.clone(), compiled.size);
        let (imports, exports) = (compiled.imports.clone(), compiled.exports.clone());
        let cfg = self.runtime.config.load()?;
        let host = Host::with_budget(runtime.clone(), Budget::new(cfg.budget.clone(), Vec::new()));
        toolhost::builtin::declare_default_grants(host.admission());
        // What this config grants a plugin of this name, as written: nothing
        // is resolved (no directory created, no variable read). Without an
        // entry, the default a built-in of that name declares (memorytool
        // holds `memory`); this host has no grants configured, so that
        // default is all `grants_for` can return.
        let granted = match cfg.plugins.grants.get(&name) {
            Some(g) => g.capabilities(),
            None => host.admission().grants().grants_for(&name).map(|g| CAPABILITIES.held(&g)).unwrap_or_default(),
        };
        let review = CAPABILITIES.review(&imports, granted);
        // What it asks for is the component's own: read with nothing
        // granted, so a grant never turns an inert import into an ask.
        let own = CAPABILITIES.review(&imports, Capabilities::default());
        let component_sha256 = toolhost::package::component_digest(&bytes)?;
        let described = runtime.describe_compiled(&compiled).map_err(|e| e.kind.to_string());
        // Its resources and prompts (an error here is the same as above).
        let offers = runtime.describe_offer(&compiled).ok().flatten().map(|l| Offers {
            resources: l.resources,
            resource_templates: l.templates,
            prompts: l.prompts,
        });
        let asks_client = imports.iter().any(|i| i.starts_with("toolhost:plugin/client@"));
        // The trust policy first, as loading does: unsigned, an unknown
        // signer, a digest the lock file does not pin.
        let trust = builder
            .trust()
            .map_err(|e| e.to_string())
            .and_then(|t| t.admit(&name, &bytes).map(|(_, p)| p).map_err(|e| e.to_string()));
        // The origins this config lets it reach.
        let origin_grants: Vec<HttpGrant> = cfg
            .plugins
            .grants
            .get(&name)
            .map(|g| g.http.iter().filter_map(|e| HttpGrant::parse(e).ok()).collect())
            .unwrap_or_default();
        let covered =
            |origin: &str| HttpGrant::parse(origin).is_ok_and(|ask| origin_grants.iter().any(|g| g.covers(&ask)));
        let refused = match &trust {
            Err(why) => Some(format!("the trust policy refuses it: {why}")),
            Ok(provenance) => {
                CAPABILITIES.check_granted(&imports, granted).err().map(|e| e.to_string()).or_else(|| {
                    // As an upgrade of the version a running host serves: held
                    // when it asks for more than that one did, ungranted (what
                    // `plugin add` would say).
                    let (pid, old_imports, old_origins) = installed_version(&builder.resolved_state_dir(), &name)?;
                    let new_origins = match provenance {
                        Provenance::Signed { manifest, .. } => manifest.http_hosts.clone(),
                        _ => Vec::new(),
                    };
                    let held = toolhost::upgrade_held(
                        &name,
                        (&old_imports, &old_origins),
                        (&imports, &new_origins),
                        |c| granted.contains(c),
                        |asks| asks.iter().filter(|h| !covered(h)).cloned().collect(),
                    )?;
                    Some(format!("as an upgrade of the version host pid {pid} serves: {held}"))
                })
            }
        };
        let needs_grants = CAPABILITIES.check_imports(&imports, &Grants::default()).is_err();
        // Why no tool runs (`None`: its idempotent tools are probed).
        let not_probed = match (&described, &refused) {
            _ if self.probes == 0 => None,
            (Err(_), _) => None,
            (Ok(_), Some(why)) => Some(format!("not probed: {name} would not load with this config ({why})")),
            (Ok(_), None) if needs_grants => {
                let needs = review.imported.difference(CAPABILITIES.inert_without_grant(review.imported));
                Some(format!(
                    "not probed: {name} needs its {} grant to load, and inspect runs tools only without grants",
                    needs.names().join(", ")
                ))
            }
            (Ok(_), None) => None,
        };
        let probed = match (&described, &not_probed) {
            (Ok(_), None) if self.probes > 0 => {
                match runtime
                    .instantiate_compiled(compiled, Grants::default())
                    .map_err(|e| e.kind.to_string())
                    .and_then(|p| {
                        host.pipeline().registry().add(Arc::new(p)).map_err(|e| e.to_string())?;
                        Ok(())
                    }) {
                    Ok(()) => Ok(calibrate::calibrate(host.pipeline(), self.probes)),
                    Err(e) => Err(format!("not probed: {e}")),
                }
            }
            _ => Ok(Vec::new()),
        };
        let tools: Vec<InspectedTool> = described
            .as_ref()
            .map(|defs| {
                defs.iter()
                    .map(|def| {
                        let probe_note = match &probed {
                            Err(e) => Some(e.clone()),
                            Ok(probed) => not_probed.clone().or_else(|| {
                                probed.iter().find(|p| p.tool == def.name).and_then(|p| match &p.outcome {
                                    ProbeOutcome::Probed(_) => None,
                                    ProbeOutcome::Skipped(why) => Some(format!("not probed: {why}")),
                                    ProbeOutcome::Failed(why) => Some(format!("probe failed: {why}")),
                                })
                            }),
                        };
                        InspectedTool {
                            declaration: def.into(),
                            budget: (&host.pipeline().budget().status(def)).into(),
                            deadline_ms: u64::try_from(host.pipeline().budget().timeout_for(def, None).as_millis())
                                .unwrap_or(u64::MAX),
                            probe_note,
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        let error = described.as_ref().err().or(refused.as_ref()).cloned();
        let loadable = described.is_ok() && refused.is_none();
        let status = match (&described, loadable) {
            (Err(_), _) => ExitCode::FAILURE,
            (Ok(_), false) => ExitCode::from(NOT_LOADABLE_HERE),
            (Ok(_), true) => ExitCode::SUCCESS,
        };
        let findings = review.findings(&name);
        let verified = toolhost::package::parse(&bytes).ok().and_then(|p| p.verify(&name).ok().flatten());
        let policy = builder.trust().ok();
        let signer = verified.as_ref().map(|v| {
            // A Sigstore signer is shown as verified here, never as claimed.
            let (key_id, key_name) = match (&v.bundle, &policy) {
                (Some(_), Some(t)) => match t.verify_bundle(&name, v) {
                    Ok(Some(s)) => (
                        format!("{} through Sigstore", s.signer().describe()),
                        t.publisher_for(&s).map(|p| p.name.clone()),
                    ),
                    Ok(None) => (v.fingerprint(), None),
                    Err(e) => (format!("none: {e}"), None),
                },
                _ => (v.fingerprint(), policy.as_ref().and_then(|t| t.key_name(&v.public_key).map(str::to_string))),
            };
            Signer { author: v.manifest.author.clone(), key_id, key_name, version: v.manifest.version.clone() }
        });
        let manifest_asks = verified.map(|v| v.manifest).map(|m| {
            let memory_in_force =
                cfg.plugins.limits.get(&name).and_then(|l| l.memory_mib).unwrap_or(runtime.limits().memory_bytes >> 20);
            ManifestAsks {
                http_hosts: m.http_hosts.iter().map(|h| AskedHost { origin: h.clone(), granted: covered(h) }).collect(),
                secrets: m.secrets.clone(),
                memory_mib: m.memory_mib,
                memory_mib_in_force: memory_in_force,
            }
        });
        let signed = match &trust {
            Ok(p) => p.describe(),
            Err(why) => format!("refused by the trust policy: {why}"),
        };
        if self.json {
            print_json(&Report {
                file: self.file.display().to_string(),
                name: name.clone(),
                file_sha256: digest,
                component_sha256,
                size,
                imports,
                exports,
                loadable,
                error: error.clone(),
                described: described.is_ok(),
                asks_for: own.asks,
                inert: own.inert,
                granted_by_config: review.granted,
                denied: review.denied,
                over_granted: review.over_granted,
                findings,
                signed: signed.clone(),
                signer,
                manifest_asks,
                tools,
                offers,
                asks_client,
            })?;
            return Ok(status);
        }
        println!("file:    {}", self.file.display());
        println!("file sha256:      {digest}");
        println!("component sha256: {component_sha256} (without the signature section)");
        println!("size:    {size} bytes");
        println!("signed:  {signed}");
        match &signer {
            Some(s) => {
                let key = match &s.key_name {
                    Some(n) => format!("{} ({n})", s.key_id),
                    None => format!("{} (not a key this config trusts)", s.key_id),
                };
                println!("signer:  {}, key {key}", log_safe(&s.author));
                println!("version: {}", log_safe(&s.version));
            }
            None => println!("signer:  none (no valid signature)"),
        }
        println!("imports ({}):", imports.len());
        for i in &imports {
            println!("  {i}");
        }
        println!("exports ({}):", exports.len());
        for e in &exports {
            println!("  {e}");
        }
        let asks = marked(own.asks.iter().map(|c| (c.as_str(), review.granted.contains(c))), "granted", "NOT granted");
        println!("asks for: {}", if asks.is_empty() { "nothing" } else { &asks });
        // Inert unless granted: a grant exposes what it names.
        let (exposed, inert): (Vec<_>, Vec<_>) = own.inert.iter().partition(|c| review.granted.contains(*c));
        if !inert.is_empty() {
            let names: Vec<&str> = inert.iter().map(|c| c.as_str()).collect();
            println!("inert:    {} (imported, but nothing is exposed without a grant)", names.join(", "));
        }
        if !exposed.is_empty() {
            let names: Vec<&str> = exposed.iter().map(|c| c.as_str()).collect();
            println!("granted:  {} (imported; plugins.grants.{name} exposes what it names)", names.join(", "));
        }
        if let Some(a) = &manifest_asks {
            if !a.http_hosts.is_empty() {
                let hosts =
                    marked(a.http_hosts.iter().map(|h| (h.origin.as_str(), h.granted)), "granted", "NOT granted");
                println!("asks to reach over HTTP: {hosts}");
            }
            if !a.secrets.is_empty() {
                let commands: Vec<String> =
                    a.secrets.iter().map(|s| format!("toolhost secret set {name} {s}")).collect();
                println!(
                    "asks for secrets: {} (held until each is set: {})",
                    a.secrets.join(", "),
                    commands.join("; ")
                );
            }
            if let Some(m) = a.memory_mib {
                println!(
                    "asks for memory: {m} MiB per call (this config gives it {} MiB; plugins.limits.{name}.memory_mib decides)",
                    a.memory_mib_in_force
                );
            }
        }
        if let (Ok(_), Some(why)) = (&described, &refused) {
            println!("loads:    no, not with this config: {why}");
        } else if described.is_ok() {
            println!("loads:    yes, with this config");
        }
        for f in &findings {
            println!("  ! {f}");
        }
        if tools.is_empty() {
            println!("tools:   none");
        } else {
            println!("tools ({}):", tools.len());
            for t in &tools {
                let (d, b) = (&t.declaration, &t.budget);
                println!(
                    "  {}  p50 {}  max {}  {}{}  args: {}",
                    d.name,
                    ms(d.estimated_duration_ms),
                    ms(d.max_duration_ms),
                    if d.idempotent { "idempotent" } else { "not idempotent" },
                    if d.cacheable_seconds > 0 {
                        format!(", cacheable {}s", d.cacheable_seconds)
                    } else {
                        String::new()
                    },
                    arg_summary(&d.input_schema)
                );
                let probe_p50 = b.probe_p50_ms.map(|p| std::time::Duration::from_secs_f64(p / 1e3));
                println!(
                    "      tier {} ({}), badge {}, {}{}",
                    tier_name(b.tier),
                    b.tier_source,
                    b.badge.as_deref().unwrap_or("-"),
                    Tier::compatibility(b.tier),
                    probe_p50.map(|p| format!(", probed p50 {}", dur(Some(p)))).unwrap_or_default()
                );
                let capped = match d.max_duration_ms {
                    Some(max) if u64::from(max) > t.deadline_ms => format!(
                        " (its declared max {max} ms is over the ceiling: {}, or limits.timeout_ceiling_ms)",
                        b.tier.map_or("the tier's ceiling".to_string(), |tier| format!("budget.{tier}_ms"))
                    ),
                    _ => String::new(),
                };
                println!("      deadline {} ms{capped}", t.deadline_ms);
                if let Some(n) = &t.probe_note {
                    println!("      {n}");
                }
                println!("      {}", d.description);
            }
        }
        if let Some(o) = &offers {
            let listed = |what: &str, items: &[serde_json::Value], key: &str| {
                let names: Vec<String> =
                    items.iter().map(|i| log_safe(i[key].as_str().unwrap_or_default()).into_owned()).collect();
                println!(
                    "{what} ({}): {}",
                    names.len(),
                    if names.is_empty() { "none".into() } else { names.join(", ") }
                );
            };
            listed("resources", &o.resources, "uri");
            listed("resource templates", &o.resource_templates, "uriTemplate");
            listed("prompts", &o.prompts, "name");
        }
        if asks_client {
            println!(
                "asks the client: may ask the user (elicitation) and the model (sampling) through the MCP client of each call; no grant needed, the client decides (limits.asks_per_call, limits.input_wait_ms)"
            );
        }
        match (described, refused) {
            (Err(e), _) => bail!("{name} cannot be loaded: {e}"),
            (Ok(_), Some(why)) => {
                eprintln!("{name} would not load with this config: {why}");
                Ok(status)
            }
            (Ok(_), None) => Ok(status),
        }
    }
}

/// The version of `plugin` a `toolhost serve` on `state` serves now, if one
/// is running and serves it: the host's pid, the version's imports, and
/// the origins its signed manifest asks to reach.
fn installed_version(state: &std::path::Path, plugin: &str) -> Option<(u32, Vec<String>, Vec<String>)> {
    let client = toolhost::admin::client::AdminClient::discover(state, None).ok()?;
    let reply = client.grants().ok()?;
    let old = reply.plugins.into_iter().find(|p| p.plugin == plugin)?;
    let origins = match old.provenance {
        Some(Provenance::Signed { manifest, .. }) => manifest.http_hosts,
        _ => Vec::new(),
    };
    Some((reply.pid, old.imports, origins))
}
