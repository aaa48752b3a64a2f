"""The `trainready` command: a thin Typer layer over `trainready.api`. This module holds the app
and `main`; each command is a module of `trainready.cli.commands`, registered below.

Bad input (unknown device, suite, model, format; malformed --shard; a store or config that does not
parse; a missing option or a value of the wrong type) prints one line naming the problem and the
valid choices, and exits with code 2.
"""

from __future__ import annotations

import sys

import typer

from trainready.cli.commands import register_all
from trainready.cli.commands.profile import quick_analyze
from trainready.cli.common import (
    ClickException,
    NoArgsIsHelpError,
    UsageError,
    print_error,
    usage_message,
)

app = typer.Typer(
    name="trainready",
    help="Is this PyTorch device ready for research training? Run suites, get a scorecard.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def main() -> None:
    """The Typer app, except that a usage error (a missing option, a value of the wrong type, no
    such command) is one line and exit code 2, as all bad input is, where Typer would draw a box
    of several. The console script is `trainready.cli.entry:main`, which runs the plain `analyze`
    before this module (Typer, rich, the runner) loads and hands everything else to this."""
    quick = quick_analyze(sys.argv[1:])  # `analyze TRACE`, parsed without Typer's pydantic
    if quick is not None:
        sys.exit(quick)
    try:
        code = app(standalone_mode=False)
    except NoArgsIsHelpError as e:  # the help is printed when the error is made
        sys.exit(e.exit_code)
    except UsageError as e:
        print_error(usage_message(e))
        sys.exit(2)
    except ClickException as e:
        print_error(" ".join(e.format_message().split()))
        sys.exit(e.exit_code)
    except typer.Abort:
        print_error("aborted")
        sys.exit(1)
    # A command's own exit code (typer.Exit), or None: success.
    sys.exit(code if isinstance(code, int) else 0)


register_all(app)  # every command: one module each in trainready.cli.commands


if __name__ == "__main__":
    main()
