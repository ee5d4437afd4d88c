"""npcnames: deterministic fantasy NPC names for the tabletop game.

A toolhost plugin written in Python and built with componentize-py against
the `plugin` world of wit/tool.wit (see plugins-py/README.md). Pure standard
library; no state survives between calls (each call is a fresh instance).

Tools:
  npc_name   one name from a culture and a seed
  npc_names  several distinct names at once (at most MAX_COUNT)

The same culture and seed always give the same name, on every host and every
Python version: the generator is a fixed 64-bit mix (splitmix64), not
`random`, whose algorithms may change between releases.
"""

import difflib
import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host
from wit_world.imports.types import (
    Content_Json,
    ToolError_Failed,
    ToolError_InvalidInput,
    ToolError_NotFound,
    ToolInfo,
)

MAX_SEED = 2**32 - 1
MAX_COUNT = 20
DEFAULT_COUNT = 5

# Each culture: given name = prefix + suffix; family name = first + second.
CULTURES = {
    "dwarf": {
        "given": (
            ("Thor", "Bal", "Dur", "Gim", "Brom", "Har", "Kil", "Ror", "Thra", "Dag", "Orn", "Bru",
             "Grun", "Vond", "Eb", "Tor", "Mag", "Ris"),
            ("in", "ar", "ek", "ur", "li", "rik", "grim", "dal", "nar", "bek", "mund", "ra", "dis",
             "hild", "vi", "gar"),
        ),
        "family": (
            ("Iron", "Stone", "Gold", "Anvil", "Deep", "Flint", "Copper", "Granite", "Hammer",
             "Oak", "Frost", "Ember", "Coal", "Silver"),
            ("fist", "beard", "hammer", "helm", "forge", "delver", "shield", "mantle", "brow",
             "vein", "axe", "tooth"),
        ),
    },
    "elf": {
        "given": (
            ("Ae", "Ara", "Cael", "Ela", "Fae", "Gal", "Ith", "Lia", "Mae", "Syl", "Tha", "Vae",
             "Ery", "Nai", "Quel", "Shan"),
            ("driel", "lith", "rion", "wyn", "thas", "niel", "ra", "lian", "vyre", "sil", "dor",
             "rae", "nor", "ith", "dria"),
        ),
        "family": (
            ("Moon", "Star", "Silver", "Dawn", "Leaf", "Mist", "Wind", "Night", "Sun", "Dew",
             "Amber", "Willow"),
            ("whisper", "song", "bloom", "shade", "brook", "petal", "wood", "glade", "fall",
             "weaver", "dancer", "light"),
        ),
    },
    "human": {
        "given": (
            ("Al", "Ber", "Cor", "Ed", "Gar", "Hal", "Is", "Mar", "Os", "Ro", "Tam", "Wil", "Ce",
             "Ly", "Bran", "Eli"),
            ("dric", "win", "a", "ric", "mund", "bel", "old", "ette", "ford", "ara", "en", "wyn",
             "is", "ton"),
        ),
        "family": (
            ("Ash", "Black", "Brook", "Fair", "Hart", "Hill", "Marsh", "Thorn", "West", "Wood",
             "Red", "Cold", "Mill", "Stan"),
            ("well", "wood", "ford", "ley", "field", "wick", "by", "more", "stone", "gate",
             "hollow", "croft"),
        ),
    },
    "halfling": {
        "given": (
            ("Al", "Bil", "Cor", "Dro", "Er", "Fin", "Lav", "Mer", "Os", "Per", "Ros", "Wil",
             "Pip", "Tob", "Mil", "Dai"),
            ("ton", "bo", "rin", "go", "ie", "da", "ric", "la", "by", "wyn", "my", "lo", "sy",
             "ly"),
        ),
        "family": (
            ("Brush", "Good", "Green", "Hill", "Tea", "Thorn", "Under", "High", "Tall", "Apple",
             "Honey", "Quick"),
            ("gather", "barrel", "bottle", "hill", "leaf", "foot", "bough", "topple", "kettle",
             "hearth", "brook", "button"),
        ),
    },
}

# Forms a model (or a player) is likely to type, mapped to the canonical name.
ALIASES = {
    "dwarves": "dwarf", "dwarfs": "dwarf", "dwarven": "dwarf", "dwarvish": "dwarf",
    "elves": "elf", "elven": "elf", "elvish": "elf", "elfin": "elf",
    "humans": "human", "man": "human", "men": "human",
    "halflings": "halfling",
}

CULTURE_LIST = ", ".join(CULTURES)

CULTURE_PROP = {
    "type": "string",
    "description": f"The NPC's culture: one of {CULTURE_LIST} "
                   "(case-insensitive; plurals such as 'elves' are accepted).",
}
SEED_PROP = {
    "type": "integer",
    "minimum": 0,
    "maximum": MAX_SEED,
    "description": "Any whole number from 0 to 4294967295. The same culture and seed always "
                   "give the same name; pick a new seed for a new name.",
}

NPC_NAME_SCHEMA = json.dumps({
    "type": "object",
    "properties": {"culture": CULTURE_PROP, "seed": SEED_PROP},
    "required": ["culture", "seed"],
    "additionalProperties": False,
})

NPC_NAMES_SCHEMA = json.dumps({
    "type": "object",
    "properties": {
        "culture": CULTURE_PROP,
        "seed": SEED_PROP,
        "count": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_COUNT,
            "default": DEFAULT_COUNT,
            "description": f"How many distinct names, 1 to {MAX_COUNT} (default {DEFAULT_COUNT}).",
        },
    },
    "required": ["culture", "seed"],
    "additionalProperties": False,
})

# Measured through toolhost (fresh instance per call, most of it instantiating
# the embedded CPython): see plugins-py/README.md. The bounds leave room for a
# loaded machine.
TOOLS = [
    ToolInfo(
        name="npc_name",
        description="Generate a fantasy name for a non-player character of a given culture "
                    f"({CULTURE_LIST}). Deterministic: the same culture and seed always give "
                    "the same name. Returns JSON with name, given, family, culture and seed.",
        input_schema=NPC_NAME_SCHEMA,
        estimated_duration_ms=15,
        max_duration_ms=100,
        idempotent=True,
        cacheable_seconds=86400,
        probe_arguments=json.dumps({"culture": "dwarf", "seed": 7}),
    ),
    ToolInfo(
        name="npc_names",
        description=f"Generate up to {MAX_COUNT} distinct fantasy names for NPCs of one culture "
                    f"({CULTURE_LIST}), e.g. for a tavern crowd or a caravan. Deterministic; "
                    "each entry carries the seed that reproduces it with npc_name. Returns JSON "
                    "with a names list.",
        input_schema=NPC_NAMES_SCHEMA,
        estimated_duration_ms=15,
        max_duration_ms=100,
        idempotent=True,
        cacheable_seconds=86400,
        probe_arguments=json.dumps({"culture": "elf", "seed": 1, "count": 3}),
    ),
]

MASK64 = (1 << 64) - 1


class _Rng:
    """splitmix64: tiny, fast, and fixed forever (unlike `random`)."""

    def __init__(self, seed: int) -> None:
        self.state = seed & MASK64

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def pick(self, options):
        return options[self.next() % len(options)]


def _culture_salt(culture: str) -> int:
    # A stable per-culture offset (not hash(), which is randomized per process).
    return sum((i + 1) * ord(c) for i, c in enumerate(culture)) << 32


def _join(first: str, second: str) -> str:
    # "Hill" + "ley" is "Hilley", not "Hillley": never three equal letters in a row.
    while len(first) >= 2 and first[-1] == first[-2] == second[0]:
        second = second[1:]
    return first + second


def make_name(culture: str, seed: int) -> dict:
    spec = CULTURES[culture]
    rng = _Rng(seed ^ _culture_salt(culture))
    given = _join(rng.pick(spec["given"][0]), rng.pick(spec["given"][1]))
    family = _join(rng.pick(spec["family"][0]), rng.pick(spec["family"][1]))
    return {"name": f"{given} {family}", "given": given, "family": family,
            "culture": culture, "seed": seed}


class InvalidInput(Exception):
    pass


def _culture(args: dict) -> str:
    raw = args.get("culture")
    if not isinstance(raw, str) or not raw.strip():
        raise InvalidInput(f"'culture' must be one of {CULTURE_LIST}")
    key = raw.strip().lower()
    key = ALIASES.get(key, key)
    if key in CULTURES:
        return key
    hint = difflib.get_close_matches(key, list(CULTURES) + list(ALIASES), n=1, cutoff=0.6)
    suggestion = f" Did you mean '{ALIASES.get(hint[0], hint[0])}'?" if hint else ""
    raise InvalidInput(f"unknown culture '{raw}': use one of {CULTURE_LIST}.{suggestion}")


def _int(args: dict, field: str, low: int, high: int, default=None) -> int:
    value = args.get(field, default)
    # bool is an int in Python; JSON true is not a number.
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInput(f"'{field}' must be a whole number from {low} to {high}")
    if not low <= value <= high:
        raise InvalidInput(f"'{field}' is {value}: it must be from {low} to {high}")
    return value


def npc_name(args: dict) -> dict:
    return make_name(_culture(args), _int(args, "seed", 0, MAX_SEED))


def npc_names(args: dict) -> dict:
    culture = _culture(args)
    seed = _int(args, "seed", 0, MAX_SEED)
    count = _int(args, "count", 1, MAX_COUNT, DEFAULT_COUNT)
    names, seen = [], set()
    # Consecutive seeds (wrapping at 2^32), skipping names already given, so
    # entry i is reproducible as npc_name(culture, names[i].seed).
    for step in range(count * 20):
        entry = make_name(culture, (seed + step) % (MAX_SEED + 1))
        if entry["name"] not in seen:
            seen.add(entry["name"])
            names.append(entry)
            if len(names) == count:
                break
    return {"culture": culture, "count": len(names), "names": names}


HANDLERS = {"npc_name": npc_name, "npc_names": npc_names}


class Tool(exports.Tool):
    def list_tools(self):
        return TOOLS

    def call(self, name, arguments):
        handler = HANDLERS.get(name)
        if handler is None:
            raise Err(ToolError_NotFound(f"no tool '{name}' here: this plugin has {', '.join(HANDLERS)}"))
        try:
            args = json.loads(arguments)
            if not isinstance(args, dict):
                raise InvalidInput("arguments must be a JSON object")
            host.log(host.LogLevel.DEBUG, f"{name} {json.dumps(args, sort_keys=True)}")
            result = handler(args)
        except InvalidInput as e:
            raise Err(ToolError_InvalidInput(str(e)))
        except json.JSONDecodeError as e:
            raise Err(ToolError_InvalidInput(f"arguments are not valid JSON: {e}"))
        except Err:
            raise
        except Exception as e:  # a bug here must come back as a typed error, not a trap
            raise Err(ToolError_Failed(f"{name} failed: {type(e).__name__}: {e}"))
        return [Content_Json(json.dumps(result, ensure_ascii=False))]
