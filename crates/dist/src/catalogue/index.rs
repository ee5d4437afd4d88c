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
/// read as none).
const FORMAT: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Index {
    format: u32,
    catalogue: String,
    synced: u64,
    rows: Vec<Row>,
}

#[derive(Serialize, Deserialize)]
struct Row {
    name: String,
    description: String,
    tools: Vec<(String, String)>,
    version: String,
    key_id: String,
    published: String,
    /// The entry, as JSON.
    entry: String,
}

impl Row {
    fn of(e: &Entry) -> Option<Row> {
        Some(Row {
            name: e.name.clone(),
            description: e.description.clone(),
            tools: e.tools.iter().map(|t| (t.name.clone(), t.description.clone())).collect(),
            version: e.version.clone(),
            key_id: e.publisher.key_id.clone(),
            published: e.published.clone(),
            entry: serde_json::to_string(e).ok()?,
        })
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
        let index = Index {
            format: FORMAT,
            catalogue: c.catalogue.clone(),
            synced: c.synced,
            rows: c.entries.values().filter_map(Row::of).collect(),
        };
        if let Ok(bytes) = postcard::to_allocvec(&index) {
            let _ = crate::runtime::private::write_private(&path, &bytes);
        }
    }

    /// The index of `catalogue`, when there is one fresher than
    /// `refresh_secs`.
    fn fresh_index(&self, catalogue: &str) -> Option<Index> {
        let path = self.index_file(catalogue)?;
        let max = self.max_entries.saturating_mul(super::MAX_ENTRY_BYTES / 4).max(1 << 20);
        let bytes = crate::runtime::private::read_state(&path, max).ok()??;
        let index: Index = postcard::from_bytes(&bytes).ok()?;
        (index.format == FORMAT
            && index.catalogue == catalogue
            && now_secs().saturating_sub(index.synced) < self.refresh_secs)
            .then_some(index)
    }

    /// Searches every catalogue in `catalogues` for `query`: the newest
    /// version of each plugin and publisher among the matches, best first,
    /// at most `limit`; and the warnings of reading them. A catalogue whose
    /// index is fresh is not read again (nor its copy parsed); the others
    /// are read as [`Catalogues::read`] reads them.
    pub fn search(&self, catalogues: &[String], refresh: bool, query: &str, limit: usize) -> (Vec<Hit>, Vec<String>) {
        let mut rows: Vec<(usize, Row)> = Vec::new();
        let mut warnings = Vec::new();
        for (i, catalogue) in catalogues.iter().enumerate() {
            if !refresh && let Some(index) = self.fresh_index(catalogue) {
                rows.extend(index.rows.into_iter().map(|r| (i, r)));
                continue;
            }
            match self.read(catalogue, refresh) {
                Ok((c, report)) => {
                    warnings.extend(report.warnings);
                    rows.extend(c.entries.values().filter_map(Row::of).map(|r| (i, r)));
                }
                Err(e) => warnings.push(e.to_string()),
            }
        }
        let ranked = rank(rows, query, |(_, r)| Fields {
            name: &r.name,
            description: &r.description,
            tools: r.tools.iter().map(|(n, d)| (n.as_str(), d.as_str())).collect(),
        });
        // Of each name and publisher, the newest version (the best score
        // among its versions).
        let mut best: HashMap<(String, String), (f64, (usize, Row))> = HashMap::new();
        for (score, (i, r)) in ranked {
            match best.entry((r.name.clone(), r.key_id.clone())) {
                std::collections::hash_map::Entry::Occupied(mut b) => {
                    let b = b.get_mut();
                    let order = version_order(&r.version, &b.1.1.version);
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
        best.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.1.name.cmp(&b.1.1.name)));
        let hits = best
            .into_iter()
            .filter_map(|(score, (i, r))| {
                let entry: Entry = serde_json::from_str(&r.entry).ok()?;
                Some(Hit { score, listed: Listed { catalogue: catalogues[i].clone(), entry } })
            })
            .take(limit)
            .collect();
        (hits, warnings)
    }
}
