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
}

/// Every built-in plugin.
pub const BUILTINS: &[Builtin] = &[
    Builtin { name: "diceroller", bytes: guests::DICEROLLER },
    Builtin { name: "ruleslookup", bytes: guests::RULESLOOKUP },
    Builtin { name: "fileio", bytes: guests::FILEIO },
    Builtin { name: "memorytool", bytes: guests::MEMORYTOOL },
];

/// Loads and registers every built-in plugin into `host`. A host without a
/// memory store is given the in-memory demo campaign first, so that
/// `memorytool` has one.
pub fn add_builtins(host: &toolhost_core::Host) -> Result<(), toolhost_core::AddPluginError> {
    add_builtins_except(host, |_| false)
}

/// [`add_builtins`], leaving out those `skip` names.
pub fn add_builtins_except(
    host: &toolhost_core::Host,
    skip: impl Fn(&str) -> bool,
) -> Result<(), toolhost_core::AddPluginError> {
    if host.memory().is_none() {
        let demo = toolhost_memory::MemoryStore::in_memory()
            .map_err(|e| toolhost_core::AddPluginError::Memory(Box::new(e)))?;
        host.set_memory(std::sync::Arc::new(demo));
    }
    for b in BUILTINS.iter().filter(|b| !skip(b.name)) {
        host.add_builtin(b.name, b.bytes)?;
    }
    Ok(())
}
