//! A search index kept beside each catalogue's local copy
//! (`<cache dir>/catalogues/<hash>.idx`, postcard): per entry, what search
//! ranks by and orders versions by, and the entry itself as JSON, parsed
//! only for the results shown. A warm search reads it instead of parsing
//! the whole copy (the copy of 10,000 entries is 9 MB of JSON).

use super::search::{Fields, rank};
use super::{Catalogue, Catalogues, Entry, Hit, Listed, now_secs, version_order};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The index's format, bumped when it changes (an index of another is
/// read as none, and written again).
const FORMAT: u32 = 2;

/// The index, borrowing its text from the file's bytes: a search decodes it
/// without a copy or an allocation per string.
#[derive(Serialize, Deserialize)]
struct Index<'a> {
    format: u32,
    #[serde(borrow)]
    catalogue: &'a str,
    synced: u64,
    #[serde(borrow)]
    rows: Vec<Row<'a>>,
}

#[derive(Serialize, Deserialize)]
struct Row<'a> {
    name: &'a str,
    description: &'a str,
    #[serde(borrow)]
    tools: Vec<(&'a str, &'a str)>,
    version: &'a str,
    key_id: &'a str,
    published: &'a str,
    /// The entry, as JSON.
    entry: &'a str,
}

impl<'a> Row<'a> {
    fn of(e: &'a Entry, json: &'a str) -> Row<'a> {
        Row {
            name: &e.name,
            description: &e.description,
            tools: e.tools.iter().map(|t| (t.name.as_str(), t.description.as_str())).collect(),
            version: &e.version,
            key_id: &e.publisher.key_id,
            published: &e.published,
            entry: json,
        }
    }
}

impl Catalogues<'_> {
    fn index_file(&self, catalogue: &str) -> Option<std::path::PathBuf> {
        Some(self.cache_file(catalogue)?.with_extension("idx"))
    }

    /// Writes the index of `c` (beside its copy; best effort: a search
    /// without it reads the copy).
    pub(super) fn save_index(&self, c: &Catalogue) {
        let Some(path) = self.index_file(&c.catalogue) else { return };
        let entries: Vec<(&Entry, String)> =
            c.entries.values().filter_map(|e| Some((e, serde_json::to_string(e).ok()?))).collect();
        let index = Index {
            format: FORMAT,
            catalogue: &c.catalogue,
            synced: c.synced,
            rows: entries.iter().map(|(e, json)| Row::of(e, json)).collect(),
        };
        if let Ok(bytes) = postcard::to_allocvec(&index) {
            let _ = crate::runtime::private::write_private(&path, &bytes);
        }
    }

    /// The bytes of `catalogue`'s index, when there is one of this format
    /// fresher than `refresh_secs`.
    fn fresh_index(&self, catalogue: &str) -> Option<Vec<u8>> {
        let path = self.index_file(catalogue)?;
        let max = self.max_entries.saturating_mul(super::MAX_ENTRY_BYTES / 4).max(1 << 20);
        let bytes = crate::runtime::private::read_state(&path, max).ok()??;
        let index: Index = postcard::from_bytes(&bytes).ok()?;
        let fresh = index.format == FORMAT
            && index.catalogue == catalogue
            && now_secs().saturating_sub(index.synced) < self.refresh_secs;
        drop(index);
        fresh.then_some(bytes)
    }

    /// Searches every catalogue in `catalogues` for `query`: the newest
    /// version of each plugin and publisher among the matches, best first,
    /// at most `limit`; and the warnings of reading them. A catalogue whose
    /// index is fresh is not read again (nor its copy parsed); the others
    /// are read as [`Catalogues::read`] reads them.
    pub fn search(&self, catalogues: &[String], refresh: bool, query: &str, limit: usize) -> (Vec<Hit>, Vec<String>) {
        // What each catalogue's rows borrow from: its index file's bytes, or
        // the copy just read.
        enum Source {
            Index(Vec<u8>),
            Read(Vec<(Entry, String)>),
        }
        let mut sources: Vec<(usize, Source)> = Vec::new();
        let mut warnings = Vec::new();
        for (i, catalogue) in catalogues.iter().enumerate() {
            if !refresh && let Some(bytes) = self.fresh_index(catalogue) {
                sources.push((i, Source::Index(bytes)));
                continue;
            }
            match self.read(catalogue, refresh) {
                Ok((c, report)) => {
                    warnings.extend(report.warnings);
                    let entries: Vec<(Entry, String)> = c
                        .entries
                        .into_values()
                        .filter_map(|e| Some((serde_json::to_string(&e).ok()?, e)).map(|(j, e)| (e, j)))
                        .collect();
                    sources.push((i, Source::Read(entries)));
                }
                Err(e) => warnings.push(e.to_string()),
            }
        }
        let mut rows: Vec<(usize, Row)> = Vec::new();
        for (i, source) in &sources {
            match source {
                Source::Index(bytes) => {
                    if let Ok(index) = postcard::from_bytes::<Index>(bytes) {
                        rows.extend(index.rows.into_iter().map(|r| (*i, r)));
                    }
                }
                Source::Read(entries) => rows.extend(entries.iter().map(|(e, json)| (*i, Row::of(e, json)))),
            }
        }
        let ranked =
            rank(rows, query, |(_, r)| Fields { name: r.name, description: r.description, tools: r.tools.clone() });
        // Of each name and publisher, the newest version (the best score
        // among its versions).
        /// A plugin by its name and publisher.
        type Plugin<'r> = (&'r str, &'r str);
        let mut best: HashMap<Plugin, (f64, (usize, Row))> = HashMap::new();
        for (score, (i, r)) in ranked {
            match best.entry((r.name, r.key_id)) {
                std::collections::hash_map::Entry::Occupied(mut b) => {
                    let b = b.get_mut();
                    let order = version_order(r.version, b.1.1.version);
                    if order.is_gt() || (order.is_eq() && r.published > b.1.1.published) {
                        *b = (b.0.max(score), (i, r));
                    }
                }
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert((score, (i, r)));
                }
            }
        }
        let mut best: Vec<(f64, (usize, Row))> = best.into_values().collect();
        best.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.1.name.cmp(b.1.1.name)));
        let hits = best
            .into_iter()
            .filter_map(|(score, (i, r))| {
                let entry: Entry = serde_json::from_str(r.entry).ok()?;
                Some(Hit { score, listed: Listed { catalogue: catalogues[i].clone(), entry } })
            })
            .take(limit)
            .collect();
        (hits, warnings)
    }
}
