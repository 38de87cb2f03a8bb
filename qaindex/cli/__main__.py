"""``python -m qaindex.cli``: the same command line as the ``qaindex`` script."""

from __future__ import annotations

from .app import main

if __name__ == "__main__":  # pragma: no cover - exercised through a subprocess in tests
    main(prog_name="qaindex")
