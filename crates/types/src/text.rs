//! Text from outside the host (a plugin's log lines, its stderr, an upstream
//! server's stderr) made safe to put in the host's own log.

use std::borrow::Cow;

/// `s` with every character that could fake or hide a log line escaped:
/// control characters (newlines, carriage returns, the escape that starts
/// terminal sequences) and the Unicode format characters that reorder or
/// hide text (bidirectional overrides and isolates, zero-width marks).
/// Everything else is kept as is; text with nothing to escape is not copied.
///
/// A plugin that writes `"ok\n2026-01-01T00:00:00Z INFO toolhost: ..."`
/// gets one log line reading `ok\n2026-...`, never a second line that
/// looks like the host's.
pub fn log_safe(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if needs_escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00AD}'                  // soft hyphen (invisible)
            | '\u{061C}'                // Arabic letter mark
            | '\u{115F}' | '\u{1160}'   // Hangul fillers
            | '\u{180E}'                // Mongolian vowel separator
            | '\u{3164}' | '\u{FFA0}'   // Hangul fillers
            | '\u{FE00}'..='\u{FE0F}'   // variation selectors
            | '\u{E0000}'..='\u{E0FFF}' // tags, variation selectors supplement
            | '\u{200B}'..='\u{200F}'   // zero-width space/joiners, LRM, RLM
            | '\u{2028}' | '\u{2029}'   // line and paragraph separators
            | '\u{202A}'..='\u{202E}'   // bidi embeddings and overrides
            | '\u{2060}'..='\u{2064}'   // word joiner, invisible operators
            | '\u{2066}'..='\u{2069}'   // bidi isolates
            | '\u{FEFF}'                // zero-width no-break space
        )
}

/// `s` cut to at most `max` bytes, on a character boundary, and whether it
/// was cut.
pub fn cut_at(s: &str, max: usize) -> (&str, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

/// `text` within `cap` bytes: as it is, or cut with a note saying how many
/// bytes it had in all (the note counted within `cap`).
pub fn cut_with_note(text: &str, cap: usize) -> Cow<'_, str> {
    if text.len() <= cap {
        return Cow::Borrowed(text);
    }
    let note = format!(" [output truncated: {} bytes in all]", text.len());
    let (head, _) = cut_at(text, cap.saturating_sub(note.len()));
    Cow::Owned(format!("{head}{note}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_not_copied() {
        assert!(matches!(log_safe("rolled 17 (d20)"), Cow::Borrowed(_)));
        assert_eq!(log_safe("naïve café ✓"), "naïve café ✓");
    }

    #[test]
    fn line_breaks_terminal_sequences_and_bidi_overrides_are_escaped() {
        let forged = "ok\n2026-01-01T00:00:00Z  INFO toolhost: plugin installed\r\x1b[2K\u{202e}txt.exe";
        let safe = log_safe(forged);
        assert!(!safe.contains(['\n', '\r', '\x1b', '\u{202e}']));
        assert_eq!(safe, "ok\\n2026-01-01T00:00:00Z  INFO toolhost: plugin installed\\r\\u{1b}[2K\\u{202e}txt.exe");
        assert_eq!(log_safe("a\u{2028}b\u{85}c"), "a\\u{2028}b\\u{85}c");
        assert_eq!(log_safe("x\u{ad}\u{3164}\u{e0041}"), "x\\u{ad}\\u{3164}\\u{e0041}");
    }

    #[test]
    fn cuts_land_on_character_boundaries_and_say_so() {
        assert_eq!(cut_at("abc", 3), ("abc", false));
        assert_eq!(cut_at("héllo", 2), ("h", true));
        assert_eq!(cut_with_note("short", 100), "short");
        let long = "é".repeat(5000);
        let cut = cut_with_note(&long, 1000);
        assert!(cut.len() <= 1000 && cut.ends_with("[output truncated: 10000 bytes in all]"), "{cut}");
    }
}
