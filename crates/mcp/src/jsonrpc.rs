//! JSON-RPC checks in front of rmcp, on both transports (`http.rs` before
//! rmcp's service, `stdio.rs` inside its transport's `receive`), so that
//! every malformed message gets the answer the specification and the
//! reference SDKs give (rmcp answers some with 415 or `-32601`, and over
//! stdio drops them unanswered).

use serde_json::{Value, json};

/// Parse error.
pub const PARSE_ERROR: i64 = -32700;
/// Invalid request.
pub const INVALID_REQUEST: i64 = -32600;
/// Invalid params.
pub const INVALID_PARAMS: i64 = -32602;

/// A message refused before it reached the protocol layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// The JSON-RPC error code.
    pub code: i64,
    /// The JSON-RPC error response to send.
    pub response: Value,
}

impl Rejection {
    pub(crate) fn new(id: Value, code: i64, message: String) -> Rejection {
        Rejection { code, response: json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}) }
    }
}

/// The `id` of a request whose message is cut (too large to read whole),
/// found in the part that was read: the value of the top-level object's
/// `id` member, when it comes before the cut and is a string or an
/// integer, as the SDKs write it (`{"jsonrpc":"2.0","id":7,"method":...}`).
/// So a refusal can carry the id the client waits on (with `null` its
/// call would hang until its own timeout).
pub fn leading_id(prefix: &[u8]) -> Option<Value> {
    let skip_ws = |mut i: usize| {
        while prefix.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        i
    };
    // The end (one past the closing quote) of the string opening at `i`.
    let string_end = |mut i: usize| {
        i += 1;
        loop {
            match *prefix.get(i)? {
                b'\\' => i += 2,
                b'"' => return Some(i + 1),
                _ => i += 1,
            }
        }
    };
    let mut i = skip_ws(0);
    if *prefix.get(i)? != b'{' {
        return None;
    }
    i += 1;
    let (mut depth, mut key_next) = (1usize, true);
    while i < prefix.len() {
        match prefix[i] {
            b'"' => {
                let end = string_end(i)?;
                if depth == 1 && key_next {
                    let key = &prefix[i + 1..end - 1];
                    let colon = skip_ws(end);
                    if *prefix.get(colon)? != b':' {
                        return None;
                    }
                    let value = skip_ws(colon + 1);
                    if key == b"id" {
                        let mut values = serde_json::Deserializer::from_slice(&prefix[value..]).into_iter::<Value>();
                        let id = values.next()?.ok()?;
                        // A value running to the cut may itself be cut (`12` of `123`).
                        let whole = value + values.byte_offset() < prefix.len();
                        return (whole && (id.is_string() || id.is_i64() || id.is_u64())).then_some(id);
                    }
                    key_next = false;
                    i = value;
                    continue;
                }
                i = end;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.checked_sub(1)?,
            b',' if depth == 1 => key_next = true,
            _ => {}
        }
        i += 1;
    }
    None
}

/// What to do with one incoming message.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Well formed: pass it on.
    Pass,
    /// A notification that is not well formed: JSON-RPC answers no
    /// notification, so it is dropped.
    Drop,
}

/// Checks one message: JSON (else -32700), a single JSON-RPC 2.0 object
/// (else -32600; a batch too: the protocol versions served here have
/// none) that is a request (string `method`, string or integer `id`), a
/// notification (string `method`, no `id`) or a response (`result` or
/// `error`, no `method`); `params`, when present, an object. A request with
/// bad params, and a `tools/call` whose params are not
/// `{name: string, arguments?: object}`, get -32602 with the request's id;
/// a malformed notification is dropped, never answered.
pub fn check_message(body: &[u8]) -> Result<Verdict, Rejection> {
    check_parsed(body).map(|(verdict, _)| verdict)
}

/// [`check_message`], with the message as parsed for the check (so that
/// a caller need not parse it again).
pub fn check_parsed(body: &[u8]) -> Result<(Verdict, Value), Rejection> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        let hint = if body.starts_with(b"\xEF\xBB\xBF") {
            " (the message starts with a UTF-8 byte order mark; send JSON without one)"
        } else {
            ""
        };
        Rejection::new(Value::Null, PARSE_ERROR, format!("Parse error: {e}{hint}"))
    })?;
    let invalid = |why: &str| Rejection::new(Value::Null, INVALID_REQUEST, format!("Invalid Request: {why}"));
    let Value::Object(m) = &v else {
        return Err(invalid(if v.is_array() {
            "batches are not supported; send one message at a time"
        } else {
            "a message must be a JSON object"
        }));
    };
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("\"jsonrpc\" must be \"2.0\""));
    }
    let id = match m.get("id") {
        None => None,
        Some(id @ Value::String(_)) => Some(id.clone()),
        Some(id @ Value::Number(n)) if n.is_i64() => Some(id.clone()),
        // Past i64 (serde_json reads those beyond u64 as floats): a whole
        // number rmcp cannot hold, named as such.
        Some(Value::Number(n))
            if n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0 && f.abs() >= 2f64.powi(63)) =>
        {
            return Err(invalid(
                "an integer \"id\" must be between -9223372036854775808 and 9223372036854775807 (a signed 64-bit integer)",
            ));
        }
        Some(_) => return Err(invalid("\"id\" must be a string or an integer")),
    };
    let is_response = m.contains_key("result") || m.contains_key("error");
    let method = match m.get("method") {
        Some(Value::String(method)) if !is_response => method,
        Some(Value::String(_)) => return Err(invalid("a message is a request or a response, not both")),
        Some(_) => return Err(invalid("\"method\" must be a string")),
        None if is_response && id.is_some() => return Ok((Verdict::Pass, v)),
        None if is_response => return Err(invalid("a response needs the \"id\" of its request")),
        None => return Err(invalid("a message needs a \"method\", or a \"result\" or \"error\"")),
    };
    let params = m.get("params");
    let bad_params = if params.is_some_and(|p| !p.is_object()) {
        Some("\"params\" must be an object")
    } else if params.and_then(|p| p.get("_meta")).is_some_and(|meta| !meta.is_object()) {
        Some("\"_meta\" must be an object")
    } else if method == "tools/call" {
        let name_ok = params.and_then(|p| p.get("name")).is_some_and(Value::is_string);
        let args_ok = params.and_then(|p| p.get("arguments")).is_none_or(|a| a.is_object() || a.is_null());
        match (name_ok, args_ok) {
            (false, _) => Some("\"name\" must be a string"),
            (true, false) => Some("\"arguments\" must be an object"),
            (true, true) => None,
        }
    } else if method == "logging/setLevel" {
        // rmcp answers a level it does not know as an unknown method.
        let level = params.and_then(|p| p.get("level")).and_then(Value::as_str);
        (!level.is_some_and(|l| LOG_LEVELS.contains(&l)))
            .then_some("\"level\" must be one of debug, info, notice, warning, error, critical, alert, emergency")
    } else {
        None
    };
    match (bad_params, id) {
        (None, _) => Ok((Verdict::Pass, v)),
        (Some(_), None) => Ok((Verdict::Drop, v)),
        (Some(why), Some(id)) => Err(Rejection::new(id, INVALID_PARAMS, format!("Invalid params: {why}"))),
    }
}

/// The MCP log levels (RFC 5424's), lowest first.
const LOG_LEVELS: [&str; 8] = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

/// The longest stdio message accepted, in bytes; a longer line is answered
/// with -32600 and skipped without being held in memory.
pub const MAX_STDIO_MESSAGE: usize = 4 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_requests_id_is_found_before_the_cut() {
        let big = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"arguments":{{"x":"{}"#,
            "a".repeat(1000)
        );
        assert_eq!(leading_id(big.as_bytes()), Some(json!(7)));
        assert_eq!(
            leading_id(br#" { "method": "x", "params": {"id": 3, "s": "}\"{"}, "id" : "abc-1", "#),
            Some(json!("abc-1"))
        );
        assert_eq!(
            leading_id(br#"{"jsonrpc":"2.0","method":"tools/call","params":{"id":5,"arguments":{"x":"aaaa"#),
            None,
            "a nested id is not the request's"
        );
        assert_eq!(leading_id(br#"{"id": null, "method": "x""#), None);
        assert_eq!(leading_id(br#"{"id": 1.5, "method": "x""#), None);
        assert_eq!(leading_id(br#"[{"id": 1}"#), None);
        assert_eq!(leading_id(br#"{"id": 12"#), None, "an id running to the cut may be cut itself");
        assert_eq!(leading_id(br#"{"id": 12,"#), Some(json!(12)));
    }

    fn code(body: &str) -> Option<i64> {
        check_message(body.as_bytes()).err().map(|r| r.code)
    }

    #[test]
    fn ids_params_and_mixed_messages_are_checked() {
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#), Some(INVALID_REQUEST));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#), Some(INVALID_REQUEST));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}"#), Some(INVALID_REQUEST));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":5}"#), Some(INVALID_PARAMS));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":5}}"#), Some(INVALID_PARAMS));
        assert_eq!(code(r#"{"jsonrpc":"2.0","result":{}}"#), Some(INVALID_REQUEST));
        let drop = |b: &str| check_message(b.as_bytes()).unwrap();
        assert_eq!(drop(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":5}"#), Verdict::Drop);
        assert_eq!(drop(r#"{"jsonrpc":"2.0","method":"tools/call","params":{}}"#), Verdict::Drop);
    }

    #[test]
    fn each_malformation_gets_its_code() {
        assert_eq!(code("{not json"), Some(PARSE_ERROR));
        assert_eq!(code(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#), Some(INVALID_REQUEST));
        assert_eq!(code("42"), Some(INVALID_REQUEST));
        assert_eq!(code(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#), Some(INVALID_REQUEST));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#), Some(INVALID_REQUEST));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":5}"#), Some(INVALID_REQUEST));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1}"#), Some(INVALID_REQUEST));
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{}}}"#),
            Some(INVALID_PARAMS)
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"roll","arguments":"1d20"}}"#),
            Some(INVALID_PARAMS)
        );
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"roll"}}"#), None);
        assert_eq!(code(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), None);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#), None);
    }

    #[test]
    fn invalid_params_keep_the_request_id() {
        let r = check_message(br#"{"jsonrpc":"2.0","id":"x7","method":"tools/call","params":{}}"#).unwrap_err();
        assert_eq!(r.response["id"], "x7");
        let r = check_message(b"{oops").unwrap_err();
        assert_eq!(r.response["id"], Value::Null);
    }

    /// What rmcp cannot hold as an id (an integer past `i64`) and a byte
    /// order mark get errors that say so, not a bare "Invalid request".
    #[test]
    fn big_ids_and_byte_order_marks_are_named() {
        let message = |body: &[u8]| check_message(body).unwrap_err().response["error"]["message"].to_string();
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":9223372036854775807,"method":"ping"}"#), None);
        for id in ["9223372036854775808", "18446744073709551616", "99999999999999999999999", "-9223372036854775809"] {
            let big = message(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#).as_bytes());
            assert!(big.contains("a signed 64-bit integer"), "{id}: {big}");
        }
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":-9223372036854775808,"method":"ping"}"#), None);
        let fraction = message(br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#);
        assert!(fraction.contains("a string or an integer"), "{fraction}");
        let bom = message(b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
        assert!(bom.contains("byte order mark"), "{bom}");
    }

    /// A log level MCP does not have is invalid params (rmcp would answer
    /// "method not found"); each of the eight levels passes.
    #[test]
    fn set_level_takes_the_mcp_levels_only() {
        let set = |level: Value| {
            code(
                &json!({"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": level}})
                    .to_string(),
            )
        };
        for level in LOG_LEVELS {
            assert_eq!(set(json!(level)), None, "{level}");
        }
        for bad in [json!("bogus"), json!("WARNING"), json!(3), Value::Null] {
            assert_eq!(set(bad.clone()), Some(INVALID_PARAMS), "{bad}");
        }
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":"logging/setLevel"}"#), Some(INVALID_PARAMS));
    }
}
