"""Suites: one package per capability, its module `trainready.suites.<name>.suite` keeping the
`Suite` contract (trainready/core/suite.py: NAME, DEFAULT_DTYPE, DEFAULT_BUDGET_S, cases(cfg),
execute(case, ctx); optional USES_PEAK, KIND, CPU_CORES). `load_suite` imports a suite by name
(or any module by dotted path: tests plug in their own) and checks the contract once, refusing a
module that breaks it with one line naming the part. The runner imports a suite by name in each
worker, before the worker takes its first case. A built-in suite that reads a run-level flag
(`--nproc`, `--variants`...) is listed for it in FLAG_USERS below.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from trainready.core.config import ConfigError
from trainready.core.suite import KINDS, check_suite, suite_cpu_cores, suite_kind

# Built-in suites, in the order `run all` uses (fast, informative suites first). A suite whose
# module is not in this build yet is left out of `all` and of the valid choices.
_PLANNED: dict[str, str] = {
    name: f"trainready.suites.{name}.suite"
    for name in ("matmul", "flex", "ops", "parity", "train", "dist")
}
SUITES: dict[str, str] = {
    name: path for name, path in _PLANNED.items() if importlib.util.find_spec(path) is not None
}


# The run-level flags (`run --nproc` ...) and the built-in suites that read each; the others ignore
# it. Kept with the registry rather than in the suite modules so the CLI can name them (help text,
# a warning for a flag no suite of the run reads) without importing torch.
FLAG_USERS: dict[str, tuple[str, ...]] = {
    "compile_backend": ("parity", "train", "dist"),
    "nproc": ("train", "dist"),
    "pg_backend": ("train", "dist"),
    "variants": ("flex",),
    "baseline": ("parity",),
    "profile": ("train",),
    "price_per_hour": ("train",),
}


__all__ = [
    "FLAG_USERS",
    "KINDS",
    "SUITES",
    "cpu_cores",
    "expand",
    "ignored_flags",
    "load_suite",
    "runs_alone",
]


def cpu_cores(module: ModuleType, device: str) -> int | None:
    """The cores a timing suite's case needs on `device` (its CPU_CORES, on a CPU run); None:
    the whole machine (every other device, and a suite without CPU_CORES)."""
    if device.split(":", 1)[0] != "cpu":
        return None
    return suite_cpu_cores(module)


def runs_alone(module: ModuleType) -> bool:
    """Whether the suite's cases need the machine to themselves (its KIND: "timing" unless the
    suite says "correctness")."""
    return suite_kind(module) != "correctness"


def ignored_flags(suites: list[str], flags: list[str]) -> list[str]:
    """The flags given that no suite of the run reads. Only for runs of built-in suites: a suite
    named by module path may read any option."""
    names = expand(suites)
    if not all(n in SUITES for n in names):
        return []
    return [key for key in flags if not set(FLAG_USERS[key]) & set(names)]


def expand(names: list[str]) -> list[str]:
    """'all' stands for every built-in suite, in the order above."""
    out: list[str] = []
    for name in names:
        for n in SUITES if name == "all" else [name]:
            if n not in out:
                out.append(n)
    return out


def load_suite(name: str) -> ModuleType:
    """A built-in suite by name, or any module by dotted path (tests plug in their own suites),
    checked against the `Suite` contract (`core.suite.check_suite`)."""
    path = SUITES.get(name)
    if path is None and "." in name:
        path = name
    if path is None:
        raise ConfigError(f"unknown suite {name!r}; valid: {', '.join(SUITES)}")
    try:
        module = importlib.import_module(path)
    except ImportError as e:
        raise ConfigError(f"cannot import suite {name!r}: {e}") from None
    return check_suite(module)
