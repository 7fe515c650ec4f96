"""Named SQL of every SQL backend, read from its own folder (rota/stores/<backend>/sql/):

- `queries/<role>.sql` (enqueue, claim, finish, schedules, ...): blocks that start with
  `-- name: <name>`; every file of the folder is read, and a name is defined once across them.
  `{now}` in a query is replaced by the backend's clock expression.
- In the same files, `-- fragment: <name>` blocks: SQL written once and used by many queries as
  `{{name}}` (double braces: no SQL, `{now}` or psycopg `%(x)s` placeholder looks like it),
  expanded at load. A reference alone on its line takes that line's indentation for every line
  of the fragment; a fragment may use other fragments.
- `migrations/NNNN_<name>.sql`: the numbered migrations.

A load error names the backend, the file and the query or fragment."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable

_BLOCK = re.compile(r"^--\s*(name|fragment):\s*(\w+)\s*$", re.MULTILINE)
_USE = re.compile(r"\{\{(\w+)\}\}")
_ALONE = re.compile(r"^([ \t]*)\{\{(\w+)\}\}[ \t]*$", re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_(\w+)\.sql$")


@dataclass(frozen=True)
class Block:
    """One `-- name:` or `-- fragment:` block as written: its file and its text."""

    file: str
    text: str


@dataclass(frozen=True)
class Sources:
    """A backend's named queries and fragments as written, before expansion."""

    backend: str
    queries: dict[str, Block]
    fragments: dict[str, Block]

    def uses(self, block: Block) -> set[str]:
        return set(_USE.findall(block.text))

    def unused_fragments(self) -> set[str]:
        used = {name for b in [*self.queries.values(), *self.fragments.values()] for name in self.uses(b)}
        return set(self.fragments) - used


def _folder(backend: str, *parts: str) -> Traversable:
    folder = resources.files("rota.stores") / backend / "sql"
    for part in parts:
        folder = folder / part
    return folder


def query_sources(backend: str) -> Sources:
    """Every block of every `queries/*.sql` file of `backend`; a name defined twice (in one
    file or across files) is an error naming both places."""
    queries: dict[str, Block] = {}
    fragments: dict[str, Block] = {}
    files = sorted((e for e in _folder(backend, "queries").iterdir() if e.name.endswith(".sql")), key=lambda e: e.name)
    if not files:
        raise RuntimeError(f"{backend}: no queries/*.sql in {_folder(backend, 'queries')}")
    for entry in files:
        parts = _BLOCK.split(entry.read_text())
        for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
            found = queries if kind == "name" else fragments
            where = f"{backend}/sql/queries/{entry.name}"
            if name in found:
                raise RuntimeError(f"{kind} {name!r} is defined twice: in {found[name].file} and in {where}")
            found[name] = Block(where, body.strip())
    return Sources(backend, queries, fragments)


def _expand(sources: Sources, name: str, block: Block, seen: tuple[str, ...] = ()) -> str:
    """The block's text with every `{{fragment}}` replaced (recursively)."""

    def fragment(used: str) -> str:
        if used in seen:
            raise RuntimeError(f"{block.file}: fragment {used!r} uses itself (through {' -> '.join(seen)})")
        if used not in sources.fragments:
            raise RuntimeError(f"{block.file}: {name!r} uses the unknown fragment {used!r}")
        return _expand(sources, used, sources.fragments[used], (*seen, used))

    def alone(m: re.Match[str]) -> str:
        return "\n".join(m.group(1) + line if line else line for line in fragment(m.group(2)).splitlines())

    text = _ALONE.sub(alone, block.text)
    return _USE.sub(lambda m: fragment(m.group(1)), text)


def load_queries(backend: str, now_sql: str) -> dict[str, str]:
    """The named queries of `backend`, fragments expanded, comment lines dropped, with `{now}`
    replaced by the backend's clock expression."""
    sources = query_sources(backend)
    queries: dict[str, str] = {}
    for name, block in sources.queries.items():
        text = _expand(sources, name, block)
        lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
        queries[name] = "\n".join(lines).replace("{now}", now_sql)
    return queries


def query_transitions(backend: str) -> dict[str, tuple[str, ...]]:
    """The lifecycle transitions (rota/lifecycle.py) each named query of `backend` names on
    its `-- transition: a, b` line; `none (why)` names none."""
    named: dict[str, tuple[str, ...]] = {}
    for name, block in query_sources(backend).queries.items():
        for line in block.text.splitlines():
            if line.startswith("-- transition:"):
                value = line.removeprefix("-- transition:").strip()
                named[name] = () if value.startswith("none") else tuple(v.strip() for v in value.split(","))
    return named


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations(backend: str) -> list[Migration]:
    """The numbered migrations of `backend`, in order. Read once per process (a process
    that dropped privileges later, or a checkout it can no longer read, still has them)."""
    return list(_migrations(backend))


@functools.cache
def _migrations(backend: str) -> tuple[Migration, ...]:
    found = []
    for entry in _folder(backend, "migrations").iterdir():
        match = _MIGRATION.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    # A database records the highest number applied and gets every higher one, so the
    # numbers must run 1, 2, 3 ... without a gap (a gap would hide a migration forever).
    if versions != list(range(1, len(versions) + 1)):
        raise RuntimeError(f"{backend} migrations must be numbered 1, 2, 3 ... without gaps: {versions}")
    return tuple(found)


def latest_version(migrations: list[Migration]) -> int:
    return migrations[-1].version if migrations else 0
