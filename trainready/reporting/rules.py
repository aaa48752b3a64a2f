"""The readiness verdict's thresholds: the built-in ones in `verdict.toml` beside this module, and
a team's own TOML file over them (`load_rules(path)`, `--verdict-config FILE`).

Below the view model (which carries a report's `Rules`) and the verdict (which applies them).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainready.core.config import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

DEFAULT_CONFIG = Path(__file__).with_name("verdict.toml")
BUILT_IN = "built-in thresholds"


@dataclass(frozen=True)
class Rules:
    """The thresholds of every dimension, and where they came from (a file, or built in)."""

    values: dict[str, dict[str, Any]]
    source: str = BUILT_IN

    def __getitem__(self, dimension: str) -> dict[str, Any]:
        return self.values[dimension]


def _read(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"verdict config {path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"verdict config {path}: a directory, not a TOML file") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"verdict config {path}: not valid TOML ({e})") from None


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check(path: Path, dimension: str, key: str, value: object, default: object) -> None:
    where = f"verdict config {path}: [{dimension}] {key}"
    if _number(default):
        if not _number(value) or value < 0:
            raise ConfigError(f"{where} must be a number >= 0, got {value!r}")
    elif isinstance(default, list) and (
        not value or not isinstance(value, list) or not all(isinstance(v, str) for v in value)
    ):
        raise ConfigError(f"{where} must be a non-empty list of metric names, got {value!r}")


def load_rules(path: str | Path | None = None) -> Rules:
    """The built-in thresholds, with those a team's TOML file at `path` gives in their place.
    An unknown table or key, a value of the wrong type, a file that is missing or not TOML is a
    ConfigError naming it (and the valid choices)."""
    defaults = _read(DEFAULT_CONFIG)
    if path is None:
        return Rules(defaults)
    path = Path(path)
    merged = {dim: dict(table) for dim, table in defaults.items()}
    for dim, table in _read(path).items():
        if dim not in defaults:
            valid = ", ".join(defaults)
            raise ConfigError(f"verdict config {path}: unknown dimension [{dim}]; valid: {valid}")
        if not isinstance(table, dict):
            raise ConfigError(f"verdict config {path}: {dim} must be a table, [{dim}]")
        for key, value in table.items():
            if key not in defaults[dim]:
                valid = ", ".join(defaults[dim])
                raise ConfigError(
                    f"verdict config {path}: unknown key {key!r} in [{dim}]; valid: {valid}"
                )
            _check(path, dim, key, value, defaults[dim][key])
            merged[dim][key] = value
    return Rules(merged, str(path))
