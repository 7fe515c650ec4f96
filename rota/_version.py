"""The version of rota: the single source (pyproject.toml reads it; `rota --version` prints it)."""

__version__ = "0.1.0"
