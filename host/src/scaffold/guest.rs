//! The JavaScript, TypeScript and Python projects of `toolhost new --lang`:
//! each a folder that builds with its own `./build.sh`, the language's SDK
//! (`sdk-js/`, `sdk-py/`) and the WIT it targets vendored in it.

use super::Template;

/// A file of a project: where it goes and its text (before rendering).
type File = (&'static str, &'static str);

/// The WIT every guest project carries: toolhost's contract and
/// `wasi:config` (settings and secrets), as `wit/deps` of its own world.
const WIT: &[File] = &[
    ("wit/deps/toolhost-plugin/tool.wit", include_str!("../../../wit/tool.wit")),
    ("wit/deps/config/store.wit", include_str!("../../../wit/deps/config/store.wit")),
    ("wit/deps/config/world.wit", include_str!("../../../wit/deps/config/world.wit")),
];

/// The JavaScript SDK, vendored as `toolhost/` (an npm `file:` dependency).
pub(super) const JS_SDK: &[File] = &[
    ("toolhost/package.json", include_str!("../../../sdk-js/package.json")),
    ("toolhost/index.js", include_str!("../../../sdk-js/index.js")),
    ("toolhost/index.d.ts", include_str!("../../../sdk-js/index.d.ts")),
    ("wit/world.wit", include_str!("../../../sdk-js/wit/world.wit")),
];

/// The Python SDK, vendored as the package `toolhost/`, and the WIT of
/// `wasi:http` 0.2.12 (as wasmtime 48 ships it) for the `http-tool` world.
pub(super) const PY_SDK: &[File] = &[
    ("toolhost/__init__.py", include_str!("../../../sdk-py/toolhost/__init__.py")),
    ("toolhost/config.py", include_str!("../../../sdk-py/toolhost/config.py")),
    ("toolhost/secret.py", include_str!("../../../sdk-py/toolhost/secret.py")),
    ("toolhost/tools.py", include_str!("../../../sdk-py/toolhost/tools.py")),
    ("toolhost/http.py", include_str!("../../../sdk-py/toolhost/http.py")),
    ("wit/world.wit", include_str!("../../../sdk-py/wit/world.wit")),
    ("wit/deps/cli.wit", include_str!("../../../sdk-py/wit/deps/cli.wit")),
    ("wit/deps/clocks.wit", include_str!("../../../sdk-py/wit/deps/clocks.wit")),
    ("wit/deps/filesystem.wit", include_str!("../../../sdk-py/wit/deps/filesystem.wit")),
    ("wit/deps/http.wit", include_str!("../../../sdk-py/wit/deps/http.wit")),
    ("wit/deps/io.wit", include_str!("../../../sdk-py/wit/deps/io.wit")),
    ("wit/deps/random.wit", include_str!("../../../sdk-py/wit/deps/random.wit")),
    ("wit/deps/sockets.wit", include_str!("../../../sdk-py/wit/deps/sockets.wit")),
];

const README: &str = include_str!("../../templates/guest/README.md.tmpl");
const README_HTTP: &str = include_str!("../../templates/guest/README_http.md.tmpl");

/// The pinned npm packages, as `package.json` lines.
const COMPONENTIZE_JS: &str = r#""@bytecodealliance/componentize-js": "0.23.0""#;
const JCO: &str = r#""@bytecodealliance/jco": "1.35.0""#;
const COMPONENTIZE_QJS: &str = r#""componentize-qjs": "0.4.5""#;
const ESBUILD: &str = r#""esbuild": "0.28.2""#;
const TYPESCRIPT: &str = r#""typescript": "5.9.3""#;

/// A JavaScript (`typescript` false) or TypeScript project's files, rendered.
///
/// A plain tool builds with QuickJS (componentize-qjs: about 1.6 MiB,
/// compiled in a fraction of a second, synchronous, no `fetch`); an `--http`
/// one with StarlingMonkey (componentize-js: about 12 MiB, `fetch` over
/// `wasi:http`, Promises awaited).
pub(super) fn js_files(name: &str, typescript: bool, template: Template) -> Vec<(String, String)> {
    let http = template == Template::Http;
    let (entry, language, lang) =
        if typescript { ("app.ts", "TypeScript", "ts") } else { ("app.js", "JavaScript", "js") };
    let app = match (typescript, http) {
        (false, false) => include_str!("../../templates/js/app.js.tmpl"),
        (false, true) => include_str!("../../templates/js/app_http.js.tmpl"),
        (true, false) => include_str!("../../templates/js/app.ts.tmpl"),
        (true, true) => include_str!("../../templates/js/app_http.ts.tmpl"),
    };
    let (engine, engine_words) = if http {
        ("starlingmonkey", "componentize-js (StarlingMonkey, which has fetch)")
    } else {
        ("quickjs", "componentize-qjs (QuickJS)")
    };
    let mut dev = if http { vec![COMPONENTIZE_JS] } else { vec![JCO, COMPONENTIZE_QJS] };
    dev.push(ESBUILD);
    if typescript {
        dev.push(TYPESCRIPT);
    }
    let dev = dev.iter().map(|d| format!("    {d}")).collect::<Vec<_>>().join(",\n");
    let build = include_str!("../../templates/js/build.sh")
        .replace("{{entry}}", entry)
        .replace("{{engine}}", engine)
        .replace("{{engine_words}}", engine_words)
        .replace("{{typecheck}}", if typescript { " after tsc typechecks it" } else { "" });
    let add = format!(
        "In `{entry}`, declare it with `defineTool(spec, handler)` from `toolhost` (its\n\
         name, the description and JSON Schema the model reads, its declared\n\
         latency) and add it to `export const tool = plugin(greet, yourTool)`.\n\
         The handler returns a JSON-able value or a string{promise}. `config.get`,\n\
         `secret.get` and `log` are in the SDK too; its types are in\n\
         `toolhost/index.d.ts`.",
        promise = if http { ", or a Promise of one" } else { " (synchronously: QuickJS)" },
    );
    let readme = readme(name, language, lang, http, "`toolhost/`, an npm `file:` dependency", &add).replace(
        "{{needs}}",
        "It needs Node.js >= 20 and the npm registry; the first\n\
             build installs the packages pinned in `package.json` (about 15 s).",
    );
    let mut files: Vec<(String, String)> = vec![
        (entry.to_string(), app.to_string()),
        ("build.sh".into(), build),
        (
            "package.json".into(),
            include_str!("../../templates/js/package.json.tmpl").replace("{{dev_dependencies}}", &dev),
        ),
        (".gitignore".into(), include_str!("../../templates/js/gitignore").to_string()),
        ("README.md".into(), readme),
    ];
    if typescript {
        files.push(("tsconfig.json".into(), include_str!("../../templates/js/tsconfig.json").to_string()));
    }
    files.extend(JS_SDK.iter().chain(WIT).map(|(p, t)| (p.to_string(), t.to_string())));
    render_all(files, name)
}

/// A Python project's files, rendered: componentize-py, the `tool` world
/// (or `http-tool` with `--http`).
pub(super) fn python_files(name: &str, template: Template) -> Vec<(String, String)> {
    let http = template == Template::Http;
    let app = if http {
        include_str!("../../templates/python/app_http.py.tmpl")
    } else {
        include_str!("../../templates/python/app.py.tmpl")
    };
    let build =
        include_str!("../../templates/python/build.sh").replace("{{world}}", if http { "http-tool" } else { "tool" });
    let add = "In `app.py`, write a function taking the arguments (a dict) and returning a\n\
               JSON-able value or a string, declare it with `@tool(...)` (the description\n\
               and JSON Schema the model reads, its declared latency) and add it to\n\
               `tools` in `class Tool(Plugin)`. `toolhost.config`, `toolhost.secret`\n\
               and `toolhost.http` (with `--http`) are the SDK, in `toolhost/`.\n\
               Module-level code runs once, at build time, and is snapshotted into\n\
               the component: build tables there, not per call.";
    let readme = readme(name, "Python", "python", http, "the package `toolhost/`", add).replace(
        "{{needs}}",
        "It needs Python >= 3.10 and PyPI; the first build makes\n\
         `.venv` with the componentize-py pinned in `requirements.txt`.",
    );
    let mut files: Vec<(String, String)> = vec![
        ("app.py".into(), app.to_string()),
        ("build.sh".into(), build),
        ("requirements.txt".into(), include_str!("../../templates/python/requirements.txt").to_string()),
        (".gitignore".into(), include_str!("../../templates/python/gitignore").to_string()),
        ("README.md".into(), readme),
    ];
    files.extend(PY_SDK.iter().chain(WIT).map(|(p, t)| (p.to_string(), t.to_string())));
    render_all(files, name)
}

fn readme(name: &str, language: &str, lang: &str, http: bool, sdk: &str, add: &str) -> String {
    let try_it = if http {
        "# fetch calls an API: see \"Call an API\" below for its grant, setting and key".to_string()
    } else {
        format!("toolhost call greet '{{\"name\":\"Ada\"}}' --allow-unsigned --plugin {name}.wasm")
    };
    let mut text = README
        .replace("{{language}}", language)
        .replace("{{lang}}", lang)
        .replace("{{http_flag}}", if http { " --http" } else { "" })
        .replace("{{sdk_path}}", sdk)
        .replace("{{try_it}}", &try_it)
        .replace("{{sign_asks}}", if http { " \\\n  --http-host https://api.example.com --secret api_key" } else { "" })
        .replace("{{add_a_tool}}", add)
        .replace(
            "{{errors}}",
            if lang == "python" {
                "`raise invalid_input(...)` (or `not_found`, `forbidden`, `failed`)"
            } else {
                "`throw invalidInput(...)` (or `notFound`, `forbidden`, `failed`)"
            },
        );
    if http {
        text.push_str(README_HTTP);
    }
    text
}

fn render_all(files: Vec<(String, String)>, name: &str) -> Vec<(String, String)> {
    files.into_iter().map(|(path, text)| (path, super::render(&text, name))).collect()
}

#[cfg(test)]
mod tests {
    use super::super::{Lang, Template, new_project};
    use super::*;
    use std::path::Path;

    /// Every file of `sdk-js/` and `sdk-py/` is vendored.
    #[test]
    fn the_vendored_sdks_are_the_whole_sdks() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for (dir, embedded, prefix, skip) in [
            ("sdk-js", JS_SDK, "toolhost/", "wit/"),
            ("sdk-py/toolhost", PY_SDK, "toolhost/", "wit/"),
            ("sdk-py/wit", PY_SDK, "wit/", "toolhost/"),
        ] {
            let mut on_disk = Vec::new();
            let base = root.join(dir);
            let mut stack = vec![base.clone()];
            while let Some(d) = stack.pop() {
                for e in std::fs::read_dir(&d).unwrap() {
                    let p = e.unwrap().path();
                    if p.is_dir() {
                        if !p.ends_with("__pycache__") {
                            stack.push(p);
                        }
                    } else if !p.to_string_lossy().ends_with(".md") {
                        on_disk.push(p.strip_prefix(&base).unwrap().display().to_string());
                    }
                }
            }
            let mut names: Vec<String> = embedded
                .iter()
                .filter(|(p, _)| !p.starts_with(skip))
                .map(|(p, _)| p.strip_prefix(prefix).unwrap_or(p).to_string())
                .collect();
            if dir == "sdk-js" {
                names.push("wit/world.wit".into());
            }
            on_disk.sort();
            names.sort();
            names.dedup();
            assert_eq!(names, on_disk, "{dir}: add new SDK files to guest.rs");
        }
    }

    #[test]
    fn every_language_and_template_renders_a_complete_project() {
        let tmp = tempfile::tempdir().unwrap();
        for lang in [Lang::Js, Lang::Ts, Lang::Python] {
            for template in [Template::Plain, Template::Http] {
                let name = format!("p{}{}", lang as u8, template as u8);
                let project = new_project(tmp.path(), &name, lang, template).unwrap();
                let build = std::fs::read_to_string(project.join("build.sh")).unwrap();
                assert!(build.contains(&format!("name={name}\n")), "{build}");
                let mode = std::os::unix::fs::PermissionsExt::mode(
                    &std::fs::metadata(project.join("build.sh")).unwrap().permissions(),
                );
                assert_eq!(mode & 0o111, 0o111, "build.sh is executable");
                let files = match lang {
                    Lang::Python => python_files(&name, template),
                    _ => js_files(&name, lang == Lang::Ts, template),
                };
                for (path, text) in &files {
                    assert!(!text.contains("{{"), "{lang:?} {template:?} {path}: an unfilled placeholder");
                    assert!(project.join(path).is_file(), "{path}");
                }
                let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
                assert_eq!(readme.contains("## Call an API"), template == Template::Http, "{readme}");
                if lang != Lang::Python {
                    let engine = if template == Template::Http { "engine=starlingmonkey" } else { "engine=quickjs" };
                    assert!(build.contains(engine), "{build}");
                    let package = std::fs::read_to_string(project.join("package.json")).unwrap();
                    let parsed: serde_json::Value = serde_json::from_str(&package).unwrap();
                    assert_eq!(parsed["dependencies"]["toolhost"], "file:toolhost");
                    assert_eq!(parsed["devDependencies"].get("typescript").is_some(), lang == Lang::Ts, "{package}");
                } else {
                    let world = if template == Template::Http { "world=http-tool" } else { "world=tool" };
                    assert!(build.contains(world), "{build}");
                }
            }
        }
    }
}
