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

/// Paths of the test-only guest components (hostile plugins and the like),
/// for the test suite and benchmarks. Not part of the public API.
#[doc(hidden)]
pub mod test_guests {
    pub use super::guests::{
        CONFORMANCE_PATH, DICEROLLER_PATH, FILEIO_PATH, HOSTILE_PATH, MEMORYTOOL_PATH, NETCLIENT_PATH, OTHERWORLD_PATH,
        RULESLOOKUP_PATH, SWAP_V1_PATH, SWAP_V2_PATH,
    };
}
