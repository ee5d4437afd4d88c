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
