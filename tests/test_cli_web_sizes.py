"""rota/cli and rota/web stay readable: no function (decorators included) over 50 lines, no
module over 500 lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "rota"


def test_no_long_function_or_module_in_cli_or_web() -> None:
    too_long: list[str] = []
    for path in sorted([*(ROOT / "cli").rglob("*.py"), *(ROOT / "web").rglob("*.py")]):
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > 500:
            too_long.append(f"{path.name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                length = (node.end_lineno or node.lineno) - start + 1
                if length > 50:
                    too_long.append(f"{path.name}:{node.lineno} {node.name}: {length} lines")
    assert too_long == []
