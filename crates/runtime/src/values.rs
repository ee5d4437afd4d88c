//! What a plugin reads through `wasi:config/store`: the operator's plain
//! values for it (`plugins.config.<plugin>`) and its secrets (`toolhost
//! secret set`), in one namespace, and only its own.
//!
//! Every plugin may import `wasi:config/store`: it exposes nothing but what
//! the operator set for that plugin. The values are looked up per call, so
//! a secret set while the host serves is read by the next call.
//!
//! A secret's value never leaves the host through toolhost's own channels:
//! its occurrences in the plugin's log lines, progress messages, error
//! text, captured stdout/stderr and the origins it contacted are replaced
//! by `[secret NAME]` ([`PluginValues::redact`], which says which forms are
//! found and which are not). What a plugin sends where its grants allow
//! (an HTTP request, its answer) is the plugin's: the grant is the boundary.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use wasmtime_wasi_config::WasiConfigVariables;

/// Secrets shorter than this are not redacted: replacing every occurrence
/// of a two-letter string would garble every message and hide nothing.
pub const REDACT_MIN_LEN: usize = 4;

/// One plugin's values in `wasi:config/store`.
#[derive(Default)]
pub struct PluginValues {
    pub(crate) vars: WasiConfigVariables,
    /// Each secret long enough to redact.
    secrets: Vec<Needle>,
}

/// One secret as [`PluginValues::redact`] looks for it.
#[derive(PartialEq, Eq)]
struct Needle {
    name: String,
    /// The value, ASCII letters lowercased.
    lower: String,
    /// The same, one Latin-1 character per byte (the percent-decoded view's
    /// alphabet); equal to `lower` for an ASCII value.
    bytes: String,
}

impl std::fmt::Debug for PluginValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values.
        f.debug_struct("PluginValues")
            .field("secrets", &self.secrets.iter().map(|n| n.name.as_str()).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl PluginValues {
    /// The values `config` (plain) and `secrets` make: one namespace, the
    /// caller having refused a name in both.
    pub fn new(config: &BTreeMap<String, String>, secrets: &BTreeMap<String, String>) -> PluginValues {
        let mut vars = WasiConfigVariables::new();
        for (k, v) in config.iter().chain(secrets) {
            vars.insert(k.clone(), v.clone());
        }
        let redact = secrets
            .iter()
            .filter(|(_, v)| v.len() >= REDACT_MIN_LEN)
            .map(|(n, v)| Needle {
                name: n.clone(),
                lower: v.to_ascii_lowercase(),
                bytes: v.bytes().map(|b| char::from(b.to_ascii_lowercase())).collect(),
            })
            .collect();
        PluginValues { vars, secrets: redact }
    }

    /// `text` with the value of each of this plugin's secrets replaced by
    /// `[secret NAME]`. Found, for a value of 4 bytes or more
    /// ([`REDACT_MIN_LEN`]):
    ///
    /// - exactly as it is;
    /// - with its ASCII letters in any case (lowercased, as a host name is,
    ///   uppercased, or mixed);
    /// - percent-encoded, wholly or in part, with hex digits of either case
    ///   (`%2B` or `%2b`), and then in any case (a lowercased URL).
    ///
    /// Where matches overlap (one secret inside another, or two sharing a
    /// part), the whole stretch is replaced, named after the longest (the
    /// first of equally long ones).
    ///
    /// Not found: any other encoding a plugin chooses (base64, hex, JSON's
    /// `\u` escapes, percent-encoding twice, `+` for a space), a value
    /// reversed, interleaved or split across lines, messages or calls, and
    /// Unicode case changes beyond ASCII. A plugin can always smuggle its own
    /// secret out through what it is granted to reach, or in its result: this
    /// keeps the value out of toolhost's own channels (its log, the audit, the
    /// page, error and progress text), it does not make a hostile plugin safe
    /// to give a secret.
    ///
    /// A plugin with no secrets pays nothing (no allocation); one with secrets
    /// pays one lowercased copy of the text, and one percent-decoded copy when
    /// the text holds a `%`, searched in linear time.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        redact_all(&[self], text)
    }

    /// Whether there is anything to redact.
    pub fn has_secrets(&self) -> bool {
        !self.secrets.is_empty()
    }

    /// Whether `other` redacts exactly the same secrets.
    fn same_secrets(&self, other: &PluginValues) -> bool {
        self.secrets == other.secrets
    }
}

/// [`PluginValues::redact`] with the secrets of every set at once.
fn redact_all<'a>(sets: &[&PluginValues], text: &'a str) -> Cow<'a, str> {
    if text.len() < REDACT_MIN_LEN || sets.iter().all(|s| s.secrets.is_empty()) {
        return Cow::Borrowed(text);
    }
    let needles = || sets.iter().flat_map(|s| &s.secrets);
    // (start, end, name) in `text`.
    let mut found: Vec<(usize, usize, &str)> = Vec::new();
    // As it is, in any case: lowercasing ASCII keeps every offset.
    let lower = text.to_ascii_lowercase();
    for n in needles() {
        found.extend(lower.match_indices(n.lower.as_str()).map(|(i, m)| (i, i + m.len(), n.name.as_str())));
    }
    // Percent-decoded: each `%XX` read as its byte, every byte as one
    // Latin-1 character (so a decoded byte that is not UTF-8 on its own is
    // still searched as text), with where each came from in `text`.
    if text.contains('%') {
        let (decoded, from) = percent_decoded(text);
        for n in needles() {
            found.extend(
                decoded.match_indices(n.bytes.as_str()).map(|(i, m)| (from[i], from[i + m.len()], n.name.as_str())),
            );
        }
    }
    if found.is_empty() {
        return Cow::Borrowed(text);
    }
    found.sort_unstable_by_key(|&(start, end, _)| (start, std::cmp::Reverse(end)));
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    let mut found = found.into_iter().peekable();
    while let Some((start, mut end, mut name)) = found.next() {
        let mut longest = end - start;
        // Everything overlapping this stretch joins it.
        while let Some(&(s, e, n)) = found.peek()
            && s < end
        {
            if e - s > longest {
                (longest, name) = (e - s, n);
            }
            end = end.max(e);
            found.next();
        }
        // Whole characters (a match always starts and ends on one; this
        // only widens should it not).
        let start = (0..=start).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        let end = (end..=text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(text.len());
        // (Widened into the stretch before, it starts where that ended.)
        out.push_str(&text[at..start.max(at)]);
        out.push_str("[secret ");
        out.push_str(name);
        out.push(']');
        at = end.max(at);
    }
    out.push_str(&text[at..]);
    Cow::Owned(out)
}

/// `text` with each `%XX` decoded to its byte and ASCII letters lowercased,
/// one Latin-1 character per byte; and for each byte of the result, where
/// its character came from in `text` (plus `text.len()` at the end).
fn percent_decoded(text: &str) -> (String, Vec<usize>) {
    let hex = |b: Option<&u8>| b.and_then(|&b| char::from(b).to_digit(16)).map(|d| d as u8);
    let b = text.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(b.len());
    let mut from: Vec<usize> = Vec::with_capacity(b.len() + 1);
    // One byte as a Latin-1 character, in UTF-8.
    let latin1 = |byte: u8, at: usize, out: &mut Vec<u8>, from: &mut Vec<usize>| {
        if byte.is_ascii() {
            out.push(byte);
            from.push(at);
        } else {
            out.extend_from_slice(&[0xC0 | (byte >> 6), 0x80 | (byte & 0x3F)]);
            from.extend_from_slice(&[at, at]);
        }
    };
    let mut i = 0;
    while i < b.len() {
        // Up to the next `%`: copied whole when ASCII (most text).
        let run = b[i..].iter().position(|&c| c == b'%').map_or(b.len(), |p| i + p);
        if b[i..run].is_ascii() {
            out.extend_from_slice(&b[i..run]);
            from.extend(i..run);
        } else {
            for (k, &c) in b[i..run].iter().enumerate() {
                latin1(c, i + k, &mut out, &mut from);
            }
        }
        i = run;
        if i < b.len() {
            match (hex(b.get(i + 1)), hex(b.get(i + 2))) {
                (Some(hi), Some(lo)) => {
                    latin1((hi << 4) | lo, i, &mut out, &mut from);
                    i += 3;
                }
                _ => {
                    latin1(b'%', i, &mut out, &mut from);
                    i += 1;
                }
            }
        }
    }
    // Only ASCII bytes change: UTF-8's other bytes are all 0x80 or above.
    out.make_ascii_lowercase();
    from.push(b.len());
    (String::from_utf8(out).expect("Latin-1 characters are UTF-8"), from)
}

/// What one call's text is redacted with: the secrets in force when it
/// started (the ones it could read: a call reads one snapshot) and, when
/// they changed while it ran (a rotation, a removal), the ones in force
/// when it ended.
#[derive(Debug, Clone)]
pub(crate) struct CallSecrets {
    start: Arc<PluginValues>,
    end: Option<Arc<PluginValues>>,
}

impl CallSecrets {
    /// The secrets of a call that started with `start` and ends with `end`.
    pub(crate) fn new(start: Arc<PluginValues>, end: Option<&Arc<PluginValues>>) -> CallSecrets {
        let end = end.filter(|e| !Arc::ptr_eq(e, &start) && !e.same_secrets(&start)).cloned();
        CallSecrets { start, end }
    }

    /// `text` redacted with both ([`PluginValues::redact`]).
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match &self.end {
            None => self.start.redact(text),
            Some(end) => redact_all(&[&self.start, end], text),
        }
    }

    /// Whether there is anything to redact.
    pub fn has_secrets(&self) -> bool {
        self.start.has_secrets() || self.end.as_ref().is_some_and(|e| e.has_secrets())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(secrets: &[(&str, &str)]) -> PluginValues {
        let secrets = secrets.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        PluginValues::new(&BTreeMap::from([("units".to_string(), "metric".to_string())]), &secrets)
    }

    #[test]
    fn every_occurrence_of_a_secret_is_replaced_by_its_name() {
        let v = values(&[("api_key", "sk-live-123456")]);
        assert_eq!(
            v.redact("key sk-live-123456 refused; sk-live-123456!"),
            "key [secret api_key] refused; [secret api_key]!"
        );
        assert!(matches!(v.redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_secret_containing_another_is_replaced_whole() {
        let v = values(&[("short", "abcd"), ("long", "xxabcdxx")]);
        assert_eq!(v.redact("xxabcdxx abcd"), "[secret long] [secret short]");
    }

    /// RFC 3986 percent-encoding: every byte but the unreserved ones as
    /// `%XX` (uppercase hex).
    fn percent_encoded(v: &str) -> String {
        v.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(b).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect()
    }

    const LIVE: &str = "sk-LIVE+abc/XYZ=123456";

    #[test]
    fn a_secret_is_found_in_any_case_and_percent_encoded_wholly_or_in_part() {
        let v = values(&[("api_key", LIVE)]);
        for form in [
            LIVE.to_string(),
            LIVE.to_lowercase(),
            LIVE.to_uppercase(),
            percent_encoded(LIVE),
            percent_encoded(LIVE).to_lowercase(),
            "sk-LIVE%2Babc/XYZ%3d123456".to_string(),
            "%73%6B%2D%4C%49%56%45%2B%61%62%63%2F%58%59%5A%3D%31%32%33%34%35%36".to_string(),
        ] {
            let text = format!("GET https://h.test/?key={form}&x=1 ({form})");
            assert_eq!(v.redact(&text), "GET https://h.test/?key=[secret api_key]&x=1 ([secret api_key])", "{form}");
        }
        // In a host name, which the HTTP layer lowercases.
        let v = values(&[("api_key", "Sk7LiveQ9x")]);
        assert_eq!(v.redact("https://sk7liveq9x.example.test:443"), "https://[secret api_key].example.test:443");
    }

    #[test]
    fn forms_left_unredacted_are_the_ones_documented() {
        let v = values(&[("api_key", LIVE)]);
        let reversed: String = LIVE.chars().rev().collect();
        let hex: String = LIVE.bytes().map(|b| format!("{b:02x}")).collect();
        let twice = percent_encoded(&percent_encoded(LIVE));
        for form in ["c2stTElWRSthYmMvWFlaPTEyMzQ1Ng==", &hex, &reversed, &twice, "sk-LIVE+abc/ XYZ=123456"] {
            assert!(matches!(v.redact(form), Cow::Borrowed(_)), "{form}");
        }
    }

    #[test]
    fn a_secret_holding_a_percent_sign_or_beyond_ascii_is_found_too() {
        let v = values(&[("pct", "ab%41cd-9"), ("word", "pässwört-1")]);
        assert_eq!(v.redact("x ab%41cd-9 y"), "x [secret pct] y", "as it is");
        assert_eq!(v.redact("x ab%2541cd-9 y"), "x [secret pct] y", "its % encoded");
        assert_eq!(v.redact("é pässwört-1 é"), "é [secret word] é");
        assert_eq!(v.redact("é PäSSWöRT-1 é"), "é [secret word] é", "ASCII letters in any case");
        assert_eq!(v.redact("é p%C3%A4ssw%c3%b6rt-1 é"), "é [secret word] é", "its UTF-8 bytes encoded");
        assert!(matches!(v.redact("é %C3%A4 %zz %4 %"), Cow::Borrowed(_)));
    }

    #[test]
    fn overlapping_secrets_are_replaced_as_one_stretch_named_after_the_longest() {
        let v = values(&[("a", "abcdef"), ("b", "defghijk")]);
        assert_eq!(v.redact("<abcdefghijk>"), "<[secret b]>", "nothing of either is left");
        assert_eq!(v.redact("<abcdefghijk abcdef>"), "<[secret b] [secret a]>");
    }

    #[test]
    fn a_calls_secrets_are_those_of_its_start_and_of_its_end() {
        let start = Arc::new(values(&[("api_key", "old-value-1")]));
        let end = Arc::new(values(&[("api_key", "new-value-2")]));
        let s = CallSecrets::new(start.clone(), Some(&end));
        assert_eq!(s.redact("old-value-1 new-value-2"), "[secret api_key] [secret api_key]");
        // Removed mid-call: the value read at the start is still redacted.
        let s = CallSecrets::new(start.clone(), Some(&Arc::new(values(&[]))));
        assert!(s.has_secrets());
        assert_eq!(s.redact("OLD-VALUE-1"), "[secret api_key]");
        // Unchanged (the same values, or equal ones from a reload): one set.
        assert!(CallSecrets::new(start.clone(), Some(&start)).end.is_none());
        assert!(CallSecrets::new(start.clone(), Some(&Arc::new(values(&[("api_key", "old-value-1")])))).end.is_none());
        // No secrets at all: nothing to do, nothing allocated.
        let none = CallSecrets::new(Arc::new(values(&[])), None);
        assert!(!none.has_secrets());
        assert!(matches!(none.redact("anything at all"), Cow::Borrowed(_)));
    }

    proptest::proptest! {
        /// Whatever surrounds it, no tested form of a secret survives.
        #[test]
        fn no_tested_form_survives(
            secret in "[a-zA-Z+/=_.~-]{0,12}[0-9][a-zA-Z0-9+/=_.~-]{3,12}",
            before in "[ -~é]{0,16}",
            after in "[ -~é]{0,16}",
            form in 0..5usize,
        ) {
            let v = values(&[("k", &secret)]);
            let shown = match form {
                0 => secret.clone(),
                1 => secret.to_lowercase(),
                2 => secret.to_uppercase(),
                3 => percent_encoded(&secret),
                _ => percent_encoded(&secret).to_lowercase(),
            };
            let out = v.redact(&format!("{before}{shown}{after}")).to_ascii_lowercase();
            proptest::prop_assert!(!out.contains(&secret.to_ascii_lowercase()), "{out}");
            let (decoded, _) = percent_decoded(&out);
            proptest::prop_assert!(!decoded.contains(&secret.to_ascii_lowercase()), "{out}");
        }
    }

    #[test]
    fn secrets_too_short_to_hide_anything_are_left_and_plain_values_never_redacted() {
        let v = values(&[("pin", "42")]);
        assert!(!v.has_secrets());
        assert_eq!(v.redact("42 metric"), "42 metric");
        assert!(!format!("{v:?}").contains("42"), "Debug never shows a value");
    }
}
