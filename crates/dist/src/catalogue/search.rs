//! Search over catalogue entries, and the order of versions.

use super::Listed;
use serde::Serialize;

/// One search result.
#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    /// How well it matched (higher is better).
    pub score: f64,
    /// The entry.
    #[serde(flatten)]
    pub listed: Listed,
}

fn words(text: &str) -> impl Iterator<Item = &str> + '_ {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty())
}

/// How `word` (as written) matches `term` (lowercase): 1 the whole word,
/// 0.5 its beginning (terms of three letters or more), 0 not at all. ASCII
/// is compared without a copy; anything else is lowercased first.
fn matches(word: &str, term: &str) -> f64 {
    let (w, t) = (word.as_bytes(), term.as_bytes());
    if word.is_ascii() {
        if w.len() == t.len() && w.eq_ignore_ascii_case(t) {
            return 1.0;
        }
        return if t.len() >= 3 && w.len() > t.len() && w[..t.len()].eq_ignore_ascii_case(t) { 0.5 } else { 0.0 };
    }
    let w = word.to_lowercase();
    if w == term {
        1.0
    } else if t.len() >= 3 && w.starts_with(term) {
        0.5
    } else {
        0.0
    }
}

/// Whether `text` may hold `term` (lowercase) anywhere, case aside: a
/// necessary condition for any word of it to match. Exact for ASCII text
/// (memchr finds the term's first letter in either case); text that is not
/// ASCII is always scanned word by word (its lowercase may be ASCII).
fn may_hold(text: &str, term: &str) -> bool {
    let (h, n) = (text.as_bytes(), term.as_bytes());
    if !text.is_ascii() || !term.is_ascii() || n.is_empty() {
        return true;
    }
    memchr::memchr2_iter(n[0], n[0].to_ascii_uppercase(), h)
        .any(|i| h.len() - i >= n.len() && h[i..i + n.len()].eq_ignore_ascii_case(n))
}

/// The fields of an item that search looks at.
pub(super) struct Fields<'a> {
    pub(super) name: &'a str,
    pub(super) description: &'a str,
    pub(super) tools: Vec<(&'a str, &'a str)>,
}

/// Ranks `items` against `query` by relevance over their names,
/// descriptions, tool names and tool descriptions (see [`search`]): each
/// matching item with its score, unsorted.
pub(super) fn rank<T>(items: Vec<T>, query: &str, fields: impl Fn(&T) -> Fields<'_>) -> Vec<(f64, T)> {
    let terms: Vec<String> = {
        let mut t: Vec<String> = words(query).map(str::to_lowercase).collect();
        t.sort();
        t.dedup();
        t
    };
    if terms.is_empty() {
        return Vec::new();
    }
    // Per item, per term: the best weight of a field it matched in.
    const NAME: f64 = 4.0;
    const TOOL_NAME: f64 = 2.5;
    const DESCRIPTION: f64 = 2.0;
    const TOOL_DESCRIPTION: f64 = 1.5;
    let matches: Vec<Vec<f64>> = items
        .iter()
        .map(|item| {
            let f = fields(item);
            let mut best = vec![0.0f64; terms.len()];
            // Most items hold none of the terms: found without splitting words.
            let held = |t: &str| {
                may_hold(f.name, t)
                    || may_hold(f.description, t)
                    || f.tools.iter().any(|(n, d)| may_hold(n, t) || may_hold(d, t))
            };
            if !terms.iter().any(|t| held(t)) {
                return best;
            }
            let mut field = |text: &str, weight: f64| {
                for w in words(text) {
                    for (i, t) in terms.iter().enumerate() {
                        let m = weight * matches(w, t);
                        if m == 0.0 {
                            continue;
                        }
                        // Several matches in one field add a little, not a lot.
                        best[i] = if best[i] >= m { best[i] + m / 8.0 } else { m + best[i] / 8.0 };
                    }
                }
            };
            field(f.name, NAME);
            field(f.description, DESCRIPTION);
            for (name, description) in &f.tools {
                field(name, TOOL_NAME);
                field(description, TOOL_DESCRIPTION);
            }
            best
        })
        .collect();
    let n = items.len() as f64;
    let idf: Vec<f64> = (0..terms.len())
        .map(|i| {
            let df = matches.iter().filter(|m| m[i] > 0.0).count() as f64;
            ((n - df + 0.5) / (df + 0.5) + 1.0).ln()
        })
        .collect();
    items
        .into_iter()
        .zip(matches)
        .filter_map(|(item, m)| {
            let mut score: f64 = m.iter().zip(&idf).map(|(w, idf)| w * idf).sum();
            let name = fields(&item).name.to_lowercase();
            if terms.contains(&name) {
                score += 4.0;
            }
            (score > 0.0).then_some((score, item))
        })
        .collect()
}

/// Ranks `entries` against `query` by relevance over their names,
/// descriptions, tool names and tool descriptions: each word of the query
/// weighs by how rare it is among the entries (idf) and by the field it
/// matched in (the name most, a tool's description least); a word that
/// begins an entry's word counts half. Entries matching no word are left
/// out; ties go to the name, then the newest publish.
pub fn search(entries: Vec<Listed>, query: &str) -> Vec<Hit> {
    let ranked = rank(entries, query, |l| Fields {
        name: &l.entry.name,
        description: &l.entry.description,
        tools: l.entry.tools.iter().map(|t| (t.name.as_str(), t.description.as_str())).collect(),
    });
    let mut hits: Vec<Hit> = ranked.into_iter().map(|(score, listed)| Hit { score, listed }).collect();
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.listed.entry.name.cmp(&b.listed.entry.name))
            .then_with(|| b.listed.entry.published.cmp(&a.listed.entry.published))
    });
    hits
}

/// Orders versions: semantic versions by precedence, anything else after
/// them as text.
pub fn version_order(a: &str, b: &str) -> std::cmp::Ordering {
    let parse = |v: &str| -> Option<Vec<u64>> {
        let core = v.split(['-', '+']).next()?;
        core.split('.').map(|p| p.parse().ok()).collect()
    };
    match (parse(a), parse(b)) {
        (Some(x), Some(y)) => x.cmp(&y).then_with(|| {
            // A pre-release comes before its release.
            let pre = |v: &str| v.split('+').next().is_some_and(|c| c.contains('-'));
            pre(b).cmp(&pre(a)).then_with(|| a.cmp(b))
        }),
        (Some(_), None) => std::cmp::Ordering::Greater,
        (None, Some(_)) => std::cmp::Ordering::Less,
        (None, None) => a.cmp(b),
    }
}

#[cfg(test)]
mod quick_test {
    use super::may_hold;

    #[test]
    fn the_quick_test_finds_a_term_in_any_case_and_never_misses_non_ascii_text() {
        assert!(may_hold("Dice roller", "dice"));
        assert!(may_hold("roll the DICE", "dice"));
        assert!(may_hold("a dicebag", "dice"));
        assert!(!may_hold("nothing here", "dice"));
        assert!(!may_hold("dic", "dice"));
        // Not ASCII: scanned word by word (the Kelvin sign lowercases to k).
        assert!(may_hold("\u{212a}nights", "knights"));
        assert!(may_hold("anything", "würfel"));
    }
}
