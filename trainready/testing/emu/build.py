"""Build emu's C++ libraries once, cache them on disk, and load them.

A library is compiled by `torch.utils.cpp_extension.load` into a directory named after the torch
version and a hash of everything that goes into it (sources, flags, torch, Python), under
`$TRAINREADY_EMU_CACHE` or else `~/.cache/trainready` (`$XDG_CACHE_HOME` is honoured). A
directory whose build finished holds a `built.json`; later imports load its `.so` straight away,
without the compiler or ninja.

Concurrent first imports are safe: each process takes an exclusive `flock` on the directory
before looking, so one builds while the others wait and then load its result. cpp_extension's
own baton (a `lock` file) would do for live processes, but a builder that is killed leaves the
file behind and every later import waits forever; a `flock` dies with its process, and the
stale baton is removed under it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

CSRC = Path(__file__).parent / "csrc"
ENV_CACHE = "TRAINREADY_EMU_CACHE"
ENV_VERBOSE = "TRAINREADY_EMU_VERBOSE"  # "1": show the compiler's commands and output
CFLAGS = ("-O2",)
_DONE = "built.json"

# name -> what happened when this process loaded it (read by build_info()).
_loaded: dict[str, dict[str, Any]] = {}


def cache_root() -> Path:
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "trainready"


def _fingerprint(sources: Sequence[Path], cflags: Sequence[str]) -> str:
    h = hashlib.sha256()
    for part in (torch.__version__, sys.version, sys.executable, *cflags):
        h.update(part.encode() + b"\0")
    # Headers too: a changed emu.h must rebuild every source that includes it.
    headers = {header for src in sources for header in src.parent.glob("*.h")}
    for path in sorted({*sources, *headers}):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def build_dir(
    name: str, sources: Sequence[Path], root: Path | None = None, cflags: Sequence[str] = ()
) -> Path:
    version = torch.__version__.replace("+", "_")
    return (root or cache_root()) / f"{name}-{version}-{_fingerprint(sources, (*CFLAGS, *cflags))}"


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # Windows: no flock; cpp_extension's baton still serialises live builds
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _import_so(name: str, so: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, so)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load(
    name: str,
    sources: Sequence[str],
    *,
    python_module: bool = False,
    csrc: Path = CSRC,
    root: Path | None = None,
    cflags: Sequence[str] = (),
) -> ModuleType | None:
    """Build (if not cached) and load the library `name` from `<csrc>/<sources>`.

    A pybind module is returned when `python_module`; otherwise the library is loaded into the
    process for its registrations (ops, kernels, device hooks) and None is returned. `root`
    replaces the cache root (tests build throwaway libraries there). `cflags` are added to
    CFLAGS (e.g. a profile's `-D` define) and are part of the cache key, so builds of the same
    sources with other flags sit side by side.
    """
    if name in _loaded:
        return _loaded[name].get("module")
    paths = [Path(csrc) / s for s in sources]
    directory = build_dir(name, paths, root, cflags)
    directory.mkdir(parents=True, exist_ok=True)
    so = directory / f"{name}.so"
    t0 = time.perf_counter()
    with _exclusive(directory / ".flock"):
        done = directory / _DONE
        cold = not (done.exists() and so.exists())
        if cold:
            (directory / "lock").unlink(missing_ok=True)  # a killed builder's baton
            from torch.utils import cpp_extension

            if not cpp_extension.is_ninja_available():
                raise RuntimeError(
                    f"building {name} (emu's C++ library) needs ninja and a C++ compiler: "
                    "`pip install ninja` or `apt-get install ninja-build g++`"
                )
            t_build = time.perf_counter()
            module = cpp_extension.load(
                name,
                [str(p) for p in paths],
                extra_cflags=[*CFLAGS, *cflags],
                build_directory=str(directory),
                is_python_module=python_module,
                verbose=os.environ.get(ENV_VERBOSE) == "1",
            )
            module = module if python_module else None  # else it is the library's path
            seconds = time.perf_counter() - t_build
            done.write_text(json.dumps({"build_s": round(seconds, 2), "torch": torch.__version__}))
        elif python_module:
            module = _import_so(name, so)
        else:
            torch.ops.load_library(str(so))
            module = None
    _loaded[name] = {
        "module": module,
        "directory": str(directory),
        "cold": cold,
        "load_s": round(time.perf_counter() - t0, 3),
    }
    return module


def build_info() -> dict[str, dict[str, Any]]:
    """Per library this process loaded: its directory, whether it was built here (`cold`), the
    seconds the build or load took, and the build time recorded when it was built."""
    info = {}
    for name, entry in _loaded.items():
        recorded = json.loads((Path(entry["directory"]) / _DONE).read_text())
        info[name] = {k: v for k, v in entry.items() if k != "module"} | {
            "recorded_build_s": recorded.get("build_s")
        }
    return info
