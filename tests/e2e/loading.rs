//! Loading is bounded: bad files are refused with a message that names the
//! problem, and compiled code is cached on disk.

use crate::common::builtin_path;
use crate::common::run;
use crate::common::stderr;
use crate::common::stdout;
use std::path::Path;
use std::time::{Duration, Instant};
use toolhost::runtime::{
    CodeKind, CompileMode, CompileSource, FastCompiler, Limits, LoadErrorKind, Runtime, WasmPlugin,
};
use toolhost::tool::{CallContext, Content, Provider as _};
use toolhost_test_artifacts::{HOSTILE_PATH, OTHERWORLD_PATH};

fn runtime() -> Runtime {
    Runtime::new(Limits::default(), None).unwrap()
}

fn load_err(bytes: &[u8]) -> LoadErrorKind {
    runtime().load("bad", bytes).unwrap_err().kind
}

#[test]
fn a_core_module_is_refused_as_such() {
    // The smallest valid core module: magic and version 1.
    let e = load_err(b"\0asm\x01\0\0\0");
    assert!(matches!(e, LoadErrorKind::CoreModule), "{e}");
    assert!(e.to_string().contains("core WebAssembly module, not a component"));
}

#[test]
fn a_truncated_component_is_refused() {
    let bytes = std::fs::read(builtin_path("diceroller")).unwrap();
    let e = load_err(&bytes[..bytes.len() / 2]);
    assert!(matches!(e, LoadErrorKind::Invalid(_)), "{e}");
    assert!(e.to_string().contains("failed to parse WebAssembly"), "{e}");
}

#[test]
fn a_component_of_another_world_is_refused_naming_what_it_exports() {
    let e = load_err(&std::fs::read(OTHERWORLD_PATH).unwrap());
    match &e {
        LoadErrorKind::WrongWorld { exports } => assert!(exports.iter().any(|x| x.starts_with("wasi:cli/run")), "{e}"),
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("must export toolhost:plugin/tool@0.1.2"), "{e}");
}

#[test]
fn garbage_is_not_wasm() {
    assert!(matches!(load_err(b"#!/bin/sh\necho hi\n"), LoadErrorKind::NotWasm));
    assert!(matches!(load_err(b""), LoadErrorKind::NotWasm));
}

#[test]
fn an_oversized_file_is_refused_before_it_is_read() {
    let rt = Runtime::new(Limits { max_component_bytes: 1000, ..Limits::default() }, None).unwrap();
    let e = rt.load_file(Path::new(builtin_path("diceroller"))).unwrap_err();
    assert!(matches!(e.kind, LoadErrorKind::TooLarge { limit: 1000, .. }), "{e}");
    assert!(e.to_string().contains("diceroller"), "{e}");
}

#[test]
fn a_missing_file_names_the_plugin() {
    let e = runtime().load_file(Path::new("/nonexistent/ghost.wasm")).unwrap_err();
    assert!(matches!(e.kind, LoadErrorKind::Io(_)), "{e}");
    assert!(e.to_string().contains("ghost"), "{e}");
}

#[test]
fn the_second_load_comes_from_the_disk_cache() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(builtin_path("diceroller")).unwrap();
    let first = Runtime::new(Limits::default(), Some(dir.path())).unwrap().load("diceroller", &bytes).unwrap();
    assert_eq!(first.compile_source(), CompileSource::Compiled);
    // A new runtime (a restart) finds the artifact.
    let second = Runtime::new(Limits::default(), Some(dir.path())).unwrap().load("diceroller", &bytes).unwrap();
    assert_eq!(second.compile_source(), CompileSource::Cache);
    assert_eq!(first.digest(), second.digest());
}

#[test]
fn a_corrupt_cache_entry_is_discarded_and_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(HOSTILE_PATH).unwrap();
    // The optimized code's entry (no fast code first, nothing compiling in
    // the background).
    let optimized = Limits { compile: CompileMode::Optimized, ..Limits::default() };
    let rt = Runtime::new(optimized.clone(), Some(dir.path())).unwrap();
    let p = rt.load("hostile", &bytes).unwrap();
    let entry = rt.cache().unwrap().dir().join(format!("{}.cwasm", p.digest()));
    std::fs::write(&entry, b"not a compiled artifact").unwrap();
    let again = Runtime::new(optimized, Some(dir.path())).unwrap().load("hostile", &bytes).unwrap();
    assert_eq!(again.compile_source(), CompileSource::Compiled);
    assert!(std::fs::read(&entry).unwrap().len() > 1000, "entry rewritten");
}

#[test]
fn an_engine_with_other_settings_does_not_reuse_artifacts() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(builtin_path("diceroller")).unwrap();
    Runtime::new(Limits::default(), Some(dir.path())).unwrap().load("diceroller", &bytes).unwrap();
    let no_fuel = Runtime::new(Limits { fuel: None, ..Limits::default() }, Some(dir.path())).unwrap();
    assert_eq!(no_fuel.load("diceroller", &bytes).unwrap().compile_source(), CompileSource::Compiled);
}

#[test]
fn a_tool_name_clash_across_plugins_exposes_the_later_one_under_its_plugins_name() {
    // The diceroller built-in is already loaded; a copy under another name
    // clashes on every tool: its tools are exposed as dice2_<tool>.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("dice2.wasm");
    std::fs::copy(builtin_path("diceroller"), &copy).unwrap();
    let o = run(&["tools", "--plugin", copy.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("dice2_roll") && out.contains("roll"), "{out}");
    let err = stderr(&o);
    assert!(err.contains("roll is already served by diceroller: dice2's is exposed as dice2_roll"), "{err}");
}

fn echo(p: &WasmPlugin, n: u32) {
    let out = p.call("echo", &serde_json::json!({ "n": n }), &CallContext::default()).unwrap();
    assert_eq!(out.content, vec![Content::Text(format!("{{\"n\":{n}}}"))]);
}

/// A component nobody compiled before answers on fast code at once; its
/// optimized code, compiled in the background, takes over between calls
/// (calls keep answering throughout); the cache then holds the optimized
/// code only, and a restart runs it from the first call.
#[test]
fn a_new_plugin_answers_on_fast_code_and_switches_to_optimized_code_between_calls() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(HOSTILE_PATH).unwrap();
    let rt = Runtime::new(Limits::default(), Some(dir.path())).unwrap();
    let p = rt.load("hostile", &bytes).unwrap();
    assert_eq!((p.compile_source(), p.code_kind()), (CompileSource::Compiled, CodeKind::Fast));
    // Winch's code on x86_64, Cranelift's elsewhere.
    let (compiler, entry) = if cfg!(target_arch = "x86_64") { ("winch", ".winch") } else { ("cranelift", ".fast") };
    assert_eq!(p.code_compiler(), compiler);
    let cached = |suffix: &str| rt.cache().unwrap().dir().join(format!("{}{suffix}.cwasm", p.digest())).exists();
    assert!(cached(entry), "the fast code is cached apart");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut n = 0;
    while p.code_kind() == CodeKind::Fast {
        assert!(Instant::now() < deadline, "no optimized code after 120 s");
        echo(&p, n);
        n += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    echo(&p, n);
    assert_eq!(rt.optimizing_now(), 0, "nothing left to optimize");
    assert_eq!(p.code_compiler(), "cranelift", "the optimized code is Cranelift's");
    assert!(cached("") && !cached(entry), "the optimized code replaces the fast code in the cache");

    // A restart: the optimized code from the cache, nothing to optimize.
    let restarted = Runtime::new(Limits::default(), Some(dir.path())).unwrap();
    let again = restarted.load("hostile", &bytes).unwrap();
    assert_eq!((again.compile_source(), again.code_kind()), (CompileSource::Cache, CodeKind::Optimized));
    assert_eq!(restarted.optimizing_now(), 0);
    echo(&again, 1);
}

/// `limits.compile`: `optimized` compiles before the first call; `fast`
/// never optimizes; a restart that finds only the fast code in the cache
/// runs it and optimizes it again in the background. `limits.fast_compiler:
/// cranelift` keeps Winch out.
#[test]
fn limits_compile_chooses_the_first_code_and_a_restart_resumes_the_optimization() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(HOSTILE_PATH).unwrap();
    let with = |compile| Runtime::new(Limits { compile, ..Limits::default() }, Some(dir.path())).unwrap();

    let optimized = tempfile::tempdir().unwrap();
    let rt =
        Runtime::new(Limits { compile: CompileMode::Optimized, ..Limits::default() }, Some(optimized.path())).unwrap();
    let p = rt.load("hostile", &bytes).unwrap();
    assert_eq!((p.compile_source(), p.code_kind()), (CompileSource::Compiled, CodeKind::Optimized));
    assert_eq!(rt.optimizing_now(), 0);

    let fast = with(CompileMode::Fast);
    let p = fast.load("hostile", &bytes).unwrap();
    assert_eq!((p.code_kind(), fast.optimizing_now()), (CodeKind::Fast, 0), "fast only: nothing queued");
    let cranelift = Limits { compile: CompileMode::Fast, fast_compiler: FastCompiler::Cranelift, ..Limits::default() };
    let unoptimized = Runtime::new(cranelift, None).unwrap().load("hostile", &bytes).unwrap();
    assert_eq!((unoptimized.code_kind(), unoptimized.code_compiler()), (CodeKind::Fast, "cranelift"));
    echo(&unoptimized, 6);
    echo(&p, 7);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(p.code_kind(), CodeKind::Fast, "and it stays on fast code");

    // The default again: the cached fast code, optimized in the background.
    let resumed = with(CompileMode::FastFirst);
    let p = resumed.load("hostile", &bytes).unwrap();
    assert_eq!((p.compile_source(), p.code_kind()), (CompileSource::Cache, CodeKind::Fast));
    let deadline = Instant::now() + Duration::from_secs(120);
    while p.code_kind() == CodeKind::Fast {
        assert!(Instant::now() < deadline, "no optimized code after 120 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    echo(&p, 8);
}

/// `bytes` with a custom section appended: the same component under
/// another digest.
fn variant(bytes: &[u8], n: u32) -> Vec<u8> {
    padded(bytes, n, 0)
}

/// [`variant`], `pad` bytes larger.
fn padded(bytes: &[u8], n: u32, pad: usize) -> Vec<u8> {
    let name = b"toolhost-test";
    let mut payload = n.to_le_bytes().to_vec();
    payload.resize(4 + pad, 0);
    let mut size = 1 + name.len() + payload.len();
    let mut out = bytes.to_vec();
    out.push(0);
    // The section's size, unsigned LEB128.
    loop {
        let byte = (size & 0x7f) as u8;
        size >>= 7;
        out.push(if size > 0 { byte | 0x80 } else { byte });
        if size == 0 {
            break;
        }
    }
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.extend_from_slice(&payload);
    out
}

/// A DM swapping versions quickly piles nothing up: a version replaced
/// before its optimized code was ready leaves the queue with its bytes;
/// past 32 components waiting at once, a new one stays on fast code (and
/// answers), and the queue never grows past that.
#[test]
fn quick_swaps_leave_the_optimizer_queue_bounded() {
    let bytes = std::fs::read(HOSTILE_PATH).unwrap();
    let rt = Runtime::new(Limits::default(), None).unwrap();
    // Forty versions, each replaced by the next at once.
    let mut last = None;
    for n in 0..40 {
        last = Some(rt.load("hostile", &variant(&bytes, n)).unwrap());
        assert!(rt.optimizing_now() <= 2, "version {n}: {} waiting", rt.optimizing_now());
    }
    let last = last.unwrap();
    echo(&last, 1);
    let deadline = Instant::now() + Duration::from_secs(120);
    while last.code_kind() == CodeKind::Fast {
        assert!(Instant::now() < deadline, "the last version never optimized");
        std::thread::sleep(Duration::from_millis(20));
    }

    // Seventy versions kept at once, loaded faster than one thread
    // optimizes them: at most 32 wait (and one compiling); the rest run
    // fast code.
    let kept: Vec<WasmPlugin> = (100..170)
        .map(|n| {
            let p = rt.load("hostile", &variant(&bytes, n)).unwrap();
            assert!(rt.optimizing_now() <= 33, "{} waiting", rt.optimizing_now());
            p
        })
        .collect();
    for (i, p) in kept.iter().enumerate() {
        echo(p, i as u32);
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    while rt.optimizing_now() > 0 {
        assert!(Instant::now() < deadline, "{} still waiting after 300 s", rt.optimizing_now());
        std::thread::sleep(Duration::from_millis(50));
    }
    let fast = kept.iter().filter(|p| p.code_kind() == CodeKind::Fast).count();
    assert!((10..=70 - 32).contains(&fast), "the ones past the bound stay on fast code: {fast}");
}

/// The bytes held for optimized compiles are bounded too: twenty-four
/// 24 MiB versions kept at once (576 MiB, under the 32-component bound)
/// never hold more than 256 MiB in the queue; the rest answer on fast code.
#[test]
fn large_versions_waiting_for_optimized_code_hold_at_most_256_mib() {
    let bytes = std::fs::read(HOSTILE_PATH).unwrap();
    let rt = Runtime::new(Limits::default(), None).unwrap();
    let pad = 24 << 20;
    let mut kept = Vec::new();
    for n in 0..24 {
        kept.push(rt.load("hostile", &padded(&bytes, n, pad)).unwrap());
        // Queued, and one compiling (not counted): 256 MiB / 24 MiB.
        assert!(rt.optimizing_now() <= 10 + 1, "version {n}: {} waiting", rt.optimizing_now());
    }
    for (i, p) in kept.iter().enumerate() {
        echo(p, i as u32);
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    while rt.optimizing_now() > 0 {
        assert!(Instant::now() < deadline, "{} still waiting after 300 s", rt.optimizing_now());
        std::thread::sleep(Duration::from_millis(50));
    }
    let fast = kept.iter().filter(|p| p.code_kind() == CodeKind::Fast).count();
    assert!(fast >= 1, "the ones past the byte bound stay on fast code");
}

/// The contract grew to 0.1.1 (resources, prompts, asking the client): a
/// component built against 0.1.0 (the hostile plugin, from the frozen WIT in
/// `tests/plugins/wit-0.1.0`) still links, lists its tools and answers.
#[test]
fn a_component_built_against_contract_0_1_0_loads_and_answers_unchanged() {
    let bytes = std::fs::read(HOSTILE_PATH).unwrap();
    let rt = runtime();
    let compiled = rt.compile("hostile", &bytes).unwrap();
    assert!(compiled.exports.iter().any(|e| e == "toolhost:plugin/tool@0.1.0"), "{:?}", compiled.exports);
    assert!(compiled.imports.iter().any(|i| i == "toolhost:plugin/host@0.1.0"), "{:?}", compiled.imports);
    assert!(!compiled.imports.iter().any(|i| i.contains("@0.1.1")), "{:?}", compiled.imports);
    let plugin = rt.instantiate_compiled(compiled, Default::default()).unwrap();
    assert!(plugin.tools().iter().any(|t| t.name == "echo"));
    assert!(plugin.extension().is_none(), "a 0.1.0 component offers no resources or prompts");
    let out = plugin.call("echo", &serde_json::json!({"said": "hello"}), &CallContext::default()).unwrap();
    assert_eq!(out.content, vec![Content::Text(r#"{"said":"hello"}"#.into())]);
}
