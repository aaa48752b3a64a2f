"""The ops column's `weak_on` claims: where a planted fault is excused in bf16, its move on the
samples the ops suite runs is measured here, in float64, to be under what bf16 resolves."""

from __future__ import annotations

import math

import pytest
import torch

from trainready.testing import faults

# Two roundings to bf16 (2 x 2^-8 of the rms): one is the rule's floor, and the CPU's own bf16
# noise comes on top; a move under this is not what bf16 can be asked to resolve.
BF16_RESOLVES = 2 * 2.0**-8


def _softmax_moves() -> list[float]:
    """softmax(SOFTMAX_SCALE x) against softmax(x), relative rms, in float64, over every
    floating sample the ops column's bf16 softmax cases run."""
    from trainready.suites.ops import database, samples

    ops = database.load()
    moves = []
    for case in faults.ops_cases("softmax_scale_2pct"):
        if case.params["dtype"] != "bf16" or case.params["entry"] not in ops:
            continue
        op = ops[case.params["entry"]]
        seed = samples.case_seed(case.name)
        backward = case.params["direction"] == "bwd"
        for _, sample in samples.first(
            op, torch.bfloat16, backward, seed, case.params.get("samples")
        ):
            x, dim = sample.input.detach().double(), sample.args[0] if sample.args else -1
            if x.numel() < 2:
                continue
            ref = torch.softmax(x, dim)
            kept = torch.isfinite(ref)  # rows of -inf logits (_safe_softmax's masked rows)
            moved = (torch.softmax(x * faults.SOFTMAX_SCALE, dim) - ref)[kept]
            moves.append(float(moved.pow(2).mean().sqrt() / ref[kept].pow(2).mean().sqrt()))
    return moves


def test_softmax_scale_is_under_what_bf16_resolves_on_the_ops_samples():
    spec = faults.FAULTS["softmax_scale_2pct"]
    assert {f"ops/{e}" for e in spec.ops} <= set(spec.weak_on)
    moves = _softmax_moves()
    assert moves, "no bf16 softmax sample measured"
    assert all(math.isfinite(m) and 0 < m < BF16_RESOLVES for m in moves), moves


@pytest.mark.parametrize("name", sorted(faults.FAULTS))
def test_only_faults_measured_here_are_excused_in_the_ops_column(name):
    ops_weak = [w for w in faults.FAULTS[name].weak_on if w.startswith("ops/")]
    assert not ops_weak or name == "softmax_scale_2pct"
