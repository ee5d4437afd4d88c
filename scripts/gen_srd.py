#!/usr/bin/env python3
"""Convert the SRD 5.1 SQLite data set into the ruleslookup plugin's data file.

Usage: python3 scripts/gen_srd.py PATH/TO/dnd5e-2014-en-v5.10.0.sqlite3 [OUT.json]

The output (default: plugins/ruleslookup/data/srd.json) is committed; the plugin's
build script turns it into static tables and a BM25 index at compile time, so the
project never reads the SQLite file at build or run time.

Categories: condition, combat (sections of the Combat chapter), spell, general
(every other rules section, plus damage types).
"""
import json
import os
import sqlite3
import sys


def rows(db, table):
    for (data,) in db.execute(f'SELECT data FROM {table} ORDER BY "index"'):
        yield json.loads(data)


def paragraphs(value):
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [p for p in value if p]


def spell_text(s):
    level = s["level"]
    school = s["school"]["name"]
    head = f"{school} cantrip" if level == 0 else f"Level {level} {school.lower()}"
    if s.get("ritual"):
        head += " (ritual)"
    lines = [
        head,
        f"Casting time: {s['casting_time']}",
        f"Range: {s['range']}",
        "Components: " + ", ".join(s.get("components", []))
        + (f" ({s['material']})" if s.get("material") else ""),
        "Duration: " + ("Concentration, " if s.get("concentration") else "") + s["duration"],
        "Classes: " + ", ".join(c["name"] for c in s.get("classes", [])),
        "",
    ]
    lines += paragraphs(s.get("desc"))
    higher = paragraphs(s.get("higher_level"))
    if higher:
        lines += ["", "At higher levels: " + " ".join(higher)]
    return "\n".join(lines).strip()


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    src = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        here, "..", "plugins", "ruleslookup", "data", "srd.json")
    db = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    docs = []
    for c in rows(db, "conditions"):
        docs.append({"id": f"condition-{c['index']}", "name": c["name"], "category": "condition",
                     "text": "\n".join(paragraphs(c.get("desc")))})
    for s in rows(db, "spells"):
        docs.append({"id": f"spell-{s['index']}", "name": s["name"], "category": "spell",
                     "text": spell_text(s)})
    combat = set()
    for r in rows(db, "rules"):
        if r["index"] == "combat":
            combat = {sub["index"] for sub in r.get("subsections", [])}
    for r in rows(db, "rule_sections"):
        cat = "combat" if r["index"] in combat else "general"
        text = r.get("desc", "")
        # Drop the section's own heading line: the name carries it.
        lines = text.split("\n")
        if lines and lines[0].lstrip("#").strip() == r["name"]:
            lines = lines[1:]
        docs.append({"id": f"{cat if cat == 'combat' else 'rule'}-{r['index']}", "name": r["name"],
                     "category": cat, "text": "\n".join(lines).strip()})
    for d in rows(db, "damage_types"):
        docs.append({"id": f"damage-{d['index']}", "name": f"{d['name']} damage",
                     "category": "general", "text": "\n".join(paragraphs(d.get("desc")))})
    (attribution,) = db.execute(
        "SELECT value FROM metadata WHERE key = 'attribution'"
    ).fetchone() or ("",)
    docs.sort(key=lambda d: d["id"])
    ids = [d["id"] for d in docs]
    assert len(ids) == len(set(ids)), "duplicate ids"
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"source": "SRD 5.1 via 5e-database v5.10.0", "licence": "CC-BY-4.0",
                   "attribution": attribution, "documents": docs}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {len(docs)} documents to {out}")


if __name__ == "__main__":
    main()
