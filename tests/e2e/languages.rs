//! Authors in every language (issue #51): the weather tool in JavaScript,
//! Python and Rust, each built from a copy of its folder alone and run
//! through the binary against an HTTPS origin with its own CA; and
//! `toolhost new --lang js|ts|python` projects built by their own command
//! and called.

use crate::common::{stderr, stdout, toolhost};
use crate::http::https_origin;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const KEY: &str = "sk-languages-test-0123456789";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Copies the project folder `from` to `to`, leaving out what a build makes
/// (installed packages, bindings, components): what a newcomer copies.
fn copy_project(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if ["node_modules", "dist", ".venv", "gen", "__pycache__", "target"].contains(&name.as_str())
            || name.ends_with(".wasm")
        {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            copy_project(&entry.path(), &to.join(&name));
        } else {
            std::fs::copy(entry.path(), to.join(&name)).unwrap();
        }
    }
}

/// `./build.sh` in `project`, which must succeed; its component.
fn build(project: &Path, name: &str) -> PathBuf {
    let _heavy = crate::common::heavy();
    let o = Command::new("bash").arg("build.sh").current_dir(project).env_remove("CARGO_TARGET_DIR").output().unwrap();
    assert!(o.status.success(), "{}/build.sh:\n{}\n{}", project.display(), stdout(&o), stderr(&o));
    let wasm = project.join(format!("{name}.wasm"));
    assert!(wasm.is_file(), "{} was not written:\n{}", wasm.display(), stdout(&o));
    wasm
}

/// A config loading only `wasm` (as plugin `name`), unsigned allowed, the
/// origin's CA trusted and api.example.test pinned to it, `name` granted
/// `grant` and its `base_url` set.
fn config(dir: &Path, wasm: &Path, name: &str, port: u16, ca: &Path, grant: &str, base_url: &str) {
    let yaml = format!(
        "trust:\n  allow_unsigned: true\nplugins:\n  builtins: false\n  files: [{wasm:?}]\n  http_ca_files: [{ca:?}]\n  http_resolve:\n    \"api.example.test:{port}\": \"127.0.0.1:{port}\"\n  grants:\n    {name}:\n      http: [{grant:?}]\n  config:\n    {name}:\n      base_url: {base_url:?}\n"
    );
    std::fs::write(dir.join("toolhost.yaml"), yaml).unwrap();
}

/// `toolhost secret set PLUGIN api_key`, the key on stdin.
fn set_key(dir: &Path, plugin: &str) {
    let mut child = toolhost()
        .current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .args(["secret", "set", plugin, "api_key"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(format!("{KEY}\n").as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `toolhost call TOOL ARGS` in `dir`.
fn call(dir: &Path, tool: &str, args: &str) -> Output {
    toolhost()
        .current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .args(["call", tool, args])
        .output()
        .unwrap()
}

/// The weather tool of one language, answering through its grant with the
/// key as a Bearer header, and refused elsewhere in words naming the origin.
fn weather_answers_and_is_refused_elsewhere(lang: &str, wasm: &Path) {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let o = https_origin(dir);
    let api = format!("https://api.example.test:{}", o.port);
    let wasm_here = dir.join("weather.wasm");
    std::fs::copy(wasm, &wasm_here).unwrap();
    config(dir, &wasm_here, "weather", o.port, &o.ca, &api, &api);
    set_key(dir, "weather");

    let args = r#"{"latitude": 52.52, "longitude": 13.41}"#;
    let out = call(dir, "weather_now", args);
    assert!(out.status.success(), "{lang}: {}", stderr(&out));
    let v: serde_json::Value =
        serde_json::from_str(stdout(&out).trim()).unwrap_or_else(|e| panic!("{lang}: {e}: {}", stdout(&out)));
    assert_eq!(v["temperature_c"], 12.5, "{lang}: {v}");
    assert_eq!(v["source"], api, "{lang}: {v}");
    let requests = std::fs::read_to_string(dir.join("requests.log")).unwrap();
    assert!(requests.contains(&format!("auth=Bearer {KEY}")), "{lang}: the key went as a Bearer header: {requests}");
    assert!(requests.contains("/v1/forecast?latitude=52.52&longitude=13.41"), "{lang}: {requests}");

    // Pointed at another port of the same host: refused, the origin named.
    let elsewhere = format!("https://api.example.test:{}", o.port + 1);
    config(dir, &wasm_here, "weather", o.port, &o.ca, &api, &elsewhere);
    let out = call(dir, "weather_now", args);
    assert!(!out.status.success(), "{lang}: {}", stdout(&out));
    assert!(
        stderr(&out).contains(&format!("{elsewhere} is not granted to plugin weather (plugins.grants.weather.http")),
        "{lang}: {}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains(KEY), "{lang}: the key is redacted: {}", stderr(&out));
}

#[test]
fn the_weather_tool_in_javascript_python_and_rust_sends_its_key_and_names_an_ungranted_origin() {
    let t = tempfile::tempdir().unwrap();
    for (lang, folder) in [("javascript", "weather-js"), ("python", "weather-py")] {
        // Built from a copy of its folder alone, as a newcomer would.
        let copy = t.path().join(folder);
        copy_project(&repo().join("examples").join(folder), &copy);
        let wasm = build(&copy, "weather");
        weather_answers_and_is_refused_elsewhere(lang, &wasm);
    }
    weather_answers_and_is_refused_elsewhere("rust", Path::new(toolhost_test_artifacts::WEATHER_PATH));
}

/// The examples' vendored SDK and WIT are what `toolhost new` writes today.
#[test]
fn the_examples_vendor_what_toolhost_new_writes() {
    let t = tempfile::tempdir().unwrap();
    for (folder, lang) in [("weather-js", "js"), ("weather-py", "python")] {
        let o = toolhost()
            .args(["new", "weather", "--lang", lang, "--http", "--dir"])
            .arg(t.path().join(lang))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let fresh = t.path().join(lang).join("weather");
        let mut files = Vec::new();
        list_files(&fresh, &fresh, &mut files);
        for file in files.iter().filter(|f| !["app.js", "app.py", "README.md", "package.json"].contains(&f.as_str())) {
            let want = std::fs::read_to_string(fresh.join(file)).unwrap();
            let have = std::fs::read_to_string(repo().join("examples").join(folder).join(file)).unwrap_or_default();
            assert!(
                have == want,
                "examples/{folder}/{file} differs from `toolhost new weather --lang {lang} --http`: copy it again"
            );
        }
    }
}

fn list_files(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            list_files(root, &path, out);
        } else {
            out.push(path.strip_prefix(root).unwrap().display().to_string());
        }
    }
}

/// `toolhost new x --lang L [--http]`, built by its own `./build.sh`, loads
/// and answers: the greeting, or the API's answer through a grant.
#[test]
fn toolhost_new_in_each_language_builds_a_component_that_loads_and_answers() {
    let t = tempfile::tempdir().unwrap();
    let origin_dir = t.path().join("origin");
    std::fs::create_dir(&origin_dir).unwrap();
    let o = https_origin(&origin_dir);
    let api = format!("https://api.example.test:{}", o.port);
    for (lang, http) in [("js", false), ("js", true), ("ts", true), ("python", true), ("python", false)] {
        let name = format!("{lang}{}", if http { "-api" } else { "-hello" });
        let mut args = vec!["new", name.as_str(), "--lang", lang];
        if http {
            args.push("--http");
        }
        let made = toolhost().args(&args).current_dir(t.path()).output().unwrap();
        assert!(made.status.success(), "{args:?}: {}", stderr(&made));
        assert!(
            stdout(&made).contains("build it:   (cd ./") && stdout(&made).contains("&& ./build.sh)"),
            "{}",
            stdout(&made)
        );
        let project = t.path().join(&name);
        let wasm = build(&project, &name);
        if http {
            config(&project, &wasm, &name, o.port, &o.ca, &api, &api);
            set_key(&project, &name);
            let out = call(&project, "fetch", r#"{"path": "/v1/forecast"}"#);
            assert!(out.status.success(), "{name}: {}", stderr(&out));
            let v: serde_json::Value =
                serde_json::from_str(stdout(&out).trim()).unwrap_or_else(|e| panic!("{name}: {e}: {}", stdout(&out)));
            assert_eq!(v["authorization"], format!("Bearer {KEY}"), "{name}: {v}");
            let out = call(&project, "fetch", r#"{"path": "https://evil.example/x"}"#);
            assert!(stderr(&out).contains("invalid input for fetch: path must start with"), "{name}: {}", stderr(&out));
            if lang == "python" {
                // A URL wasi:http refuses a part of: named, not a crash.
                config(&project, &wasm, &name, o.port, &o.ca, &api, "http://bad host:1");
                let out = call(&project, "fetch", r#"{"path": "/v1/forecast"}"#);
                assert!(
                    stderr(&out).contains("wasi:http refused the authority bad host:1"),
                    "{name}: {}",
                    stderr(&out)
                );
            }
        } else {
            let out = toolhost()
                .args(["call", "greet", r#"{"name": "Ada", "excited": true}"#, "--no-builtins", "--plugin"])
                .arg(&wasm)
                .output()
                .unwrap();
            assert!(out.status.success(), "{name}: {}", stderr(&out));
            assert_eq!(stdout(&out).trim(), r#"{"message":"Hello, Ada!"}"#, "{name}");
            let out = toolhost()
                .args(["call", "greet", r#"{"name": " "}"#, "--no-builtins", "--plugin"])
                .arg(&wasm)
                .output()
                .unwrap();
            assert!(
                stderr(&out).contains("invalid input for greet: name must not be blank"),
                "{name}: {}",
                stderr(&out)
            );
            authors_mistakes_say_what_is_wrong(lang, &project, &name);
        }
    }
}

/// What an author gets wrong first, in words: a mistyped field fails the
/// build naming it; an async handler in a QuickJS project fails the call
/// saying why (not "expected array").
fn authors_mistakes_say_what_is_wrong(lang: &str, project: &Path, name: &str) {
    let (file, right, wrong, said) = match lang {
        "python" => (
            "app.py",
            "\"properties\": {",
            "\"propertes\": {",
            "unknown keyword 'propertes'; did you mean 'properties'?",
        ),
        _ => ("app.js", "inputSchema: {", "inputSchmea: {", "unknown field \"inputSchmea\"; did you mean inputSchema?"),
    };
    let app = project.join(file);
    let good = std::fs::read_to_string(&app).unwrap();
    std::fs::write(&app, good.replacen(right, wrong, 1)).unwrap();
    let heavy = crate::common::heavy();
    let o = Command::new("bash").arg("build.sh").current_dir(project).output().unwrap();
    drop(heavy);
    assert!(!o.status.success(), "{name}: a typo built");
    assert!(format!("{}{}", stdout(&o), stderr(&o)).contains(said), "{name}:\n{}\n{}", stdout(&o), stderr(&o));
    if lang == "js" {
        std::fs::write(&app, good.replacen("(args) => {", "async (args) => {", 1)).unwrap();
        let wasm = build(project, name);
        let out = toolhost()
            .args(["call", "greet", r#"{"name": "Ada"}"#, "--no-builtins", "--plugin"])
            .arg(&wasm)
            .output()
            .unwrap();
        assert!(
            stderr(&out).contains(
                "returned a Promise (an async function?): a plain project (QuickJS) runs tools synchronously"
            ),
            "{name}: {}",
            stderr(&out)
        );
    }
    std::fs::write(&app, good).unwrap();
}
