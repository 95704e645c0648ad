"""``python -m mingru_cli`` runs the ``mingru`` command line (see :mod:`mingru_cli.cli`)."""

from mingru_cli.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
