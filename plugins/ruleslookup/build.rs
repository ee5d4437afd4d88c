//! Turns `data/srd.json` into static tables and a BM25 inverted index, so the
//! plugin pays no parsing or indexing cost per call: the data lives in the
//! component's data segment.

use std::collections::BTreeMap;
use std::fmt::Write as _;

#[path = "src/text.rs"]
mod text;

/// How much more a word in a rule's name counts than one in its body.
const NAME_WEIGHT: u32 = 3;

#[derive(serde::Deserialize)]
struct Data {
    attribution: String,
    documents: Vec<Doc>,
}

#[derive(serde::Deserialize)]
struct Doc {
    id: String,
    name: String,
    category: String,
    text: String,
}

fn main() {
    println!("cargo:rerun-if-changed=data/srd.json");
    println!("cargo:rerun-if-changed=src/text.rs");
    let raw = std::fs::read_to_string("data/srd.json").expect("read data/srd.json");
    let data: Data = serde_json::from_str(&raw).expect("parse data/srd.json");
    assert!(data.documents.len() < u16::MAX as usize);

    let mut postings: BTreeMap<String, Vec<(u16, u16)>> = BTreeMap::new();
    let mut lens = Vec::new();
    for (i, doc) in data.documents.iter().enumerate() {
        let mut tf: BTreeMap<String, u32> = BTreeMap::new();
        for t in text::terms(&doc.name) {
            *tf.entry(t).or_default() += NAME_WEIGHT;
        }
        for t in text::terms(&doc.text) {
            *tf.entry(t).or_default() += 1;
        }
        lens.push(tf.values().sum::<u32>());
        for (t, n) in tf {
            postings.entry(t).or_default().push((i as u16, n.min(u16::MAX as u32) as u16));
        }
    }
    let avg = lens.iter().map(|&l| f64::from(l)).sum::<f64>() / lens.len() as f64;

    let mut out = String::new();
    writeln!(out, "/// CC-BY-4.0 attribution that must ship with this content.").unwrap();
    writeln!(out, "pub const ATTRIBUTION: &str = {:?};", data.attribution).unwrap();
    writeln!(out, "/// Average weighted document length.").unwrap();
    writeln!(out, "pub const AVG_LEN: f64 = {avg:?};").unwrap();
    writeln!(out, "/// Every rule document, sorted by id.").unwrap();
    writeln!(out, "pub static DOCS: [Doc; {}] = [", data.documents.len()).unwrap();
    for (doc, len) in data.documents.iter().zip(&lens) {
        writeln!(
            out,
            "    Doc {{ id: {:?}, name: {:?}, category: {:?}, text: {:?}, len: {len} }},",
            doc.id, doc.name, doc.category, doc.text
        )
        .unwrap();
    }
    writeln!(out, "];").unwrap();
    writeln!(out, "/// Index terms, sorted, parallel to `POSTINGS`.").unwrap();
    writeln!(out, "pub static TERMS: [&str; {}] = [", postings.len()).unwrap();
    for t in postings.keys() {
        writeln!(out, "    {t:?},").unwrap();
    }
    writeln!(out, "];").unwrap();
    writeln!(out, "/// For each term: (document index, weighted term frequency).").unwrap();
    writeln!(out, "pub static POSTINGS: [&[(u16, u16)]; {}] = [", postings.len()).unwrap();
    for p in postings.values() {
        writeln!(out, "    &{p:?},").unwrap();
    }
    writeln!(out, "];").unwrap();
    let dest = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("srd.rs");
    std::fs::write(dest, out).unwrap();
}
