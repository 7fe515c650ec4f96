"""The named queries, transitions and migrations every SQL backend loads, as JSON, and a
comparison of two such snapshots: what makes a refactor of the stores' SQL safe (issue 42).

    PYTHONPATH=/path/to/old/checkout python tools/query_snapshot.py dump before.json
    PYTHONPATH=$PWD python tools/query_snapshot.py compare before.json

`compare` prints, per backend, how many queries are byte-identical and which are equal only
modulo whitespace or a `--` comment, and fails on any other difference. It reads the loader
of the checkout on PYTHONPATH (rota.stores.sqlstore.queries, or rota.stores.queries before
issue 42's layout)."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

NOW = {"postgres": "coalesce(%(now)s::timestamptz, now())", "sqlite": ":now", "mysql": "%(now)s"}


def _loader() -> Any:
    import importlib

    try:
        return importlib.import_module("rota.stores.sqlstore.queries")
    except ImportError:  # the layout before issue 42
        return importlib.import_module("rota.stores.queries")


def snapshot(backends: list[str]) -> dict[str, Any]:
    loader = _loader()
    found: dict[str, Any] = {}
    for backend in backends:
        found[backend] = {
            "queries": loader.load_queries(backend, NOW.get(backend, "{now}")),
            "transitions": {k: list(v) for k, v in loader.query_transitions(backend).items()},
            "migrations": [[m.version, m.name, m.sql] for m in loader.load_migrations(backend)],
        }
    return found


def _spaces(sql: str) -> str:
    return re.sub(r"\s+", " ", sql).strip()


def _bare(sql: str) -> str:
    return _spaces(re.sub(r"--[^\n]*", "", sql))


def compare(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The differences beyond whitespace and comments (empty: none); prints the tiers."""
    problems = []
    for backend, old in before.items():
        new = after[backend]
        if set(old["queries"]) != set(new["queries"]):
            problems.append(f"{backend}: names differ: {sorted(set(old['queries']) ^ set(new['queries']))}")
        same = [k for k in old["queries"] if new["queries"].get(k) == old["queries"][k]]
        spaces, comments = [], []
        for name in sorted(set(old["queries"]) & set(new["queries"]) - set(same)):
            a, b = old["queries"][name], new["queries"][name]
            if _spaces(a) == _spaces(b):
                spaces.append(name)
            elif _bare(a) == _bare(b):
                comments.append(name)
            else:
                problems.append(f"{backend}: {name} differs")
        for part in ("transitions", "migrations"):
            if old[part] != new[part]:
                problems.append(f"{backend}: {part} differ")
        print(f"{backend}: {len(same)} byte-identical; modulo whitespace: {spaces}; modulo a comment: {comments}")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("dump", "compare"):
        print(__doc__)
        return 2
    if argv[0] == "dump":
        with open(argv[1], "w") as out:
            json.dump(snapshot(["postgres", "sqlite"]), out)
        return 0
    with open(argv[1]) as f:
        before = json.load(f)
    problems = compare(before, snapshot(sorted(before)))
    print("\n".join(problems) or "OK: the same statements")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
