"""How a case's error is named (core/errors.py) and caught where cases run: any BaseException but
those that end the process is the case's error, named by its root cause."""

from __future__ import annotations

import traceback
from types import SimpleNamespace

import pytest
from torch.distributed.checkpoint.api import CheckpointException

from trainready.core.case import Case, Outcome
from trainready.core.context import CaseContext
from trainready.core.errors import error_head, root_cause
from trainready.core.worker import execute_case


def _checkpoint_failure() -> CheckpointException:
    cause = NotImplementedError("emu has no pinned host memory")
    stack = traceback.StackSummary()
    return CheckpointException("save failed", {1: (cause, stack), 0: (cause, stack)})


def test_errors_are_named_in_one_line_by_their_root_cause():
    assert error_head(ValueError("bad shape\nmore detail")) == "ValueError: bad shape"
    assert error_head(RuntimeError()) == "RuntimeError"
    assert error_head(ValueError("x" * 900)) == "ValueError: " + "x" * 488  # 500 characters
    plain = KeyError("k")
    assert root_cause(plain) is plain
    ckpt = _checkpoint_failure()
    assert isinstance(root_cause(ckpt), NotImplementedError)  # the lowest rank's
    assert error_head(ckpt) == (
        "CheckpointException from ranks [0, 1]: NotImplementedError: emu has no pinned host memory"
    )


def _suite(raised: BaseException) -> SimpleNamespace:
    def execute(case: Case, ctx: CaseContext) -> Outcome:
        raise raised

    return SimpleNamespace(execute=execute)


def test_a_case_raising_any_base_exception_is_its_error_but_exits_end_the_process():
    case, ctx = Case("s", "c", {}), CaseContext("cpu", None, 10.0)
    out = execute_case(_suite(_checkpoint_failure()), case, ctx)
    assert out.status == "fail_run"
    assert out.diagnostics["error"].startswith("CheckpointException from ranks [0, 1]: ")
    assert "CheckpointException" in out.diagnostics["traceback"]
    for exiting in (KeyboardInterrupt(), SystemExit(3)):
        with pytest.raises(type(exiting)):
            execute_case(_suite(exiting), case, ctx)
