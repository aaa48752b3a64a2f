"""The CLI's commands, one module each (e.g. `run`, `report`, `ledger`, `explore`).

A module here defines `register(app: typer.Typer) -> None` and adds its command(s) to the app;
`trainready.cli.app` finds the modules by listing this package, so adding a command edits no shared
file. Registration order is the order of `trainready --help`: the modules named in ORDER first, as
listed, then any others by name.
Keep imports of heavy dependencies inside the command functions: `trainready --help` stays fast.
"""

from __future__ import annotations

import importlib
import pkgutil

import typer

# The core commands first, in the order a user meets them; then the rest.
ORDER = (
    "devices",
    "run",
    "report",
    "merge",
    "mfu",
    "explore",
    "gate",
    "history",
    "ledger",
    "profile",
)


def register_all(app: typer.Typer) -> None:
    names = [info.name for info in pkgutil.iter_modules(__path__)]
    rank = {name: i for i, name in enumerate(ORDER)}
    for name in sorted(names, key=lambda n: (rank.get(n, len(ORDER)), n)):
        module = importlib.import_module(f"{__name__}.{name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(app)
