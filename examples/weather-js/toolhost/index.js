// toolhost's SDK for tool plugins in JavaScript and TypeScript, built into
// a WebAssembly component with componentize-js (StarlingMonkey) or
// componentize-qjs (QuickJS). Types: index.d.ts.
//
//   import { defineTool, plugin, invalidInput } from 'toolhost';
//
//   const greet = defineTool({ name: 'greet', description: 'Greets someone by name.',
//                              inputSchema: { type: 'object', properties: { name: { type: 'string' } } },
//                              estimatedMs: 1, maxMs: 20, idempotent: true },
//                            ({ name }) => ({ message: `Hello, ${name}.` }));
//
//   // The component's export, named as the WIT interface it implements.
//   export const tool = plugin(greet);
import { get as storeGet } from 'wasi:config/store@0.2.0-rc.1';
import { log as hostLog } from 'toolhost:plugin/host@0.1.2';

/** A tool's failure, as the caller sees it: `kind` is one of the WIT's
 * `tool-error` cases. Throw one (or let `invalidInput(...)` and friends
 * make it) from a handler. */
export class ToolError extends Error {
  constructor(kind, message) {
    super(message);
    this.name = 'ToolError';
    this.kind = kind;
    // What componentize-js and componentize-qjs lower into the WIT's
    // `result<_, tool-error>` error case.
    this.payload = { tag: kind, val: message };
  }
}

/** The arguments are wrong: say what was wrong and what would be right. */
export const invalidInput = (message) => new ToolError('invalid-input', message);
/** What the arguments name does not exist. */
export const notFound = (message) => new ToolError('not-found', message);
/** The tool may not do that. */
export const forbidden = (message) => new ToolError('forbidden', message);
/** The tool could not do it (an API down, a setting missing...). */
export const failed = (message) => new ToolError('failed', message);

const NAME = /^[a-zA-Z0-9_-]{1,64}$/;

const SPEC_FIELDS = ['name', 'description', 'inputSchema', 'estimatedMs', 'maxMs', 'idempotent', 'cacheableSeconds', 'probeArguments'];

// The JSON Schema keywords an arguments schema may use at its top level.
const SCHEMA_KEYWORDS = [
  '$schema', '$id', '$ref', '$defs', '$comment', 'definitions', 'type', 'title', 'description', 'properties',
  'required', 'additionalProperties', 'patternProperties', 'propertyNames', 'minProperties', 'maxProperties',
  'dependentRequired', 'dependentSchemas', 'unevaluatedProperties', 'allOf', 'anyOf', 'oneOf', 'not', 'if', 'then',
  'else', 'enum', 'const', 'default', 'examples', 'deprecated', 'readOnly', 'writeOnly',
];

// Levenshtein distance, for "did you mean".
function distance(a, b) {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0];
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const here = row[j];
      row[j] = Math.min(row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = here;
    }
  }
  return row[b.length];
}

function unknownKeys(object, known, what) {
  for (const key of Object.keys(object)) {
    if (known.includes(key)) continue;
    const near = known.filter((k) => distance(k.toLowerCase(), key.toLowerCase()) <= 2);
    throw new TypeError(`${what}: unknown field ${JSON.stringify(key)}` + (near.length ? `; did you mean ${near.join(' or ')}?` : `; the fields are ${known.join(', ')}`));
  }
}

function checkSchema(schema, name) {
  if (schema === null || typeof schema !== 'object' || Array.isArray(schema)) {
    throw new TypeError(`tool ${name}: inputSchema must be a JSON Schema object, like { type: 'object', properties: {...} }`);
  }
  unknownKeys(schema, SCHEMA_KEYWORDS, `tool ${name}: inputSchema`);
  const declared = Object.keys(schema.properties ?? {});
  for (const r of schema.required ?? []) {
    if (schema.properties && !declared.includes(r)) {
      throw new TypeError(`tool ${name}: inputSchema.required names ${JSON.stringify(r)}, which is not in its properties (${declared.join(', ')})`);
    }
  }
  return schema;
}

function u32(value, field, name) {
  if (!Number.isInteger(value) || value < 0 || value > 0xffffffff) {
    throw new TypeError(`tool ${name}: ${field} must be a whole number of milliseconds (0 to 4294967295), not ${value}`);
  }
  return value;
}

/**
 * Declares a tool: what the model reads (`name`, `description`, the JSON
 * Schema of its arguments `inputSchema`), its declared latency in
 * milliseconds (typical `estimatedMs`, worst case `maxMs`: the host places
 * it in a latency tier by them and stops a call past `maxMs`), `idempotent`
 * (same arguments, same answer, no side effects), `cacheableSeconds`, and
 * `probeArguments` (what the host may call it with to measure it).
 *
 * `handler(args)` gets the arguments (already checked against the schema)
 * and returns a JSON-able value (sent as a JSON block), a string (a text
 * block), or a Promise of one (StarlingMonkey builds only).
 */
export function defineTool(spec, handler) {
  const name = spec?.name;
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new TypeError(`tool name must match ^[a-zA-Z0-9_-]{1,64}$, not ${JSON.stringify(name)}`);
  }
  if (typeof handler !== 'function') throw new TypeError(`tool ${name}: the handler must be a function`);
  unknownKeys(spec, SPEC_FIELDS, `tool ${name}`);
  if (spec.inputSchema === undefined) {
    throw new TypeError(`tool ${name}: inputSchema is missing (the JSON Schema of its arguments; { type: 'object', properties: {} } for none)`);
  }
  const info = {
    name,
    description: String(spec.description ?? ''),
    inputSchema: JSON.stringify(checkSchema(spec.inputSchema, name)),
    estimatedDurationMs: u32(spec.estimatedMs, 'estimatedMs', name),
    maxDurationMs: u32(spec.maxMs, 'maxMs', name),
    idempotent: Boolean(spec.idempotent),
    cacheableSeconds: u32(spec.cacheableSeconds ?? 0, 'cacheableSeconds', name),
    probeArguments: spec.probeArguments === undefined ? undefined : JSON.stringify(spec.probeArguments),
  };
  return { info, handler };
}

function content(value) {
  if (typeof value === 'string') return [{ tag: 'text', val: value }];
  const json = JSON.stringify(value === undefined ? null : value);
  return [{ tag: 'json', val: json }];
}

function failure(error) {
  if (error instanceof ToolError || (error && error.payload && typeof error.payload.tag === 'string')) return error;
  // A bug or an unexpected answer: the caller gets words, not a trap.
  // (The host names the tool: "<name> failed: <this>".)
  return failed(error instanceof Error ? `${error.name}: ${error.message}` : String(error));
}

/**
 * The component's `tool` export for these tools:
 * `export const tool = plugin(greet, roll);`.
 */
export function plugin(...tools) {
  const byName = new Map();
  for (const t of tools) {
    if (!t || !t.info || typeof t.handler !== 'function') throw new TypeError('plugin() takes tools made by defineTool(spec, handler)');
    if (byName.has(t.info.name)) throw new TypeError(`two tools are named ${t.info.name}`);
    byName.set(t.info.name, t);
  }
  return {
    listTools() {
      return tools.map((t) => t.info);
    },
    call(name, args) {
      const t = byName.get(name);
      if (!t) throw notFound(`no tool ${JSON.stringify(name)} in this plugin; it has ${[...byName.keys()].join(', ')}`);
      let out;
      try {
        out = t.handler(JSON.parse(args));
      } catch (e) {
        throw failure(e);
      }
      if (out && typeof out.then === 'function') {
        if (typeof fetch === 'undefined') {
          // QuickJS components here do not await: say so, not "expected array".
          throw failed(`the handler of ${name} returned a Promise (an async function?): a plain project (QuickJS) runs tools synchronously; drop async/await, or build with StarlingMonkey as \`toolhost new NAME --lang js --http\` does`);
        }
        return out.then(content, (e) => { throw failure(e); });
      }
      return content(out);
    },
  };
}

function read(key, what) {
  try {
    return storeGet(key) ?? undefined;
  } catch (e) {
    throw failed(`reading ${what} ${key}: ${e?.payload?.val ?? e}`);
  }
}

/** The operator's settings (`plugins.config.<plugin>`). */
export const config = {
  /** The setting `key`, or `undefined` when it is not set. */
  get(key) {
    return read(key, 'setting');
  },
};

/** The operator's secrets (`toolhost secret set <plugin> <name>`). The host
 * redacts their values wherever they would appear in an error, the log or
 * the audit. */
export const secret = {
  /** The secret `name`; throws a `failed` error saying how to set it when it is not set. */
  get(name) {
    const value = read(name, 'secret');
    if (value === undefined) {
      throw failed(`secret ${name} is not set; the operator sets it with \`toolhost secret set <plugin> ${name}\``);
    }
    return value;
  },
  /** The secret `name`, or `undefined` when it is not set. */
  getOptional(name) {
    return read(name, 'secret');
  },
};

/** The host's log (`TOOLHOST_LOG`), tagged with the plugin and tool. */
export const log = {
  debug: (message) => hostLog('debug', String(message)),
  info: (message) => hostLog('info', String(message)),
  warn: (message) => hostLog('warn', String(message)),
  error: (message) => hostLog('error', String(message)),
};
