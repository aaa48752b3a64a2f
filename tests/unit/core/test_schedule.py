"""The scheduling rule (core/schedule.py): what may start beside what, in which order."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from trainready.core.schedule import may_start, next_startable


@dataclass(frozen=True)
class J:
    name: str
    alone: bool = False
    cores: int | None = None


C = J("correctness")
T = J("timing (whole machine)", alone=True)
T1 = J("timing (one core)", alone=True, cores=1)
T2 = J("timing (two cores)", alone=True, cores=2)


@pytest.mark.parametrize(
    ("job", "running", "starting", "expected"),
    [
        (C, [C, C, C], 0, True),  # correctness cases: as many as there are workers
        (C, [T], 0, False),  # nothing beside a whole-machine timing case
        (T, [C], 0, False),
        (T, [], 1, False),  # nor beside a worker importing torch
        (T, [], 0, True),
        (T1, [C], 0, True),  # 1 share + 1 core <= 2 cores
        (T1, [C, C], 0, False),  # the cores are taken
        (T1, [], 1, True),
        (T1, [C], 1, False),  # the starting worker's core counts
        (T1, [T1], 0, False),  # never two timing cases at once
        (C, [T1], 0, True),  # beside a one-core timing case, on the other core
        (C, [T1, C], 0, False),  # but not past the cores
        (C, [T2], 0, False),  # a two-core timing case on two cores leaves none
        (J("four cores", True, 4), [], 0, True),  # more than the machine has: the whole of it
        (J("four cores", True, 4), [C], 0, False),
    ],
)
def test_what_may_start_beside_what(job, running, starting, expected):
    assert may_start(job, running, starting, total=2, share=1) is expected


def test_correctness_cases_pass_one_core_timing_cases_waiting_for_one_that_runs():
    pending = [J("flex 2", True, 1), J("flex 3", True, 1), J("parity 1"), J("parity 2")]
    assert next_startable(pending, [J("flex 1", True, 1)], 0, total=2, share=1) == 2
    # the timing case ends: the next one starts first, in order
    assert next_startable(pending, [J("parity 0")], 0, total=2, share=1) == 0


def test_nothing_passes_a_case_that_waits_for_correctness_cases_to_end():
    # No timing case runs: the one-core case waits for a core, and no correctness case may take
    # it first (with --jobs above the cores they would never leave one free).
    pending = [J("flex 1", True, 1), J("parity 9")]
    assert next_startable(pending, [C, C], 0, total=2, share=1) is None


def test_a_whole_machine_case_is_never_passed():
    pending = [J("train", True), J("parity 1")]
    assert next_startable(pending, [J("flex", True, 1)], 0, total=2, share=1) is None
    pending = [J("flex 2", True, 1), J("train", True), J("dist", True)]
    assert next_startable(pending, [J("flex 1", True, 1)], 0, total=2, share=1) is None


def test_in_order_when_everything_fits():
    pending = [J("a"), J("b", True, 1), J("c")]
    assert next_startable(pending, [], 0, total=4, share=1) == 0
    assert next_startable(pending[1:], [J("a")], 0, total=4, share=1) == 0
