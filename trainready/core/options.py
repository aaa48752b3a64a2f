"""Suite options (`--set KEY=VALUE` and the suite flags): every key known, every value valid,
checked before anything is written.

A built-in suite declares the options it reads in a module-level `OPTIONS` dict, key -> spec:

    str                  a non-empty string (or a path, from the Python API)
    list                 names: a comma-separated string, or a JSON list of strings
    ["a", "b"]           a comma-separated subset of these (or a JSON list of them)
    ("a", "b")           exactly one of these
    range(lo, hi)        an integer in the range (JSON true/false are not integers)
    float                a finite number > 0
    bool                 true or false

A key that no suite of the run declares is an error naming the valid keys, unless it is a suite
flag (`--nproc`...: suites.FLAG_USERS, which the CLI warns about instead) or some suite of the
run declares nothing (a suite named by module path may read any option).
"""

from __future__ import annotations

import math
import os
from types import ModuleType
from typing import Any

from trainready.core.config import ConfigError


def check_options(options: dict[str, Any], suites: dict[str, ModuleType], flags: set[str]) -> None:
    """Raise ConfigError for an unknown key or a value a declaring suite cannot use."""
    declared = {name: getattr(m, "OPTIONS", None) for name, m in suites.items()}
    known = {key for specs in declared.values() if specs for key in specs}
    for key, value in options.items():
        users = [n for n, specs in declared.items() if specs and key in specs]
        for name in users:
            problem = _problem(declared[name][key], value)
            if problem:
                raise ConfigError(f"--set {key}={_shown(value)}: {problem} (suite {name})")
        if not users and key not in flags and all(specs is not None for specs in declared.values()):
            valid = ", ".join(sorted(known)) or "none"
            raise ConfigError(
                f"unknown option {key!r} for {', '.join(suites)}; valid --set keys: {valid}"
            )


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def _names(value: Any) -> list[str] | None:
    """A comma-separated string or a list of strings -> the names; None if neither."""
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v.strip() for v in value if v.strip()]
    return None


def _problem(spec: Any, value: Any) -> str | None:
    """What is wrong with `value` for `spec`, or None."""
    if spec is str:
        ok = isinstance(value, (str, os.PathLike)) and str(value).strip()
        return None if ok else "expected a non-empty string"
    if spec is list:
        return None if _names(value) else "expected names, comma-separated"
    if spec is bool:
        return None if isinstance(value, bool) else "expected true or false"
    if spec is float:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = number and math.isfinite(value) and value > 0
        return None if ok else "expected a finite number > 0"
    if isinstance(spec, range):
        if isinstance(value, bool) or not isinstance(value, int) or value not in spec:
            return f"expected an integer from {spec.start} to {spec.stop - 1}"
        return None
    if isinstance(spec, tuple):
        return None if value in spec else f"expected one of {', '.join(spec)}"
    if isinstance(spec, list):
        names = _names(value)
        if not names:
            return f"expected one or more of {', '.join(spec)}"
        wrong = [n for n in names if n not in spec]
        return f"unknown {', '.join(wrong)}; valid: {', '.join(spec)}" if wrong else None
    raise TypeError(f"unknown option spec {spec!r}")
