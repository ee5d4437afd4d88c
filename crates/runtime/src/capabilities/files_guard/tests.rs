use super::*;
use crate::capabilities::DirGrantConfig;

#[test]
fn quota_keys_default_and_parse_as_integers() {
    let d: DirGrantConfig = serde_json::from_str(r#"{"dir": "x"}"#).unwrap();
    assert_eq!((d.max_bytes, d.max_files, d.mount.as_str()), (DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES, "/"));
    assert_eq!(d, DirGrantConfig { dir: "x".into(), ..Default::default() });
    let d: DirGrantConfig = serde_json::from_str(r#"{"dir": "x", "max_bytes": 5, "max_files": 2}"#).unwrap();
    assert_eq!((d.max_bytes, d.max_files), (5, 2));
    assert!(serde_json::from_str::<DirGrantConfig>(r#"{"dir": "x", "max_bytes": "1MiB"}"#).is_err());
    assert!(serde_json::from_str::<DirGrantConfig>(r#"{"dir": "x", "max_files": -1}"#).is_err());
}

#[test]
fn a_scan_counts_files_and_entries_follows_no_symlink_and_stops_past_a_limit() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join("sub")).unwrap();
    std::fs::write(t.path().join("sub/a"), [0u8; 100]).unwrap();
    std::fs::write(t.path().join("b"), [0u8; 20]).unwrap();
    std::os::unix::fs::symlink("/usr", t.path().join("link")).unwrap();
    assert_eq!(scan(t.path(), 1000, 1000), Some((120, 4)));
    assert_eq!(scan(t.path(), 119, 1000), None, "past max_bytes");
    assert_eq!(scan(t.path(), 1000, 3), None, "past max_files");
    assert_eq!(scan(&t.path().join("missing"), 1000, 1000), None);
}
