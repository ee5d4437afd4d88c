//! The `fileio` plugin: read, write and list files inside the directory the
//! operator granted (a WASI preopen mounted at `/`).
//!
//! The sandbox is enforced twice: this plugin refuses absolute paths, `..`,
//! NUL bytes and absurd lengths with a clear message, and the host's WASI
//! preopen (cap-std) makes anything outside the granted directory, symlinks
//! included, unreachable whatever the plugin does. Writes are atomic: a
//! temporary file in the same directory, renamed over the target.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::{ErrorKind, Read, Write};
use std::path::{Component, Path, PathBuf};
use toolhost_sdk::{ToolError, TypedTool};

/// Largest file `read_file` returns.
pub const MAX_READ: u64 = 1 << 20;
/// Largest content `write_file` accepts.
pub const MAX_WRITE: usize = 1 << 20;
/// Longest path accepted, in bytes.
pub const MAX_PATH: usize = 1024;
/// Where the granted directory is mounted.
const ROOT: &str = "/";

/// Checks a sandbox-relative path and returns it under the mount point.
pub fn sandbox_path(p: &str) -> Result<PathBuf, String> {
    if p.is_empty() {
        return Err("path is empty".into());
    }
    if p.len() > MAX_PATH {
        return Err(format!("path is {} bytes long; the limit is {MAX_PATH}", p.len()));
    }
    if p.contains('\0') {
        return Err("path contains a NUL byte".into());
    }
    let path = Path::new(p);
    let mut out = PathBuf::from(ROOT);
    for c in path.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err(format!("path {p:?} leaves the sandbox ('..' is not allowed)")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!("path {p:?} is absolute; give a path relative to the sandbox"));
            }
        }
    }
    if out == Path::new(ROOT) {
        return Err(format!("path {p:?} names the sandbox itself, not a file"));
    }
    Ok(out)
}

fn io_error(op: &str, p: &str, e: std::io::Error) -> ToolError {
    match e.kind() {
        ErrorKind::NotFound => ToolError::NotFound(format!("{p}: no such file or directory")),
        ErrorKind::NotADirectory => ToolError::InvalidInput(format!(
            "{op} {p}: a component of the path is not a directory in the sandbox (symlinks that leave it are not followed)"
        )),
        ErrorKind::PermissionDenied => ToolError::Forbidden(format!(
            "{op} {p}: not permitted (outside the granted directory, through a symlink that leaves it, or a read-only grant)"
        )),
        _ => ToolError::Failed(format!("{op} {p}: {e}")),
    }
}

fn no_grant() -> ToolError {
    ToolError::Forbidden(
        "no directory was granted to the fileio plugin; the operator grants one in toolhost.yaml (plugins.grants.fileio.files)"
            .into(),
    )
}

fn check_granted() -> Result<(), ToolError> {
    match std::fs::metadata(ROOT) {
        Ok(_) => Ok(()),
        Err(_) => Err(no_grant()),
    }
}

// The arguments of `read_file`. No doc comment here: it would describe the
// whole arguments object in the schema.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PathArgs {
    /// Path relative to the sandbox, e.g. notes/session-3.md. No absolute paths, no '..'.
    #[schemars(length(min = 1, max = 1024))]
    path: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    /// Path relative to the sandbox, e.g. notes/session-3.md. No absolute paths, no '..'.
    #[schemars(length(min = 1, max = 1024))]
    path: String,
    /// The text to write (at most 1 MiB).
    content: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DirArgs {
    /// Directory relative to the sandbox; "." for the root.
    #[schemars(length(max = 1024))]
    path: String,
}

/// What `read_file` returns.
#[derive(Serialize, JsonSchema)]
struct ReadResult {
    /// The path, as given.
    path: String,
    /// The file's text.
    content: String,
    /// Its length in bytes.
    bytes: usize,
}

/// What `write_file` returns.
#[derive(Serialize, JsonSchema)]
struct WriteResult {
    /// The path, as given.
    path: String,
    /// Bytes written.
    bytes: usize,
}

/// What `list_dir` returns.
#[derive(Serialize, JsonSchema)]
struct ListResult {
    /// The directory, as given.
    path: String,
    /// Its entries, sorted by name.
    entries: Vec<Entry>,
}

/// One directory entry.
#[derive(Serialize, JsonSchema)]
struct Entry {
    /// The entry's name.
    name: String,
    /// `file`, `dir` or `other`.
    #[schemars(extend("enum" = ["file", "dir", "other"]))]
    kind: &'static str,
    /// Size in bytes (0 for anything but a file).
    bytes: u64,
}

/// `read_file`.
struct ReadFile;

impl TypedTool for ReadFile {
    type Args = PathArgs;
    type Output = ReadResult;
    const NAME: &'static str = "read_file";
    const DESCRIPTION: &'static str = "Read a text file from the sandbox. Files larger than 1 MiB are rejected.";
    const ESTIMATED_MS: u32 = 20;
    const MAX_MS: u32 = 100;
    const IDEMPOTENT: bool = true;

    fn call(args: PathArgs) -> Result<ReadResult, ToolError> {
        let path = sandbox_path(&args.path).map_err(ToolError::InvalidInput)?;
        check_granted()?;
        let file = std::fs::File::open(&path).map_err(|e| io_error("read", &args.path, e))?;
        let meta = file.metadata().map_err(|e| io_error("read", &args.path, e))?;
        if meta.is_dir() {
            return Err(ToolError::InvalidInput(format!("{} is a directory; use list_dir", args.path)));
        }
        if meta.len() > MAX_READ {
            return Err(ToolError::InvalidInput(format!(
                "{} is {} bytes; files over {MAX_READ} bytes (1 MiB) are not read",
                args.path,
                meta.len()
            )));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.take(MAX_READ + 1).read_to_end(&mut bytes).map_err(|e| io_error("read", &args.path, e))?;
        let content = String::from_utf8(bytes)
            .map_err(|_| ToolError::InvalidInput(format!("{} is not UTF-8 text", args.path)))?;
        Ok(ReadResult { path: args.path, bytes: content.len(), content })
    }
}

/// `write_file`.
struct WriteFile;

impl TypedTool for WriteFile {
    type Args = WriteArgs;
    type Output = WriteResult;
    const NAME: &'static str = "write_file";
    const DESCRIPTION: &'static str = "Write text content to a file within the sandbox, replacing it atomically. Creates parent directories automatically.";
    const ESTIMATED_MS: u32 = 20;
    const MAX_MS: u32 = 100;

    fn call(args: WriteArgs) -> Result<WriteResult, ToolError> {
        let path = sandbox_path(&args.path).map_err(ToolError::InvalidInput)?;
        if args.content.len() > MAX_WRITE {
            return Err(ToolError::InvalidInput(format!(
                "content is {} bytes; the limit is {MAX_WRITE}",
                args.content.len()
            )));
        }
        check_granted()?;
        let parent = path.parent().unwrap_or(Path::new(ROOT));
        std::fs::create_dir_all(parent).map_err(|e| match e.kind() {
            // The parent exists but is not a directory we may enter: a file, or a
            // symlink leading out of the sandbox.
            ErrorKind::AlreadyExists => ToolError::InvalidInput(format!(
                "write {}: a component of the path is not a directory in the sandbox (symlinks that leave it are not followed)",
                args.path
            )),
            _ => io_error("create directory for", &args.path, e),
        })?;
        // Atomic replace: write a temporary sibling, flush it, rename it over
        // the target. A crash leaves the old file or the new one, never a mix.
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
        let tmp = parent.join(format!(".{name}.tmp-{:016x}", random_suffix()));
        let result = (|| {
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            f.write_all(args.content.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_error("write", &args.path, e));
        }
        Ok(WriteResult { bytes: args.content.len(), path: args.path })
    }
}

fn random_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from WASI random.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u8(0);
    h.finish()
}

/// `list_dir`.
struct ListDir;

impl TypedTool for ListDir {
    type Args = DirArgs;
    type Output = ListResult;
    const NAME: &'static str = "list_dir";
    const DESCRIPTION: &'static str = "List a directory in the sandbox (\".\" for its root): names, kinds and sizes.";
    const ESTIMATED_MS: u32 = 20;
    const MAX_MS: u32 = 100;
    const IDEMPOTENT: bool = true;
    const PROBE_ARGUMENTS: Option<&'static str> = Some(r#"{"path":"."}"#);

    fn call(args: DirArgs) -> Result<ListResult, ToolError> {
        let path = if matches!(args.path.as_str(), "" | "." | "./") {
            PathBuf::from(ROOT)
        } else {
            sandbox_path(&args.path).map_err(ToolError::InvalidInput)?
        };
        check_granted()?;
        let mut entries = Vec::new();
        for e in std::fs::read_dir(&path).map_err(|e| io_error("list", &args.path, e))? {
            let e = e.map_err(|e| io_error("list", &args.path, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name.contains(".tmp-") {
                continue; // an interrupted atomic write
            }
            let meta = e.metadata().map_err(|err| io_error("list", &name, err))?;
            let kind = if meta.is_dir() {
                "dir"
            } else if meta.is_file() {
                "file"
            } else {
                "other"
            };
            entries.push(Entry { name, kind, bytes: if meta.is_file() { meta.len() } else { 0 } });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(ListResult { path: args.path, entries })
    }
}

toolhost_sdk::plugin!(WriteFile, ReadFile, ListDir);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_land_under_the_mount() {
        assert_eq!(sandbox_path("notes/a.md").unwrap(), PathBuf::from("/notes/a.md"));
        assert_eq!(sandbox_path("./a.md").unwrap(), PathBuf::from("/a.md"));
    }

    #[test]
    fn escapes_are_refused_with_a_reason() {
        for (p, needle) in [
            ("../etc/passwd", "'..' is not allowed"),
            ("a/../../b", "'..' is not allowed"),
            ("/etc/passwd", "absolute"),
            ("a\0b", "NUL"),
            ("", "empty"),
            (".", "sandbox itself"),
        ] {
            let e = sandbox_path(p).unwrap_err();
            assert!(e.contains(needle), "{p:?}: {e}");
        }
        assert!(sandbox_path(&"a/".repeat(600)).unwrap_err().contains("limit"));
    }

    #[test]
    fn tools_refuse_escapes_before_touching_files() {
        let err = toolhost_sdk::invoke::<ReadFile>(r#"{"path":"../etc/passwd"}"#).unwrap_err();
        assert!(matches!(&err, ToolError::InvalidInput(m) if m.contains("'..' is not allowed")), "{err}");
        let err = toolhost_sdk::invoke::<WriteFile>(r#"{"path":"/etc/x","content":""}"#).unwrap_err();
        assert!(matches!(&err, ToolError::InvalidInput(m) if m.contains("absolute")), "{err}");
        let err = toolhost_sdk::invoke::<ListDir>(r#"{"path":"a/../.."}"#).unwrap_err();
        assert!(matches!(&err, ToolError::InvalidInput(m) if m.contains("'..' is not allowed")), "{err}");
    }

    #[test]
    fn schemas_keep_their_constraints() {
        use serde_json::{Value, json};
        let schema = |info: toolhost_sdk::ToolInfo| serde_json::from_str::<Value>(&info.input_schema).unwrap();
        let write = schema(toolhost_sdk::describe::<WriteFile>());
        assert_eq!(write["required"], json!(["path", "content"]), "{write}");
        assert_eq!(write["additionalProperties"], false, "{write}");
        assert_eq!(write["properties"]["path"]["minLength"], 1, "{write}");
        assert_eq!(write["properties"]["path"]["maxLength"], 1024, "{write}");
        assert_eq!(write["properties"]["content"]["type"], "string", "{write}");
        let read = schema(toolhost_sdk::describe::<ReadFile>());
        assert_eq!(read["properties"]["path"], write["properties"]["path"]);
        assert_eq!(read["required"], json!(["path"]), "{read}");
        let list = schema(toolhost_sdk::describe::<ListDir>());
        assert!(list["properties"]["path"].get("minLength").is_none(), "\"\" lists the root: {list}");
        assert_eq!(list["properties"]["path"]["maxLength"], 1024, "{list}");
        assert_eq!(list["required"], json!(["path"]), "{list}");
        let out = toolhost_sdk::output_schema::<ListDir>();
        assert_eq!(
            out["properties"]["entries"]["items"]["properties"]["kind"]["enum"],
            json!(["file", "dir", "other"])
        );
    }
}
