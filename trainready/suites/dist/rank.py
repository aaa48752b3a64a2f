"""The dist suite's rank side: what every rank runs for one case (started by trainready.core.launch).

`run_case(env, case, options)` dispatches on the case's `family` to one module per family
(collectives, ddp/fsdp2 training, dtensor/tp, moe, dcp). Each returns, on every rank,

    {"ok": bool, "metrics": {name: float}, "diagnostics": {...}}

where `ok` is this rank's verdict against its single-process reference, plus `"skipped": reason`
when the case cannot be judged here for a reason that is not the device's. An error that the backend
reports as a missing feature ("not supported", "not implemented", ...) becomes `Unsupported`, which
the host records as `unsupported` with the backend's own message.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from trainready.core.context import Unsupported
from trainready.core.launch import RankEnv

# family -> module (imported on first use: a rank pays for FSDP or DCP only when it runs them)
FAMILIES = {
    "coll": "collectives",
    "ddp": "training",
    "fsdp2": "training",
    "dtensor": "dtensor",
    "tp": "dtensor",
    "moe": "moe",
    "dcp": "checkpoint",
}
_MISSING_FEATURE = re.compile(
    r"not (yet )?(supported|implemented)|does not support|unsupported|no kernel|"
    r"could not run '.*' with arguments from the",
    re.IGNORECASE,
)


def skipped(reason: str) -> dict[str, Any]:
    """A rank's answer for a case it cannot judge, for a reason that is not the device's."""
    return {"ok": True, "skipped": reason, "metrics": {}, "diagnostics": {}}


def run_case(env: RankEnv, case: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    params = case["params"]
    module = importlib.import_module(f"{__package__}.{FAMILIES[params['family']]}")
    try:
        return module.run_case(env, case["name"], params, options)
    except (RuntimeError, NotImplementedError) as e:
        if _MISSING_FEATURE.search(str(e)):
            raise Unsupported(f"{type(e).__name__}: {e}".splitlines()[0][:500]) from e
        raise
