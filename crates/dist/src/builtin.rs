//! The built-in plugins, compiled into the binary by `build.rs`, so
//! `toolhost` works from any directory and after `cargo install`.

mod guests {
    include!(concat!(env!("OUT_DIR"), "/guests.rs"));
}

/// A plugin shipped inside the binary.
#[derive(Debug, Clone, Copy)]
pub struct Builtin {
    /// Plugin name.
    pub name: &'static str,
    /// The component.
    pub bytes: &'static [u8],
    /// Its code, precompiled by the build for the runtime's default engine.
    pub code: toolhost_runtime::Precompiled,
    /// Capabilities without which its tools cannot work (they load, and
    /// every call fails): the DM's page marks them.
    pub needs: &'static [&'static str],
    /// What it holds when `plugins.grants` has no entry for it (the
    /// operator's entry, even an empty one, replaces this).
    pub default_grant: DefaultGrant,
}

/// A built-in's declared default grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultGrant {
    /// Nothing.
    Nothing,
    /// The campaign memory, to read and to write.
    Memory,
}

impl DefaultGrant {
    /// As a grant entry.
    pub fn config(self) -> Option<toolhost_runtime::capabilities::GrantConfig> {
        match self {
            DefaultGrant::Nothing => None,
            DefaultGrant::Memory => Some(toolhost_runtime::capabilities::GrantConfig {
                memory: true,
                memory_write: true,
                ..Default::default()
            }),
        }
    }
}

/// Every built-in plugin.
pub const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "diceroller",
        bytes: guests::DICEROLLER,
        code: guests::DICEROLLER_CODE,
        needs: &[],
        default_grant: DefaultGrant::Nothing,
    },
    Builtin {
        name: "ruleslookup",
        bytes: guests::RULESLOOKUP,
        code: guests::RULESLOOKUP_CODE,
        needs: &[],
        default_grant: DefaultGrant::Nothing,
    },
    Builtin {
        name: "fileio",
        bytes: guests::FILEIO,
        code: guests::FILEIO_CODE,
        needs: &["files"],
        default_grant: DefaultGrant::Nothing,
    },
    Builtin {
        name: "memorytool",
        bytes: guests::MEMORYTOOL,
        code: guests::MEMORYTOOL_CODE,
        needs: &[],
        default_grant: DefaultGrant::Memory,
    },
];

/// Gives `host` each built-in's declared default grant (what it holds
/// when `plugins.grants` has no entry for it), loading nothing: for a
/// host that judges plugins by name without loading the built-ins
/// (`inspect`).
pub fn declare_default_grants(host: &toolhost_admission::Admission) {
    declare(host, BUILTINS.iter());
}

/// Declares the default grants of `builtins`.
fn declare<'a>(host: &toolhost_admission::Admission, builtins: impl Iterator<Item = &'a Builtin>) {
    for b in builtins {
        if let Some(grant) = b.default_grant.config() {
            host.grants().set_default(b.name, grant);
        }
    }
}

/// Loads and registers every built-in plugin into `host`. A host without a
/// memory store is given the in-memory demo campaign first, so that
/// `memorytool` has one.
pub fn add_builtins(host: &toolhost_admission::Admission) -> Result<(), toolhost_admission::AddPluginError> {
    add_builtins_except(host, |_| false)
}

/// [`add_builtins`], leaving out those `skip` names.
pub fn add_builtins_except(
    host: &toolhost_admission::Admission,
    skip: impl Fn(&str) -> bool,
) -> Result<(), toolhost_admission::AddPluginError> {
    if host.grants().memory().is_none() {
        let demo = toolhost_memory::MemoryStore::in_memory()
            .map_err(|e| toolhost_admission::AddPluginError::Memory(Box::new(e)))?;
        host.grants().set_memory(std::sync::Arc::new(demo));
    }
    let chosen: Vec<&Builtin> = BUILTINS.iter().filter(|b| !skip(b.name)).collect();
    // Only the built-ins loaded: one the operator removed declares nothing,
    // so a plugin file that takes its name later is granted what its own
    // `plugins.grants` entry says, not the built-in's default.
    declare(host, chosen.iter().copied());
    for b in &chosen {
        host.pipeline().runtime().offer_precompiled(b.code);
    }
    // Each on a thread of its own: loading the code and reading the tools
    // is most of a start-up, and the four are independent.
    std::thread::scope(|s| {
        let loading: Vec<_> = chosen.iter().map(|b| s.spawn(move || host.add_builtin(b.name, b.bytes))).collect();
        loading.into_iter().try_for_each(|l| l.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    })
}

#[cfg(test)]
mod tests {
    use super::BUILTINS;
    use sha2::{Digest as _, Sha256};
    use toolhost_runtime::{CompileSource, Limits, Runtime};

    /// The code the build embedded fits the runtime's default engine (the
    /// two share `engine_settings.rs`): a built-in loads with no compile,
    /// under the digest of its very bytes. A copy of the bytes gets the
    /// same code; other bytes never do.
    #[test]
    fn the_builtins_load_from_their_precompiled_code_and_only_for_their_bytes() {
        let rt = Runtime::new(Limits::default(), None).unwrap();
        for b in BUILTINS {
            rt.offer_precompiled(b.code);
        }
        for b in BUILTINS {
            let c = rt.compile(b.name, b.bytes).unwrap();
            assert_eq!(c.source, CompileSource::Precompiled, "{}", b.name);
            assert_eq!(c.digest, hex::encode(Sha256::digest(b.bytes)), "{}: the build's digest", b.name);
            let copy = b.bytes.to_vec();
            assert_eq!(rt.compile(b.name, &copy).unwrap().source, CompileSource::Precompiled, "{}", b.name);
        }
        // One byte changed (in a custom section's name, so it stays a
        // valid component): compiled, not given the embedded code.
        let mut other = BUILTINS[0].bytes.to_vec();
        other.extend_from_slice(&[0, 4, 3, b'x', b'y', b'z']);
        assert_eq!(rt.compile("other", &other).unwrap().source, CompileSource::Compiled);
    }
}
