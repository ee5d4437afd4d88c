//! All of MCP from a sandboxed plugin, through the official Python SDK:
//! resources, templates, prompts and completions a plugin offers (world
//! `server-plugin`), and its questions to the user (elicitation, form and
//! URL) and to the model (sampling), in both protocol revisions: over
//! 2025-11-25 (`legacy`) they are requests of the server's mid-call; over
//! 2026-07-28 (`auto`) `input_required` results the SDK answers and tries
//! again with. The plugin is the conformance fixture.
//!
//! Hostile and tired: a plugin that never stops asking is cut off at
//! `limits.asks_per_call`; a person who takes longer than the tool's
//! deadline to answer does not time the call out (the wait is not the
//! plugin's), but one who takes longer than `limits.input_wait_ms` does;
//! and a call waiting for its person holds up nobody else's.

use crate::peers::{Served, peer, python, run, serve_http, test_dir, toolhost_stdio_env};
use serde_json::{Value, json};
use std::process::Command;
use toolhost_test_artifacts::CONFORMANCE_PATH;

/// Runs `py_client.py` against `target` in `mode` with `args` first.
pub(crate) fn py(dir: &std::path::Path, mode: &str, args: &[&str], target: &[String]) -> Value {
    let mut cmd = Command::new(python());
    cmd.current_dir(dir).arg(peer("py_client.py")).args(["--mode", mode]).args(args).args(target);
    let run = run(&format!("py_client.py --mode {mode} {args:?} {target:?}"), cmd);
    assert!(run.status.success(), "{}", run.report());
    let line = run.stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("py_client printed no JSON ({e})\n{}", run.report()))
}

/// A result's first text block.
pub(crate) fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text: {result}"))
}

fn serve(dir: &std::path::Path) -> Served {
    serve_http(dir, &["--no-builtins", "--plugin", CONFORMANCE_PATH])
}

/// `serve --stdio` with the conformance plugin only, for a `--stdio` client.
pub(crate) fn stdio(dir: &std::path::Path) -> Vec<String> {
    let mut t = toolhost_stdio_env("--env", &dir.join("stdio-state"));
    t.extend(
        ["--stdio", crate::peers::toolhost_bin(), "serve", "--stdio", "--no-builtins", "--allow-unsigned"]
            .map(String::from),
    );
    t.extend(["--plugin".to_string(), CONFORMANCE_PATH.to_string()]);
    t
}

#[test]
fn python_sdk_uses_a_plugins_resources_prompts_and_questions_in_both_revisions() {
    let dir = test_dir("");
    let server = serve(dir.path());
    let http = vec!["--http".to_string(), server.mcp()];
    let calls = json!([
        ["test_elicitation", {"message": "Who goes there?"}],
        ["test_sampling", {"prompt": "Describe the tavern"}],
        ["elicit_url", {"url": "https://wiki.example/login"}],
    ])
    .to_string();
    let complete = json!({"ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"}, "argument": {"name": "arg1", "value": "te"}}).to_string();
    let template = json!({"ref": {"type": "ref/resource", "uri": "test://template/{id}/data"}, "argument": {"name": "id", "value": "1"}}).to_string();
    let args = [
        "--elicit",
        r#"{"action": "accept", "content": {"username": "ann", "email": "ann@example.com"}}"#,
        "--sample",
        "Smoke and song.",
        "--calls",
        &calls,
        "--resources",
        "--read",
        "test://static-text",
        "--read",
        "test://static-binary",
        "--read",
        "test://template/42/data",
        "--prompts",
        "--prompt",
        "test_prompt_with_arguments",
        "--prompt-args",
        r#"{"arg1": "hello", "arg2": "world"}"#,
        "--complete",
        &complete,
        "--complete",
        &template,
    ];
    for (transport, target) in [("http", http.clone()), ("stdio", stdio(dir.path()))] {
        for (mode, protocol) in [("auto", "2026-07-28"), ("legacy", "2025-11-25")] {
            let v = py(dir.path(), mode, &args, &target);
            let ctx = format!("{transport}, {mode}: {v}");
            assert_eq!(v["protocol_version"], protocol, "{ctx}");
            // Resources, a template, reads of each kind.
            let uris: Vec<&str> =
                v["resources"].as_array().unwrap().iter().map(|r| r["uri"].as_str().unwrap()).collect();
            assert_eq!(uris, ["test://static-text", "test://static-binary"], "{ctx}");
            assert_eq!(v["resource_templates"][0]["uriTemplate"], "test://template/{id}/data", "{ctx}");
            let reads = &v["reads"];
            assert_eq!(
                reads["test://static-text"]["contents"][0]["text"], "This is the content of the static text resource.",
                "{ctx}"
            );
            assert_eq!(reads["test://static-binary"]["contents"][0]["mimeType"], "image/png", "{ctx}");
            assert!(
                reads["test://static-binary"]["contents"][0]["blob"].as_str().unwrap().starts_with("iVBORw0KGgo"),
                "{ctx}"
            );
            assert_eq!(
                reads["test://template/42/data"]["contents"][0]["text"],
                r#"{"id":"42","templateTest":true,"data":"Data for ID: 42"}"#,
                "{ctx}"
            );
            // Prompts, one filled in, and completions of a prompt argument and a template variable.
            assert_eq!(v["prompts"].as_array().unwrap().len(), 4, "{ctx}");
            assert_eq!(
                v["prompt"]["messages"][0]["content"]["text"], "Prompt with arguments: arg1='hello', arg2='world'",
                "{ctx}"
            );
            assert_eq!(v["completions"][0]["completion"]["values"], json!(["test", "testing", "tested"]), "{ctx}");
            assert_eq!(v["completions"][1]["completion"]["values"], json!(["1", "123"]), "{ctx}");
            // The questions: each reached the SDK's callback, and the answer the plugin.
            let results = v["results"].as_array().unwrap();
            assert_eq!(
                text(&results[0]),
                r#"User response: action=accept, content={"username":"ann","email":"ann@example.com"}"#,
                "{ctx}"
            );
            assert_eq!(text(&results[1]), "LLM response: Smoke and song.", "{ctx}");
            assert_eq!(text(&results[2]), "URL elicitation: action=accept", "{ctx}");
            let asked = v["elicitations"].as_array().unwrap();
            assert_eq!(asked.len(), 2, "{ctx}");
            assert_eq!(asked[0]["message"], "Who goes there?", "{ctx}");
            assert_eq!(asked[0]["requestedSchema"]["required"], json!(["username", "email"]), "{ctx}");
            assert_eq!(
                (&asked[1]["mode"], &asked[1]["url"]),
                (&json!("url"), &json!("https://wiki.example/login")),
                "{ctx}"
            );
            assert_eq!(v["samplings"][0]["messages"][0]["content"]["text"], "Describe the tavern", "{ctx}");
            assert_eq!(v["samplings"][0]["maxTokens"], 100, "{ctx}");
        }
    }
    // A client that declares neither: the plugin gets its typed error
    // (`unsupported`) and answers with its own, a tool error the model reads.
    for (mode, target) in [("auto", &http), ("legacy", &http)] {
        let v = py(dir.path(), mode, &["--calls", &calls], target);
        let r = &v["results"];
        for (i, what) in [(0, "elicitation"), (1, "sampling"), (2, "elicitation")] {
            assert_eq!(r[i]["isError"], true, "{mode}: {v}");
            assert_eq!(r[i]["_meta"]["toolhost"]["code"], "forbidden", "{mode}: {v}");
            assert!(text(&r[i]).contains(&format!("the MCP client declared no {what} capability")), "{mode}: {v}");
        }
    }
}

#[test]
fn a_plugin_that_never_stops_asking_is_cut_off_and_a_slow_person_is_bounded_but_not_the_tools_deadline() {
    let dir = test_dir("limits:\n  input_wait_ms: 2500\n  asks_per_call: 5\n");
    let server = serve(dir.path());
    let http = vec!["--http".to_string(), server.mcp()];
    let forever = json!([["ask_forever", {"kind": "elicit"}], ["ask_forever", {"kind": "sample"}]]).to_string();
    for mode in ["legacy", "auto"] {
        let v = py(
            dir.path(),
            mode,
            &["--elicit", r#"{"action": "accept", "content": {}}"#, "--sample", "more", "--calls", &forever],
            &http,
        );
        for r in v["results"].as_array().unwrap() {
            assert_eq!(
                text(r),
                "asked 5 times, then: this call has asked its client 5 times already (limits.asks_per_call)",
                "{mode}: {v}"
            );
        }
        assert_eq!(v["elicitations"].as_array().unwrap().len(), 5, "{mode}: {v}");
    }
    // test_elicitation declares 1000 ms at most; its person takes 1.5 s,
    // and meanwhile another client's calls are answered.
    let slow = json!([["test_elicitation", {"message": "Take your time"}]]).to_string();
    let waiting = {
        let (dir, http, slow) = (dir.path().to_path_buf(), http.clone(), slow.clone());
        std::thread::spawn(move || {
            py(
                &dir,
                "legacy",
                &["--elicit", r#"{"action": "decline"}"#, "--elicit-delay", "1.5", "--calls", &slow],
                &http,
            )
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(500));
    let other = py(dir.path(), "legacy", &["--calls", r#"[["test_simple_text", {}]]"#], &http);
    assert_eq!(text(&other["results"][0]), "This is a simple text response for testing.", "{other}");
    assert!(!waiting.is_finished(), "the other client was answered while the first person thought");
    let v = waiting.join().unwrap();
    assert_eq!(text(&v["results"][0]), "User response: action=decline, content={}", "{v}");
    // The person's 1.5 s are not the tool's latency: it stays FAST.
    let listed = py(dir.path(), "legacy", &[], &http);
    let meta = &listed["tool_meta"]["test_elicitation"]["toolhost"];
    assert!(meta["measured_p50_ms"].as_f64().is_some_and(|ms| ms < 500.0), "{meta}");
    assert_eq!(meta["tier"], "fast", "{meta}");
    // One who takes longer than limits.input_wait_ms: the plugin hears `timeout`.
    let v = py(
        dir.path(),
        "legacy",
        &["--elicit", r#"{"action": "decline"}"#, "--elicit-delay", "4", "--calls", &slow],
        &http,
    );
    assert_eq!(v["results"][0]["isError"], true, "{v}");
    assert!(
        text(&v["results"][0]).contains("no answer to elicitation/create within 2500 ms (limits.input_wait_ms)"),
        "{v}"
    );
}

/// A reviewer sees what a plugin offers besides tools, and that it may ask
/// the user and the model, before loading it.
#[test]
fn inspect_shows_a_plugins_resources_prompts_and_that_it_asks_the_client() {
    let o = crate::common::toolhost()
        .args(["inspect", "--allow-unsigned", "--probes", "0", CONFORMANCE_PATH])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("resources (2): test://static-text, test://static-binary"), "{text}");
    assert!(text.contains("resource templates (1): test://template/{id}/data"), "{text}");
    assert!(text.contains("prompts (4): test_simple_prompt, test_prompt_with_arguments,"), "{text}");
    assert!(text.contains("asks the client: may ask the user (elicitation) and the model (sampling)"), "{text}");
    let o = crate::common::toolhost()
        .args(["inspect", "--json", "--allow-unsigned", "--probes", "0", CONFORMANCE_PATH])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["asks_client"], true);
    assert_eq!(
        v["offers"]["prompts"][1]["arguments"][0],
        json!({"name": "arg1", "description": "First test argument", "required": true})
    );
    // A tools-only plugin offers nothing and asks nothing.
    let o = crate::common::toolhost()
        .args(["inspect", "--json", "--allow-unsigned", "--probes", "0", toolhost_test_artifacts::HOSTILE_PATH])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((v.get("offers"), &v["asks_client"]), (None, &json!(false)));
}

/// A plugin's resources and prompts follow its tools: under the operator's
/// prefix, and only for agents whose allow-list names one of its tools.
#[test]
fn a_plugins_prompts_take_its_prefix_and_only_agents_allowed_its_tools_see_its_offer() {
    let dir = test_dir(
        "plugins:\n  prefix:\n    conformance: cf_\nnpcs:\n  - name: Bard\n    budget_tier: deep\n    tools: [cf_test_simple_text]\n  - name: Mute\n    budget_tier: deep\n    tools: [roll]\n",
    );
    let server = serve_http(dir.path(), &["--allow-unsigned", "--plugin", CONFORMANCE_PATH]);
    let asks = ["--resources", "--prompts", "--read", "test://static-text", "--prompt", "cf_test_simple_prompt"];
    for (who, endpoint) in [("operator", server.mcp()), ("bard", format!("{}/bard", server.mcp()))] {
        let v = py(dir.path(), "legacy", &asks, &["--http".into(), endpoint]);
        let prompts: Vec<&str> = v["prompts"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(
            prompts,
            [
                "cf_test_simple_prompt",
                "cf_test_prompt_with_arguments",
                "cf_test_prompt_with_embedded_resource",
                "cf_test_prompt_with_image"
            ],
            "{who}: {v}"
        );
        assert_eq!(v["resources"].as_array().unwrap().len(), 2, "{who}: {v}");
        assert_eq!(
            v["reads"]["test://static-text"]["contents"][0]["text"], "This is the content of the static text resource.",
            "{who}: {v}"
        );
        assert_eq!(v["prompt"]["messages"][0]["content"]["text"], "This is a simple prompt for testing.", "{who}: {v}");
    }
    let mute = py(dir.path(), "legacy", &asks, &["--http".into(), format!("{}/mute", server.mcp())]);
    assert_eq!((&mute["resources"], &mute["prompts"]), (&json!([]), &json!([])), "{mute}");
    assert!(mute["reads"]["test://static-text"]["error"]["message"].as_str().unwrap().contains("no server"), "{mute}");
    assert!(mute["prompt"]["error"]["message"].as_str().unwrap().contains("cf_test_simple_prompt"), "{mute}");
}
