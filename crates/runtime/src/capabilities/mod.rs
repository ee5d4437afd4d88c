//! Capabilities: what the operator lets a plugin touch beyond pure
//! computation. Deny by default: without a grant a plugin sees no directory,
//! no environment variable, no memory store and no network.
//!
//! Each capability is one module implementing [`CapabilityFactor`] (the way
//! Spin's factors and wasmtime-wasi's per-interface modules split a host):
//! which imports it answers, how its grant is read from config
//! ([`GrantConfig`]) and resolved ([`Grants`]), how it configures one
//! instance, and what it reports as held and used. [`CAPABILITIES`] is the
//! one list; everything else (loading, linking, the store, the audit, the
//! reviewer's report) asks it. Adding a capability is one new module, one
//! entry in that list, and its field in [`GrantConfig`] and [`Grants`]. A
//! capability whose host side needs what this crate does not carry (`http`:
//! hyper and TLS) is an [`crate::Extension`]'s, whole: the runtime keeps
//! only which imports it answers ([`provided`]).
//!
//! Grants come only from the operator's config (`plugins.grants`); nothing a
//! tool or a model sends can change them.

pub mod env;
pub mod files;
pub(crate) mod files_guard;
pub mod memory;
pub mod network;
pub mod provided;

use crate::state::{State, Used};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use toolhost_types::{Capabilities, Capability};
use wasmtime::component::Linker;
use wasmtime_wasi::WasiCtxBuilder;

pub use files::{DirGrant, DirGrantConfig, DirMode};
pub use memory::MemoryBackend;

/// What a capability is, as data.
#[derive(Debug)]
pub struct About {
    /// Which capability.
    pub capability: Capability,
    /// The WIT interfaces it answers (`package:namespace/interface`, no version).
    pub interfaces: &'static [&'static str],
    /// Whether a component may import it without holding it: the import
    /// alone exposes nothing (an empty list of directories or variables).
    /// When `false`, a component importing it is refused at load unless the
    /// grant is held.
    pub inert_without_grant: bool,
    /// Whether its host side is an [`crate::Extension`]'s ([`provided`]):
    /// the extension resolves, reports and links it.
    pub by_extension: bool,
}

/// One capability: everything the runtime does for it.
pub trait CapabilityFactor: Send + Sync {
    /// What it is.
    fn about(&self) -> &'static About;
    /// Whether `grants` gives anything of it.
    fn held(&self, grants: &Grants) -> bool;
    /// Puts what the grant gives into one instance's context.
    fn configure(&self, grants: &Grants, setup: &mut InstanceSetup) -> Result<(), String>;
    /// Links its host functions (wrappers that note use, or its own
    /// interface) into the linker every instance is made from.
    fn link(&self, linker: &mut Linker<State>) -> wasmtime::Result<()>;
    /// The grant in detail, for reports (JSON).
    fn report(&self, grants: &Grants) -> serde_json::Value;
    /// In plain words, what the grant allows (and grants that cannot work).
    fn allows(&self, grants: &Grants) -> Vec<String>;
}

/// A WASI view wrapped to note when a call uses a held capability (the
/// interfaces through which a grant is exercised: asking for the
/// preopened directories, reading the environment).
pub(crate) struct Noting<'a, V> {
    used: &'a Used,
    held: bool,
    capability: Capability,
    pub(crate) inner: V,
}

impl<'a, V> Noting<'a, V> {
    pub(crate) fn new(used: &'a Used, held: Capabilities, capability: Capability, inner: V) -> Self {
        Noting { used, held: held.contains(capability), capability, inner }
    }

    /// Notes the use (of a capability the plugin holds).
    pub(crate) fn note(&self) {
        if self.held {
            self.used.mark(self.capability);
        }
    }
}

/// What configuring one instance builds: its WASI context and the
/// toolhost services it may reach.
pub struct InstanceSetup {
    pub(crate) wasi: WasiCtxBuilder,
    pub(crate) memory: Option<Arc<dyn MemoryBackend>>,
    pub(crate) memory_write: Option<Arc<dyn MemoryBackend>>,
    pub(crate) used: Arc<Used>,
}

/// What an import is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportClass {
    /// Harmless by itself: clocks, random, stdio into a bounded buffer,
    /// the host's log and progress.
    Inert,
    /// Part of a capability.
    Capability(Capability),
    /// Something this host does not provide (for example `wasi:http`).
    Unsupported,
}

/// Interfaces every plugin may import. None exposes anything by itself: the
/// store's context has no arguments, no stdin and a bounded stdout/stderr.
const INERT: &[&str] = &[
    // The call's own MCP client decides, and its user sees each question.
    "toolhost:plugin/client",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:clocks/monotonic-clock",
    "wasi:clocks/wall-clock",
    // Only the values the operator set for this plugin (crate::values).
    "wasi:config/store",
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "toolhost:plugin/host",
    "toolhost:plugin/types",
];

/// Every capability, in report order.
pub struct CapabilitySet {
    factors: [&'static dyn CapabilityFactor; 6],
}

/// The capabilities this runtime offers.
pub static CAPABILITIES: CapabilitySet = CapabilitySet {
    factors: [&files::Files, &env::Env, &network::Network, &memory::Memory, &provided::HTTP, &memory::MemoryWrite],
};

/// An import name without its version: `wasi:cli/environment@0.2.3` ->
/// `wasi:cli/environment`.
fn interface(import: &str) -> &str {
    import.split_once('@').map_or(import, |(i, _)| i)
}

impl CapabilitySet {
    /// Every capability's factor.
    pub fn factors(&self) -> impl Iterator<Item = &'static dyn CapabilityFactor> + '_ {
        self.factors.iter().copied()
    }

    /// The factor of `c`.
    pub fn factor(&self, c: Capability) -> &'static dyn CapabilityFactor {
        self.factors().find(|f| f.about().capability == c).expect("every capability has a factor")
    }

    /// What `import` is.
    pub fn classify(&self, import: &str) -> ImportClass {
        let name = interface(import);
        if INERT.contains(&name) {
            return ImportClass::Inert;
        }
        match self.factors().find(|f| f.about().interfaces.contains(&name)) {
            Some(f) => ImportClass::Capability(f.about().capability),
            None => ImportClass::Unsupported,
        }
    }

    /// The capabilities `imports` touch.
    pub fn imported(&self, imports: &[String]) -> Capabilities {
        imports
            .iter()
            .filter_map(|i| match self.classify(i) {
                ImportClass::Capability(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    /// Of `imported`, those that expose nothing without a grant.
    pub fn inert_without_grant(&self, imported: Capabilities) -> Capabilities {
        imported.iter().filter(|c| self.factor(*c).about().inert_without_grant).collect()
    }

    /// Whether `c`'s host side is an [`crate::Extension`]'s.
    pub fn provided(&self, c: Capability) -> bool {
        self.factor(c).about().by_extension
    }

    /// The capabilities `grants` gives.
    pub fn held(&self, grants: &Grants) -> Capabilities {
        self.factors().filter(|f| f.held(grants)).map(|f| f.about().capability).collect()
    }

    /// Each held capability's grant in detail, by name.
    pub fn report(&self, grants: &Grants) -> BTreeMap<&'static str, serde_json::Value> {
        self.factors().map(|f| (f.about().capability.as_str(), f.report(grants))).collect()
    }

    /// In plain words, what `grants` allows.
    pub fn allows(&self, grants: &Grants) -> Vec<String> {
        self.factors().flat_map(|f| f.allows(grants)).collect()
    }

    /// Checks a component's imports against its grants: refuses what this
    /// host does not provide, and capabilities that need a grant it lacks.
    pub fn check_imports(&self, imports: &[String], grants: &Grants) -> Result<(), crate::LoadErrorKind> {
        self.check_granted(imports, self.held(grants))
    }

    /// [`CapabilitySet::check_imports`] against a set of granted
    /// capabilities (what a config would grant, before it is resolved).
    pub fn check_granted(&self, imports: &[String], granted: Capabilities) -> Result<(), crate::LoadErrorKind> {
        for import in imports {
            match self.classify(import) {
                ImportClass::Inert => {}
                ImportClass::Capability(c) => {
                    if !self.factor(c).about().inert_without_grant && !granted.contains(c) {
                        return Err(crate::LoadErrorKind::NotGranted { interface: import.clone(), grant: c.as_str() });
                    }
                }
                ImportClass::Unsupported => return Err(crate::LoadErrorKind::UnknownImport(import.clone())),
            }
        }
        Ok(())
    }

    /// Refuses only what this host does not provide at all, whatever is
    /// granted: what a component must pass to be described.
    pub fn check_supported(&self, imports: &[String]) -> Result<(), crate::LoadErrorKind> {
        self.check_granted(imports, Capability::ALL.into_iter().collect())
    }

    /// What a reviewer reads: a component's `imports` against the
    /// capabilities `granted` to it.
    pub fn review(&self, imports: &[String], granted: Capabilities) -> Review {
        let imported = self.imported(imports);
        let inert = self.inert_without_grant(imported).difference(granted);
        let asks = imported.difference(inert);
        Review {
            imported,
            asks,
            inert,
            granted,
            denied: asks.difference(granted),
            over_granted: granted.difference(imported),
        }
    }

    /// The interfaces through which `c` is reached, in words:
    /// `wasi:sockets` for a whole package, else the interface names.
    pub fn interfaces_in_words(&self, c: Capability) -> String {
        let interfaces = self.factor(c).about().interfaces;
        let package = |i: &'static str| i.split_once('/').map_or(i, |(p, _)| p);
        match interfaces {
            [first, rest @ ..] if !rest.is_empty() && rest.iter().all(|i| package(i) == package(first)) => {
                package(first).to_string()
            }
            _ => interfaces.join(" or "),
        }
    }

    pub(crate) fn configure(&self, grants: &Grants, setup: &mut InstanceSetup) -> Result<(), String> {
        self.factors().try_for_each(|f| f.configure(grants, setup))
    }

    pub(crate) fn link(&self, linker: &mut Linker<State>) -> wasmtime::Result<()> {
        self.factors().try_for_each(|f| f.link(linker))
    }
}

/// A component's capabilities against what it is granted, as a reviewer
/// reads them (`toolhost inspect`, `toolhost grants`). By construction
/// `asks` and `inert` split `imported`, and nothing granted is `denied`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Review {
    /// Capabilities its imports touch.
    pub imported: Capabilities,
    /// What it asks for: imported capabilities that mean something, those
    /// that need a grant to load at all, and those it is granted.
    pub asks: Capabilities,
    /// Imported, but exposing nothing: no grant is needed to load and none
    /// is given (the Rust standard library imports the environment and the
    /// filesystem whether or not a plugin uses them).
    pub inert: Capabilities,
    /// What is granted.
    pub granted: Capabilities,
    /// Asked for and not granted: the component does not load.
    pub denied: Capabilities,
    /// Granted but not imported: the grant can never be used.
    pub over_granted: Capabilities,
}

impl Review {
    /// In plain words, what is wrong between `plugin`'s imports and its
    /// grants: capabilities it needs and lacks, grants it cannot use.
    pub fn findings(&self, plugin: &str) -> Vec<String> {
        let denied = self.denied.iter().map(|c| {
            format!(
                "{plugin} imports {}, which needs the {c} capability, and is not granted it: it does not load until plugins.grants.{plugin}.{c} grants it",
                CAPABILITIES.interfaces_in_words(c)
            )
        });
        let over = self.over_granted.iter().map(|c| {
            format!(
                "over-grant: {plugin} is granted {c} but does not import {}, so the grant can never be used; remove plugins.grants.{plugin}.{c}",
                CAPABILITIES.interfaces_in_words(c)
            )
        });
        denied.chain(over).collect()
    }
}

/// `plugins.grants.<plugin>` in the config: one key per capability.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GrantConfig {
    /// Directories the plugin may use.
    pub files: Vec<DirGrantConfig>,
    /// Names of host environment variables the plugin may read.
    pub env: Vec<String>,
    /// TCP endpoints the plugin may connect to, as `IP:port` (IPv6 as
    /// `[::1]:port`). Only outgoing TCP connections to exactly these
    /// addresses are allowed; no name lookups, no listening, no UDP.
    pub network: Vec<String>,
    /// Access to the campaign memory store (read).
    pub memory: bool,
    /// Writes to the campaign memory store (`remember`).
    pub memory_write: bool,
    /// Origins the plugin may send HTTP requests to (`wasi:http`):
    /// `scheme://host[:port]`, or `scheme://*.domain[:port]`.
    pub http: Vec<String>,
}

/// All plugins' grants from the config, keyed by plugin name.
pub type GrantsByPlugin = BTreeMap<String, GrantConfig>;

/// Grants resolved for one plugin: absolute directories, environment values
/// read once, the memory store when granted, parsed addresses.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// Directories, with mount point and mode.
    pub dirs: Vec<DirGrant>,
    /// Environment variables (name, value) the plugin sees.
    pub env: Vec<(String, String)>,
    /// Variables granted but not set on the host (reported, not exposed).
    pub env_missing: Vec<String>,
    /// The only socket addresses the plugin may connect to.
    pub network: Vec<std::net::SocketAddr>,
    /// The campaign memory store, when granted.
    pub memory: Option<Arc<dyn MemoryBackend>>,
    /// The campaign memory store for writes, when granted.
    pub memory_write: Option<Arc<dyn MemoryBackend>>,
    /// The grants of capabilities an [`crate::Extension`] provides (`http`),
    /// each resolved by its extension into its own type.
    pub extensions: crate::extension::ExtensionGrants,
}

/// A grant that cannot be honoured.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// A granted directory is missing or unusable.
    #[error("plugins.grants.{plugin}.files: {dir}: {reason}")]
    Dir {
        /// Plugin.
        plugin: String,
        /// Directory.
        dir: String,
        /// Why.
        reason: String,
    },
    /// A network entry is not `IP:port`.
    #[error("plugins.grants.{plugin}.network: {entry:?} is not an IP:port address (names are not resolved)")]
    Network {
        /// Plugin.
        plugin: String,
        /// The entry.
        entry: String,
    },
    /// An entry of a capability an extension provides is not valid (an
    /// `http` entry that is not an origin).
    #[error("plugins.grants.{plugin}.{capability}: {entry:?}: {reason}")]
    Extension {
        /// Plugin.
        plugin: String,
        /// The capability.
        capability: Capability,
        /// The entry.
        entry: String,
        /// Why.
        reason: String,
    },
    /// A capability is granted that no installed extension provides.
    #[error("plugins.grants.{plugin}.{capability}: this host has no {capability} support (no extension provides it)")]
    Unprovided {
        /// Plugin.
        plugin: String,
        /// The capability.
        capability: Capability,
    },
    /// `memory` was granted but the store cannot be opened.
    #[error("plugins.grants.{plugin}.memory: {reason}")]
    Memory {
        /// Plugin.
        plugin: String,
        /// Why.
        reason: String,
    },
}

impl GrantConfig {
    /// The capabilities this grants, as written (before it is resolved: a
    /// granted variable counts whether or not the host sets it).
    pub fn capabilities(&self) -> Capabilities {
        [
            (!self.files.is_empty(), Capability::Files),
            (!self.env.is_empty(), Capability::Env),
            (!self.network.is_empty(), Capability::Network),
            (self.memory, Capability::Memory),
            (!self.http.is_empty(), Capability::Http),
            (self.memory_write, Capability::MemoryWrite),
        ]
        .into_iter()
        .filter_map(|(granted, c)| granted.then_some(c))
        .collect()
    }

    /// Resolves the grant for `plugin`: paths against `base` (a read-write
    /// directory that does not exist yet is created), variables read from
    /// the host's environment, addresses parsed, and the memory store taken
    /// from `memory` when granted. The capabilities an extension provides
    /// are resolved by the `extensions` given (a runtime's,
    /// [`crate::Runtime::extensions`]); one granted that none provides is
    /// an error.
    pub fn resolve(
        &self,
        plugin: &str,
        base: &Path,
        memory: &dyn Fn() -> Result<Arc<dyn MemoryBackend>, String>,
        extensions: &[Arc<dyn crate::Extension>],
    ) -> Result<Grants, GrantError> {
        let (env, env_missing) = env::resolve(&self.env);
        let mut provided = crate::extension::ExtensionGrants::default();
        for c in self.capabilities().iter().filter(|c| CAPABILITIES.provided(*c)) {
            let e = extensions
                .iter()
                .find(|e| e.capability() == c)
                .ok_or_else(|| GrantError::Unprovided { plugin: plugin.into(), capability: c })?;
            provided.insert(c, e.resolve(plugin, self)?);
        }
        Ok(Grants {
            dirs: files::resolve(plugin, base, &self.files)?,
            env,
            env_missing,
            network: network::resolve(plugin, &self.network)?,
            extensions: provided,
            memory: match self.memory {
                true => Some(memory().map_err(|reason| GrantError::Memory { plugin: plugin.into(), reason })?),
                false => None,
            },
            memory_write: match self.memory_write {
                true => Some(memory().map_err(|reason| GrantError::Memory { plugin: plugin.into(), reason })?),
                false => None,
            },
        })
    }
}

impl Grants {
    /// Whether this grants anything of capability `c`.
    pub fn grants(&self, c: Capability) -> bool {
        CAPABILITIES.factor(c).held(self)
    }

    /// Plain-words lines saying what each grant allows.
    pub fn describe(&self) -> Vec<String> {
        CAPABILITIES.allows(self)
    }

    /// True when nothing is granted (and nothing granted is missing).
    pub fn is_empty(&self) -> bool {
        CAPABILITIES.held(self).is_empty() && self.env_missing.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every interface of WASI 0.2 and of `wit/tool.wit`, and what it must
    /// be: `inert`, a capability's name, or `unsupported`.
    const TABLE: &str = "
        wasi:cli/environment env; wasi:cli/exit inert; wasi:cli/stdin inert; wasi:cli/stdout inert;
        wasi:cli/stderr inert; wasi:cli/terminal-input inert; wasi:cli/terminal-output inert;
        wasi:cli/terminal-stdin inert; wasi:cli/terminal-stdout inert; wasi:cli/terminal-stderr inert;
        wasi:clocks/monotonic-clock inert; wasi:clocks/wall-clock inert;
        wasi:filesystem/types files; wasi:filesystem/preopens files;
        wasi:io/error inert; wasi:io/poll inert; wasi:io/streams inert;
        wasi:random/random inert; wasi:random/insecure inert; wasi:random/insecure-seed inert;
        wasi:config/store inert;
        wasi:sockets/network network; wasi:sockets/instance-network network; wasi:sockets/tcp network;
        wasi:sockets/tcp-create-socket network; wasi:sockets/udp network; wasi:sockets/udp-create-socket network;
        wasi:sockets/ip-name-lookup network;
        wasi:http/outgoing-handler http; wasi:http/types http; wasi:http/incoming-handler unsupported;
        toolhost:plugin/host inert; toolhost:plugin/types inert; toolhost:plugin/memory memory;
        toolhost:plugin/memory-write memory_write; toolhost:plugin/client inert;
        example:unknown/thing unsupported";

    fn table() -> Vec<(String, ImportClass)> {
        TABLE
            .split(';')
            .map(|entry| {
                let (name, class) = entry.trim().split_once(' ').expect("name and class");
                let class = match class {
                    "inert" => ImportClass::Inert,
                    "unsupported" => ImportClass::Unsupported,
                    c => ImportClass::Capability(Capability::from_name(c).expect("a capability")),
                };
                (format!("{name}@0.2.6"), class)
            })
            .collect()
    }

    #[test]
    fn every_import_maps_to_exactly_one_capability_or_the_inert_set() {
        let table = table();
        for (import, want) in &table {
            let name = interface(import);
            let owners: Vec<Capability> = CAPABILITIES
                .factors()
                .filter(|f| f.about().interfaces.contains(&name))
                .map(|f| f.about().capability)
                .collect();
            let inert = INERT.contains(&name);
            assert!(owners.len() + usize::from(inert) <= 1, "{import} belongs to {owners:?} (inert: {inert})");
            assert_eq!(CAPABILITIES.classify(import), *want, "{import}");
        }
        // And every interface a factor or the inert list names is in the table.
        for name in INERT.iter().chain(CAPABILITIES.factors().flat_map(|f| f.about().interfaces.iter())) {
            assert!(table.iter().any(|(i, _)| interface(i) == *name), "{name} is missing from the table");
        }
        for c in Capability::ALL {
            assert_eq!(CAPABILITIES.factor(c).about().capability, c);
        }
    }

    fn imports(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| format!("{n}@0.2.6")).collect()
    }

    fn set(c: &[Capability]) -> Capabilities {
        c.iter().copied().collect()
    }

    #[test]
    fn a_review_shows_std_imports_as_inert_asks_what_needs_a_grant_and_flags_over_grants() {
        // What the Rust standard library imports, whatever the plugin does.
        let std_only = imports(&["wasi:cli/environment", "wasi:filesystem/types", "wasi:filesystem/preopens"]);
        let r = CAPABILITIES.review(&std_only, Capabilities::EMPTY);
        assert_eq!((r.inert.names(), r.asks.names()), (vec!["files", "env"], vec![]));
        assert!(r.denied.is_empty() && r.over_granted.is_empty() && r.findings("dice").is_empty(), "{r:?}");
        // Granted, an inert import is an ask: the plugin sees what is granted.
        let r = CAPABILITIES.review(&std_only, set(&[Capability::Env]));
        assert_eq!((r.inert.names(), r.asks.names()), (vec!["files"], vec!["env"]));
        assert!(r.denied.is_empty());
        // Sockets without a grant are inert (CPython imports them all), as
        // files are; granted, they are an ask.
        let net = imports(&["wasi:cli/environment", "wasi:sockets/tcp", "wasi:sockets/network"]);
        let r = CAPABILITIES.review(&net, Capabilities::EMPTY);
        assert_eq!((r.asks.names(), r.denied.names(), r.inert.names()), (vec![], vec![], vec!["env", "network"]));
        assert!(r.findings("netclient").is_empty(), "{:?}", r.findings("netclient"));
        assert!(CAPABILITIES.check_granted(&net, Capabilities::EMPTY).is_ok(), "it loads");
        let r = CAPABILITIES.review(&net, set(&[Capability::Network]));
        assert_eq!((r.asks.names(), r.denied.names()), (vec!["network"], vec![]));
        // Grants the imports cannot use.
        let r =
            CAPABILITIES.review(&imports(&["wasi:cli/environment"]), set(&[Capability::Network, Capability::Files]));
        assert_eq!(r.over_granted.names(), ["files", "network"]);
        let f = r.findings("dice");
        assert!(f[0].starts_with("over-grant: dice is granted files but does not import wasi:filesystem"), "{f:?}");
        assert!(f[1].contains("does not import wasi:sockets") && f[1].contains("remove plugins.grants.dice.network"));
    }

    #[test]
    fn a_review_never_shows_a_capability_both_denied_and_granted() {
        let both = |a: Capabilities, b: Capabilities| a.difference(a.difference(b));
        // One interface per capability; every subset imported, every subset granted.
        let one: Vec<&str> = Capability::ALL.iter().map(|c| CAPABILITIES.factor(*c).about().interfaces[0]).collect();
        for imported in 0u8..16 {
            let names: Vec<&str> = (0..4).filter(|i| imported & (1 << i) != 0).map(|i| one[i]).collect();
            let imports = imports(&names);
            for granted in 0u8..16 {
                let granted = Capabilities::from_bits(granted);
                let r = CAPABILITIES.review(&imports, granted);
                assert_eq!(r.imported, CAPABILITIES.imported(&imports));
                assert_eq!(r.asks.union(r.inert), r.imported, "{r:?}");
                assert!(both(r.asks, r.inert).is_empty(), "{r:?}");
                assert!(both(r.denied, r.granted).is_empty(), "{r:?}");
                assert!(both(r.over_granted, r.imported).is_empty(), "{r:?}");
                assert!(r.denied.is_subset(r.asks), "{r:?}");
                // Denied exactly when the load check refuses it.
                assert_eq!(r.denied.is_empty(), CAPABILITIES.check_granted(&imports, granted).is_ok(), "{r:?}");
            }
        }
    }

    #[test]
    fn describing_refuses_only_what_the_host_does_not_provide() {
        assert!(CAPABILITIES.check_supported(&imports(&["wasi:sockets/tcp", "toolhost:plugin/memory"])).is_ok());
        assert!(CAPABILITIES.check_supported(&imports(&["wasi:sockets/tcp", "wasi:http/types"])).is_ok());
        let e =
            CAPABILITIES.check_supported(&imports(&["wasi:sockets/tcp", "wasi:http/incoming-handler"])).unwrap_err();
        assert!(
            matches!(e, crate::LoadErrorKind::UnknownImport(ref i) if i.starts_with("wasi:http/incoming-handler")),
            "{e}"
        );
        assert_eq!(CAPABILITIES.interfaces_in_words(Capability::Env), "wasi:cli/environment");
        assert_eq!(CAPABILITIES.interfaces_in_words(Capability::Memory), "toolhost:plugin/memory");
    }

    #[test]
    fn a_grant_config_names_its_capabilities_before_it_is_resolved() {
        assert!(GrantConfig::default().capabilities().is_empty());
        let g = GrantConfig {
            env: vec!["SURELY_NOT_SET_ANYWHERE".into()],
            network: vec!["not an address".into()],
            memory: true,
            ..GrantConfig::default()
        };
        assert_eq!(g.capabilities().names(), ["env", "network", "memory"]);
    }

    #[test]
    fn a_grant_of_a_capability_no_extension_provides_is_refused_saying_so() {
        let g = GrantConfig { http: vec!["https://api.example.test".into()], ..GrantConfig::default() };
        let e = g.resolve("weather", Path::new("/"), &|| unreachable!("no memory grant"), &[]).unwrap_err();
        assert!(matches!(e, GrantError::Unprovided { capability: Capability::Http, .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "plugins.grants.weather.http: this host has no http support (no extension provides it)"
        );
        // Nothing granted of it: nothing to provide.
        assert!(GrantConfig::default().resolve("weather", Path::new("/"), &|| unreachable!(), &[]).is_ok());
        assert!(CAPABILITIES.provided(Capability::Http) && !CAPABILITIES.provided(Capability::Network));
    }

    #[test]
    fn held_follows_the_grant() {
        let none = Grants::default();
        assert!(CAPABILITIES.held(&none).is_empty());
        assert!(none.is_empty());
        let g = Grants {
            env: vec![("A".into(), "1".into())],
            network: vec!["127.0.0.1:1".parse().unwrap()],
            ..Grants::default()
        };
        assert_eq!(CAPABILITIES.held(&g).names(), ["env", "network"]);
        assert_eq!(g.describe().len(), 2, "{:?}", g.describe());
    }
}
