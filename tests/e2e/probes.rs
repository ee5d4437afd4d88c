//! The HTTP probe table of `docs/http-probes.md` stays true: its toolhost
//! column is what `tests/peers/http_probe.py` gets from a default
//! `toolhost serve --http` now.
//!
//! - `http_probe_table_matches_toolhost`

use crate::live::serve;
use crate::peers::{peers_dir, python};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// The probe table's toolhost column: probe id -> "STATUS / CODE".
fn documented() -> BTreeMap<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/http-probes.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let cells = |line: &str| -> Vec<String> {
        line.trim().trim_matches('|').split('|').map(|c| c.trim().to_string()).collect()
    };
    let mut lines = doc.lines();
    let header = lines
        .by_ref()
        .map(cells)
        .find(|c| c.first().is_some_and(|h| h == "probe") && c.iter().any(|h| h == "toolhost"))
        .unwrap_or_else(|| panic!("{}: no probe table with a toolhost column", path.display()));
    let column = header.iter().position(|h| h == "toolhost").unwrap();
    let mut table = BTreeMap::new();
    for line in lines.skip(1).take_while(|l| l.trim_start().starts_with('|')) {
        let row = cells(line);
        let id = row[0].trim_matches('`').to_string();
        assert!(
            row.len() == header.len(),
            "{}: row {id} has {} cells, not {}",
            path.display(),
            row.len(),
            header.len()
        );
        table.insert(id, row[column].clone());
    }
    table
}

#[test]
fn http_probe_table_matches_toolhost() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, base) = serve(dir.path());
    let out = Command::new(python())
        .arg(peers_dir().join("http_probe.py"))
        .args(["--json", &format!("toolhost={base}/mcp")])
        .output()
        .expect("run http_probe.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "http_probe.py: {}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let probes = report["probes"].as_array().unwrap();
    let measured: BTreeMap<&str, &str> = probes
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["results"]["toolhost"]["cell"].as_str().unwrap()))
        .collect();
    let documented = documented();
    let ids: BTreeSet<&str> = measured.keys().copied().chain(documented.keys().map(String::as_str)).collect();
    let mut wrong = Vec::new();
    for id in ids {
        let (doc, now) = (documented.get(id).map(String::as_str), measured.get(id).copied());
        if doc != now {
            let message = probes.iter().find(|p| p["id"] == id).map(|p| &p["results"]["toolhost"]["message"]);
            wrong.push(format!("{id}: docs/http-probes.md says {doc:?}, toolhost answers {now:?} ({message:?})"));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/http-probes.md is out of date (rerun the command it gives, or fix the front):\n{}",
        wrong.join("\n")
    );
}
