"""CPU runs that several parity cases of one run compute alike, computed once and shared.

The cases of one model in a run (eager and compiled; fp32 and bf16) each need CPU runs that do
not depend on the case's mode: the float64 reference, and the plain eager run at the case dtype
(the compiled case's honest baseline, which on the CPU is also the eager case's device run). The
first case to need one computes it and leaves it in the run's folder (RUN_DIR/parity_shared/);
the others load the very tensors it produced. Only CPU runs are shared, eager, never a run on
another device or a compiled one: those are what a case tests.

A file is named by a hash of everything the run's result depends on: the case's model (its params
less mode, dtype and backend), the model's weights, buffers and structure, the batch, the run's
spec, torch's version and CPU thread count, and the planted faults (TRAINREADY_FAULTS). It is
written to a temporary name and renamed into place, so a reader sees a whole file or none. While
one case computes a run it holds a lock file (O_EXCL); a case needing the same run meanwhile waits
for the file (up to MAX_WAIT_S), and computes the run itself when the lock's holder died, the
wait ran out, or the holder failed (it then fails the same way). Any trouble with the folder itself
(unwritable, full) means computing the run, never a different result. Outside a stored run (no
RUN_DIR) nothing is shared.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainready.device import device_type
from trainready.suites.parity.engine import Data, Spec, TaskData, Trace, train

DIRNAME = "parity_shared"
MAX_WAIT_S = 120.0  # a holder this slow is left to finish; the waiter computes the run itself
POLL_S = 0.05
KEEP = 32  # newest files kept; the cases of one model run next to each other
FAULTS_ENV = "TRAINREADY_FAULTS"  # trainready.testing.faults.ENV_VAR (not imported: it plants)
# Set to "0" to share nothing (the judging is the same; every case computes its own runs).
ENV = "TRAINREADY_PARITY_SHARE"


def shareable(spec: Spec) -> bool:
    """Only eager CPU runs are shared (a run on the device under test, or compiled, never)."""
    return spec.compile_backend is None and device_type(spec.device) == "cpu"


def _hash_tensor(h: Any, name: str, t: torch.Tensor) -> None:
    t = t.detach().cpu().contiguous()
    h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
    if t.numel():
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())


def _model_digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    h.update(f"{type(model).__module__}.{type(model).__qualname__}\n{model!r}".encode())
    for name, p in model.named_parameters(remove_duplicate=False):
        _hash_tensor(h, f"p:{name}:{p.requires_grad}", p)
    for name, b in model.named_buffers(remove_duplicate=False):
        _hash_tensor(h, f"b:{name}", b)
    return h.hexdigest()


def _data_digest(data: Data | TaskData) -> str:
    h = hashlib.sha256()
    if isinstance(data, TaskData):
        for k in sorted(data.batch):
            v = data.batch[k]
            if isinstance(v, torch.Tensor):
                _hash_tensor(h, f"batch:{k}", v)
            else:
                h.update(f"batch:{k}={v!r}".encode())
    else:
        _hash_tensor(h, "ids", data.ids)
        _hash_tensor(h, "targets", data.targets)
    return h.hexdigest()


def _to_payload(key: str, t: Trace) -> dict[str, Any]:
    return {
        "key": key,
        "loss": t.loss,
        "logits": t.logits,
        "grads": t.grads,
        "params": t.params,
        "curve": [float(x) for x in t.curve],
        "first_step_s": float(t.first_step_s),
        "step_s": float(t.step_s),
        "aux": t.aux,
    }


def _from_payload(d: dict[str, Any]) -> Trace:
    return Trace(
        loss=d["loss"],
        logits=d["logits"],
        grads=dict(d["grads"]),
        params=dict(d["params"]),
        curve=list(d["curve"]),
        first_step_s=d["first_step_s"],
        step_s=d["step_s"],
        aux=d["aux"],
    )


class Shared:
    """The shared CPU runs of one case: `train(model, data, spec)`, computed or loaded.

    `directory` None shares nothing. `identity`: what names the case's model beyond its weights
    (the case's params less mode, dtype and backend, and any state the case set on the model).
    `users(spec)`: how many planned cases of the run compute that run (written only when more
    than one does; where exactly two do, the one that loads it deletes it: no one else will)."""

    def __init__(
        self,
        directory: str | Path | None,
        identity: dict[str, Any],
        users: Callable[[Spec], int] = lambda _spec: 2,
    ):
        off = os.environ.get(ENV, "1").strip() in ("0", "false", "no", "off")
        self.directory = None if directory is None or off else Path(directory)
        self.identity = identity
        self.users = users
        self.reused: list[str] = []  # the runs this case loaded from another case's computation
        self._digests: dict[int, str] = {}

    def _key(self, model: nn.Module, data: Data | TaskData, spec: Spec) -> str:
        if id(model) not in self._digests:
            self._digests[id(model)] = _model_digest(model)
        parts = {
            "identity": self.identity,
            "model": self._digests[id(model)],
            "data": _data_digest(data),
            "spec": [spec.device, spec.dtype, spec.steps],
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "faults": os.environ.get(FAULTS_ENV, ""),
        }
        text = json.dumps(parts, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def train(self, model: nn.Module, data: Data | TaskData, spec: Spec, name: str) -> Trace:
        """`train(model, data, spec)`, or the same run another case of this run computed."""
        users = self.users(spec)
        if self.directory is None or not shareable(spec) or users < 2:
            return train(model, data, spec)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            key = self._key(model, data, spec)
        except OSError:
            return train(model, data, spec)
        trace, reused = _shared(self.directory, key, lambda: train(model, data, spec))
        if reused:
            self.reused.append(name)
            if users == 2:  # its last user
                with contextlib.suppress(OSError):
                    (self.directory / f"{key}.pt").unlink()
        return trace


def _read(path: Path, key: str) -> Trace | None:
    try:
        d = torch.load(path, weights_only=True)
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - an unreadable file is a missing one: compute the run
        return None
    if not isinstance(d, dict) or d.get("key") != key:
        return None
    return _from_payload(d)


def _write(directory: Path, path: Path, key: str, trace: Trace) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        torch.save(_to_payload(key, trace), tmp)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return
    _prune(directory)


def _prune(directory: Path) -> None:
    """Keep the KEEP newest files (a case that needed a pruned one computes it)."""
    try:
        files = sorted(directory.glob("*.pt"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    for p in files[KEEP:]:
        with contextlib.suppress(OSError):
            p.unlink()


def _holder_gone(lock: Path) -> bool:
    """The lock's holder died (a killed worker), or it has held it past MAX_WAIT_S."""
    try:
        text = lock.read_text()
        age = time.time() - lock.stat().st_mtime
    except OSError:
        return False  # released meanwhile: look again
    if age > MAX_WAIT_S:
        return True
    host, _, pid = text.partition(" ")
    if host != socket.gethostname() or not pid.strip().isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _shared(directory: Path, key: str, compute: Callable[[], Trace]) -> tuple[Trace, bool]:
    """(the run, whether it was loaded rather than computed here)."""
    path, lock = directory / f"{key}.pt", directory / f"{key}.lock"
    deadline = time.monotonic() + MAX_WAIT_S
    while True:
        found = _read(path, key)
        if found is not None:
            return found, True
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if _holder_gone(lock):
                with contextlib.suppress(OSError):
                    lock.unlink()  # (two waiters may both compute then: the same result)
                continue
            if time.monotonic() > deadline:
                return compute(), False
            time.sleep(POLL_S)
            continue
        except OSError:
            return compute(), False
        try:
            with contextlib.suppress(OSError):
                os.write(fd, f"{socket.gethostname()} {os.getpid()}".encode())
            os.close(fd)
            found = _read(path, key)  # written between our read and our lock
            if found is not None:
                return found, True
            trace = compute()
            _write(directory, path, key, trace)
            return trace, False
        finally:
            with contextlib.suppress(OSError):
                lock.unlink()
