"""trainready.device.compat: torch version parsing, moved APIs, and known torch limitations that
turn a matching failure, and only a matching one, into `unsupported`."""

from __future__ import annotations

import re

import pytest

from trainready.core.case import STATUSES, Case, Outcome
from trainready.core.worker import _excuse_torch_limitation
from trainready.device import compat
from trainready.device.compat import (
    EXCUSED_KEY,
    LIMITATIONS,
    TORCH_FLOOR,
    TORCH_NEWEST,
    excuse,
    parse_version,
)

FLEX_BWD = "flex/causal/B1/H2-1/S128/D32/fwd_bwd"
INDUCTOR_ERROR = {"error": "InductorError: IndexError: tuple index out of range"}
DTENSOR = "dist/dtensor/redistribute"
DTENSOR_REASON = {
    "reason": "RuntimeError: Trying to distribute tensor with unsupported placements P on "
    "device mesh dimension 0!"
}


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("2.9.0+cu128", (2, 9, 0)),
        ("2.14.1", (2, 14, 1)),
        ("2.11", (2, 11, 0)),
        ("2.11.0a0+git1234abc", (2, 11, 0)),
        ("2.10.0.dev20251030+cu126", (2, 10, 0)),
    ],
)
def test_parse_version(text, want):
    assert parse_version(text) == want


def test_parse_version_refuses_what_is_no_version():
    with pytest.raises(ValueError, match="not a torch version"):
        parse_version("nightly")


def test_grouped_mm_is_this_torchs():
    assert callable(compat.grouped_mm())


def test_the_declared_range_is_ordered():
    assert parse_version(TORCH_FLOOR) < parse_version(TORCH_NEWEST)


@pytest.mark.parametrize("entry", LIMITATIONS, ids=lambda e: e.what)
def test_every_entry_is_well_formed(entry):
    """A range inside the supported one, a signature, a reason, statuses the vocabulary has."""
    assert parse_version(TORCH_FLOOR) <= parse_version(entry.since) < parse_version(entry.until)
    assert parse_version(entry.until) <= parse_version(TORCH_NEWEST)
    assert re.compile(entry.error).pattern and entry.reason and entry.what
    assert entry.statuses <= set(STATUSES) and "pass" not in entry.statuses
    assert "fail_numerics" not in entry.statuses  # wrong numbers are never excused
    assert "/" in entry.cases


def test_a_matching_failure_becomes_unsupported_with_the_reason():
    status, diag = excuse(FLEX_BWD, "cpu", "fail_compile", dict(INDUCTOR_ERROR), (2, 9, 0))
    assert status == "unsupported"
    assert "error" not in diag  # the report's reason is the entry's, not the bare error
    assert diag["reason"].startswith("flex backward: torch 2.9.0 ")
    assert "(pytorch/pytorch#169224)" in diag["reason"]
    assert len(diag["reason"]) <= 200  # the report's one line keeps 200 characters
    assert diag["reason"].endswith(
        "torch said: InductorError: IndexError: tuple index out of range"
    )
    assert diag[EXCUSED_KEY] == {
        "what": "flex backward",
        "torch_range": ">=2.9,<2.11",
        "upstream": LIMITATIONS[0].upstream,
        "status": "fail_compile",
        "error": INDUCTOR_ERROR["error"],
    }


def test_other_diagnostics_are_kept():
    diag = {**INDUCTOR_ERROR, "traceback": "Traceback…", "phase_s": 1.5}
    _, got = excuse(FLEX_BWD, "cpu", "fail_run", diag, (2, 10, 3))
    assert got["traceback"] == "Traceback…" and got["phase_s"] == 1.5


@pytest.mark.parametrize(
    ("case_id", "device", "status", "diagnostics", "version"),
    [
        # another error on the same case: the device's finding, not torch's known bug
        (FLEX_BWD, "cpu", "fail_compile", {"error": "InductorError: KeyError: 'x'"}, (2, 9, 0)),
        # the same error outside the range: the fixed torch raises it for another reason
        (FLEX_BWD, "cpu", "fail_compile", INDUCTOR_ERROR, (2, 11, 0)),
        (FLEX_BWD, "cpu", "fail_compile", INDUCTOR_ERROR, (2, 13, 0)),
        (FLEX_BWD, "cpu", "fail_compile", INDUCTOR_ERROR, (2, 8, 0)),
        # a device the entry does not name
        (FLEX_BWD, "cuda:0", "fail_compile", INDUCTOR_ERROR, (2, 9, 0)),
        # a case the pattern does not name (the forward pass)
        (FLEX_BWD.replace("fwd_bwd", "fwd"), "cpu", "fail_compile", INDUCTOR_ERROR, (2, 9, 0)),
        # wrong numbers, a timeout: never excused
        (FLEX_BWD, "cpu", "fail_numerics", INDUCTOR_ERROR, (2, 9, 0)),
        (FLEX_BWD, "cpu", "timeout", INDUCTOR_ERROR, (2, 9, 0)),
        # an error in the traceback only: the case did not end with it
        (
            FLEX_BWD,
            "cpu",
            "fail_run",
            {"error": "boom", "traceback": INDUCTOR_ERROR["error"]},
            (2, 9, 0),
        ),
        (DTENSOR, "cpu", "unsupported", {"reason": "Partial not supported"}, (2, 9, 0)),
        (DTENSOR, "cpu", "unsupported", DTENSOR_REASON, (2, 11, 0)),
    ],
)
def test_anything_else_is_left_as_it_is(case_id, device, status, diagnostics, version):
    got_status, got = excuse(case_id, device, status, diagnostics, version)
    assert (got_status, got) == (status, diagnostics)
    assert got is diagnostics


def test_an_unsupported_case_gets_the_entry_that_says_whose_gap_it_is():
    status, diag = excuse(DTENSOR, "cpu", "unsupported", dict(DTENSOR_REASON), (2, 9, 0))
    assert status == "unsupported"
    assert diag["reason"].startswith("DTensor Partial: torch 2.9.0 has no Partial placement")
    assert len(diag["reason"]) <= 200
    assert diag[EXCUSED_KEY]["status"] == "unsupported"


def test_the_worker_applies_the_table_to_every_outcome(monkeypatch):
    """The worker's hook: on a torch inside the range the case is unsupported; on this torch
    (2.13, outside every entry) the same outcome comes back untouched."""
    case = Case("flex", FLEX_BWD.removeprefix("flex/"))
    outcome = Outcome("fail_compile", diagnostics=dict(INDUCTOR_ERROR))
    assert _excuse_torch_limitation(case, "cpu", outcome) is outcome
    monkeypatch.setattr(compat, "torch_version", lambda: (2, 9, 0))
    got = _excuse_torch_limitation(case, "cpu", outcome)
    assert got.status == "unsupported" and got.diagnostics[EXCUSED_KEY]["status"] == "fail_compile"
    other = Outcome("fail_compile", diagnostics={"error": "InductorError: AssertionError"})
    assert _excuse_torch_limitation(case, "cpu", other) is other
