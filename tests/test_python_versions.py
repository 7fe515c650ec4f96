"""What keeps rota working on every Python it supports (pyproject's classifiers; .ci/run
runs a chosen part of the suite on each): no module uses an API that warns of its removal."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_IMPORT_ALL = """
import importlib, pkgutil, warnings
warnings.simplefilter("error")
import rota
for m in pkgutil.walk_packages(rota.__path__, "rota."):
    if m.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(m.name)
    except Exception as exc:  # an extra not installed (.ci/pythons: postgres and mysql only) is no failure
        missing = exc if isinstance(exc, ModuleNotFoundError) else exc.__cause__
        if not isinstance(missing, ModuleNotFoundError) or (missing.name or "rota").partition(".")[0] == "rota":
            raise
"""


def test_every_module_imports_without_a_warning() -> None:
    """A deprecation seen at import (3.12: importlib.abc.Traversable, removed in 3.14) is an
    error here, in a fresh interpreter: the suite's own imports cannot hide it."""
    done = subprocess.run([sys.executable, "-c", _IMPORT_ALL], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_classifiers_name_the_versions_ci_runs() -> None:
    """pyproject's classifiers, requires-python and the versions CI tests (.ci/pythons) agree."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    classified = re.findall(r'"Programming Language :: Python :: (3\.\d+)"', pyproject)
    ci = re.search(r'^PYTHON_VERSIONS="\$\{PYTHON_VERSIONS-([\d. ]+)\}"', (ROOT / ".ci" / "pythons").read_text(), re.M)
    assert ci is not None, ".ci/pythons sets PYTHON_VERSIONS"
    assert classified == ["3.11", *ci.group(1).split()]
    assert 'requires-python = ">=3.11"' in pyproject
