"""The losses a task model trains, computed from its outputs (never by the model's own code).

Every loss is computed in promote_types(dtype, float32): transformers' losses call `.float()`,
which would compute the float64 reference's loss in float32. `plan` picks the outputs trained:
every `*logits` output by cross-entropy against fixed random labels (never a class the model
masks: -inf, or a logit at or below `MASKED`), a CTC head's logits by the CTC loss, `REGRESSED`
outputs (detection boxes) and a head without logits (depth, spectrograms, waveforms, forecasts,
backbone features) by the mean square of the prediction (`PREDICTED` first).
Detection heads so train against fixed per-query targets: no Hungarian matching, a discrete
assignment that a rounding can flip.

    plan(output, task)                      -> [Term]
    labels(terms, generator, blank, finite) -> {"label:<field>": labels}
    term_loss(term, value, labels, blank)   -> the term's scalar loss
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from trainready.models.zoo import hf_causal as hf


@dataclass(frozen=True)
class Term:
    """One trained output: `field` of the model output, trained by `kind` ("ce", "ctc",
    "square"); `shape` the output's shape (labels are drawn for it); `allowed` (a "ce" term's):
    where the model masks classes, the classes that may be labels (`masked`), else None."""

    field: str
    kind: str
    shape: tuple[int, ...]
    allowed: torch.Tensor | None = field(default=None, compare=False, repr=False)
    probabilities: bool = False  # the output is the head's softmax: trained on its log


# A logit at or below this is a class the model masks out with a constant, not a score:
# PP-DocLayout's reading-order heads fill the pairs no order can hold (an element and those
# before it) with -1e4, fp16-safe masking does the same, Chameleon uses its dtype's lowest value,
# a QA head -inf. Its softmax weight, exp(-1e4), is 0 in every dtype, so the class can never be
# predicted: a user's labels never name it (as a label, its cross-entropy would be 1e4, constant,
# which no gradient can lower: the mask fills it whatever the model computes).
MASKED = -1e4
IGNORED = -100  # the label of a row with no class to predict: skipped by the cross-entropy
REGRESSED = ("pred_boxes", "pred_masks")  # trained by their mean square beside the rest
# Outputs that select rather than predict (keypoints picked by a threshold and NMS): no gradient.
SELECTED = ("keypoints",)
# Recognition heads that output their softmax rather than logits (transformers' PP-OCR text
# recognisers and SLANet's table-structure decoder apply it in forward) train on its log, as
# these models are trained: CTC over a text line's frames (PP-OCR's recognisers are CTC-trained),
# cross-entropy over a table's structure tokens (SLANet's structure loss). The square of the
# probabilities would train on differences of near-equal ~1/classes values, all cancellation:
# its gradient through the softmax is p * (2p - 2 sum p^2), which float32 computes to 1e-3.
PROBABILITIES = {"TEXT_RECOGNITION": "ctc", "TABLE_RECOGNITION": "ce"}
# A head without logits trains on the first of these it outputs, else its first output: the
# prediction a forecaster's or a vocoder's head makes, so the head itself gets gradients (a
# TimesFM's first output is the backbone's hidden state; a TTS model with its vocoder outputs
# the spectrogram first, the waveform computed from it last).
PREDICTED = ("waveform", "mean_predictions", "prediction_outputs", "full_predictions")


def tensors(value: Any) -> list[torch.Tensor]:
    """The floating tensors of an output field (a tensor, or a tuple or list of them)."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors(v)]
    return []


def fields(out: Any) -> dict[str, Any]:
    if isinstance(out, dict):
        return dict(out.items())
    if isinstance(out, torch.Tensor):
        return {"output": out}
    if isinstance(out, (tuple, list)):
        return {str(i): v for i, v in enumerate(out)}
    return {k: v for k, v in vars(out).items() if not k.startswith("_")}


def plan(out: Any, task: str) -> list[Term]:
    """The outputs trained: CTC on the logits of a CTC head; else every `*logits` output by
    cross-entropy (and `REGRESSED` ones by their square); else a recognition head's softmax by
    CTC or cross-entropy on its log (`PROBABILITIES`); else the first output, by its square."""
    found = {
        k: v for k, v in fields(out).items() if k != "loss" and k not in SELECTED and tensors(v)
    }
    if task == "CTC" and "logits" in found:
        return [Term("logits", "ctc", tuple(found["logits"].shape))]
    terms = [
        Term(k, "ce", tuple(v.shape), masked(v))
        for k, v in found.items()
        # (one class: its cross-entropy is 0 whatever the model does, so nothing would train)
        if "logits" in k and isinstance(v, torch.Tensor) and v.dim() >= 2 and v.shape[-1] > 1
    ]
    if terms:
        terms += [Term(k, "square", ()) for k in REGRESSED if k in found]
        return terms
    if not found:
        raise hf.BuildError(f"{type(out).__name__} has no floating output to train")
    name = next(iter(found))
    first = found[name]
    if task in PROBABILITIES and isinstance(first, torch.Tensor) and first.dim() >= 3:
        return [Term(name, PROBABILITIES[task], tuple(first.shape), probabilities=True)]
    field = next((k for k in PREDICTED if k in found), next(iter(found)))
    return [Term(field, "square", ())] + [
        Term(k, "square", ()) for k in REGRESSED if k in found and k != field
    ]


def masked(value: torch.Tensor) -> torch.Tensor | None:
    """The classes of a logits output that may be labels, where the model masks some (a logit at
    or below `MASKED`, -inf included); None where it masks none."""
    keep = ~(value <= MASKED)  # (a NaN is no mask)
    return None if bool(keep.all()) else keep.detach().cpu()


def labels(
    terms: list[Term], gen: torch.Generator, blank: int, finite: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Fixed random labels of every term; a class the model masks (a QA head's question tokens
    at -inf, `finite`: the masks of such outputs; a logit at or below `MASKED`, `Term.allowed`)
    is never a label, and a row whose every class is masked (the last element of a reading
    order, which no element follows) has none: `IGNORED`, which the cross-entropy skips."""
    labels = {}
    for t in terms:
        allowed = [m for m in (finite.get(t.field), t.allowed) if m is not None]
        if t.kind == "ce" and allowed:
            rows = torch.stack(allowed).all(0).reshape(-1, t.shape[-1])
            open_rows = rows.any(-1)
            pick = torch.full((rows.shape[0],), IGNORED, dtype=torch.long)
            if open_rows.any():
                drawn = torch.multinomial(rows[open_rows].double(), 1, generator=gen)
                pick[open_rows] = drawn.reshape(-1)
            labels[f"label:{t.field}"] = pick.reshape(t.shape[:-1])
        elif t.kind == "ce":
            labels[f"label:{t.field}"] = torch.randint(0, t.shape[-1], t.shape[:-1], generator=gen)
        elif t.kind == "ctc":
            frames, classes = t.shape[1], t.shape[-1]
            n = max(1, frames // 3)
            choices = torch.tensor([c for c in range(classes) if c != blank])
            pick = torch.randint(0, len(choices), (t.shape[0], n), generator=gen)
            labels[f"label:{t.field}"] = choices[pick]
    return labels


def term_loss(term: Term, value: Any, labels: torch.Tensor | None, blank: int) -> torch.Tensor:
    parts = tensors(value)
    wide = [p.to(torch.promote_types(p.dtype, torch.float32)) for p in parts]
    if term.probabilities:
        wide = [p.log() for p in wide]  # log-probabilities: the cross-entropy's and CTC's input
    if term.kind == "ce":
        x = wide[0]
        return F.cross_entropy(x.reshape(-1, x.shape[-1]), labels.reshape(-1), ignore_index=IGNORED)
    if term.kind == "ctc":
        logp = wide[0].log_softmax(-1).transpose(0, 1)  # [T, B, C]
        # (lengths on the logits' device, as transformers' CTC heads compute them: CPU lengths
        # beside device logits are a device mix a backend may refuse)
        full = {"dtype": torch.long, "device": logp.device}
        frames = torch.full((logp.shape[1],), logp.shape[0], **full)
        lengths = torch.full((labels.shape[0],), labels.shape[1], **full)
        return F.ctc_loss(logp, labels, frames, lengths, blank=blank, zero_infinity=True)
    return sum(x.square().mean() for x in wide)
