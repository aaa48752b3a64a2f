"""Suites: one module per capability. Each defines

    NAME: str
    DEFAULT_DTYPE: str | None
    DEFAULT_BUDGET_S: float
    def cases(cfg: RunConfig) -> list[Case]
    def execute(case: Case, ctx: CaseContext) -> Outcome

and nothing else is required of it. Optional: USES_PEAK = False for a suite that reports no MFU
(the run then skips resolving the device's peak FLOP/s for it, a calibration of seconds on devices
outside the peak table). Optional: KIND = "correctness" for a suite whose cases judge behaviour
and never time anything that needs the machine quiet: its cases may run side by side on parallel
workers (`--jobs`), each on its share of the CPU cores. Every other suite (KIND "timing", the
default, as for a suite that times kernels or starts processes on every core) runs each case with
the machine to itself. Optional for a timing suite: CPU_CORES = N, the cores its case needs on a
CPU run, where its timed work then runs on N threads (flex: one, its compile being single-threaded):
there correctness cases may run on the other cores beside it (core/schedule.py); on any other
device it runs alone. The runner imports a suite by name in each worker, before the worker
takes its first case. A built-in suite that reads a run-level flag (`--nproc`, `--variants`...)
is listed for it in FLAG_USERS below.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from trainready.core.config import ConfigError

# Built-in suites, in the order `run all` uses (fast, informative suites first). A suite whose
# module is not in this build yet is left out of `all` and of the valid choices.
_PLANNED: dict[str, str] = {
    name: f"trainready.suites.{name}.suite"
    for name in ("matmul", "flex", "parity", "train", "dist")
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
}


KINDS = ("correctness", "timing")


def cpu_cores(module: ModuleType, device: str) -> int | None:
    """The cores a timing suite's case needs on `device` (CPU_CORES above, on a CPU run); None:
    the whole machine (every other device, and a suite without CPU_CORES)."""
    cores = getattr(module, "CPU_CORES", None)
    if cores is None or device.split(":", 1)[0] != "cpu":
        return None
    if not isinstance(cores, int) or isinstance(cores, bool) or cores < 1:
        raise ConfigError(f"suite {module.__name__}: CPU_CORES {cores!r}; valid: an int >= 1")
    return cores


def runs_alone(module: ModuleType) -> bool:
    """Whether the suite's cases need the machine to themselves (KIND above; "timing" unless the
    suite says "correctness")."""
    kind = getattr(module, "KIND", "timing")
    if kind not in KINDS:
        raise ConfigError(f"suite {module.__name__}: KIND {kind!r}; valid: {', '.join(KINDS)}")
    return kind != "correctness"


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
    """A built-in suite by name, or any module by dotted path (tests plug in their own suites)."""
    path = SUITES.get(name)
    if path is None and "." in name:
        path = name
    if path is None:
        raise ConfigError(f"unknown suite {name!r}; valid: {', '.join(SUITES)}")
    try:
        return importlib.import_module(path)
    except ImportError as e:
        raise ConfigError(f"cannot import suite {name!r}: {e}") from None
