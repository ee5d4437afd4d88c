use super::*;

fn entry(name: &str, description: &str, tools: &[(&str, &str)]) -> Listed {
    Listed {
        catalogue: "oci://127.0.0.1:5000/market/catalogue".into(),
        entry: Entry {
            name: name.into(),
            version: "1.0.0".into(),
            description: description.into(),
            publisher: Publisher { key_id: "ed25519:0123456789abcdef".into(), author: "alice".into() },
            tools: tools
                .iter()
                .map(|(n, d)| EntryTool {
                    name: n.to_string(),
                    description: d.to_string(),
                    tier: "FAST".into(),
                    estimated_ms: 5,
                    max_ms: 50,
                })
                .collect(),
            asks: EntryAsks::default(),
            badge: BTreeMap::new(),
            reference: format!("oci://127.0.0.1:5000/market/{name}:1.0.0"),
            digest: format!("sha256:{}", "a".repeat(64)),
            published: "2026-11-29T20:00:00Z".into(),
        },
    }
}

fn names(hits: &[Hit]) -> Vec<&str> {
    hits.iter().map(|h| h.listed.entry.name.as_str()).collect()
}

#[test]
fn a_word_in_a_tool_description_finds_its_entry_above_weaker_matches() {
    let entries = vec![
        entry("weather", "Forecasts for the table", &[("forecast", "Tomorrow's weather at a place")]),
        entry("initiative", "Combat order", &[("order", "Sorts the combatants by their initiative roll")]),
        entry("dice", "Dice for every game", &[("roll", "Rolls dice in standard notation: 2d6+3")]),
        entry("loot", "Treasure tables", &[("hoard", "A hoard; the dice decide")]),
    ];
    let hits = search(entries.clone(), "notation");
    assert_eq!(names(&hits), ["dice"], "only the entry whose tool description says it");
    // "dice": the name of one, a word of another's description, a word of a
    // third's tool description: in that order.
    let hits = search(entries.clone(), "dice");
    assert_eq!(names(&hits), ["dice", "loot"]);
    assert!(hits[0].score > hits[1].score);
    // A prefix counts, below a whole word.
    let hits = search(entries.clone(), "roll");
    assert_eq!(names(&hits), ["dice", "initiative"], "{hits:?}");
    assert!(search(entries.clone(), "  ").is_empty());
    assert!(search(entries, "necromancy").is_empty());
}

#[test]
fn a_rare_word_outweighs_a_common_one() {
    let entries = vec![
        entry("a", "tool for the game", &[]),
        entry("b", "tool for the game", &[]),
        entry("c", "tool for the game with spells", &[]),
    ];
    let hits = search(entries, "game spells");
    assert_eq!(names(&hits)[0], "c");
}

#[test]
fn every_lie_of_an_entry_is_named() {
    let l = entry("weather", "", &[]);
    let mut e = l.entry;
    e.asks.capabilities = vec!["http".into()];
    e.asks.http_hosts = vec!["https://api.example.test".into()];
    let manifest = toolhost_admission::package::Manifest {
        name: "weather".into(),
        version: "1.0.0".into(),
        author: "alice".into(),
        description: String::new(),
        capabilities: vec!["http".into()],
        sha256: "00".into(),
        http_hosts: vec!["https://api.example.test".into(), "https://evil.example.test".into()],
        secrets: vec!["api_key".into()],
        memory_mib: None,
        signed_at: None,
    };
    let lies = e.check_against(&e.digest.clone(), Some("ed25519:0123456789abcdef"), Some(&manifest)).unwrap_err();
    assert_eq!(
        lies,
        [
            "its asks: the signed component also asks for HTTP to https://evil.example.test; secrets api_key, which the entry leaves out"
        ]
    );
    let other = format!("sha256:{}", "b".repeat(64));
    let lies = e.check_against(&other, Some("ed25519:ffffffffffffffff"), Some(&manifest)).unwrap_err();
    assert!(lies[0].starts_with("its digest: the entry says sha256:aaaa"), "{lies:?}");
    assert!(lies[1].contains("the component is signed by ed25519:ffffffffffffffff"), "{lies:?}");
    e.asks.http_hosts.push("https://evil.example.test".into());
    e.asks.secrets.push("api_key".into());
    assert_eq!(e.check_against(&e.digest.clone(), Some("ed25519:0123456789abcdef"), Some(&manifest)), Ok(()));
    assert!(e.check_against(&e.digest.clone(), None, None).unwrap_err()[0].contains("not signed"));
}

#[test]
fn tags_are_valid_and_differ_by_content() {
    let mut e = entry("weather", "", &[]).entry;
    e.version = "1.0.0+build.7".into();
    let t = e.tag();
    assert!(valid_tag(&t), "{t}");
    assert!(t.starts_with("weather_1.0.0_build.7_"), "{t}");
    e.description = "changed".into();
    assert_ne!(e.tag(), t);
    assert!(!valid_tag(".hidden") && !valid_tag("a/b") && !valid_tag(&"a".repeat(129)));
}

#[test]
fn entries_out_of_shape_are_refused() {
    let good = entry("weather", "", &[("forecast", "Tomorrow's weather")]).entry;
    assert_eq!(good.validate(), Ok(()));
    let mut e = good.clone();
    e.name = "../etc".into();
    assert!(e.validate().unwrap_err().0.contains("not a valid plugin name"));
    let mut e = good.clone();
    e.digest = "sha256:nope".into();
    assert!(e.validate().is_err());
    let mut e = good.clone();
    e.reference = format!("{}@sha256:{}", e.reference.split(':').take(3).collect::<Vec<_>>().join(":"), "a".repeat(64));
    assert!(e.validate().is_err());
    let mut e = good.clone();
    e.description = "x".repeat(2001);
    assert!(e.validate().unwrap_err().0.contains("description"));
    // Nothing a catalogue says reaches a terminal as an escape sequence.
    let mut e = good.clone();
    e.tools[0].description = "fine\u{1b}]0;pwned\u{7}".into();
    assert_eq!(e.validate().unwrap_err().0, "a tool's description holds a control character");
    let mut e = good;
    e.publisher.author = "alice\r\nroot".into();
    assert!(e.validate().unwrap_err().0.contains("control character"));
}

#[test]
fn versions_order_by_precedence() {
    use std::cmp::Ordering::*;
    assert_eq!(version_order("1.10.0", "1.9.0"), Greater);
    assert_eq!(version_order("1.0.0-rc.1", "1.0.0"), Less);
    assert_eq!(version_order("2.0.0", "banana"), Greater);
}

#[test]
fn a_warm_search_reads_the_index_and_ranks_as_the_full_search_does() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::oci::OciStore::new(&Default::default(), Default::default(), None, 1 << 20);
    let cats = Catalogues::new(&store, Some(dir.path()), 3600, 1000);
    let catalogue = "oci://127.0.0.1:5000/market/catalogue";
    let listed = vec![
        entry("weather", "Forecasts for the table", &[("forecast", "Tomorrow's weather at a place")]),
        entry("dice", "Dice for every game", &[("roll", "Rolls dice in standard notation: 2d6+3")]),
        entry("loot", "Treasure tables", &[("hoard", "A hoard; the dice decide")]),
    ];
    let mut old_dice = entry("dice", "Dice, the first", &[("roll", "Rolls dice")]);
    old_dice.entry.version = "0.9.0".into();
    let mut c = Catalogue { catalogue: catalogue.into(), synced: now_secs(), ..Catalogue::default() };
    for (i, l) in listed.iter().chain([&old_dice]).enumerate() {
        c.entries.insert(format!("t{i}"), l.entry.clone());
    }
    cats.save(&c).unwrap();
    // The copy is gone: only the index can answer.
    std::fs::remove_file(cats.cache_file(catalogue).unwrap()).unwrap();
    let (hits, warnings) = cats.search(&[catalogue.to_string()], false, "dice", 10);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(names(&hits), names(&search(listed, "dice")));
    assert_eq!(hits[0].listed.entry.version, "1.0.0", "the newest version of dice");
}
