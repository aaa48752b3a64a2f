"""What every CLI command shares: the consoles, one-line errors with exit code 2, warnings, the
options several commands take, and the summary of a stored run."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.markup import escape

from trainready.cli.console import console as console  # re-exported: every command prints on it
from trainready.cli.console import err_console
from trainready.core.config import ConfigError
from trainready.core.store import StoreError

try:  # typer vendors click (typer._click) from 0.2x on; before that it raises click's own errors
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older typer
    from click import exceptions as click_errors

ClickException = click_errors.ClickException
UsageError = click_errors.UsageError
# click >= 8.2 raises it for a bare `trainready`, after printing the help.
NoArgsIsHelpError = getattr(click_errors, "NoArgsIsHelpError", ())

# `--import MODULE`, for the commands that touch a device (run, devices, profile).
IMPORT_OPTION = typer.Option(
    "--import",
    metavar="MODULE",
    help="Import MODULE first, in this process and every one the command starts (repeatable; "
    "adds to TRAINREADY_IMPORT, comma-separated): a device backend such as torch_npu or "
    "trainready.testing.emu, or your kernels for it.",
)

# `--verdict-config FILE`, for the commands that judge runs (run, report).
VERDICT_CONFIG_OPTION = typer.Option(
    metavar="FILE",
    help="A TOML file of readiness thresholds, in place of the built-in ones "
    "(trainready/reporting/verdict.toml; give only the keys you change).",
)


def print_run_summary(out: Path, run_id: str, verdict_config: Path | None = None) -> None:
    """The terminal summary of a stored run (after `run` and `merge`)."""
    from trainready.core.store import Store
    from trainready.reporting.terminal import print_summary

    with Store(out, create=False) as store:
        print_summary(console, store, run_id, verdict_config)


def print_error(message: str) -> None:
    """One line on stderr: `error: MESSAGE`."""
    # The message quotes user input: escaped, so `[...]` and `:x:` print as typed, not as markup.
    err_console.print(
        f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True, emoji=False
    )


def warn(message: str) -> None:
    """One line on stderr: `warning: MESSAGE`."""
    err_console.print(
        f"[yellow]warning:[/] {escape(message)}", highlight=False, soft_wrap=True, emoji=False
    )


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one line naming the problem and exit (2: bad input)."""
    print_error(message)
    raise typer.Exit(code)


def guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a command so user-input errors become one line and exit code 2, and a file the
    system cannot write (a read-only directory, a full disk) one line and exit code 1."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ConfigError, StoreError) as e:
            fail(str(e))
        except OSError as e:
            fail(os_message(e), code=1)

    return wrapped


def os_message(error: OSError) -> str:
    """`PATH: No space left on device`, the way the shell's tools say it."""
    if error.filename is not None and error.strerror:
        return f"{error.filename}: {error.strerror}"
    return error.strerror or str(error)


def usage_message(error: UsageError) -> str:
    """A usage error (missing option, no such command, a value of the wrong type) as one line,
    in the style of the tool's other errors: the problem, then the valid commands or where the
    command's options are listed."""
    text = " ".join(error.format_message().split())
    text = text[:1].lower() + text[1:].rstrip(".")
    ctx = error.ctx
    if ctx is None:
        return text
    group = ctx.command
    if isinstance(group, typer.core.TyperGroup):
        visible = [n for n in group.list_commands(ctx) if not group.get_command(ctx, n).hidden]
        return f"{text}; valid commands: {', '.join(visible)}"
    return f"{text} (see '{ctx.command_path} --help')"
