"""Planted faults in FlexAttention mods, a `--variants` file, to put the flex suite's numerics rule
under test.

Each variant's mods are wrong in one way (or right in another way) while its dense `reference` is
the correct built-in one, so the kernel computes the wrong (or the differently written) attention
and is judged against the right one -- as a user's buggy mod would reach the device:

- `scale_2pct`: every score 2% too large (a wrong softmax scale; the reference: noop).
- `alibi_slope_1pct`: ALiBi's slopes 1% too steep.
- `window_one_wider`: the sliding window admits one more past token than the reference.
- `causal_diagonal_dropped`: causal without the diagonal (each query cannot see itself).

Correct-but-different (must pass):

- `softcap_via_sigmoid`: tanh soft-capping written as 2 sigmoid(2x) - 1 (the same function).
- `alibi_from_table`: ALiBi's bias read from a captured [H, 2S - 1] table of slope * distance
  instead of computed (a gather where the built-in multiplies).

    trainready run flex --device cpu --variants trainready/testing/flex_faults.py

`FLEX_FAULTS` describes each for the catch table (benchmarks/planted_faults.py); each build of a
variant's mods counts as a hit of its fault (`faults.hits`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainready.suites.flex.variants import BUILTIN, SOFTCAP, Shape
from trainready.testing.faults import BF16_GOAL, _hit

PATH = str(Path(__file__).resolve())
SCALE = 1.02
SLOPE = 1.01


def _reference(builtin: str, shape: Shape, device: str) -> Any:
    return BUILTIN[builtin].build(shape, device).reference


def _slopes(shape: Shape, device: str) -> torch.Tensor:
    """The built-in ALiBi slopes 2^(-8 (h + 1) / H)."""
    exponents = torch.arange(1, shape.Hq + 1, dtype=torch.float32) * (-8.0 / shape.Hq)
    return torch.exp2(exponents).to(device)


def _scale_2pct(shape: Shape, device: str) -> dict[str, Any]:
    def score_mod(score, b, h, q_idx, kv_idx):
        return score * SCALE

    return {"score_mod": score_mod, "reference": _reference("noop", shape, device)}


def _alibi_slope_1pct(shape: Shape, device: str) -> dict[str, Any]:
    slopes = _slopes(shape, device) * SLOPE

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    return {"score_mod": score_mod, "reference": _reference("alibi", shape, device)}


def _window_one_wider(shape: Shape, device: str) -> dict[str, Any]:
    window = shape.S // 4 + 1  # the built-in's window is S / 4

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx <= window)

    return {"mask_mod": mask_mod, "reference": _reference("sliding_window", shape, device)}


def _causal_diagonal_dropped(shape: Shape, device: str) -> dict[str, Any]:
    def mask_mod(b, h, q_idx, kv_idx):
        return q_idx > kv_idx

    return {"mask_mod": mask_mod, "reference": _reference("causal", shape, device)}


def _softcap_via_sigmoid(shape: Shape, device: str) -> dict[str, Any]:
    def score_mod(score, b, h, q_idx, kv_idx):
        return SOFTCAP * (2 * torch.sigmoid(score * (2 / SOFTCAP)) - 1)

    return {"score_mod": score_mod, "reference": _reference("softcap", shape, device)}


def _alibi_from_table(shape: Shape, device: str) -> dict[str, Any]:
    distance = torch.arange(-(shape.S - 1), shape.S, dtype=torch.float32, device=device)
    table = _slopes(shape, device)[:, None] * distance[None, :]  # [H, 2S - 1]: slope * (kv - q)
    offset = shape.S - 1

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + table[h, kv_idx - q_idx + offset]

    return {"score_mod": score_mod, "reference": _reference("alibi", shape, device)}


def _counted(name: str, build: Any) -> Any:
    """`build`, counting its calls as the fault's hits (the catch table's `bug calls`)."""

    def counted(shape: Shape, device: str) -> dict[str, Any]:
        _hit(name, "mods built")
        return build(shape, device)

    return counted


VARIANTS = {
    "scale_2pct": {
        "build": _counted("scale_2pct", _scale_2pct),
        "description": "scores 2% too large (reference: noop)",
    },
    "alibi_slope_1pct": {
        "build": _counted("alibi_slope_1pct", _alibi_slope_1pct),
        "description": "ALiBi slopes 1% too steep",
    },
    "window_one_wider": {
        "build": _counted("window_one_wider", _window_one_wider),
        "description": "sliding window one token wider than the reference",
    },
    "causal_diagonal_dropped": {
        "build": _counted("causal_diagonal_dropped", _causal_diagonal_dropped),
        "description": "causal mask without the diagonal",
    },
    "softcap_via_sigmoid": {
        "build": _counted("softcap_via_sigmoid", _softcap_via_sigmoid),
        "description": "softcap as 2 sigmoid(2x) - 1 (correct, another formula)",
    },
    "alibi_from_table": {
        "build": _counted("alibi_from_table", _alibi_from_table),
        "description": "ALiBi from a captured bias table (correct, a gather)",
    },
}


@dataclass(frozen=True)
class FlexFault:
    """A planted flex variant for the catch table: `expect` "catch" or "pass"; `size` the relative
    size of the error where it is one; `clean` the built-in variant it is compared beside."""

    name: str
    expect: str
    imitates: str
    size: float | None
    clean: str

    def required(self, dtype: str) -> bool:
        """Whether the catch goal requires this fault caught at `dtype` (as `faults.Fault`)."""
        return self.expect == "catch" and (
            dtype == "fp32" or self.size is None or self.size >= BF16_GOAL
        )


FLEX_FAULTS: dict[str, FlexFault] = {
    f.name: f
    for f in (
        FlexFault("scale_2pct", "catch", "score_mod scaling scores by 1.02 (a wrong scale)",
                  SCALE - 1, "noop"),
        FlexFault("alibi_slope_1pct", "catch", "ALiBi score_mod with slopes 1% too steep",
                  SLOPE - 1, "alibi"),
        FlexFault("window_one_wider", "catch", "sliding-window mask_mod one token too wide",
                  None, "sliding_window"),
        FlexFault("causal_diagonal_dropped", "catch", "causal mask_mod without the diagonal",
                  None, "causal"),
        FlexFault("softcap_via_sigmoid", "pass", "softcap written as 2 sigmoid(2x) - 1", None,
                  "softcap"),
        FlexFault("alibi_from_table", "pass", "ALiBi read from a captured bias table", None,
                  "alibi"),
    )
}  # fmt: skip

__all__ = ["FLEX_FAULTS", "PATH", "VARIANTS", "FlexFault"]
