//! The tokenizer shared by the build-time indexer and the query side, so both
//! agree on what a term is.

/// Words too common to carry meaning in a rules search.
const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how", "if", "in", "is", "it",
    "its", "of", "on", "or", "that", "the", "their", "this", "to", "was", "what", "when", "which", "who", "with",
    "you", "your",
];

/// Reduces a lowercase word to a crude stem: plural and possessive endings go.
fn stem(word: &str) -> &str {
    let w = word.strip_suffix("'s").unwrap_or(word);
    if w.len() > 4 && w.ends_with("ies") {
        // "bodies" and "body" share the stem "bod".
        return &w[..w.len() - 3];
    }
    if w.len() > 3 && w.ends_with('y') {
        return &w[..w.len() - 1];
    }
    if w.len() > 5 && w.ends_with("ed") && !w.ends_with("eed") {
        // "blinded" finds "blind", "poisoned" finds "poison".
        return &w[..w.len() - 2];
    }
    if w.len() > 3 && w.ends_with('s') && !w.ends_with("ss") && !w.ends_with("us") {
        return &w[..w.len() - 1];
    }
    w
}

/// Splits text into search terms: lowercase, alphanumeric runs (apostrophes
/// kept inside words), stopwords dropped, crude stemming applied.
pub fn terms(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .map(|w| w.trim_matches('\''))
        .filter(|w| !w.is_empty() && !STOPWORDS.contains(w))
        .map(|w| stem(w).to_string())
        .collect()
}
