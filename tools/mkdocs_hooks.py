"""MkDocs hooks: the reference pages that come from the code, rendered at build time.

A page holds a marker such as `<!-- rota:settings -->`; `on_page_markdown` replaces it with
a table made from the code, so the page cannot drift from it:

- `rota:settings`    every setting of rota/config.py's SETTINGS, its variable, the arguments
                     in code and the `rota` flags that set it (found in the click commands);
- `rota:metrics`     every metric a worker's `/metrics` and the dashboard's `/metrics` serve,
                     collected from a real worker and App on a throw-away SQLite file;
- `rota:hook-events` and `rota:log-events` check that the page describes every event name of
                     rota.events.EVENTS / rota.logs.EVENTS (and no other): a missing or
                     stale name fails the build.

`render()` is importable without MkDocs (tests/test_docs.py uses it).
"""

from __future__ import annotations

import inspect
import re
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import click

MARKER = re.compile(r"<!-- rota:([a-z-]+) -->")

# Setting -> (callable, parameter) pairs that take it in code. The parameter must exist in the
# callable's signature (checked at render time), so a rename fails the build.
CODE_PARAMS: dict[str, list[tuple[str, str]]] = {
    "database_url": [("App", "database_url")],
    "locks_url": [("App", "locks_url")],
    "concurrency": [("App", "concurrency"), ("run_worker", "concurrency")],
    "queues": [("run_worker", "queues")],
    "lease": [("App", "lease")],
    "poll_interval": [("App", "poll_interval")],
    "shutdown_timeout": [("App", "shutdown_timeout"), ("run_worker", "shutdown_timeout")],
    "retention": [("App", "retention")],
    "prune_interval": [("App", "prune_interval")],
    "pool_size": [("App", "pool_size")],
    "pooler": [("App", "pooler")],
    "listen_url": [("App", "listen_url")],
    "prefetch": [("app.worker", "prefetch")],
    "metrics_port": [("app.worker", "metrics_port")],
    "dashboard_token": [("create_app", "token")],
    "dashboard_allowed_hosts": [("create_app", "allowed_hosts")],
}


def _callables() -> dict[str, Callable[..., Any]]:
    import rota
    from rota.worker import Worker

    found: dict[str, Callable[..., Any]] = {"App": rota.App, "run_worker": rota.App.run_worker, "app.worker": Worker}
    try:
        from rota.web import create_app

        found["create_app"] = create_app
    except ImportError:  # pragma: no cover - the docs extra brings rota[web]
        pass
    return found


def _walk(group: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
    yield path, group
    if isinstance(group, click.Group):
        for name, command in sorted(group.commands.items()):
            yield from _walk(command, f"{path} {name}")


def _flags() -> dict[str, list[str]]:
    """Variable name -> the `rota` flags whose help names it (config.help_line)."""
    from rota.cli import main

    flags: dict[str, list[str]] = {}
    for path, command in _walk(main, "rota"):
        for param in command.params:
            if not isinstance(param, click.Option):
                continue
            found = re.search(r"\benv (ROTA_[A-Z_]+)", param.help or "")
            if found:
                names = "/".join(sorted(param.opts, key=len))
                flags.setdefault(found[1], []).append(f"`{path} {names}`")
    return flags


def settings_table() -> str:
    from rota import config

    calls, flags = _callables(), _flags()
    rows = ["| Variable | Setting | In code | `rota` flag | Default |", "|---|---|---|---|---|"]
    for s in config.SETTINGS.values():
        code = []
        for where, param in CODE_PARAMS.get(s.name, []):
            if where not in calls:
                continue
            if param not in inspect.signature(calls[where]).parameters:
                raise ValueError(f"docs: {where}() has no parameter {param!r} (CODE_PARAMS in {__file__})")
            code.append(f"`{where}({param}=)`")
        rows.append(
            f"| `{s.env}` | {_cell(s.help)} | {', '.join(code) or '—'} | "
            f"{', '.join(flags.get(s.env, [])) or '—'} | `{s.shown_default}` |"
        )
    return "\n".join(rows)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _families() -> Iterator[tuple[str, Any]]:
    """(where, metric family) for every metric of a worker and of the dashboard."""
    import rota
    from rota.metrics import WorkerCollector, _run_observer
    from rota.web.metrics import StoreCollector

    with tempfile.TemporaryDirectory() as tmp:
        app = rota.App(f"sqlite:///{tmp}/docs.db", retention=None)
        try:
            app.add_schedule("docs-example", "docs.example", every=60)
            worker = app.worker(install_signal_handlers=False)
            for family in WorkerCollector(worker).collect():
                yield "worker", family
            from prometheus_client import CollectorRegistry

            registry = CollectorRegistry()
            _run_observer(registry)
            for family in registry.collect():
                yield "worker", family
            for family in StoreCollector(app).collect():
                yield "dashboard", family
        finally:
            app.close()


_HISTOGRAM_LABELS = {"rota_run_duration_seconds": "task, status", "rota_run_lateness_seconds": "task"}


def metrics_table() -> str:
    rows = ["| Metric | Type | Labels | Served by | Meaning |", "|---|---|---|---|---|"]
    for where, family in _families():
        labels = getattr(family, "_labelnames", ()) or sorted({k for x in family.samples for k in x.labels})
        shown = _HISTOGRAM_LABELS.get(family.name) or ", ".join(k for k in labels if k != "le") or "—"
        name = family.name + ("_total" if family.type == "counter" else "")
        served = "worker `--metrics-port`" if where == "worker" else "dashboard `/metrics`"
        rows.append(f"| `{name}` | {family.type} | {shown} | {served} | {_cell(family.documentation)} |")
    return "\n".join(rows)


def _check_names(markdown: str, names: tuple[str, ...], what: str, page: str) -> str:
    """Every name is described (as a `name` heading term); no described name is unknown."""
    described = set(re.findall(r"^`([a-z_]+)`\s*$", markdown, flags=re.M))
    missing = [n for n in names if n not in described]
    unknown = sorted(described - set(names))
    if missing or unknown:
        raise ValueError(f"docs: {page} must describe every {what}: missing {missing}, unknown {unknown}")
    return "Names: " + ", ".join(f"`{n}`" for n in names) + "."


def render(marker: str, markdown: str = "", page: str = "?") -> str:
    if marker == "settings":
        return settings_table()
    if marker == "metrics":
        return metrics_table()
    if marker == "hook-events":
        from rota.events import EVENTS

        return _check_names(markdown.split("<!-- rota:log-events -->")[0], EVENTS, "hook event", page)
    if marker == "log-events":
        from rota.logs import EVENTS as LOG_EVENTS

        return _check_names(markdown.split("<!-- rota:log-events -->")[-1], LOG_EVENTS, "log event", page)
    if marker == "version":
        import rota

        return rota.__version__
    raise ValueError(f"docs: unknown marker rota:{marker} in {page}")


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    where = getattr(getattr(page, "file", None), "src_uri", "?")
    return MARKER.sub(lambda m: render(m[1], markdown, where), markdown)
