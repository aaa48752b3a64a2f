"""What differs between the torch versions trainready supports, in one place.

trainready supports torch `TORCH_FLOOR` (declared in pyproject.toml) through `TORCH_NEWEST`, the
newest release CI runs the smoke preset on (`scripts/ci/torch_range.sh`). Between them torch
differs in two ways, and each has one home here, so no suite, model or probe compares versions:

- **An API that moved or appeared.** A function here returns what this torch has (`grouped_mm`);
  callers use it and never ask which version they run on.
- **A bug or gap of torch itself** that fails a case on some versions whatever the device
  (`LIMITATIONS`). The worker passes every case's outcome through `excuse`: a failure that
  matches an entry on all counts (torch version in its range, case id, device type, status, and
  the error's own text) becomes `unsupported`, its reason naming the torch version and the
  upstream issue, so the device is not charged with torch's fault. A failure matching no entry
  is left as it is: the error signature is what keeps an entry from hiding another failure.

Add an entry only with a reproduction on a version inside its range and, where one exists, the
upstream issue or fix; set `until` to the first release known to be fixed (an entry that is too
wide hides nothing, since the error must still match).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

# The releases CI's range smoke runs on (scripts/ci/torch_range.sh reads these two lines): the
# floor pyproject.toml declares (`torch>=2.9`), and the newest release tested.
TORCH_FLOOR = "2.9.0"
TORCH_NEWEST = "2.14.1"

Version = tuple[int, int, int]


def parse_version(text: str) -> Version:
    """(major, minor, patch) of a torch version string: "2.9.0+cu128" -> (2, 9, 0), "2.11" ->
    (2, 11, 0). A pre-release or nightly counts as its release ("2.11.0a0+git…" -> (2, 11, 0)):
    it may lack a fix its release has, so an entry ending there does not cover it and its
    failures stay failures."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if m is None:
        raise ValueError(f"not a torch version: {text!r}")
    major, minor, patch = m.groups()
    return int(major), int(minor), int(patch or 0)


def torch_version() -> Version:
    return parse_version(torch.__version__)


# --- APIs that moved ------------------------------------------------------------------------------


def grouped_mm() -> Callable[..., torch.Tensor] | None:
    """torch's grouped GEMM (`F.grouped_mm`, public from 2.10; `torch._grouped_mm` before), or
    None where this torch has neither. Whether it runs on a device is for the caller to try."""
    return getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


def accelerator_api(name: str) -> Callable[..., Any] | None:
    """`torch.accelerator.NAME` where this torch has it, else None: its memory queries arrived
    over releases (`get_memory_info` and `get_device_capability` are not in torch 2.9)."""
    return getattr(torch.accelerator, name, None)


# --- torch's own bugs and gaps --------------------------------------------------------------------

EXCUSED_KEY = "torch_limitation"  # the diagnostics key an excused outcome records the entry under
# The statuses of a case that raised: the only ones an entry excuses by default. Never wrong
# numbers (fail_numerics), and crash, timeout and oom are the runner's, decided outside the worker.
RAISED = frozenset({"fail_run", "fail_compile"})


@dataclass(frozen=True)
class Limitation:
    """A torch bug or gap that fails `cases` on torch versions [since, until), whatever the
    device (or on `devices` only): a failure there is torch's, not the device's."""

    what: str  # shown first in the reason: "flex backward"
    since: str  # the first torch version affected (the floor where that is all we know)
    until: str  # the first torch version fixed (exclusive)
    cases: str  # fnmatch pattern over case ids ("flex/*/fwd_bwd")
    error: str  # regex the outcome's error or reason must match (re.search)
    reason: str  # one line: what torch does wrong
    upstream: str = ""  # the issue or fix, where one was found ("owner/repo#N": reasons are short)
    statuses: frozenset[str] = RAISED  # the outcomes it may turn into `unsupported`
    devices: tuple[str, ...] = ()  # device types it holds on (empty: any)
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_pattern", re.compile(self.error))

    def covers(self, version: Version) -> bool:
        return parse_version(self.since) <= version < parse_version(self.until)

    def matches(self, case_id: str, device_type: str, status: str, text: str) -> bool:
        """Whether a case that ended `status` with `text` is this limitation (any version)."""
        return (
            status in self.statuses
            and fnmatch.fnmatchcase(case_id, self.cases)
            and (not self.devices or device_type in self.devices)
            and self._pattern.search(text) is not None
        )


LIMITATIONS: tuple[Limitation, ...] = (
    Limitation(
        what="flex backward",
        since="2.9",
        until="2.11",  # 2.11.0 refuses it eagerly ("does not support backward on CPU"): unsupported
        cases="flex/*/fwd_bwd",
        devices=("cpu",),
        error=r"IndexError: tuple index out of range",
        reason="fails in inductor, which has no FlexAttention backward on the CPU",
        # the issue; its fix, pytorch/pytorch#169646, refuses the backward up front instead
        upstream="pytorch/pytorch#169224",
    ),
    Limitation(
        what="DTensor Partial",
        since="2.9",
        until="2.11",  # 2.11.0's distribute_tensor has a Partial branch
        cases="dist/dtensor/redistribute",
        # already `unsupported` with torch's bare message: the entry says whose gap it is
        statuses=RAISED | {"unsupported"},
        error=r"Trying to distribute tensor with unsupported placements P\b",
        reason="has no Partial placement in distribute_tensor",
    ),
)


def _error_text(diagnostics: dict[str, Any]) -> str:
    """The text an entry's signature is matched against: the outcome's own line of what went wrong
    (not its traceback, where a chained error could match what the case did not end with)."""
    return "\n".join(str(diagnostics.get(k) or "") for k in ("error", "reason"))


def find_limitation(
    case_id: str,
    device: str,
    status: str,
    diagnostics: dict[str, Any],
    version: Version | None = None,
    table: tuple[Limitation, ...] = LIMITATIONS,
) -> Limitation | None:
    """The entry of `table` that explains a case ending `status` with `diagnostics` on `device`
    ("cpu", "cuda:0") under torch `version` (this torch by default); None if none does."""
    version = version or torch_version()
    device_type, text = device.split(":")[0], _error_text(diagnostics)
    for entry in table:
        if entry.covers(version) and entry.matches(case_id, device_type, status, text):
            return entry
    return None


def excuse(
    case_id: str,
    device: str,
    status: str,
    diagnostics: dict[str, Any],
    version: Version | None = None,
    table: tuple[Limitation, ...] = LIMITATIONS,
) -> tuple[str, dict[str, Any]]:
    """(status, diagnostics) of a case, turned into `unsupported` when a known torch limitation
    explains it; unchanged (the same objects) when none does.

    The excused reason, the report's one line, reads "WHAT: torch X.Y.Z REASON (UPSTREAM); torch
    said: ERROR"; the error moves into diagnostics[EXCUSED_KEY] with the entry and the status the
    case ended with, and every other diagnostic is kept."""
    version = version or torch_version()
    entry = find_limitation(case_id, device, status, diagnostics, version, table)
    if entry is None:
        return status, diagnostics
    said = _first_line(diagnostics.get("error") or diagnostics.get("reason"))
    where = f" ({entry.upstream})" if entry.upstream else ""
    kept = {k: v for k, v in diagnostics.items() if k != "error"}
    kept["reason"] = (
        f"{entry.what}: torch {_dotted(version)} {entry.reason}{where}; torch said: {said}"
    )
    kept[EXCUSED_KEY] = {
        "what": entry.what,
        "torch_range": f">={entry.since},<{entry.until}",
        "upstream": entry.upstream,
        "status": status,
        "error": said,
    }
    return "unsupported", kept


def _first_line(value: Any) -> str:
    lines = [ln.strip() for ln in str(value or "").splitlines() if ln.strip()]
    return lines[0] if lines else ""


def _dotted(version: Version) -> str:
    return ".".join(map(str, version))
