"""The suite contract (`core.suite`): every suite the registry loads keeps it, and a module that
breaks it is refused at load with one line naming the suite and the part."""

from __future__ import annotations

import math
import types

import pytest

from tests.support import faulty_suite
from trainready.core.config import ConfigError
from trainready.core.suite import Suite, check_suite
from trainready.suites import SUITES, load_suite

TEST_SUITES = [
    "tests.support.faulty_suite",
    "tests.support.sched_suite",
    "tests.support.shutdown_suite",
    "tests.support.import_probe_suite",
    "tests.support.dist_faults",
    "benchmarks.trivial_suite",
]
REQUIRED = {
    "NAME": "no NAME (str)",
    "DEFAULT_DTYPE": "no DEFAULT_DTYPE (a dtype name, or None)",
    "DEFAULT_BUDGET_S": "no DEFAULT_BUDGET_S (seconds)",
    "cases": "no cases(cfg)",
    "execute": "no execute(case, ctx)",
}


def _suite(name: str = "tests.planted_suite", **parts: object) -> types.ModuleType:
    """A module with faulty_suite's required parts, changed (a value of ... removes the part)."""
    module = types.ModuleType(name)
    for part in REQUIRED:
        setattr(module, part, getattr(faulty_suite, part))
    for part, value in parts.items():
        if value is ...:
            delattr(module, part)
        else:
            setattr(module, part, value)
    return module


@pytest.mark.parametrize("name", [*SUITES, *TEST_SUITES])
def test_every_built_in_and_test_suite_keeps_the_contract(name):
    module = load_suite(name)  # checked there
    assert check_suite(module) is module
    assert isinstance(module, Suite)


@pytest.mark.parametrize(("part", "message"), REQUIRED.items())
def test_a_missing_part_is_named(part, message):
    with pytest.raises(ConfigError) as e:
        check_suite(_suite(**{part: ...}))
    assert str(e.value) == f"suite tests.planted_suite: {message}"
    assert not isinstance(_suite(**{part: ...}), Suite)


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ({"NAME": 5}, "NAME 5; valid: a non-empty str"),
        ({"NAME": ""}, "NAME ''; valid: a non-empty str"),
        ({"DEFAULT_DTYPE": "fp8"}, "DEFAULT_DTYPE 'fp8'; valid: None, fp32, bf16, fp16, fp64"),
        ({"DEFAULT_BUDGET_S": "60"}, "DEFAULT_BUDGET_S '60'; valid: a number of seconds > 0"),
        ({"DEFAULT_BUDGET_S": 0}, "DEFAULT_BUDGET_S 0; valid: a number of seconds > 0"),
        ({"DEFAULT_BUDGET_S": math.inf}, "DEFAULT_BUDGET_S inf; valid: a number of seconds > 0"),
        ({"DEFAULT_BUDGET_S": True}, "DEFAULT_BUDGET_S True; valid: a number of seconds > 0"),
        ({"cases": [1, 2]}, "cases [1, 2] cannot be called as cases(cfg)"),
        ({"execute": None}, "execute None cannot be called as execute(case, ctx)"),
        ({"USES_PEAK": "no"}, "USES_PEAK 'no'; valid: True, False"),
        ({"KIND": "fast"}, "KIND 'fast'; valid: correctness, timing"),
        ({"CPU_CORES": 0}, "CPU_CORES 0; valid: an int >= 1"),
        ({"CPU_CORES": 1.5}, "CPU_CORES 1.5; valid: an int >= 1"),
    ],
)
def test_an_ill_typed_part_is_named_with_what_is_valid(parts, message):
    with pytest.raises(ConfigError) as e:
        check_suite(_suite(**parts))
    assert str(e.value) == f"suite tests.planted_suite: {message}"


def test_functions_are_checked_by_how_the_runner_calls_them():
    def execute_one(case: object) -> None:
        return None

    with pytest.raises(ConfigError, match=r"execute <function .*> cannot be called as execute"):
        check_suite(_suite(execute=execute_one))
    with pytest.raises(ConfigError, match=r"cannot be called as cases\(cfg\)"):
        check_suite(_suite(cases=lambda: []))
    # More parameters with defaults, or *args, are fine (dist: execute(case, ctx, target=...)).
    check_suite(_suite(execute=lambda case, ctx, target="x": None, cases=lambda *a: []))
    # The optional parts, valid: accepted as they are.
    check_suite(_suite(USES_PEAK=False, KIND="correctness", CPU_CORES=None, DEFAULT_DTYPE="bf16"))


def test_load_suite_refuses_a_module_that_breaks_the_contract(tmp_path, monkeypatch):
    package = tmp_path / "planted_suites"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "half.py").write_text(
        'NAME = "half"\nDEFAULT_DTYPE = None\nDEFAULT_BUDGET_S = 1.0\n\n\ndef cases(cfg):\n'
        "    return []\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"^suite planted_suites\.half: no execute\(case, ctx\)$"):
        load_suite("planted_suites.half")
