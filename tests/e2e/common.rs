//! Shared fixtures.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::LazyLock;
use toolhost::Host;
use toolhost::runtime::{CodeKind, CompileMode, FastCompiler, Limits, Runtime};
use toolhost::tool::{CallContext, CallError, Content, ToolOutput};

/// One compile cache for the whole test run, so each plugin compiles once.
pub static CACHE: LazyLock<tempfile::TempDir> = LazyLock::new(|| tempfile::tempdir().unwrap());

/// State (calibration, audit log) of binaries run by the tests, kept out of $HOME.
pub static STATE: LazyLock<tempfile::TempDir> = LazyLock::new(|| tempfile::tempdir().unwrap());

/// Guest builds with npm, componentize-js or componentize-py keep both
/// cores busy for a minute or more. A test that compares latencies holds
/// [`quiet`] so that none runs beside it; the builds hold [`heavy`]
/// (shared among them). Never take one while holding the other.
static QUIET: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Held while building guests with the language toolchains.
pub fn heavy() -> std::sync::RwLockReadGuard<'static, ()> {
    QUIET.read().unwrap_or_else(|p| p.into_inner())
}

/// Held by a test that compares latencies: no guest build runs meanwhile.
pub fn quiet() -> std::sync::RwLockWriteGuard<'static, ()> {
    QUIET.write().unwrap_or_else(|p| p.into_inner())
}

/// A host with the built-in plugins and the hostile test plugin, default limits.
pub static HOST: LazyLock<Host> = LazyLock::new(|| host_with(Limits::default()));

/// A fresh host with `limits`, the built-ins and the hostile plugin.
pub fn host_with(limits: Limits) -> Host {
    let host = Host::new(Runtime::new(limits, Some(CACHE.path())).unwrap());
    toolhost::builtin::add_builtins(host.admission()).unwrap();
    host.admission().add_plugin_file(Path::new(toolhost_test_artifacts::HOSTILE_PATH)).unwrap();
    host
}

/// The same host three times: the hostile plugin on optimized code, and on
/// the fast first code of each fast compiler (Winch's, Cranelift's without
/// optimization; compiled fast, never optimized, no cache), each checked to
/// run on the code it is named for. The limits' own `compile` and
/// `fast_compiler` are replaced.
pub fn on_each_code(limits: Limits) -> [(&'static str, Host); 3] {
    [("optimized", "cranelift"), ("fast", "winch"), ("fast", "cranelift")].map(|(code, compiler)| {
        let (compile, cache) = match code {
            "optimized" => (CompileMode::Optimized, Some(CACHE.path())),
            _ => (CompileMode::Fast, None),
        };
        let fast_compiler = if compiler == "winch" { FastCompiler::Winch } else { FastCompiler::Cranelift };
        let host = Host::new(Runtime::new(Limits { compile, fast_compiler, ..limits.clone() }, cache).unwrap());
        toolhost::builtin::add_builtins(host.admission()).unwrap();
        let hostile = host.admission().add_plugin_file(Path::new(toolhost_test_artifacts::HOSTILE_PATH)).unwrap();
        let named = match code {
            "optimized" => CodeKind::Optimized,
            _ => CodeKind::Fast,
        };
        assert_eq!((hostile.code_kind(), hostile.code_compiler()), (named, compiler), "the hostile plugin's code");
        let label = match (code, compiler) {
            ("optimized", _) => "optimized code",
            (_, "winch") => "fast code by Winch",
            _ => "fast code by Cranelift",
        };
        (label, host)
    })
}

/// A built-in plugin's component as a file (the binary embeds the bytes;
/// some tests need a path).
pub fn builtin_path(name: &str) -> &'static str {
    static DIR: LazyLock<tempfile::TempDir> = LazyLock::new(|| tempfile::tempdir().unwrap());
    static WRITTEN: LazyLock<std::sync::Mutex<std::collections::HashMap<String, &'static str>>> =
        LazyLock::new(Default::default);
    let mut written = WRITTEN.lock().unwrap();
    if let Some(p) = written.get(name) {
        return p;
    }
    let b = toolhost::builtin::BUILTINS.iter().find(|b| b.name == name).unwrap_or_else(|| panic!("no built-in {name}"));
    let path = DIR.path().join(format!("{name}.wasm"));
    std::fs::write(&path, b.bytes).unwrap();
    let path: &'static str = Box::leak(path.display().to_string().into_boxed_str());
    written.insert(name.to_string(), path);
    path
}

/// Calls `tool` on `host` with JSON `args`.
pub fn call(host: &Host, tool: &str, args: serde_json::Value) -> Result<ToolOutput, CallError> {
    host.call(tool, &args, &CallContext::default())
}

/// The single JSON block of a successful call.
pub fn json_of(out: ToolOutput) -> serde_json::Value {
    match &out.content[..] {
        [Content::Json(v)] => v.clone(),
        other => panic!("expected one JSON block, got {other:?}"),
    }
}

/// The `toolhost` binary with the shared cache.
pub fn toolhost() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    // The test plugins are unsigned: allowing them is the operator's explicit choice here.
    cmd.env("TOOLHOST_CACHE_DIR", CACHE.path())
        .env("TOOLHOST_STATE_DIR", STATE.path())
        .env("TOOLHOST_ALLOW_UNSIGNED", "1")
        .env_remove("TOOLHOST_LOG");
    cmd
}

/// Runs the binary in `dir` as a strict operator would: unsigned plugins
/// refused, state under `dir/state`, the shared compile cache.
pub fn run_strict(dir: &Path, args: &[&str]) -> Output {
    toolhost()
        .current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .env_remove("TOOLHOST_ALLOW_UNSIGNED")
        .args(args)
        .output()
        .expect("run toolhost")
}

/// Runs the binary with `args`.
pub fn run(args: &[&str]) -> Output {
    toolhost().args(args).output().expect("run toolhost")
}

/// stdout as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The Python plugin `plugins-py/npcnames`, built once per test run with
/// `plugins-py/build.sh` (idempotent; serialized here so two tests never
/// share its venv half-made). An 18 MB component: Cranelift takes many
/// seconds over it, which is what the first-list tests need.
pub fn python_plugin() -> std::path::PathBuf {
    static BUILT: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if !*built {
        let _heavy = heavy();
        let o = Command::new("bash").arg(repo.join("plugins-py/build.sh")).arg("npcnames").output().unwrap();
        assert!(o.status.success(), "plugins-py/build.sh:\n{}\n{}", stdout(&o), stderr(&o));
        *built = true;
    }
    repo.join("target/py-plugins/npcnames.wasm")
}

/// `plugins-js/dicebag` built (QuickJS, by its own build.sh: npm packages
/// pinned in its package.json), once per test run.
pub fn js_plugin() -> std::path::PathBuf {
    static BUILT: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if !*built {
        let _heavy = heavy();
        let o = Command::new("bash").arg(repo.join("plugins-js/dicebag/build.sh")).output().unwrap();
        assert!(o.status.success(), "plugins-js/dicebag/build.sh:\n{}\n{}", stdout(&o), stderr(&o));
        *built = true;
    }
    repo.join("target/js-plugins/dicebag.wasm")
}
