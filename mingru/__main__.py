"""``python -m mingru`` runs the ``mingru`` command line (see :mod:`mingru_cli.cli`).

An entry shim, not library code: no library module imports ``mingru_cli``, and this one does
so only when run as a script.
"""

if __name__ == "__main__":
    from mingru_cli.cli import main

    raise SystemExit(main())
