use super::*;
use tokio::io::AsyncReadExt as _;

/// What the transport makes of one line that passed the checks, and
/// what rmcp's decoder makes of it, as JSON and as Debug text (`None`:
/// dropped or refused).
fn both_ways(line: &str) -> (Option<String>, Option<String>) {
    let show = |m: &RxJsonRpcMessage<RoleServer>| format!("{} {m:?}", serde_json::to_string(m).unwrap());
    let (verdict, parsed) = check_parsed(line.as_bytes()).unwrap();
    assert_eq!(verdict, Verdict::Pass, "{line}");
    let mut codec = JsonRpcMessageCodec::<RxJsonRpcMessage<RoleServer>>::new();
    let rmcp = codec.decode(&mut BytesMut::from(format!("{line}\n").as_str())).ok().flatten();
    let ours = tool_call(&parsed, line.as_bytes()).map(|call| {
        RxJsonRpcMessage::<RoleServer>::Request(JsonRpcRequest::new(
            call.id,
            ClientRequest::CallToolRequest(call.request),
        ))
    });
    let ours = ours.or_else(|| {
        let mut codec = JsonRpcMessageCodec::<RxJsonRpcMessage<RoleServer>>::new();
        codec.decode(&mut BytesMut::from(format!("{line}\n").as_str())).ok().flatten()
    });
    (ours.as_ref().map(show), rmcp.as_ref().map(show))
}

/// The `tools/call` fast path reads each call exactly as rmcp's decoder
/// does (same message, same `_meta` in the extensions), duplicate keys
/// and stray fields included, and leaves everything else to rmcp.
#[test]
fn a_tool_call_is_read_as_rmcps_decoder_reads_it() {
    let fast = [
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"roll","arguments":{"expression":"1d20"}}}"#,
        r#"{"jsonrpc":"2.0","id":"a-1","method":"tools/call","params":{"name":"roll","arguments":null}}"#,
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"roll","_meta":{"progressToken":"p1","toolhost/tier":"FAST"}}}"#,
        r#"{"params":{"arguments":{"n":[1,2,{"x":"\u2028"}]},"name":"r\u00f6ll"},"method":"tools/call","id":9,"jsonrpc":"2.0"}"#,
        r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"roll","extra":[1]},"stray":true}"#,
    ];
    for line in fast {
        let (verdict, parsed) = check_parsed(line.as_bytes()).unwrap();
        assert_eq!(verdict, Verdict::Pass);
        assert!(tool_call(&parsed, line.as_bytes()).is_some(), "fast path: {line}");
        let (ours, rmcp) = both_ways(line);
        assert!(ours.is_some());
        assert_eq!(ours, rmcp, "{line}");
        if line.contains("_meta") {
            assert!(ours.unwrap().contains("\"progressToken\":\"p1\""), "the _meta kept");
        }
    }
    // Duplicate keys: the parsed Value keeps the last, rmcp refuses the
    // message or reads it as another request; so does the transport.
    for line in [
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"roll"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"b"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"roll"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"roll","_meta":{},"_meta":{"progressToken":1}}}"#,
    ] {
        let (_, parsed) = check_parsed(line.as_bytes()).unwrap();
        assert!(tool_call(&parsed, line.as_bytes()).is_none(), "not the fast path: {line}");
        let (ours, rmcp) = both_ways(line);
        assert_eq!(ours, rmcp, "{line}");
    }
    for other in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"roll"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
    ] {
        let (_, parsed) = check_parsed(other.as_bytes()).unwrap();
        assert!(tool_call(&parsed, other.as_bytes()).is_none(), "{other}");
    }
}

#[tokio::test]
async fn lines_are_checked_answered_and_passed_on_in_order() {
    let (mut client, server) = tokio::io::duplex(1 << 16);
    let (r, w) = tokio::io::split(server);
    let mut t = over(r, w);
    client
        .write_all(
            b"{oops\n\n{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{}}\n  {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}  \n",
        )
        .await
        .unwrap();
    let m = t.receive().await.expect("the ping");
    assert!(format!("{m:?}").contains("Ping"), "{m:?}");
    let _ = t.send(TxJsonRpcMessage::<RoleServer>::error(ErrorData::internal_error("x", None), None)).await;
    drop(t);
    let mut out = String::new();
    client.read_to_string(&mut out).await.unwrap();
    let lines: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[0]["error"]["code"], -32700);
    assert_eq!(lines[1]["error"]["message"], "x");
}

fn answer(i: usize) -> TxJsonRpcMessage<RoleServer> {
    TxJsonRpcMessage::<RoleServer>::error(ErrorData::internal_error(format!("{i:0>100}"), None), None)
}

fn line_bytes(m: &TxJsonRpcMessage<RoleServer>) -> u64 {
    serde_json::to_vec(m).unwrap().len() as u64 + 1
}

type Duplexed = LineTransport<BufReader<tokio::io::DuplexStream>>;

/// A transport whose output is a 64-byte pipe, with 100 answers queued:
/// the transport, its input's other end (kept open), its output's other
/// end, and the bytes queued.
async fn hundred_answers_queued() -> (Duplexed, tokio::io::DuplexStream, tokio::io::DuplexStream, u64) {
    let (input, server_in) = tokio::io::duplex(64);
    let (server_out, client_out) = tokio::io::duplex(64);
    let mut t = over(server_in, server_out);
    for i in 0..100 {
        t.send(answer(i)).await.unwrap();
    }
    (t, input, client_out, (0..100).map(|i| line_bytes(&answer(i))).sum())
}

/// The session's runtime is shut down as soon as rmcp has closed the
/// transport: `close` returns only once everything queued is written,
/// here to a client reading slowly through a 64-byte pipe.
#[tokio::test]
async fn close_returns_once_everything_queued_is_written() {
    let (mut t, _input, mut client_out, total) = hundred_answers_queued().await;
    let reader = tokio::spawn(async move {
        let mut out = Vec::new();
        let mut piece = [0u8; 64];
        loop {
            match client_out.read(&mut piece).await.unwrap() {
                0 => return out,
                n => out.extend_from_slice(&piece[..n]),
            }
            tokio::task::yield_now().await;
        }
    });
    t.close().await.unwrap();
    assert_eq!(t.out.written.load(std::sync::atomic::Ordering::Relaxed), total, "close returned before the end");
    drop(t);
    let out = String::from_utf8(reader.await.unwrap()).unwrap();
    assert_eq!(out.lines().count(), 100);
}

fn ping(id: Value) -> String {
    format!("{}\n", json!({"jsonrpc": "2.0", "id": id, "method": "ping"}))
}

/// What the transport passes on to rmcp next, as its id.
async fn next_id(t: &mut LineTransport<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>) -> Value {
    let m = t.receive().await.expect("a message");
    serde_json::to_value(&m).unwrap()["id"].clone()
}

/// An id in flight (passed to rmcp, not answered yet) or cancelled
/// lately is refused when reused: rmcp keeps one entry per id, and a
/// second request under it took over the first's answer or
/// cancellation. Answered, an id is free again; `1` and `"1"` differ.
#[tokio::test]
async fn a_request_reusing_an_id_in_flight_is_refused() {
    let (mut client, server) = tokio::io::duplex(1 << 16);
    let (r, w) = tokio::io::split(server);
    let mut t = over(r, w);
    client.write_all((ping(json!(5)) + &ping(json!(5)) + &ping(json!("5"))).as_bytes()).await.unwrap();
    assert_eq!(next_id(&mut t).await, json!(5));
    assert_eq!(next_id(&mut t).await, json!("5"), "the second 5 was passed on");
    let ok =
        |id: i64| TxJsonRpcMessage::<RoleServer>::response(rmcp::model::ServerResult::empty(()), RequestId::Number(id));
    t.send(ok(5)).await.unwrap();
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}});
    client
        .write_all((ping(json!(5)) + &format!("{cancel}\n") + &ping(json!(5)) + &ping(json!(6))).as_bytes())
        .await
        .unwrap();
    assert_eq!(next_id(&mut t).await, json!(5), "answered, 5 is free again");
    let m = t.receive().await.expect("the cancellation");
    assert!(format!("{m:?}").contains("Cancelled"), "{m:?}");
    assert_eq!(next_id(&mut t).await, json!(6), "5, cancelled just now, was refused");
    drop(t);
    let mut out = String::new();
    client.read_to_string(&mut out).await.unwrap();
    let lines: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!((lines[0]["id"].clone(), lines[0]["error"]["code"].as_i64()), (json!(5), Some(-32600)));
    assert!(lines[0]["error"]["message"].as_str().unwrap().contains("not answered yet"), "{out}");
    assert_eq!(lines[1]["id"], 5, "the answer sent");
    assert!(lines[2]["error"]["message"].as_str().unwrap().contains("cancelled request"), "{out}");
}

/// The ids kept after cancellation are bounded in number and in bytes
/// (a string id may be megabytes long).
#[test]
fn cancelled_ids_kept_are_bounded() {
    let mut kept = CancelledIds::default();
    for i in 0..200 {
        kept.keep(RequestId::String(format!("{i:01024}").into()));
    }
    assert!(kept.bytes <= CANCELLED_ID_BYTES_KEPT && kept.order.len() == kept.kept.len(), "{}", kept.bytes);
    assert!(kept.kept.contains(&RequestId::String(format!("{:01024}", 199).into())), "the newest is kept");
    assert!(!kept.kept.contains(&RequestId::String(format!("{:01024}", 0).into())), "the oldest went");
    kept.keep(RequestId::String("x".repeat(CANCELLED_ID_BYTES_KEPT + 1).into()));
    assert!(kept.bytes <= CANCELLED_ID_BYTES_KEPT);
    for i in 0..(2 * CANCELLED_IDS_KEPT as i64) {
        kept.keep(RequestId::Number(i));
    }
    assert_eq!(kept.order.len(), CANCELLED_IDS_KEPT);
}

/// A last message without its newline (`printf '%s'`) is still read.
#[tokio::test]
async fn a_last_line_without_its_newline_is_read() {
    let (mut client, server) = tokio::io::duplex(1 << 16);
    let (r, w) = tokio::io::split(server);
    let mut t = over(r, w);
    client.write_all(br#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#).await.unwrap();
    client.shutdown().await.unwrap();
    assert_eq!(next_id(&mut t).await, json!(7));
    assert!(t.receive().await.is_none(), "then the input has ended");
}

/// rmcp drops the transport without closing it when initialization
/// fails: `Replies::finish` still waits until what was queued is
/// written (`serve --stdio` calls it then).
#[tokio::test]
async fn finish_writes_what_a_dropped_transport_queued() {
    let (t, _input, mut client_out, total) = hundred_answers_queued().await;
    let replies = t.replies();
    drop(t);
    let reader = tokio::spawn(async move {
        let mut out = String::new();
        client_out.read_to_string(&mut out).await.unwrap();
        out
    });
    replies.finish().await;
    assert_eq!(replies.0.written.load(std::sync::atomic::Ordering::Relaxed), total, "finish returned before the end");
    drop(replies);
    assert_eq!(reader.await.unwrap().lines().count(), 100);
}

/// A client that leaves its end of the output open without reading
/// does not hold the end of the session for ever.
#[tokio::test]
async fn close_gives_up_on_output_nobody_reads() {
    let (mut t, _input, _never_read, _) = hundred_answers_queued().await;
    *t.out.stall.lock().unwrap() = std::time::Duration::from_millis(200);
    tokio::time::timeout(std::time::Duration::from_secs(30), t.close())
        .await
        .expect("close waited on output nobody reads")
        .unwrap();
    assert!(t.out.written.load(std::sync::atomic::Ordering::Relaxed) <= 64);
}

/// When the client closes its end of the output, the session ends even
/// though its input stays open: nothing more could be answered.
#[tokio::test]
async fn the_session_ends_when_the_client_closes_the_output() {
    let (_input, server_in) = tokio::io::duplex(64);
    let (server_out, client_out) = tokio::io::duplex(64);
    let mut t = over(server_in, server_out);
    drop(client_out);
    t.send(answer(0)).await.unwrap();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(30), t.receive())
        .await
        .expect("the session went on reading with its output closed");
    assert!(ended.is_none(), "{ended:?}");
}
