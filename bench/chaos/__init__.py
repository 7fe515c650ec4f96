"""The chaos matrix of issue 45: `python -m bench.chaos` (see __main__.py)."""
