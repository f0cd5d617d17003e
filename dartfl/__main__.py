"""`python -m dartfl ARGS`: the `dartfl` command ([project.scripts] in pyproject.toml), for an
environment whose bin/ is not on PATH or that has no console script."""

from __future__ import annotations

# The import stays under the guard: tests/test_core_purity.py imports every module of the core
# (this one included), which must load neither the CLI nor what it pulls in.
if __name__ == "__main__":
    from dartfl.cli.main import main

    raise SystemExit(main())
