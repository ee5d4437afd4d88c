//! Capabilities as a reviewer reads them: the kinds of access beyond pure
//! computation that an operator can grant a plugin. How each one is read
//! from config, linked and enforced lives in `toolhost-runtime`'s
//! capability modules; this is only their names and a set of them.

use serde::{Serialize, Serializer};

/// One kind of access a plugin can be granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    /// Files in granted directories (`wasi:filesystem`).
    Files,
    /// Environment variables (`wasi:cli/environment`).
    Env,
    /// Outgoing TCP to granted addresses (`wasi:sockets`).
    Network,
    /// The campaign memory store (`toolhost:plugin/memory`).
    Memory,
    /// Outgoing HTTP(S) to granted origins (`wasi:http`).
    Http,
    /// Writes to the campaign memory store (`toolhost:plugin/memory-write`).
    MemoryWrite,
}

impl Capability {
    /// Every capability, in report order.
    pub const ALL: [Capability; 6] = [
        Capability::Files,
        Capability::Env,
        Capability::Network,
        Capability::Memory,
        Capability::Http,
        Capability::MemoryWrite,
    ];

    /// Lowercase name, as in config keys and reports.
    pub const fn as_str(self) -> &'static str {
        match self {
            Capability::Files => "files",
            Capability::Env => "env",
            Capability::Network => "network",
            Capability::Memory => "memory",
            Capability::Http => "http",
            Capability::MemoryWrite => "memory_write",
        }
    }

    /// The capability called `name`.
    pub fn from_name(name: &str) -> Option<Capability> {
        Capability::ALL.into_iter().find(|c| c.as_str() == name)
    }

    const fn bit(self) -> u8 {
        1 << self as u8
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Capability {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A set of capabilities (held, asked for, used), copied by value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Capabilities(u8);

impl Capabilities {
    /// No capability.
    pub const EMPTY: Capabilities = Capabilities(0);

    /// The set as bits (one per [`Capability`], in declaration order).
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// The set from [`Capabilities::bits`]; unknown bits are dropped.
    pub const fn from_bits(bits: u8) -> Capabilities {
        Capabilities(bits & 0b1_1111)
    }

    /// Adds `c`.
    pub fn insert(&mut self, c: Capability) {
        self.0 |= c.bit();
    }

    /// With `c` added.
    #[must_use]
    pub fn with(mut self, c: Capability) -> Capabilities {
        self.insert(c);
        self
    }

    /// Whether `c` is in the set.
    pub fn contains(self, c: Capability) -> bool {
        self.0 & c.bit() != 0
    }

    /// Whether every member of `self` is in `other`.
    pub fn is_subset(self, other: Capabilities) -> bool {
        self.0 & !other.0 == 0
    }

    /// Members of both.
    #[must_use]
    pub fn union(self, other: Capabilities) -> Capabilities {
        Capabilities(self.0 | other.0)
    }

    /// Members of `self` not in `other`.
    #[must_use]
    pub fn difference(self, other: Capabilities) -> Capabilities {
        Capabilities(self.0 & !other.0)
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The members, in report order.
    pub fn iter(self) -> impl Iterator<Item = Capability> {
        Capability::ALL.into_iter().filter(move |c| self.contains(*c))
    }

    /// The members' names, in report order.
    pub fn names(self) -> Vec<&'static str> {
        self.iter().map(Capability::as_str).collect()
    }
}

impl FromIterator<Capability> for Capabilities {
    fn from_iter<I: IntoIterator<Item = Capability>>(iter: I) -> Capabilities {
        let mut s = Capabilities::EMPTY;
        for c in iter {
            s.insert(c);
        }
        s
    }
}

impl Serialize for Capabilities {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets() {
        let s: Capabilities = [Capability::Memory, Capability::Files].into_iter().collect();
        assert_eq!(s.names(), ["files", "memory"]);
        assert!(s.contains(Capability::Files) && !s.contains(Capability::Env));
        assert!(Capabilities::EMPTY.with(Capability::Files).is_subset(s));
        assert!(!s.is_subset(Capabilities::EMPTY.with(Capability::Files)));
        assert_eq!(s.difference(Capabilities::EMPTY.with(Capability::Files)).names(), ["memory"]);
        assert_eq!(serde_json::to_string(&s).unwrap(), r#"["files","memory"]"#);
        for c in Capability::ALL {
            assert_eq!(Capability::from_name(c.as_str()), Some(c));
        }
    }
}
