"""Named SQL of every SQL backend, read from its own folder (rota/stores/<backend>/sql/):

- `queries/<role>.sql` (enqueue, claim, finish, schedules, ...): blocks that start with
  `-- name: <name>`; every file of the folder is read, and a name is defined once across them.
  `{now}` in a query is replaced by the backend's clock expression.
- In the same files, `-- fragment: <name>` blocks: SQL written once and used by many queries as
  `{{name}}` (double braces: no SQL, `{now}` or psycopg `%(x)s` placeholder looks like it),
  expanded at load. A fragment may take arguments: `-- fragment: lock_dependents(parents)`,
  its body writing `{{parents}}`, used as `{{lock_dependents(ARRAY(SELECT id FROM v))}}`
  (arguments split at commas outside parentheses). A reference alone on its line gives every
  line of the fragment that line's indentation; a fragment may use other fragments.
- `migrations/NNNN_<name>.sql`: the numbered migrations.

A load error names the backend, the file and the query or fragment."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

_BLOCK = re.compile(r"^--\s*(name|fragment):\s*(\w+)(?:\(([\w\s,]*)\))?\s*$", re.MULTILINE)
_ARGS = r"(?:\(((?:(?!\}\}).)*?)\))?"  # (arguments), never across a `}}`
_USE = re.compile(r"\{\{(\w+)" + _ARGS + r"\}\}", re.DOTALL)
_ALONE = re.compile(r"^([ \t]*)\{\{(\w+)" + _ARGS + r"\}\}[ \t]*(\n|\Z)", re.DOTALL | re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_(\w+)\.sql$")


@dataclass(frozen=True)
class Block:
    """One `-- name:` or `-- fragment:` block as written: its file, parameters and text."""

    file: str
    text: str
    params: tuple[str, ...] = ()


@dataclass(frozen=True)
class Sources:
    """A backend's named queries and fragments as written, before expansion."""

    backend: str
    queries: dict[str, Block]
    fragments: dict[str, Block]

    def uses(self, block: Block) -> set[str]:
        """The fragments a block uses (its own parameters are not fragments)."""
        return {m.group(1) for m in _USE.finditer(block.text)} - set(block.params)

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
        for kind, name, params, body in zip(parts[1::4], parts[2::4], parts[3::4], parts[4::4], strict=True):
            found = queries if kind == "name" else fragments
            where = f"{backend}/sql/queries/{entry.name}"
            if name in found:
                what = "query" if kind == "name" else "fragment"
                raise RuntimeError(f"{what} {name!r} is defined twice: in {found[name].file} and in {where}")
            if params is not None and kind == "name":
                raise RuntimeError(f"{where}: query {name!r} takes no parameters (only a fragment does)")
            names = tuple(p.strip() for p in (params or "").split(",") if p.strip())
            found[name] = Block(where, body.strip(), names)
    return Sources(backend, queries, fragments)


def _arguments(text: str | None) -> list[str]:
    """A reference's arguments, split at the commas outside parentheses."""
    if text is None:
        return []
    args, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
    return [*args, text[start:].strip()]


def _indented(text: str, indent: str) -> str:
    return "\n".join(indent + line if line else line for line in text.splitlines())


def _expand(sources: Sources, name: str, block: Block, bound: dict[str, str], seen: tuple[str, ...] = ()) -> str:
    """The block's text without its comment lines, every `{{fragment}}` replaced (recursively)
    and every `{{parameter}}` of a fragment by its argument."""

    def ref(used: str, args_text: str | None, indent: str = "") -> str:
        if used in bound and args_text is None:
            return _indented(bound[used], indent) if indent else bound[used]
        if used in seen:
            raise RuntimeError(f"{block.file}: fragment {used!r} uses itself (through {' -> '.join(seen)})")
        if used not in sources.fragments:
            raise RuntimeError(f"{block.file}: {name!r} uses the unknown fragment {used!r}")
        fragment = sources.fragments[used]
        args = [_expand(sources, name, Block(block.file, a), bound, seen) for a in _arguments(args_text)]
        if len(args) != len(fragment.params):
            raise RuntimeError(
                f"{block.file}: {name!r} gives fragment {used!r} {len(args)} argument(s), it takes {len(fragment.params)}"
            )
        # indented before its arguments go in: an argument's own lines keep their indentation
        text = Block(fragment.file, _indented(fragment.text, indent), fragment.params)
        return _expand(sources, used, text, dict(zip(fragment.params, args, strict=True)), (*seen, used))

    def alone(m: re.Match[str]) -> str:
        text = ref(m.group(2), m.group(3), m.group(1))
        return text + m.group(4) if text else ""  # (a line that expands to nothing goes)

    text = "\n".join(line for line in block.text.splitlines() if not line.lstrip().startswith("--"))
    return _USE.sub(lambda m: ref(m.group(1), m.group(2)), _ALONE.sub(alone, text))


def load_queries(backend: str, now_sql: str) -> dict[str, str]:
    """The named queries of `backend`, fragments expanded, comment lines dropped, with `{now}`
    replaced by the backend's clock expression."""
    sources = query_sources(backend)
    queries: dict[str, str] = {}
    for name, block in sources.queries.items():
        queries[name] = _expand(sources, name, block, {}).replace("{now}", now_sql)
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
