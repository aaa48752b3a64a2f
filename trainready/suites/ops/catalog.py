"""The catalog of OpInfo entries the planner reads, made in a child process.

The parent (the CLI, which plans cases) must not import op_db: database.py says why. So the
catalog is `python -m trainready.suites.ops.database` run as a child, its lines kept on disk per
torch build (`$XDG_CACHE_HOME/trainready/ops/`, keyed by torch's version and install path), so
only the first plan with a torch build pays the import (about 3-4 s on 2 cores).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from trainready.core.config import ConfigError

CATALOG_TIMEOUT_S = 300.0


def _cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    torch_dir = Path(torch.__file__).parent
    stamp = f"{torch.__version__}|{torch_dir}|{torch_dir.stat().st_mtime_ns}"
    key = hashlib.sha1(stamp.encode()).hexdigest()[:12]
    return Path(base) / "trainready" / "ops" / f"catalog-{torch.__version__}-{key}.jsonl"


def _parse(text: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not lines or "entries" not in lines[0] or len(lines) - 1 != lines[0]["entries"]:
        raise ValueError("truncated catalog")
    return lines[1:]


def _made() -> str:
    """The catalog's text, from a child process; ConfigError with its last line if it fails
    (expecttest missing, an op_db that does not import)."""
    cmd = [sys.executable, "-m", "trainready.suites.ops.database"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=CATALOG_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"ops: listing op_db took over {CATALOG_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"ops: cannot list PyTorch's op_db: {tail}")
    return done.stdout


def entries() -> list[dict[str, Any]]:
    """Every op_db entry as database.describe gives it, in op_db's order."""
    path = _cache_file()
    try:
        return _parse(path.read_text())
    except (OSError, ValueError):
        pass
    text = _made()
    lines = _parse(text)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    except OSError:
        pass  # no cache: the next plan lists again
    return lines
