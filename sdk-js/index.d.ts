// Types of toolhost's JavaScript SDK (index.js), for TypeScript plugins and
// editors. The records mirror the WIT `tool` world (wit/deps/toolhost-plugin/tool.wit).

/** The cases of the WIT `tool-error`. */
export type ToolErrorKind = 'invalid-input' | 'not-found' | 'forbidden' | 'failed';

/** A tool's failure, as the caller sees it. */
export class ToolError extends Error {
  constructor(kind: ToolErrorKind, message: string);
  readonly kind: ToolErrorKind;
  readonly payload: { tag: ToolErrorKind; val: string };
}

/** The arguments are wrong: say what was wrong and what would be right. */
export function invalidInput(message: string): ToolError;
/** What the arguments name does not exist. */
export function notFound(message: string): ToolError;
/** The tool may not do that. */
export function forbidden(message: string): ToolError;
/** The tool could not do it (an API down, a setting missing...). */
export function failed(message: string): ToolError;

/** A JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** What a tool declares. */
export interface ToolSpec {
  /** As the model sees it: `^[a-zA-Z0-9_-]{1,64}$`. */
  name: string;
  /** What it does, for the model. */
  description: string;
  /** The JSON Schema of its arguments (an object). */
  inputSchema: { [key: string]: Json };
  /** Typical duration, milliseconds. */
  estimatedMs: number;
  /** Worst case, milliseconds: the host stops a call that runs longer. */
  maxMs: number;
  /** Same arguments, same answer, no side effects (the host may probe it). */
  idempotent?: boolean;
  /** How long a result may be reused, seconds (0: never). */
  cacheableSeconds?: number;
  /** Arguments the host may call it with to measure it (idempotent tools). */
  probeArguments?: { [key: string]: Json };
}

/** A tool's answer: a JSON-able value (a JSON block) or a string (a text block). */
export type Answer = Json | string | undefined;

/** A tool made by `defineTool()`, for `plugin()`. */
export interface Tool<A> {
  readonly info: ToolInfo;
  readonly handler: (args: A) => Answer | Promise<Answer>;
}

/** The WIT `tool-info` record, as the host reads it. */
export interface ToolInfo {
  name: string;
  description: string;
  inputSchema: string;
  estimatedDurationMs: number;
  maxDurationMs: number;
  idempotent: boolean;
  cacheableSeconds: number;
  probeArguments?: string;
}

/** The WIT `content` variant. */
export type Content =
  | { tag: 'text'; val: string }
  | { tag: 'json'; val: string }
  | { tag: 'image'; val: { mimeType: string; data: Uint8Array } };

/**
 * Declares a tool. `handler` gets the arguments (already checked against
 * `inputSchema`); it may return a Promise only in StarlingMonkey builds
 * (the `--http` template's), not QuickJS ones.
 */
export function defineTool<A = { [key: string]: Json }>(spec: ToolSpec, handler: (args: A) => Answer | Promise<Answer>): Tool<A>;

/** The component's `tool` export: `export const tool = plugin(a, b);`. */
export function plugin(...tools: Tool<any>[]): {
  listTools(): ToolInfo[];
  call(name: string, args: string): Content[] | Promise<Content[]>;
};

/** The operator's settings (`plugins.config.<plugin>`). */
export const config: {
  /** The setting `key`, or `undefined` when it is not set. */
  get(key: string): string | undefined;
};

/** The operator's secrets (`toolhost secret set <plugin> <name>`). */
export const secret: {
  /** The secret; throws a `failed` ToolError saying how to set it when it is not set. */
  get(name: string): string;
  /** The secret, or `undefined` when it is not set. */
  getOptional(name: string): string | undefined;
};

/** The host's log (`TOOLHOST_LOG`), tagged with the plugin and tool. */
export const log: {
  debug(message: unknown): void;
  info(message: unknown): void;
  warn(message: unknown): void;
  error(message: unknown): void;
};
