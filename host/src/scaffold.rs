//! `toolhost new NAME`: a plugin project from the template in
//! `host/templates/plugin`, embedded in the binary.
//!
//! The project is a standalone cargo package (its own `[workspace]`) that
//! depends on this repository's `sdk/` crate (`toolhost-sdk`) by path and
//! builds with `cargo build --release --target wasm32-wasip2`. Its template
//! source is compiled and tested in the workspace by `sdk/tests/template.rs`.

use std::fs;
use std::path::{Path, PathBuf};

/// The SDK this binary was built with: `<repository>/sdk`.
pub const DEFAULT_SDK_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk");

/// The target the project builds for.
pub const TARGET: &str = "wasm32-wasip2";

/// The template: where each file goes, its text, and whether it is TOML
/// (where `{{sdk_path}}` must be escaped as a string).
const FILES: &[(&str, &str, bool)] = &[
    ("Cargo.toml", include_str!("../templates/plugin/Cargo.toml.tmpl"), true),
    ("src/lib.rs", include_str!("../templates/plugin/lib.rs.tmpl"), false),
    ("README.md", include_str!("../templates/plugin/README.md.tmpl"), false),
    (".gitignore", include_str!("../templates/plugin/gitignore.tmpl"), false),
];

/// Longest plugin name accepted.
const MAX_NAME: usize = 64;

/// Words cargo refuses as package names (Rust keywords, the standard crates)
/// and the SDK's own name, separated by spaces, compared in `crate_name` form.
const RESERVED: &str = concat!(
    "abstract alloc as async await become box break const continue core crate do dyn else enum extern ",
    "false final fn for gen if impl in let loop macro match mod move mut override priv proc_macro pub ref ",
    "return self static std struct super test toolhost_sdk trait true try type typeof unsafe unsized use ",
    "virtual where while yield",
);

/// Why a project could not be created.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// The name is not a valid crate name.
    #[error("invalid plugin name {name:?}: {reason}")]
    InvalidName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The project directory exists and is not empty (or is not a directory).
    #[error("{} already exists and is not an empty directory; pick another name or remove it", path.display())]
    Exists {
        /// The project directory.
        path: PathBuf,
    },
    /// The SDK directory is missing or unusable.
    #[error(
        "the toolhost SDK is not usable at {}: {reason}; pass the sdk/ directory of a toolhost checkout",
        path.display()
    )]
    Sdk {
        /// The SDK directory tried.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Creating a directory or writing a file failed.
    #[error("could not write {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// The crate name cargo derives from a package name: `-` becomes `_`. The
/// component is `target/wasm32-wasip2/release/<crate_name>.wasm`.
pub fn crate_name(name: &str) -> String {
    name.replace('-', "_")
}

/// Checks a plugin name against cargo's rules for new packages: 1 to 64
/// lowercase ASCII letters, digits, `-` or `_`, starting with a letter, not a
/// Rust keyword or a reserved crate name.
pub fn validate_name(name: &str) -> Result<(), ScaffoldError> {
    let invalid = |reason: &str| Err(ScaffoldError::InvalidName { name: name.into(), reason: reason.into() });
    if name.is_empty() {
        return invalid("it is empty");
    }
    if name.len() > MAX_NAME {
        return invalid("it is longer than 64 characters");
    }
    if !name.as_bytes()[0].is_ascii_lowercase() {
        return invalid("it must start with a lowercase letter (a-z)");
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '_')) {
        return invalid(&format!("{c:?} is not allowed; use lowercase letters, digits, '-' and '_'"));
    }
    if RESERVED.split(' ').any(|word| word == crate_name(name)) {
        return invalid("it is a Rust keyword or a reserved crate name");
    }
    Ok(())
}

/// Where `cargo build --release --target wasm32-wasip2` puts the component of
/// the project `name` created in `project`.
pub fn component_path(project: &Path, name: &str) -> PathBuf {
    project.join("target").join(TARGET).join("release").join(format!("{}.wasm", crate_name(name)))
}

/// Creates the plugin project `parent/name` from the template and returns its
/// directory. `sdk` is the `toolhost-sdk` crate's directory; `None` means the
/// one this binary was built from ([`DEFAULT_SDK_DIR`]). The project refers to
/// it by its canonical absolute path.
///
/// Refuses an invalid name and an existing directory that is not empty; an
/// existing empty directory is filled. On failure nothing is left behind
/// (an existing empty directory stays, empty).
pub fn new_plugin(parent: &Path, name: &str, sdk: Option<&Path>) -> Result<PathBuf, ScaffoldError> {
    validate_name(name)?;
    let sdk_path = sdk_dir(sdk.unwrap_or(Path::new(DEFAULT_SDK_DIR)))?;

    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ScaffoldError::Io { path, source }
    };
    fs::create_dir_all(parent).map_err(io(parent))?;
    let project = parent.join(name);
    let existed = match fs::read_dir(&project) {
        Ok(mut entries) => match entries.next() {
            None => true,
            Some(_) => return Err(ScaffoldError::Exists { path: project }),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => return Err(ScaffoldError::Exists { path: project }),
        Err(e) => return Err(io(&project)(e)),
    };
    if !existed {
        // create_dir, not create_dir_all: fails if someone else just made it.
        fs::create_dir(&project).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => ScaffoldError::Exists { path: project.clone() },
            _ => io(&project)(e),
        })?;
    }

    let written = write_files(&project, name, &sdk_path);
    if let Err(e) = written {
        // Leave the directory as it was: absent, or empty.
        if existed {
            if let Ok(entries) = fs::read_dir(&project) {
                for entry in entries.flatten() {
                    let path = entry.path();
                    let _ = if path.is_dir() { fs::remove_dir_all(&path) } else { fs::remove_file(&path) };
                }
            }
        } else {
            let _ = fs::remove_dir_all(&project);
        }
        return Err(e);
    }
    Ok(project)
}

/// The SDK directory, canonical and checked, as UTF-8 text.
fn sdk_dir(sdk: &Path) -> Result<String, ScaffoldError> {
    let fail = |reason: String| ScaffoldError::Sdk { path: sdk.to_path_buf(), reason };
    let canonical = sdk.canonicalize().map_err(|e| fail(e.to_string()))?;
    if !canonical.join("Cargo.toml").is_file() {
        return Err(fail("it has no Cargo.toml".into()));
    }
    canonical.into_os_string().into_string().map_err(|_| fail("its path is not valid UTF-8".into()))
}

fn write_files(project: &Path, name: &str, sdk_path: &str) -> Result<(), ScaffoldError> {
    for (relative, template, toml) in FILES {
        let path = project.join(relative);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(|source| ScaffoldError::Io { path: dir.to_path_buf(), source })?;
        }
        let sdk = if *toml { toml_escape(sdk_path) } else { sdk_path.to_string() };
        let text = render(template, name, &sdk);
        fs::write(&path, text).map_err(|source| ScaffoldError::Io { path, source })?;
    }
    Ok(())
}

/// Fills in `{{name}}`, `{{crate_name}}` and `{{sdk_path}}`.
fn render(template: &str, name: &str, sdk_path: &str) -> String {
    template.replace("{{name}}", name).replace("{{crate_name}}", &crate_name(name)).replace("{{sdk_path}}", sdk_path)
}

/// Escapes text for the inside of a TOML basic string (`"..."`).
fn toml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_sdk() -> PathBuf {
        Path::new(DEFAULT_SDK_DIR).canonicalize().expect("the repository's sdk/ directory")
    }

    fn read(path: PathBuf) -> String {
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn creates_a_standalone_project_on_the_repository_sdk() {
        let tmp = tempfile::tempdir().unwrap();
        let project = new_plugin(tmp.path(), "weather-tool", None).unwrap();
        assert_eq!(project, tmp.path().join("weather-tool"));

        let cargo = read(project.join("Cargo.toml"));
        assert!(cargo.contains("name = \"weather-tool\"\n"), "{cargo}");
        let sdk = repo_sdk();
        assert!(cargo.contains(&format!("toolhost-sdk = {{ path = \"{}\" }}", sdk.display())), "{cargo}");
        assert!(sdk.is_absolute() && sdk.join("Cargo.toml").is_file());
        assert!(cargo.contains("\n[workspace]\n"), "standalone: {cargo}");
        assert!(cargo.contains("crate-type = [\"cdylib\"]"), "{cargo}");
        for line in ["opt-level = \"s\"", "lto = true", "strip = true"] {
            assert!(cargo.contains(line), "{line}: {cargo}");
        }

        let lib = read(project.join("src/lib.rs"));
        assert!(lib.starts_with("//! The `weather-tool` toolhost plugin."), "{lib}");
        assert!(lib.contains("toolhost_sdk::plugin!(Greet);"), "{lib}");
        let readme = read(project.join("README.md"));
        assert!(readme.contains("target/wasm32-wasip2/release/weather_tool.wasm"), "{readme}");
        assert!(readme.contains("cargo build --release --target wasm32-wasip2"), "{readme}");
        assert_eq!(read(project.join(".gitignore")), "/target\n");

        for (relative, _, _) in FILES {
            let text = read(project.join(relative));
            assert!(!text.contains("{{"), "{relative} has an unfilled placeholder: {text}");
        }
        assert_eq!(
            component_path(&project, "weather-tool"),
            project.join("target/wasm32-wasip2/release/weather_tool.wasm")
        );
    }

    #[test]
    fn refuses_invalid_names() {
        let tmp = tempfile::tempdir().unwrap();
        for (name, needle) in [
            ("", "empty"),
            ("Demo", "lowercase letter"),
            ("1tool", "lowercase letter"),
            ("-tool", "lowercase letter"),
            ("my tool", "' '"),
            ("my.tool", "'.'"),
            ("tool/x", "'/'"),
            ("ünï", "lowercase letter"),
            ("fn", "keyword"),
            ("self", "keyword"),
            ("std", "reserved"),
            ("toolhost-sdk", "reserved"),
            (&"a".repeat(65), "longer than 64"),
        ] {
            let e = new_plugin(tmp.path(), name, None).expect_err(name);
            assert!(matches!(e, ScaffoldError::InvalidName { .. }), "{name}: {e}");
            assert!(e.to_string().contains(needle), "{name:?}: {e}");
        }
        assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 0, "nothing written");
        for name in ["a", "demo", "my-tool_2", &"a".repeat(64)] {
            validate_name(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn refuses_a_non_empty_directory_and_fills_an_empty_one() {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir(tmp.path().join("taken")).unwrap();
        fs::write(tmp.path().join("taken/notes.txt"), "mine").unwrap();
        let e = new_plugin(tmp.path(), "taken", None).unwrap_err();
        assert!(matches!(e, ScaffoldError::Exists { .. }), "{e}");
        assert!(e.to_string().contains("not an empty directory"), "{e}");
        assert_eq!(read(tmp.path().join("taken/notes.txt")), "mine");

        fs::write(tmp.path().join("afile"), "x").unwrap();
        assert!(matches!(new_plugin(tmp.path(), "afile", None), Err(ScaffoldError::Exists { .. })));

        fs::create_dir(tmp.path().join("empty")).unwrap();
        let project = new_plugin(tmp.path(), "empty", None).unwrap();
        assert!(project.join("src/lib.rs").is_file());

        // A second run on the same name is refused.
        assert!(matches!(new_plugin(tmp.path(), "empty", None), Err(ScaffoldError::Exists { .. })));
    }

    #[test]
    fn creates_missing_parents() {
        let tmp = tempfile::tempdir().unwrap();
        let project = new_plugin(&tmp.path().join("a/b"), "deep", None).unwrap();
        assert!(project.join("Cargo.toml").is_file());
    }

    #[test]
    fn an_explicit_sdk_path_is_canonical_and_escaped() {
        let tmp = tempfile::tempdir().unwrap();
        let sdk = tmp.path().join("odd \"sdk\" \\ dir");
        fs::create_dir(&sdk).unwrap();
        fs::write(sdk.join("Cargo.toml"), "").unwrap();
        let relative = sdk.join("..").join(sdk.file_name().unwrap());
        let project = new_plugin(&tmp.path().join("out"), "demo", Some(&relative)).unwrap();
        let cargo = read(project.join("Cargo.toml"));
        let canonical = sdk.canonicalize().unwrap().display().to_string();
        let escaped = canonical.replace('\\', "\\\\").replace('"', "\\\"");
        assert!(cargo.contains(&format!("toolhost-sdk = {{ path = \"{escaped}\" }}")), "{cargo}");
        assert!(read(project.join("README.md")).contains(&canonical));
    }

    #[test]
    fn a_missing_sdk_is_refused_before_anything_is_written() {
        let tmp = tempfile::tempdir().unwrap();
        let e = new_plugin(tmp.path(), "demo", Some(&tmp.path().join("nowhere"))).unwrap_err();
        assert!(matches!(e, ScaffoldError::Sdk { .. }), "{e}");
        assert!(e.to_string().contains("nowhere"), "{e}");
        let e = new_plugin(tmp.path(), "demo", Some(tmp.path())).unwrap_err();
        assert!(e.to_string().contains("no Cargo.toml"), "{e}");
        assert!(!tmp.path().join("demo").exists());
    }

    #[test]
    fn toml_escaping() {
        assert_eq!(toml_escape(r#"/a "b" \c"#), r#"/a \"b\" \\c"#);
        assert_eq!(toml_escape("x\ny"), "x\\u000Ay");
    }
}
