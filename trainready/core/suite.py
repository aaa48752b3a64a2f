"""The suite contract: `Suite`, what a module defines to be run as a suite, and `check_suite`, which
the registry (`trainready.suites.load_suite`) runs once on every module it loads, so that a suite
missing a part, or with one of the wrong type, is refused with one line naming the suite and the
part before any case is planned, instead of an AttributeError in the middle of a run.

Required (the `Suite` protocol):

    NAME: str                       the suite's name, as cases and reports carry it
    DEFAULT_DTYPE: str | None       a dtype name (core.config.DTYPES), or None (cases name theirs)
    DEFAULT_BUDGET_S: float         seconds a case may take unless the run says otherwise
    def cases(cfg: RunConfig) -> list[Case]
    def execute(case: Case, ctx: CaseContext) -> Outcome

Optional, checked when present:

    USES_PEAK: bool = True          False for a suite that reports no MFU: the run then skips
                                    resolving the device's peak FLOP/s for it (a calibration of
                                    seconds on devices outside the peak table)
    KIND: str = "timing"            "correctness" for a suite whose cases judge behaviour and
                                    never time anything that needs the machine quiet: they may run
                                    side by side on parallel workers (`--jobs`), each on its share
                                    of the CPU cores. A "timing" suite's case has the machine to
                                    itself (`runs_alone`)
    CPU_CORES: int >= 1             for a timing suite: the cores its case needs on a CPU run,
                                    where its timed work runs on that many threads (flex: one);
                                    correctness cases may then run on the other cores beside it
                                    (core/schedule.py). On any other device it runs alone
                                    (`cpu_cores`)

Anything else a suite defines (OPTIONS, its own constants) is its own business.
"""

from __future__ import annotations

import inspect
import math
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from trainready.core.case import Case, Outcome
from trainready.core.config import DTYPES, ConfigError, RunConfig
from trainready.core.context import CaseContext

KINDS = ("correctness", "timing")


@runtime_checkable
class Suite(Protocol):
    """A suite module, as the runner uses it (the optional parts: the module docstring)."""

    NAME: str
    DEFAULT_DTYPE: str | None
    DEFAULT_BUDGET_S: float

    def cases(self, cfg: RunConfig) -> list[Case]: ...

    def execute(self, case: Case, ctx: CaseContext) -> Outcome: ...


def _fail(module: ModuleType, what: str) -> ConfigError:
    return ConfigError(f"suite {module.__name__}: {what}")


def _takes(fn: Any, n: int) -> bool:
    """Whether `fn` is a callable that can be called with `n` positional arguments."""
    if not callable(fn):
        return False
    try:
        inspect.signature(fn).bind(*range(n))
    except TypeError:
        return False
    except ValueError:  # no signature to read (a builtin): trust it
        return True
    return True


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def suite_kind(module: ModuleType) -> str:
    """The suite's KIND ("timing" when it says none); ConfigError for any other value."""
    kind = getattr(module, "KIND", "timing")
    if kind not in KINDS:
        raise _fail(module, f"KIND {kind!r}; valid: {', '.join(KINDS)}")
    return kind


def suite_cpu_cores(module: ModuleType) -> int | None:
    """The suite's CPU_CORES (None when it says none); ConfigError unless an int >= 1."""
    cores = getattr(module, "CPU_CORES", None)
    if cores is None:
        return None
    if not isinstance(cores, int) or isinstance(cores, bool) or cores < 1:
        raise _fail(module, f"CPU_CORES {cores!r}; valid: an int >= 1")
    return cores


def check_suite(module: ModuleType) -> ModuleType:
    """`module` itself when it keeps the `Suite` contract (and its optional parts are valid);
    else ConfigError naming the suite and the first part missing or ill-typed."""
    missing = object()
    name = getattr(module, "NAME", missing)
    if name is missing:
        raise _fail(module, "no NAME (str)")
    if not isinstance(name, str) or not name:
        raise _fail(module, f"NAME {name!r}; valid: a non-empty str")
    dtype = getattr(module, "DEFAULT_DTYPE", missing)
    if dtype is missing:
        raise _fail(module, "no DEFAULT_DTYPE (a dtype name, or None)")
    if dtype is not None and dtype not in DTYPES:
        raise _fail(module, f"DEFAULT_DTYPE {dtype!r}; valid: None, {', '.join(DTYPES)}")
    budget = getattr(module, "DEFAULT_BUDGET_S", missing)
    if budget is missing:
        raise _fail(module, "no DEFAULT_BUDGET_S (seconds)")
    if not _is_number(budget) or not math.isfinite(budget) or budget <= 0:
        raise _fail(module, f"DEFAULT_BUDGET_S {budget!r}; valid: a number of seconds > 0")
    for part, n, call in (("cases", 1, "cases(cfg)"), ("execute", 2, "execute(case, ctx)")):
        fn = getattr(module, part, missing)
        if fn is missing:
            raise _fail(module, f"no {call}")
        if not _takes(fn, n):
            raise _fail(module, f"{part} {fn!r} cannot be called as {call}")
    uses_peak = getattr(module, "USES_PEAK", True)
    if not isinstance(uses_peak, bool):
        raise _fail(module, f"USES_PEAK {uses_peak!r}; valid: True, False")
    suite_kind(module)
    suite_cpu_cores(module)
    return module
