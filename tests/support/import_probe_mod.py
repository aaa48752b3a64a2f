"""Imported by `--import tests.support.import_probe_mod` in tests/unit/core/test_imports.py: appends this
process's pid to the file IMPORT_PROBE_LOG names, so a test sees which processes imported it."""

import os

_log = os.environ.get("IMPORT_PROBE_LOG")
if _log:
    with open(_log, "a") as f:
        f.write(f"{os.getpid()}\n")
