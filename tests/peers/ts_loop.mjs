// Call one tool over and over on ONE session, with the official TypeScript SDK
// @modelcontextprotocol/sdk 1.x (installed under tests/peers/node_modules).
//
//   node ts_loop.mjs --url URL [--header 'Name: value'] [--tool roll] [--args JSON]
//                    [--every 0.1] --until FILE [--max-seconds 120] [--trace]
//
// Connects once (Client + StreamableHTTPClientTransport with default options:
// `initialize`, protocol 2025-11-25, then the standalone GET SSE stream), then
// calls --tool with --args (default {"expression":"1d20"}) every --every
// seconds until FILE exists (checked before each call, and every 50 ms of the
// pause between calls) or --max-seconds have passed. It never reconnects nor initializes again: after an error it goes
// on with the same Client, so whatever the SDK does on its own (the GET
// stream's reconnection with Last-Event-ID, at most 2 retries) is what happens.
//
// stdout, one JSON object a line:
//   {"ready": true, "session": <Mcp-Session-Id or null>, "protocol": <version>}
//   {"i": N, "start": <unix seconds>, "end": <unix seconds>, "ok": BOOL,
//    "error": <text or null>}                                        (each call)
//   {"done": true, "calls": N, "failed": N, "reason": "until"|"max-seconds"}
//
// A call fails ("ok": false) when it threw (timeout 30 s a call, the SDK's
// own `timeout` request option), answered a JSON-RPC error ("error" is the
// McpError's message, "MCP error CODE: ...") or a result with isError: true
// ("error" is its text). When connecting fails: {"ready": false, "error"} and
// exit status 1; otherwise exit status 0, also when the session is broken
// (client.close() is given 5 s, then the process exits regardless).
//
// stderr: {"t", "sdk_error": ...} for each error the SDK reports through
// onerror without throwing (the GET stream's failures and reconnections);
// with --trace also each HTTP request and response ({"t", "http": "request",
// "method", "headers": {mcp-session-id, last-event-id, mcp-protocol-version}};
// {"t", "http": "response", "method", "status"}; {"t", "http": "failed",
// "method", "error"}), through a logging wrapper around the global fetch.

import { existsSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const CALL_TIMEOUT_MS = 30_000;
const TEARDOWN_MS = 5_000;

function parseArgs(argv) {
  const opts = { headers: {}, tool: 'roll', args: { expression: '1d20' }, every: 0.1, maxSeconds: 120, trace: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    switch (a) {
      case '--url': opts.url = next(); break;
      case '--header': {
        const h = next();
        const at = h.indexOf(':');
        if (at < 0) throw new Error(`--header ${h}: expected 'Name: value'`);
        opts.headers[h.slice(0, at).trim()] = h.slice(at + 1).trim();
        break;
      }
      case '--tool': opts.tool = next(); break;
      case '--args': opts.args = JSON.parse(next()); break;
      case '--every': opts.every = Number(next()); break;
      case '--until': opts.until = next(); break;
      case '--max-seconds': opts.maxSeconds = Number(next()); break;
      case '--trace': opts.trace = true; break;
      default: throw new Error(`unknown argument ${a}`);
    }
  }
  if (!opts.url) throw new Error('--url is required');
  if (!opts.until) throw new Error('--until is required');
  return opts;
}

const now = () => Date.now() / 1000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const emit = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');
const note = (obj) => process.stderr.write(JSON.stringify({ t: now(), ...obj }) + '\n');

function describe(e) {
  if (e === undefined || e === null) return String(e);
  if (typeof e !== 'object') return String(e);
  let s = `${e.constructor?.name ?? e.name ?? 'Error'}: ${e.message ?? String(e)}`;
  if (e.cause !== undefined) s += ` (cause: ${describe(e.cause)})`;
  return s;
}

/** The text of an isError result, else null. */
function resultError(result) {
  if (!result?.isError) return null;
  const texts = (result.content ?? []).filter((b) => b?.type === 'text' && b.text).map((b) => b.text);
  return texts.join(' ') || 'isError: true (no text)';
}

/** The global fetch, logging each request and its outcome to stderr. */
function tracingFetch() {
  const keep = ['mcp-session-id', 'last-event-id', 'mcp-protocol-version'];
  return async (url, init) => {
    const method = init?.method ?? 'GET';
    const h = new Headers(init?.headers);
    const headers = Object.fromEntries(keep.filter((k) => h.has(k)).map((k) => [k, h.get(k)]));
    note({ http: 'request', method, url: String(url), headers });
    try {
      const response = await fetch(url, init);
      note({ http: 'response', method, status: response.status });
      return response;
    } catch (e) {
      note({ http: 'failed', method, error: describe(e) });
      throw e;
    }
  };
}

/** Flush stdout, then exit: a broken session's timers and sockets must not keep the process alive. */
function finish(status) {
  process.stdout.write('', () => process.exit(status));
  setTimeout(() => process.exit(status), 1000).unref();
}

async function main() {
  let opts;
  try {
    opts = parseArgs(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`ts_loop: ${e.message}\n`);
    return finish(2);
  }
  const client = new Client({ name: 'toolhost-ts-loop', version: '0.1.0' }, { capabilities: {} });
  let closing = false;
  client.onerror = (e) => closing || note({ sdk_error: describe(e) });
  const transportOptions = { requestInit: { headers: opts.headers } };
  if (opts.trace) transportOptions.fetch = tracingFetch();
  const transport = new StreamableHTTPClientTransport(new URL(opts.url), transportOptions);
  try {
    await client.connect(transport, { timeout: CALL_TIMEOUT_MS });
  } catch (e) {
    emit({ ready: false, error: describe(e) });
    return finish(1);
  }
  emit({ ready: true, session: transport.sessionId ?? null, protocol: transport.protocolVersion ?? null });

  const deadline = Date.now() + opts.maxSeconds * 1000;
  let calls = 0;
  let failed = 0;
  let reason = 'max-seconds';
  for (;;) {
    if (existsSync(opts.until)) {
      reason = 'until';
      break;
    }
    if (Date.now() >= deadline) break;
    const start = now();
    let error;
    try {
      const result = await client.callTool({ name: opts.tool, arguments: opts.args }, undefined, { timeout: CALL_TIMEOUT_MS });
      error = resultError(result);
    } catch (e) {
      error = e?.constructor?.name === 'McpError' ? e.message : describe(e);
    }
    emit({ i: calls, start, end: now(), ok: error === null, error });
    calls += 1;
    if (error !== null) failed += 1;
    // The pause, cut short once FILE exists.
    const pauseEnd = Date.now() + opts.every * 1000;
    while (Date.now() < pauseEnd && !existsSync(opts.until)) await sleep(Math.min(50, pauseEnd - Date.now()));
  }
  emit({ done: true, calls, failed, reason });

  // close() aborts the streams; it sends no DELETE (terminateSession() would).
  closing = true;
  try {
    await Promise.race([client.close(), sleep(TEARDOWN_MS).then(() => { throw new Error('close() timed out'); })]);
  } catch (e) {
    note({ teardown: describe(e) });
  }
  return finish(0);
}

main().catch((e) => {
  note({ ts_loop: describe(e) });
  finish(1);
});
