"""Named SQL: each backend keeps its queries in `sql/<dialect>/queries.sql` as blocks that
start with `-- name: <name>`, and its numbered migrations as `sql/<dialect>/NNNN_<name>.sql`."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_(\w+)\.sql$")


def sql_folder(dialect: str) -> Any:
    """Where `dialect` keeps its SQL: a backend package's own `sql/` (mysql), else `sql/<dialect>/`."""
    if dialect == "mysql":
        return resources.files("rota.stores.mysql") / "sql"
    return resources.files("rota.stores") / "sql" / dialect


def _query_text(dialect: str) -> str:
    """The dialect's named queries: `queries.sql`, or one file per role in `queries/`."""
    folder = sql_folder(dialect)
    if dialect != "mysql":
        return str((folder / "queries.sql").read_text())
    files = sorted((e for e in (folder / "queries").iterdir() if e.name.endswith(".sql")), key=lambda e: e.name)
    return "\n".join(e.read_text() for e in files)


def load_queries(dialect: str, now_sql: str) -> dict[str, str]:
    """The named queries of `dialect`, with `{now}` replaced by the dialect's clock expression."""
    text = _query_text(dialect)
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise RuntimeError(f"query {name!r} is defined twice in {dialect}/queries.sql")
        lines = [line for line in body.strip().splitlines() if not line.lstrip().startswith("--")]
        queries[name] = "\n".join(lines).replace("{now}", now_sql)
    return queries


def query_transitions(dialect: str) -> dict[str, tuple[str, ...]]:
    """The lifecycle transitions (rota/lifecycle.py) each named query of `dialect` names on
    its `-- transition: a, b` line; `none (why)` names none."""
    parts = _NAME.split(_query_text(dialect))
    named: dict[str, tuple[str, ...]] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        for line in body.strip().splitlines():
            if line.startswith("-- transition:"):
                value = line.removeprefix("-- transition:").strip()
                named[name] = () if value.startswith("none") else tuple(v.strip() for v in value.split(","))
    return named


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations(dialect: str) -> list[Migration]:
    """The numbered migrations of `dialect`, in order. Read once per process (a process
    that dropped privileges later, or a checkout it can no longer read, still has them)."""
    return list(_migrations(dialect))


@functools.cache
def _migrations(dialect: str) -> tuple[Migration, ...]:
    folder = sql_folder(dialect)
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    # A database records the highest number applied and gets every higher one, so the
    # numbers must run 1, 2, 3 ... without a gap (a gap would hide a migration forever).
    if versions != list(range(1, len(versions) + 1)):
        raise RuntimeError(f"{dialect} migrations must be numbered 1, 2, 3 ... without gaps: {versions}")
    return tuple(found)


def latest_version(migrations: list[Migration]) -> int:
    return migrations[-1].version if migrations else 0
