//! `server.max_body_bytes` without breaking clients (issue #30, item 6):
//! a body over the limit is read to its end and discarded before the 413,
//! so the client hears the answer and its connection and session go on;
//! past 64 MiB, the 413 closes the connection.
//!
//! - `a_python_client_over_the_body_limit_gets_an_error_and_keeps_its_session`:
//!   the official Python SDK's client, 5 MB calls against the default limit.
//! - `over_the_limit_the_connection_serves_the_next_request`: the same on
//!   the wire, one keep-alive connection.
//! - `a_body_over_64_mib_gets_413_and_the_connection_closed`: streamed,
//!   chunked, and declared in `Content-Length`.
//! - `chunked_requests_held_open_hold_only_what_they_sent`: a body's share
//!   of `server.max_bodies_bytes` is its size once read.

use crate::live::serve;
use crate::peers::python;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

/// A client of the `mcp` package: in one session, `ROUNDS` times a 5 MB
/// `tools/call` (over the default 4 MiB limit) then a normal one. Prints
/// one JSON object: `rounds`, each `{"big": {"error"|"result"}, "big_seconds",
/// "after": the normal call's result}`.
const CLIENT: &str = r#"
import asyncio, json, sys, time
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

ROUNDS = 3

async def main(url):
    rounds = []
    async with create_mcp_http_client() as http:
        async with Client(streamable_http_client(url, http_client=http), read_timeout_seconds=60, cache=None) as client:
            for i in range(ROUNDS):
                started = time.monotonic()
                try:
                    r = await client.call_tool("roll", {"expression": "1d6", "padding": "x" * 5_000_000})
                    big = {"result": r.model_dump(mode="json", by_alias=True)}
                except MCPError as e:
                    big = {"error": {"code": e.error.code, "message": e.error.message}}
                took = time.monotonic() - started
                r = await client.call_tool("roll", {"expression": "2d6+3", "seed": i})
                after = r.model_dump(mode="json", by_alias=True, exclude_none=True)
                rounds.append({"big": big, "big_seconds": took, "after": after})
    print(json.dumps({"rounds": rounds}))

asyncio.run(main(sys.argv[1]))
"#;

#[test]
fn a_python_client_over_the_body_limit_gets_an_error_and_keeps_its_session() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, base) = serve(dir.path());
    let script = dir.path().join("big_call.py");
    std::fs::write(&script, CLIENT).unwrap();
    let started = Instant::now();
    let out = Command::new(python()).arg(&script).arg(format!("{base}/mcp")).output().expect("run the Python client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the client's session survived: {}\n{stdout}\n{stderr}", out.status);
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    let rounds = v["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 3, "{v}");
    for (i, round) in rounds.iter().enumerate() {
        let error = &round["big"]["error"];
        assert_eq!(error["code"], -32000, "round {i}: the 5 MB call is an error: {round}");
        assert!(
            error["message"].as_str().unwrap().contains("4194304 byte limit"),
            "round {i}: it names the limit: {round}"
        );
        let after = &round["after"];
        assert_ne!(after["isError"], true, "round {i}: the same session calls on: {round}");
        let rolled: Value = serde_json::from_str(after["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(rolled["expression"], "2d6+3", "round {i}: {round}");
        eprintln!("round {i}: the 5 MB call was answered in {:.3} s", round["big_seconds"].as_f64().unwrap());
    }
    eprintln!("the whole client: {:.2} s", started.elapsed().as_secs_f64());
}

/// The port of `http://127.0.0.1:PORT`.
fn port_of(base: &str) -> u16 {
    base.rsplit(':').next().unwrap().parse().unwrap()
}

/// A POST to `/mcp` on `port` with `extra` headers, up to the blank line.
fn post_head(port: u16, extra: &str) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{extra}\r\n"
    )
}

/// One response's head and body, read from `s` without reading past it
/// (the body by its `Content-Length`).
fn read_response(s: &mut TcpStream) -> (String, Vec<u8>) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut byte).unwrap();
        assert_eq!(n, 1, "the connection ended inside a response head: {}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let len: usize = header(&head, "content-length").expect("a Content-Length").parse().unwrap();
    let mut body = vec![0; len];
    s.read_exact(&mut body).unwrap();
    (head, body)
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Reads `s` to its end (EOF, or a reset after the answer): what came.
fn read_to_close(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                panic!("the connection stayed open: {}", String::from_utf8_lossy(&got))
            }
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn over_the_limit_the_connection_serves_the_next_request() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, base) = serve(dir.path());
    let port = port_of(&base);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let big = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#, "x".repeat(5 << 20));
    // Written whole before reading: a server that answered before taking
    // the body would leave this write stuck, or the answer lost.
    s.write_all(post_head(port, &format!("Content-Length: {}\r\n", big.len())).as_bytes()).unwrap();
    s.write_all(big.as_bytes()).unwrap();
    let (head, body) = read_response(&mut s);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert!(header(&head, "connection").is_none_or(|c| !c.eq_ignore_ascii_case("close")), "kept open: {head}");
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["error"]["code"], -32000, "{body}");

    // The same connection: the next request is read as one.
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
    .to_string();
    let extra = format!("Content-Length: {}\r\nConnection: close\r\n", init.len());
    s.write_all(post_head(port, &extra).as_bytes()).unwrap();
    s.write_all(init.as_bytes()).unwrap();
    let answer = read_to_close(&mut s);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""protocolVersion""#), "{answer}");
}

#[test]
fn a_body_over_64_mib_gets_413_and_the_connection_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, base) = serve(dir.path());
    let port = port_of(&base);

    // Streamed in chunks, with no length declared: the server reads 64 MiB,
    // answers and stops reading.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut writer = s.try_clone().unwrap();
    const OFFERED: usize = 256 << 20;
    let sender = std::thread::spawn(move || {
        let head = post_head(port, "Transfer-Encoding: chunked\r\n");
        let chunk = vec![b'x'; 64 << 10];
        let frame = [format!("{:x}\r\n", chunk.len()).into_bytes(), chunk, b"\r\n".to_vec()].concat();
        let mut sent = 0;
        if writer.write_all(head.as_bytes()).is_err() || writer.write_all(b"4\r\n{\"a\"\r\n").is_err() {
            return sent;
        }
        while sent < OFFERED {
            if writer.write_all(&frame).is_err() {
                return sent;
            }
            sent += 64 << 10;
        }
        let _ = writer.write_all(b"0\r\n\r\n");
        sent
    });
    let started = Instant::now();
    let answer = read_to_close(&mut s);
    let sent = sender.join().unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no answer: {answer:?}"));
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert_eq!(header(head, "connection").map(str::to_ascii_lowercase).as_deref(), Some("close"), "{head}");
    assert!(body.contains("byte limit"), "{body}");
    assert!(sent < OFFERED, "the server stopped reading: {sent} bytes were taken");
    assert!(sent >= 64 << 20, "it read 64 MiB first: {sent}");
    eprintln!("64 MiB read and refused in {:.2} s ({} MiB sent)", started.elapsed().as_secs_f64(), sent >> 20);

    // Declared: answered at once, nothing read.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(post_head(port, &format!("Content-Length: {}\r\n", (64 << 20) + 1)).as_bytes()).unwrap();
    s.write_all(b"{\"jsonrpc\":").unwrap();
    let answer = read_to_close(&mut s);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    let head = answer.split("\r\n\r\n").next().unwrap();
    assert_eq!(header(head, "connection").map(str::to_ascii_lowercase).as_deref(), Some("close"), "{head}");
}

/// A body's share of `server.max_bodies_bytes` is what it holds once read:
/// requests sent chunked (no length declared, so the whole
/// `max_body_bytes` is set aside while they are read) and then held open
/// by a slow call hold only their few bytes, and another client still
/// gets in (with 8 MiB of bodies, two such requests used to leave it 503).
#[test]
fn chunked_requests_held_open_hold_only_what_they_sent() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolhost.yaml"),
        format!(
            "trust:\n  allow_unsigned: true\nplugins:\n  files: [{:?}]\nserver:\n  max_bodies_bytes: 8388608\n",
            toolhost_test_artifacts::CONFORMANCE_PATH
        ),
    )
    .unwrap();
    let (_server, base) = serve(dir.path());
    let port = port_of(&base);
    let post = |extra: &str, body: &str| {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let extra = format!("Content-Length: {}\r\nConnection: close\r\n{extra}", body.len());
        s.write_all(post_head(port, &extra).as_bytes()).unwrap();
        s.write_all(body.as_bytes()).unwrap();
        read_to_close(&mut s)
    };
    let initialize = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
    .to_string();
    let answer = post("", &initialize);
    let head = answer.split("\r\n\r\n").next().unwrap();
    let session = header(head, "mcp-session-id").unwrap_or_else(|| panic!("no session: {answer}")).to_string();
    post(&format!("Mcp-Session-Id: {session}\r\n"), r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);

    // Three calls of 2 s, each sent chunked, held open while they run
    // (longer than a body waits for its share: 1 s).
    let held: Vec<TcpStream> = (0..3)
        .map(|i| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let extra = format!("Transfer-Encoding: chunked\r\nConnection: close\r\nMcp-Session-Id: {session}\r\n");
            let call = format!(
                r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"long_quest","arguments":{{"steps":20}}}}}}"#,
                10 + i
            );
            s.write_all(post_head(port, &extra).as_bytes()).unwrap();
            s.write_all(format!("{:x}\r\n{call}\r\n0\r\n\r\n", call.len()).as_bytes()).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let answer = post("", &initialize);
    assert!(answer.starts_with("HTTP/1.1 200"), "another client gets in while they run: {answer}");
    for mut s in held {
        let answer = read_to_close(&mut s);
        assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("done after 20 steps"), "{answer}");
    }
}
