// The clients bench's TypeScript SDK client (benches/clients.rs): the
// official `@modelcontextprotocol/sdk` package's `Client` over its
// `StdioClientTransport`, as an application uses them.
//
//   node ts_sdk_client.mjs SPEC_JSON
//
// SPEC_JSON as py_sdk_client.py's, plus "sdk": the directory of the
// @modelcontextprotocol/sdk package (this file lives outside node_modules, so
// the SDK is imported by path). Spawns the server through the SDK's stdio
// transport, initializes, lists the tools, makes `warmup` sequential calls (and
// `warmup` more at the largest `inflight`), then for each phase times N calls
// with K in flight (K workers, each taking the next call when its last one is
// answered). Prints one JSON object on stdout before closing the client:
//
//   {"phases": [{"inflight": K, "lat_us": [per-call microseconds], "wall_us": W}, ...]}
//
// Spawn, initialize and shutdown are outside every timing. Any failure exits
// 1 with the reason on stderr.

import { openSync, writeSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const spec = JSON.parse(process.argv[2]);
const sdk = (p) => import(pathToFileURL(join(spec.sdk, "dist/esm", p)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport, getDefaultEnvironment } = await sdk("client/stdio.js");

async function main() {
  const srv = spec.server;
  const transport = new StdioClientTransport({
    command: srv.command,
    args: srv.args,
    env: { ...getDefaultEnvironment(), ...(srv.env ?? {}) },
    cwd: srv.cwd,
    stderr: openSync(srv.stderr, "a"),
  });
  const client = new Client({ name: "clients-bench-ts", version: "0" });
  await client.connect(transport);
  await client.listTools();

  const params = { name: spec.tool, arguments: spec.arguments };
  if (spec.meta != null) params._meta = spec.meta;
  const call = async () => {
    const t = process.hrtime.bigint();
    const r = await client.callTool(params);
    const d = Number(process.hrtime.bigint() - t) / 1000;
    if (r.isError) throw new Error(`${spec.tool} failed: ${JSON.stringify(r.content)}`);
    return d;
  };
  const phase = async (inflight, calls) => {
    const lat = [];
    const t0 = process.hrtime.bigint();
    let next = 0;
    const worker = async () => {
      while (next < calls) {
        next += 1;
        lat.push(await call());
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, inflight) }, worker));
    const wall = Number(process.hrtime.bigint() - t0) / 1000;
    return { inflight, lat_us: lat.map((x) => Math.round(x * 10) / 10), wall_us: Math.round(wall * 10) / 10 };
  };

  await phase(1, spec.warmup);
  const most = Math.max(1, ...spec.phases.map((p) => p.inflight));
  if (most > 1) await phase(most, spec.warmup);
  const phases = [];
  for (const p of spec.phases) phases.push(await phase(p.inflight, p.calls));
  // Written synchronously before the client closes, so shutdown is not on the clock.
  writeSync(1, JSON.stringify({ phases }) + "\n");
  await client.close();
}

try {
  await main();
  process.exit(0);
} catch (err) {
  process.stderr.write(`ts_sdk_client: ${err?.stack ?? err}\n`);
  process.exit(1);
}
