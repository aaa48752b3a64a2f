"""The CLI's rich consoles (stdout and stderr), apart from Typer so that `analyze` prints through
them without loading the command line."""

from __future__ import annotations

from rich.console import Console

console = Console()
err_console = Console(stderr=True)
