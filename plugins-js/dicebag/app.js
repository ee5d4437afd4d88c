// dicebag: a toolhost plugin written in JavaScript, built into a WebAssembly
// component by plugins-js/dicebag/build.sh (jco componentize, QuickJS backend)
// against the `plugin` world of wit/tool.wit.
//
// Errors: throw an Error whose `payload` is the tool-error variant,
// { tag: 'invalid-input' | 'not-found' | 'forbidden' | 'failed', val: message }.
// Records use camelCase field names (inputSchema, maxDurationMs, ...).
import { log } from 'toolhost:plugin/host@0.1.2';

const MAX_DICE = 100;
const SIDES = [4, 6, 8, 10, 12, 20, 100];

const POOL_SCHEMA = JSON.stringify({
  type: 'object',
  properties: {
    dice: { type: 'integer', minimum: 1, maximum: MAX_DICE, description: `How many dice, 1 to ${MAX_DICE}.` },
    sides: { type: 'integer', enum: SIDES, description: `Sides per die: ${SIDES.join(', ')}.` },
    target: { type: 'integer', minimum: 1, description: 'A die showing this or more is a success.' },
    seed: { type: 'integer', minimum: 0, maximum: 4294967295, description: 'Same seed, same roll.' },
  },
  required: ['dice', 'sides', 'target', 'seed'],
  additionalProperties: false,
});

// mulberry32: a small fixed PRNG, so a seed always gives the same roll.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function toolError(tag, message) {
  const e = new Error(message);
  e.payload = { tag, val: message };
  return e;
}

const invalid = (message) => toolError('invalid-input', message);

function dicePool({ dice, sides, target, seed }) {
  if (!Number.isInteger(dice) || dice < 1 || dice > MAX_DICE) throw invalid(`dice must be 1 to ${MAX_DICE}, got ${dice}`);
  if (!SIDES.includes(sides)) throw invalid(`sides must be one of ${SIDES.join(', ')}, got ${sides}`);
  if (!Number.isInteger(target) || target < 1 || target > sides) throw invalid(`target must be 1 to ${sides} (the die's sides), got ${target}`);
  const next = rng(seed);
  const rolls = Array.from({ length: dice }, () => 1 + Math.floor(next() * sides));
  const successes = rolls.filter((r) => r >= target).length;
  return { dice, sides, target, seed, rolls, successes };
}

export const tool = {
  listTools() {
    return [{
      name: 'dice_pool',
      description: 'Roll a pool of identical dice and count successes (dice showing target or more), e.g. 6d10 against 7. Deterministic for a given seed. Returns JSON with rolls and successes.',
      inputSchema: POOL_SCHEMA,
      estimatedDurationMs: 5,
      maxDurationMs: 50,
      idempotent: true,
      cacheableSeconds: 0,
      probeArguments: JSON.stringify({ dice: 5, sides: 10, target: 7, seed: 1 }),
    }];
  },
  call(name, args) {
    if (name !== 'dice_pool') throw toolError('not-found', `no tool '${name}' here: this plugin has dice_pool`);
    log('debug', `dice_pool ${args}`);
    try {
      return [{ tag: 'json', val: JSON.stringify(dicePool(JSON.parse(args))) }];
    } catch (e) {
      if (e && e.payload) throw e;
      // A bug here must come back as a typed error, not a trap.
      throw toolError('failed', `dice_pool failed: ${e}`);
    }
  },
};
