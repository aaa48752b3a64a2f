"""What every CLI command shares: the consoles, and one-line errors with exit code 2."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console

from trainready.config import ConfigError
from trainready.core.store import StoreError

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 2) -> None:
    """Print one line naming the problem and exit (2: bad input)."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a command so user-input errors become one line and exit code 2."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ConfigError, StoreError) as e:
            fail(str(e))

    return wrapped
