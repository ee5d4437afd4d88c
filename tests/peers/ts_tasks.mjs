// MCP *tasks* for long tool calls, driven with the official TypeScript SDKs
// (installed under tests/peers/node_modules by scripts/install-peers).
//
//   node ts_tasks.mjs --url URL [--sdk v1|v2] (--run|--cancel|--call) TOOL [--args JSON]
//                     [--ttl MS] [--timeout S] [--no-progress]
//                     [--negotiation auto|legacy] [--task-preference P]   (v2 only)
//
// Connects to one Streamable HTTP server, lists its tools, runs ONE action and
// prints ONE JSON object on stdout. Errors are recorded in the object, never
// thrown: exit status 0 whenever the object was printed (a usage error too).
//
// --sdk v1 (default): @modelcontextprotocol/sdk 1.x, which speaks 2025-11-25
//   and its experimental tasks (`initialize`; tools/call with params.task
//   answers a CreateTaskResult; tasks/get, tasks/result, tasks/cancel).
//   --run     client.experimental.tasks.callToolStream(), the SDK's own task
//             driver: it adds `task` when tools/list marked the tool
//             execution.taskSupport optional|required (and the server declared
//             capabilities.tasks.requests.tools.call), then polls tasks/get at
//             the server's pollInterval and fetches tasks/result once
//             completed. Every message it yields is in "messages"; a tool that
//             is not a task tool goes through client.callTool() instead.
//   --cancel  the same stream; at its `taskCreated` message
//             client.experimental.tasks.cancelTask(), then the stream is
//             drained (its own tasks/get sees the cancel), then getTask()
//             until terminal ("final").
//   --call    plain client.callTool() (no task requested).
//
// --sdk v2: @modelcontextprotocol/client 2.x with @modelcontextprotocol/ext-tasks.
//   The client negotiates with `versionNegotiation: {mode: "auto"}` (a
//   `server/discover` probe; the SDK's own default is "legacy", i.e.
//   `initialize` and 2025-11-25: `--negotiation legacy`). On 2026-07-28 the
//   tasks extension (io.modelcontextprotocol/tasks, SEP-2663) is driven by
//   ext-tasks' createTaskSessionFromClient(); its V2 task traffic (tools/call,
//   tasks/*) cannot go through Client.request (the SDK rejects resultType
//   "task"), so ext-tasks requires a host `rawDispatch`: this script sends
//   those requests on the client's own transport with string ids and takes
//   their responses off the transport before the SDK's Protocol sees them.
//   --run     session.callTool(); for a task, execution.updates() to the
//             outcome (each event in "messages").
//   --cancel  session.callTool(); at the first task event execution.cancel(),
//             then session.task(id).snapshot() until terminal ("final").
//   --call    plain client.callTool() of the v2 SDK (no extension declared).
//   --task-preference allow|prefer|require|forbid  ext-tasks' task.preference
//             (its default "allow" lets a 2026-07-28 server decide, but on
//             2025-11-25 asks for a task only for taskSupport "required"
//             tools: use "prefer" there for an "optional" one).
//
// The object: {"sdk", "sdk_package", "protocol_version", "action", "tool",
//   "path", "created", "messages", "statuses", "cancel", "result", "final",
//   "progress", "error", "sdk_errors", "wire"}.
//   created   the task as the SDK first handed it over
//   statuses  each task status the SDK reported, in order
//   result    the CallToolResult (or v2's outcome)
//   final     the last task state read
//   error     {"name", "message", "code"?, "data"?, "at": [SDK stack frames]}
//             of the first failure (the run stops there)
//   sdk_errors what the SDK reported through onerror without throwing
//   wire      a compact log of the JSON-RPC traffic after connecting
//             (">" sent, "<" received)
//
//   ts_tasks.mjs --url http://127.0.0.1:8931/mcp --run long_quest --args '{"steps":5}'
//   ts_tasks.mjs --url http://127.0.0.1:8931/mcp --sdk v2 --cancel long_quest --args '{"steps":50}'

import { readFileSync } from 'node:fs';

function parseArgs(argv) {
  const opts = { sdk: 'v1', args: {}, timeout: 30, negotiation: 'auto', progress: true };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    switch (a) {
      case '--url': opts.url = next(); break;
      case '--sdk': opts.sdk = next(); break;
      case '--run': opts.action = 'run'; opts.tool = next(); break;
      case '--cancel': opts.action = 'cancel'; opts.tool = next(); break;
      case '--call': opts.action = 'call'; opts.tool = next(); break;
      case '--args': opts.args = JSON.parse(next()); break;
      case '--ttl': opts.ttl = Number(next()); break;
      case '--timeout': opts.timeout = Number(next()); break;
      case '--negotiation': opts.negotiation = next(); break;
      case '--no-progress': opts.progress = false; break;
      case '--task-preference': opts.preference = next(); break;
      default: throw new Error(`unknown argument ${a}`);
    }
  }
  if (!opts.url) throw new Error('--url is required');
  if (!opts.action) throw new Error('one of --run, --cancel, --call is required');
  if (opts.sdk !== 'v1' && opts.sdk !== 'v2') throw new Error('--sdk is v1 or v2');
  if (opts.negotiation !== 'auto' && opts.negotiation !== 'legacy') throw new Error('--negotiation is auto or legacy');
  return opts;
}

const TERMINAL = new Set(['completed', 'failed', 'cancelled']);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** An error as data: its class, message, code/data, and where in the SDKs it was raised. */
function errRec(e, depth = 0) {
  if (e === undefined || e === null) return null;
  if (typeof e !== 'object') return { name: typeof e, message: String(e) };
  const r = { name: e.constructor?.name && e.constructor.name !== 'Object' ? e.constructor.name : (e.name ?? 'Error'),
    message: String(e.message ?? e) };
  if (e.code !== undefined) r.code = e.code;
  if (e.data !== undefined) r.data = jsonable(e.data);
  if (e.retryable !== undefined) r.retryable = e.retryable;
  const frames = String(e.stack ?? '').split('\n').map((l) => l.trim()).filter((l) => l.startsWith('at ') && l.includes('node_modules/'));
  if (frames.length) r.at = frames.slice(0, 5).map((l) => l.replace(/^at /, '').replace(/file:\/\/\S*node_modules\//, '').replace(/\/\S*node_modules\//, ''));
  if (e.cause !== undefined && depth < 3) r.cause = errRec(e.cause, depth + 1);
  return r;
}

function jsonable(v) {
  try {
    return JSON.parse(JSON.stringify(v, (_k, x) => (x instanceof Error ? errRec(x) : x)));
  } catch (e) {
    return String(v);
  }
}

/** A JSON-RPC message in a few words, for the wire log. */
function summarize(dir, m) {
  if (!m || typeof m !== 'object' || Array.isArray(m)) return { [dir]: 'batch/other' };
  const s = { [dir]: m.method ?? 'response' };
  if (m.id !== undefined) s.id = m.id;
  if (m.method) {
    const p = m.params ?? {};
    if (p.name !== undefined) s.name = p.name;
    if (p.taskId !== undefined) s.taskId = p.taskId;
    if (p.task !== undefined) s.task = p.task;
    if (p._meta?.progressToken !== undefined) s.progressToken = p._meta.progressToken;
    if (m.method === 'notifications/progress') Object.assign(s, { progress: p.progress, total: p.total, message: p.message });
    if (m.method.startsWith('notifications/tasks')) Object.assign(s, { taskId: p.taskId, status: p.status });
  } else if (m.error) {
    s.error = { code: m.error.code, message: m.error.message };
  } else if (m.result && typeof m.result === 'object') {
    const r = m.result;
    if (r.resultType !== undefined) s.resultType = r.resultType;
    if (r.taskId !== undefined) s.taskId = r.taskId;
    if (r.status !== undefined) s.status = r.status;
    if (r.task?.status !== undefined) s.status = r.task.status;
    if (r.task?.taskId !== undefined) s.taskId = r.task.taskId;
    if (r.protocolVersion !== undefined) s.protocolVersion = r.protocolVersion;
    s.keys = Object.keys(r);
  }
  return s;
}

/** Log what goes over `transport` from now on; `intercept(msg)` may claim an incoming message. */
function tapTransport(transport, out, intercept) {
  const send = transport.send.bind(transport);
  transport.send = (msg, options) => {
    out.wire.push(summarize('>', msg));
    return send(msg, options);
  };
  const onmessage = transport.onmessage;
  transport.onmessage = (msg, extra) => {
    out.wire.push(summarize('<', msg));
    if (intercept && intercept(msg)) return;
    return onmessage?.call(transport, msg, extra);
  };
}

function sdkPackage(name) {
  try {
    // Read the file itself: the packages' "./*" exports map package.json elsewhere.
    const pkg = JSON.parse(readFileSync(new URL(`./node_modules/${name}/package.json`, import.meta.url), 'utf8'));
    return `${name}@${pkg.version}`;
  } catch {
    return name;
  }
}

// ---------------------------------------------------------------- v1 -------

async function runV1(opts, out) {
  const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
  const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
  out.sdk_package = sdkPackage('@modelcontextprotocol/sdk');
  const client = new Client({ name: 'toolhost-ts-tasks', version: '0.1.0' }, { capabilities: {} });
  client.onerror = (e) => out.sdk_errors.push(errRec(e));
  const transport = new StreamableHTTPClientTransport(new URL(opts.url));
  out.step = 'connect';
  await client.connect(transport);
  out.protocol_version = transport.protocolVersion ?? null;
  out.server_capabilities = client.getServerCapabilities() ?? null;
  tapTransport(transport, out);
  try {
    out.step = 'tools/list';
    const tools = (await client.listTools()).tools;
    const tool = tools.find((t) => t.name === opts.tool);
    out.tool_execution = tool ? (tool.execution ?? null) : 'not listed';
    out.is_tool_task = client.isToolTask(opts.tool);
    const reqOptions = {};
    if (opts.progress) {
      out.progress = [];
      reqOptions.onprogress = (p) => out.progress.push(p);
    }
    if (opts.ttl !== undefined) reqOptions.task = { ttl: opts.ttl };
    const tasks = client.experimental.tasks;

    if (opts.action === 'call' || (opts.action === 'run' && !out.is_tool_task && opts.ttl === undefined)) {
      out.path = 'client.callTool';
      out.step = 'tools/call';
      out.result = await client.callTool({ name: opts.tool, arguments: opts.args }, undefined,
        reqOptions.onprogress ? { onprogress: reqOptions.onprogress } : undefined);
      return;
    }

    out.path = 'client.experimental.tasks.callToolStream';
    out.step = 'callToolStream';
    out.messages = [];
    out.statuses = [];
    const stream = tasks.callToolStream({ name: opts.tool, arguments: opts.args }, undefined, reqOptions);
    let taskId;
    for await (const m of stream) {
      const rec = { type: m.type };
      if (m.task) rec.task = m.task;
      if (m.result) rec.result = m.result;
      if (m.error) rec.error = errRec(m.error);
      out.messages.push(jsonable(rec));
      if (m.type === 'taskCreated') {
        out.created = m.task;
        taskId = m.task.taskId;
        out.statuses.push(m.task.status);
        if (opts.action === 'cancel') {
          out.step = 'tasks/cancel';
          try {
            out.cancel = await tasks.cancelTask(taskId);
          } catch (e) {
            out.cancel = { error: errRec(e) };
            out.error ??= errRec(e);
          }
          out.step = 'callToolStream (after cancel)';
        }
      } else if (m.type === 'taskStatus') {
        out.statuses.push(m.task.status);
        out.final = m.task;
      } else if (m.type === 'result') {
        out.result = m.result;
      } else if (m.type === 'error') {
        // The stream's own end: a failed/cancelled task, or an SDK rejection.
        out.stream_error = errRec(m.error);
        if (opts.action !== 'cancel' || !/was cancelled/.test(String(m.error?.message))) out.error ??= errRec(m.error);
      }
    }
    if (opts.action === 'cancel' && taskId === undefined) {
      out.error ??= { name: 'NoTask', message: 'the stream yielded no taskCreated: nothing to cancel' };
    }
    if (opts.action === 'cancel' && taskId !== undefined) {
      out.step = 'tasks/get (after cancel)';
      const deadline = Date.now() + 5000;
      for (;;) {
        const t = await tasks.getTask(taskId);
        out.final = t;
        out.statuses.push(t.status);
        if (TERMINAL.has(t.status) || Date.now() > deadline) break;
        await sleep(Math.max(50, t.pollInterval ?? 100));
      }
    }
  } finally {
    await client.close().catch((e) => out.sdk_errors.push(errRec(e)));
  }
}

// ---------------------------------------------------------------- v2 -------

async function runV2(opts, out) {
  const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
  const { createTaskSessionFromClient, DispatchError } = await import('@modelcontextprotocol/ext-tasks/client');
  out.sdk_package = `${sdkPackage('@modelcontextprotocol/client')} + ${sdkPackage('@modelcontextprotocol/ext-tasks')}`;
  const clientInfo = { name: 'toolhost-ts-tasks', version: '0.1.0' };
  const clientCapabilities = {};
  const client = new Client(clientInfo, {
    capabilities: clientCapabilities,
    ...(opts.negotiation === 'auto' ? { versionNegotiation: { mode: 'auto' } } : {}),
  });
  client.onerror = (e) => out.sdk_errors.push(errRec(e));
  const transport = new StreamableHTTPClientTransport(new URL(opts.url));
  out.step = 'connect';
  await client.connect(transport);
  out.protocol_version = client.getNegotiatedProtocolVersion() ?? null;
  out.protocol_era = client.getProtocolEra() ?? null;
  out.server_capabilities = client.getServerCapabilities() ?? null;

  // The host request coordinator ext-tasks needs for V2 task traffic: the
  // client's own transport, string ids the SDK never uses, responses taken
  // off the transport before the SDK's Protocol sees them.
  const pending = new Map();
  let rawSeq = 0;
  const progressTokens = new Set();
  tapTransport(transport, out, (msg) => {
    if (msg && typeof msg === 'object' && !Array.isArray(msg)) {
      if (msg.id !== undefined && ('result' in msg || 'error' in msg) && pending.has(msg.id)) {
        const p = pending.get(msg.id);
        pending.delete(msg.id);
        p.resolve('error' in msg ? { kind: 'error', error: msg.error } : { kind: 'result', result: msg.result });
        return true;
      }
      if (msg.method === 'notifications/progress' && progressTokens.has(msg.params?.progressToken)) {
        (out.progress ??= []).push(msg.params);
        return true;
      }
    }
    return false;
  });
  const rawDispatch = (request, options = {}) => new Promise((resolve, reject) => {
    const id = `ts-tasks-${++rawSeq}`;
    const timeoutMs = options.context?.requestTimeoutMs ?? 60000;
    const timer = setTimeout(() => {
      pending.delete(id);
      reject(new DispatchError(`raw request ${request.method} timed out after ${timeoutMs} ms`));
    }, timeoutMs);
    const settle = (f) => (v) => { clearTimeout(timer); f(v); };
    pending.set(id, { resolve: settle(resolve), reject: settle(reject) });
    const onAbort = () => {
      if (pending.delete(id)) settle(reject)(options.signal.reason ?? new DOMException('aborted', 'AbortError'));
    };
    options.signal?.addEventListener('abort', onAbort, { once: true });
    transport.send({ jsonrpc: '2.0', id, ...request }, {
      ...(options.signal ? { requestSignal: options.signal } : {}),
      ...(options.context?.headers ? { headers: options.context.headers } : {}),
    }).catch((e) => {
      if (pending.delete(id)) settle(reject)(new DispatchError(`raw request ${request.method} failed: ${e?.message ?? e}`, false, { cause: e }));
    });
  });

  let session;
  try {
    out.step = 'createTaskSessionFromClient';
    session = createTaskSessionFromClient(client, {
      endpointId: opts.url,
      rawDispatch,
      v2RequestFraming: { protocolVersion: out.protocol_version ?? '', clientInfo, clientCapabilities },
      onError: (e) => out.sdk_errors.push(errRec(e)),
    });
    out.session_capabilities = session.capabilities;

    if (opts.action === 'call') {
      out.path = 'client.callTool';
      out.step = 'tools/call';
      out.result = await client.callTool({ name: opts.tool, arguments: opts.args });
      return;
    }

    out.path = 'ext-tasks session.callTool';
    out.step = 'session.callTool';
    const callOptions = {};
    if (opts.ttl !== undefined || opts.preference !== undefined) {
      callOptions.task = {
        ...(opts.ttl !== undefined ? { retentionMs: opts.ttl } : {}),
        ...(opts.preference !== undefined ? { preference: opts.preference } : {}),
      };
    }
    if (opts.progress) {
      const token = `ts-tasks-progress-${opts.tool}`;
      progressTokens.add(token);
      callOptions.metadata = { progressToken: token };
    }
    const execution = await session.callTool(opts.tool, opts.args, callOptions);
    out.execution_kind = execution.kind;
    out.declaration = execution.declaration ?? null;
    if (execution.kind !== 'task') {
      out.step = 'execution.result';
      const outcome = await execution.result();
      out.outcome = outcome.status;
      if (outcome.status === 'completed') out.result = outcome.result;
      else out.error ??= errRec(outcome.error ?? new Error(`outcome ${outcome.status}`));
      if (opts.action === 'cancel') out.error ??= { name: 'NoTask', message: 'the call was answered at once, not as a task: nothing to cancel' };
      return;
    }
    const taskId = execution.handle.taskId;
    out.messages = [];
    out.statuses = [];
    out.step = 'execution.updates';
    let cancelled = false;
    for await (const ev of execution.updates()) {
      if (ev.type === 'task') {
        out.messages.push(jsonable({ type: 'task', task: ev.task }));
        out.created ??= ev.task;
        out.statuses.push(ev.task.status);
        out.final = ev.task;
        if (opts.action === 'cancel' && !cancelled) {
          cancelled = true;
          out.step = 'execution.cancel';
          try {
            await execution.cancel();
            out.cancel = 'acknowledged';
          } catch (e) {
            out.cancel = { error: errRec(e) };
            out.error ??= errRec(e);
          }
          out.step = 'execution.updates (after cancel)';
        }
      } else {
        const o = ev.outcome;
        const rec = { type: 'outcome', status: o.status };
        if (o.result !== undefined) rec.result = o.result;
        if (o.error !== undefined) rec.error = errRec(o.error);
        if (o.task !== undefined) rec.task = o.task;
        out.messages.push(jsonable(rec));
        out.outcome = o.status;
        if (o.status === 'completed') out.result = o.result;
        if (o.status === 'failed') out.error ??= errRec(o.error);
        if (o.status === 'cancelled' && opts.action !== 'cancel') out.error ??= { name: 'TaskCancelled', message: 'outcome cancelled' };
      }
    }
    if (opts.action === 'cancel') {
      out.step = 'session.task().snapshot (after cancel)';
      const controller = session.task(taskId);
      const deadline = Date.now() + 5000;
      for (;;) {
        const t = await controller.snapshot();
        out.final = t;
        out.statuses.push(t.status);
        if (TERMINAL.has(t.status) || Date.now() > deadline) break;
        await sleep(Math.max(50, t.suggestedPollIntervalMs ?? 100));
      }
    }
  } finally {
    if (session) await session.close().catch((e) => out.sdk_errors.push(errRec(e)));
    await client.close().catch((e) => out.sdk_errors.push(errRec(e)));
  }
}

// -------------------------------------------------------------- main -------

let printed = false;
function emit(out) {
  if (printed) return;
  printed = true;
  if (out.error === undefined) delete out.step;
  const first = ['sdk', 'sdk_package', 'protocol_version', 'action', 'tool', 'args', 'path', 'created', 'messages',
    'statuses', 'cancel', 'outcome', 'result', 'final', 'progress', 'error', 'step', 'sdk_errors'];
  const ordered = {};
  for (const k of first) if (out[k] !== undefined) ordered[k] = out[k];
  for (const k of Object.keys(out)) if (!(k in ordered) && k !== 'wire') ordered[k] = out[k];
  ordered.wire = out.wire;
  process.stdout.write(JSON.stringify(jsonable(ordered)) + '\n');
}

async function main() {
  const out = { sdk: null, protocol_version: null, sdk_errors: [], wire: [] };
  let opts;
  try {
    opts = parseArgs(process.argv.slice(2));
  } catch (e) {
    out.error = errRec(e);
    emit(out);
    process.exit(0);
  }
  Object.assign(out, { sdk: opts.sdk, action: opts.action, tool: opts.tool, args: opts.args });
  const timer = setTimeout(() => {
    out.error ??= { name: 'Timeout', message: `--timeout ${opts.timeout} s ran out during ${out.step}` };
    emit(out);
    process.exit(0);
  }, opts.timeout * 1000);
  try {
    await (opts.sdk === 'v1' ? runV1(opts, out) : runV2(opts, out));
  } catch (e) {
    out.error ??= errRec(e);
  }
  clearTimeout(timer);
  emit(out);
  process.exit(0);
}

main();
