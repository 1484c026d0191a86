#!/usr/bin/env python3
"""Every entry of scripts/mutation-check/mutations.json still applies: its file exists and its
"find" text occurs in it exactly once (a refactor that moves or rewrites the code a mutation
names must re-point the entry, or the mutation check silently tests nothing). Also: ids are
unique and every entry says what should catch it and why. Exits 1 naming each stale entry."""
import json
import pathlib
import sys

root = pathlib.Path(__file__).resolve().parents[2]
entries = json.loads((root / "scripts/mutation-check/mutations.json").read_text())
bad, seen = [], set()
for e in entries:
    name = e.get("id", "?")
    if name in seen:
        bad.append(f"{name}: the id is used twice")
    seen.add(name)
    for key in ("id", "file", "why"):
        if not e.get(key):
            bad.append(f"{name}: no {key!r}")
    if "find" not in e:
        bad.append(f"{name}: no 'find' text")
        continue
    if not e.get("expect") and not e.get("command"):
        bad.append(f"{name}: neither 'expect' (the tests that catch it) nor 'command'")
    path = root / e.get("file", "")
    if not path.is_file():
        bad.append(f"{name}: file {e.get('file')} does not exist (moved? re-point the entry)")
        continue
    count = path.read_text().count(e["find"])
    if count != 1:
        bad.append(f"{name}: its find text occurs {count} times in {e['file']}, not once "
                   "(re-point the entry at the code as it is now)")
for b in bad:
    print(b)
if bad:
    print(f"mutations_apply_test: {len(bad)} of {len(entries)} entries are stale")
    sys.exit(1)
print(f"mutations_apply_test: all {len(entries)} mutations apply")
