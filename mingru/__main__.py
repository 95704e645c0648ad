"""``python -m mingru`` runs the ``mingru`` command line (see :mod:`mingru.cli`)."""

from mingru.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
