//! `toolhost new NAME [--lang rust|js|ts|python]`: a plugin project from
//! the templates in `host/templates`, embedded in the binary.
//!
//! JavaScript, TypeScript and Python projects are in [`guest`]: each a
//! folder with its own `build.sh` and the language's SDK vendored. A Rust
//! project is a standalone cargo package (its own `[workspace]`) with
//! the guest SDK vendored in `vendor/toolhost-sdk` (this binary's copy of
//! `sdk/src` and `wit/tool.wit`, also embedded), so it builds with
//! `cargo build --release --target wasm32-wasip2` in any directory, with no
//! toolhost checkout. Its template source is compiled and tested in the
//! workspace by `sdk/tests/template.rs`.

use std::fs;
use std::path::{Path, PathBuf};

mod guest;

/// The language of a new project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lang {
    /// Rust, with `toolhost-sdk` (cargo, the `wasm32-wasip2` target).
    #[default]
    Rust,
    /// JavaScript, with the SDK of `sdk-js/` (Node.js, componentize-js or -qjs).
    Js,
    /// TypeScript: as [`Lang::Js`], typechecked by `tsc` first.
    Ts,
    /// Python, with the SDK of `sdk-py/` (componentize-py).
    Python,
}

impl Lang {
    /// The command that builds the project, run in its directory.
    pub fn build_command(self) -> String {
        match self {
            Lang::Rust => format!("cargo build --release --target {TARGET}"),
            Lang::Js | Lang::Ts | Lang::Python => "./build.sh".to_string(),
        }
    }
}

/// The target the project builds for.
pub const TARGET: &str = "wasm32-wasip2";

/// The template: where each file goes and its text.
const FILES: &[(&str, &str)] = &[
    ("Cargo.toml", include_str!("../../templates/plugin/Cargo.toml.tmpl")),
    ("src/lib.rs", include_str!("../../templates/plugin/lib.rs.tmpl")),
    ("README.md", include_str!("../../templates/plugin/README.md.tmpl")),
    (".gitignore", include_str!("../../templates/plugin/gitignore.tmpl")),
    ("vendor/toolhost-sdk/Cargo.toml", include_str!("../../templates/sdk/Cargo.toml.tmpl")),
    ("vendor/toolhost-sdk/wit/tool.wit", include_str!("../../../wit/tool.wit")),
    ("vendor/toolhost-sdk/wit/deps/config/store.wit", include_str!("../../../wit/deps/config/store.wit")),
    ("vendor/toolhost-sdk/wit/deps/config/world.wit", include_str!("../../../wit/deps/config/world.wit")),
];

/// The SDK's source files, vendored as they are (but for where its
/// `lib.rs` finds the WIT).
pub const SDK_SOURCES: &[(&str, &str)] = &[
    ("lib.rs", include_str!("../../../sdk/src/lib.rs")),
    ("error.rs", include_str!("../../../sdk/src/error.rs")),
    ("log.rs", include_str!("../../../sdk/src/log.rs")),
    ("memory.rs", include_str!("../../../sdk/src/memory.rs")),
    ("output.rs", include_str!("../../../sdk/src/output.rs")),
    ("schema.rs", include_str!("../../../sdk/src/schema.rs")),
    ("tool.rs", include_str!("../../../sdk/src/tool.rs")),
    ("config.rs", include_str!("../../../sdk/src/config.rs")),
    ("secret.rs", include_str!("../../../sdk/src/secret.rs")),
    ("http.rs", include_str!("../../../sdk/src/http.rs")),
    ("http_error.rs", include_str!("../../../sdk/src/http_error.rs")),
    ("http_wasi.rs", include_str!("../../../sdk/src/http_wasi.rs")),
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

/// Where the build command of a `lang` project puts its component.
pub fn component_path_of(project: &Path, name: &str, lang: Lang) -> PathBuf {
    match lang {
        Lang::Rust => component_path(project, name),
        Lang::Js | Lang::Ts | Lang::Python => project.join(format!("{name}.wasm")),
    }
}

/// Creates the plugin project `parent/name` from the template, with the
/// SDK vendored in it, and returns its directory.
///
/// Refuses an invalid name and an existing directory that is not empty; an
/// existing empty directory is filled. On failure nothing is left behind
/// (an existing empty directory stays, empty).
pub fn new_plugin(parent: &Path, name: &str) -> Result<PathBuf, ScaffoldError> {
    new_plugin_from(parent, name, Template::Plain)
}

/// Which starting point `toolhost new` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Template {
    /// A `greet` tool: pure computation.
    #[default]
    Plain,
    /// A `fetch` tool that calls a JSON API through `wasi:http`, with its
    /// base URL from config and its key from a secret (`toolhost new --http`).
    Http,
}

/// [`new_plugin`] from `template`.
pub fn new_plugin_from(parent: &Path, name: &str, template: Template) -> Result<PathBuf, ScaffoldError> {
    new_project(parent, name, Lang::Rust, template)
}

/// Creates the `lang` project `parent/name` from `template`, with the
/// language's SDK vendored in it, and returns its directory; see
/// [`new_plugin`] for what is refused and what is left on failure.
pub fn new_project(parent: &Path, name: &str, lang: Lang, template: Template) -> Result<PathBuf, ScaffoldError> {
    validate_name(name)?;

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

    let written = match lang {
        Lang::Rust => write_files(&project, name, template),
        Lang::Js => write_all(&project, guest::js_files(name, false, template)),
        Lang::Ts => write_all(&project, guest::js_files(name, true, template)),
        Lang::Python => write_all(&project, guest::python_files(name, template)),
    };
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

/// What `--http` puts in place of, or after, the plain template's files.
const HTTP_LIB: &str = include_str!("../../templates/plugin/lib_http.rs.tmpl");
const HTTP_README: &str = include_str!("../../templates/plugin/README_http.md.tmpl");

fn write_files(project: &Path, name: &str, template: Template) -> Result<(), ScaffoldError> {
    let sdk = SDK_SOURCES.iter().map(|(file, text)| (format!("vendor/toolhost-sdk/src/{file}"), vendored(file, text)));
    let files = FILES
        .iter()
        .map(|(relative, text)| {
            let text = match (template, *relative) {
                (Template::Http, "src/lib.rs") => render(HTTP_LIB, name),
                (Template::Http, "README.md") => {
                    render(text, name)
                        .replace("greet '{\"name\":\"Ada\"}'", "fetch '{\"path\":\"/v1/items/42\"}'")
                        .replace("plugin!(Greet, YourTool)", "plugin!(Fetch, YourTool)")
                        + &render(HTTP_README, name)
                }
                _ => render(text, name),
            };
            (relative.to_string(), text)
        })
        .chain(sdk);
    write_all(project, files)
}

/// Writes `files` (relative path, text) under `project`; `build.sh` executable.
fn write_all(project: &Path, files: impl IntoIterator<Item = (String, String)>) -> Result<(), ScaffoldError> {
    for (relative, text) in files {
        let path = project.join(&relative);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(|source| ScaffoldError::Io { path: dir.to_path_buf(), source })?;
        }
        fs::write(&path, text).map_err(|source| ScaffoldError::Io { path: path.clone(), source })?;
        if relative == "build.sh" {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755))
                .map_err(|source| ScaffoldError::Io { path, source })?;
        }
    }
    Ok(())
}

/// An SDK source file as vendored: the WIT sits beside the crate.
fn vendored(file: &str, text: &str) -> String {
    if file == "lib.rs" { text.replace("path: \"../wit\"", "path: \"wit\"") } else { text.to_string() }
}

/// Fills in `{{name}}`, `{{crate_name}}` and `{{toolhost_version}}`.
fn render(template: &str, name: &str) -> String {
    template
        .replace("{{name}}", name)
        .replace("{{crate_name}}", &crate_name(name))
        .replace("{{toolhost_version}}", env!("CARGO_PKG_VERSION"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(path: PathBuf) -> String {
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn creates_a_standalone_project_with_the_sdk_vendored() {
        let tmp = tempfile::tempdir().unwrap();
        let project = new_plugin(tmp.path(), "weather-tool").unwrap();
        assert_eq!(project, tmp.path().join("weather-tool"));

        let cargo = read(project.join("Cargo.toml"));
        assert!(cargo.contains("name = \"weather-tool\"\n"), "{cargo}");
        assert!(cargo.contains("toolhost-sdk = { path = \"vendor/toolhost-sdk\" }"), "{cargo}");
        assert!(!cargo.contains("path = \"/"), "no absolute path: {cargo}");
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
        assert!(readme.contains("--allow-unsigned") && readme.contains("toolhost sign"), "{readme}");
        assert_eq!(read(project.join(".gitignore")), "/target\n");

        let sdk = project.join("vendor/toolhost-sdk");
        let sdk_lib = read(sdk.join("src/lib.rs"));
        assert!(sdk_lib.contains("path: \"wit\"") && !sdk_lib.contains("../wit"), "the WIT is found beside the crate");
        assert_eq!(read(sdk.join("wit/tool.wit")), include_str!("../../../wit/tool.wit"));
        let sdk_cargo = read(sdk.join("Cargo.toml"));
        assert!(!sdk_cargo.contains(".workspace") && !sdk_cargo.contains("[lints]"), "standalone: {sdk_cargo}");

        for (relative, _) in FILES {
            let text = read(project.join(relative));
            assert!(!text.contains("{{"), "{relative} has an unfilled placeholder: {text}");
        }
        assert_eq!(
            component_path(&project, "weather-tool"),
            project.join("target/wasm32-wasip2/release/weather_tool.wasm")
        );
    }

    /// The vendored copy is the whole SDK: every source file, and the same
    /// dependencies as `sdk/Cargo.toml` (whose versions come from the workspace).
    #[test]
    fn the_vendored_sdk_is_the_whole_sdk() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk/src");
        let mut on_disk: Vec<String> =
            fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        on_disk.sort();
        let mut embedded: Vec<String> = SDK_SOURCES.iter().map(|(f, _)| f.to_string()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk, "add new SDK files to SDK_SOURCES");

        let deps = |toml: &str| -> Vec<String> {
            let section = toml.split("[dependencies]").nth(1).unwrap_or("");
            let section = section.split("\n[").next().unwrap_or("");
            let mut names: Vec<String> = section
                .lines()
                .filter_map(|l| l.split(['=', '.']).next())
                .map(str::trim)
                .filter(|n| !n.is_empty() && !n.starts_with('#'))
                .map(str::to_string)
                .collect();
            names.sort();
            names
        };
        let repo = read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk/Cargo.toml"));
        let template = FILES.iter().find(|(f, _)| *f == "vendor/toolhost-sdk/Cargo.toml").unwrap().1;
        assert_eq!(deps(template), deps(&repo));
        assert!(SDK_SOURCES[0].1.contains("path: \"../wit\""), "the SDK's lib.rs names its WIT as vendored() expects");
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
            let e = new_plugin(tmp.path(), name).expect_err(name);
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
        let e = new_plugin(tmp.path(), "taken").unwrap_err();
        assert!(matches!(e, ScaffoldError::Exists { .. }), "{e}");
        assert!(e.to_string().contains("not an empty directory"), "{e}");
        assert_eq!(read(tmp.path().join("taken/notes.txt")), "mine");

        fs::write(tmp.path().join("afile"), "x").unwrap();
        assert!(matches!(new_plugin(tmp.path(), "afile"), Err(ScaffoldError::Exists { .. })));

        fs::create_dir(tmp.path().join("empty")).unwrap();
        let project = new_plugin(tmp.path(), "empty").unwrap();
        assert!(project.join("src/lib.rs").is_file());

        // A second run on the same name is refused.
        assert!(matches!(new_plugin(tmp.path(), "empty"), Err(ScaffoldError::Exists { .. })));
    }

    /// Issue #52, item 10: the README names the tool its `src/lib.rs`
    /// declares, in either template.
    #[test]
    fn the_readme_names_the_templates_own_tool() {
        let tmp = tempfile::tempdir().unwrap();
        for (template, tool) in [(Template::Plain, "Greet"), (Template::Http, "Fetch")] {
            let name = format!("t{}", tool.to_lowercase());
            let project = new_plugin_from(tmp.path(), &name, template).unwrap();
            let lib = read(project.join("src/lib.rs"));
            assert!(lib.contains(&format!("toolhost_sdk::plugin!({tool});")), "{lib}");
            let readme = read(project.join("README.md"));
            assert!(readme.contains(&format!("toolhost_sdk::plugin!({tool}, YourTool)")), "{template:?}: {readme}");
            let other = if tool == "Greet" { "Fetch" } else { "Greet" };
            assert!(!readme.contains(&format!("plugin!({other}")), "{template:?}: {readme}");
        }
    }

    #[test]
    fn creates_missing_parents() {
        let tmp = tempfile::tempdir().unwrap();
        let project = new_plugin(&tmp.path().join("a/b"), "deep").unwrap();
        assert!(project.join("Cargo.toml").is_file());
    }
}
