"""CLI commands beyond the core ones, one module each (e.g. `ledger`, `analyze`, `explore`).

A module here defines `register(app: typer.Typer) -> None` and adds its command(s) to the app;
`trainready.cli.app` finds the modules by listing this package, so adding a command edits no shared file.
Keep imports of heavy dependencies inside the command functions: `trainready --help` stays fast.
"""

from __future__ import annotations

import importlib
import pkgutil

import typer


def register_all(app: typer.Typer) -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(app)
