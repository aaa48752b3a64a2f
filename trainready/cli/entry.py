"""The `trainready` console script: `trainready analyze TRACE` without loading the CLI.

The plain form of `analyze` (`trainready.profile.text.parse_quick`) runs here before Typer, the
runner or the report package is imported, so its whole process is Python's start, numpy, the
parse, the analyses and the printing (rich's on a terminal, plain text into a file or a pipe); its
output, errors and exit codes are the Typer command's.
Everything else (`--help`, other commands, any other form of `analyze`) is `trainready.cli.app.main`.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["analyze"]:
        from trainready.profile.text import quick_main

        code = quick_main(argv)
        if code is not None:
            _exit(code)
    from trainready.cli.app import main as cli_main

    cli_main()


def _exit(code: int) -> None:
    """Exit with `code` once the output is flushed, skipping the interpreter's teardown (freeing
    every module, numpy's among them, and the trace's objects: a fifth of the CPU time of a
    whole `analyze` of a small trace). Nothing in `analyze` waits on it: no thread, every file
    closed; atexit hooks (a caller's, a coverage or memory probe) are run first. Should flushing fail (a closed pipe), Python exits as usual."""
    import atexit

    atexit._run_exitfuncs()  # hooks still run (a coverage or memory probe): only teardown goes
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - reported by the normal exit's own flush
        sys.exit(code)
    os._exit(code)


if __name__ == "__main__":
    main()
