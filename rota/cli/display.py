"""How the `rota` command shows things to people: tables that fit the terminal, short
relative times, humanized durations, and text cleaned of markup and control characters.

A table never wraps a cell: each column gets the width of its widest cell; when they do not
fit the terminal, columns are dropped lowest `keep` first, and the one `flexible` column (a
free-text summary) is cut with an ellipsis to the width left.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_FLEX_MIN = 24  # an exception type and the start of its message
_GAP = 3  # rich's padding and separator between two columns, rounded up


def clean(value: Any, *, newlines: bool = True) -> str:
    """Text safe for a terminal: no escape sequences or control characters (newlines and tabs
    kept if `newlines`), lone surrogates replaced. Rich markup is not interpreted where this
    is printed (Text objects or click.echo)."""
    text = _CONTROL.sub("?", _ESCAPES.sub("", str(value)))
    if not newlines:
        text = text.replace("\n", " ").replace("\t", " ")
    return text.encode("utf-8", "replace").decode("utf-8")


def duration(value: timedelta | float | None) -> str | None:
    """850 ms, 3.2 s, 4 min 12 s, 2 h 5 min, 3 d 4 h."""
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 0:
        return "-" + (duration(-seconds) or "")
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 10 and seconds != int(seconds):
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def when(value: datetime | None, now: datetime, *, utc: bool = False) -> str | None:
    """Relative within an hour (`in 12 s`, `3 min ago`), else a short local (or UTC) time."""
    if value is None:
        return None
    if value.year >= 9999:
        return "9999 (corrupt?)"
    delta = (value - now).total_seconds()
    if abs(delta) < 1:
        return "now"
    if abs(delta) < 3600:
        amount = f"{abs(delta):.0f} s" if abs(delta) < 59.5 else f"{abs(delta) // 60:.0f} min"
        return f"in {amount}" if delta > 0 else f"{amount} ago"
    try:
        shown = value.astimezone(UTC) if utc else value.astimezone()
    except (OverflowError, ValueError):  # near year 1 or 9999, local time may not exist: UTC
        shown = value.astimezone(UTC)
    today = now.astimezone(UTC) if utc else now.astimezone()
    if shown.date() == today.date():
        return shown.strftime("%H:%M:%S")
    if shown.year == today.year:
        return shown.strftime("%b %d %H:%M")
    return shown.strftime("%Y-%m-%d %H:%M")


def line(text: str, console: Console | None = None) -> None:
    """Print one line of plain text that never wraps: cut in the middle (`…`) to the terminal
    width, so both ends of a long path or URL stay readable."""
    console = console or Console()
    text = clean(text, newlines=False)
    width = console.width
    if len(text) > width and width > 10:
        keep = width - 1
        text = text[: keep // 2] + "…" + text[len(text) - (keep - keep // 2) :]
    console.print(Text(text), no_wrap=True, overflow="ignore", crop=False)


@dataclass(frozen=True)
class Column:
    header: str
    keep: int  # higher stays longer when the terminal is narrow
    flexible: bool = False  # free text: cut with an ellipsis instead of dropped first


def fit(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> dict[int, int]:
    """{column index: width} of the columns to show at `width`: all that fit, dropping the
    lowest `keep` first; the flexible column gets what is left (at least _FLEX_MIN)."""
    widths = [max([len(c.header)] + [len(row[i]) for row in rows]) for i, c in enumerate(columns)]
    shown = list(range(len(columns)))

    def needed(indexes: list[int]) -> int:
        cells = sum(min(widths[i], _FLEX_MIN) if columns[i].flexible else widths[i] for i in indexes)
        return cells + _GAP * (len(indexes) - 1)

    for i in sorted(shown, key=lambda i: columns[i].keep):
        if needed(shown) <= width or len(shown) == 1:
            break
        shown.remove(i)
    spare = width - needed(shown)
    return {i: min(widths[i], _FLEX_MIN + spare) if columns[i].flexible else widths[i] for i in shown}


def table(columns: Sequence[Column], rows: Sequence[Sequence[Any]], console: Console | None = None) -> None:
    """Print rows under columns, fitted to the terminal; cells are plain text, never markup."""
    console = console or Console()  # made per call: COLUMNS and the terminal are read now
    cells = [["-" if v is None else clean(v, newlines=False) for v in row] for row in rows]
    shown = fit(columns, cells, console.width)
    out = Table(box=box.SIMPLE_HEAD, header_style="bold", show_edge=False, pad_edge=False)
    for i, width in shown.items():
        out.add_column(columns[i].header, no_wrap=True, overflow="ellipsis", width=width)
    for row in cells:
        out.add_row(*(Text(row[i]) for i in shown))
    console.print(out)
