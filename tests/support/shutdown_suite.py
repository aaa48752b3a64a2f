"""A suite for the shutdown tests (imported by dotted path): `ok` passes at once; `spawn` starts two
children and then waits to be killed -- one in the worker's process group, one in a session of
its own started through `core.procs.guarded_command` (only its parent-death guard can end it) --
and writes their pids to the `pid_file` option once both are up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from trainready.core.case import Case, Outcome
from trainready.core.procs import guarded_command

NAME = "shutdown"
DEFAULT_DTYPE = None
DEFAULT_BUDGET_S = 300.0

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def cases(cfg) -> list[Case]:
    kinds = cfg.options.get("kinds", ["ok", "spawn", "ok"])
    pid_file = cfg.options.get("pid_file", "")
    return [
        Case(NAME, f"{i:02d}-{k}", {"kind": k, "pid_file": pid_file}) for i, k in enumerate(kinds)
    ]


def execute(case: Case, ctx) -> Outcome:
    if case.params["kind"] == "ok":
        return Outcome("pass", metrics={"pid": float(os.getpid())})
    in_group = subprocess.Popen(SLEEPER)
    cmd, env = guarded_command(SLEEPER)
    own_session = subprocess.Popen(cmd, env={**os.environ, **env}, start_new_session=True)
    tmp = case.params["pid_file"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"worker": os.getpid(), "children": [in_group.pid, own_session.pid]}, f)
    os.replace(tmp, case.params["pid_file"])  # whole, so the test never reads half of it
    time.sleep(600)
    return Outcome("pass")
