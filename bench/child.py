"""Entry point of every benchmark subprocess, so each one starts from a clean interpreter.

python -m bench.child measure MODULE:FUNC '{"ctx": {...}, "params": {...}}'
    runs FUNC(Ctx(**ctx), **params) and prints one line: RESULT_PREFIX + JSON metrics
    (or {"unsupported": reason} / {"error": text});
python -m bench.child worker MODULE:FUNC '{...}'
    runs FUNC(**kwargs): a worker loop that returns (or is signalled) when done.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from collections.abc import Callable
from typing import Any

from bench.core import Ctx, Unsupported

RESULT_PREFIX = "BENCH-RESULT "


def resolve(spec: str) -> Callable[..., Any]:
    module, _, name = spec.partition(":")
    func: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return func


def _measure(spec: str, payload: dict[str, Any]) -> dict[str, Any]:
    try:
        metrics = resolve(spec)(Ctx(**payload["ctx"]), **payload.get("params", {}))
        return {"metrics": metrics}
    except Unsupported as exc:
        return {"unsupported": str(exc)}
    except Exception as exc:
        traceback.print_exc()
        return {"error": f"{type(exc).__name__}: {exc}"}


def main(argv: list[str]) -> int:
    mode, spec, payload = argv[0], argv[1], json.loads(argv[2])
    if mode == "worker":
        resolve(spec)(**payload)
        return 0
    result = _measure(spec, payload)
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
