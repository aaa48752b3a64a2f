"""`trainready mfu`: MFU from a published throughput, model config and device count."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from trainready import api
from trainready.cli.common import console, guard
from trainready.metrics.peaks import KINDS
from trainready.models.specs import list_specs


def register(app: typer.Typer) -> None:
    app.command()(guard(mfu))


def mfu(
    model: Annotated[
        str,
        typer.Option(
            help=f"A named config ({', '.join(list_specs())}; case-insensitive, HF ids work "
            "too) or a path to a Hugging Face config.json."
        ),
    ],
    seq_len: Annotated[int, typer.Option(help="Sequence length T.")],
    tokens_per_s: Annotated[float, typer.Option(help="Total tokens/s across all devices.")],
    devices: Annotated[
        int,
        typer.Option(
            help="Number of devices D (X is their total), counted as the peak is given: GPUs "
            "for GPU kinds, chips for the -chip and TPU kinds, logical NeuronCores for the "
            "trn*-core kinds (LNC=2, 4 per chip: a trn2.48xlarge is 64), and for "
            "--peak-tflops whatever that peak is per."
        ),
    ],
    device_kind: Annotated[
        str | None, typer.Option(help=f"A key of the peak table: {', '.join(KINDS)}.")
    ] = None,
    peak_tflops: Annotated[float | None, typer.Option(help="Peak TFLOP/s per device.")] = None,
    dtype: Annotated[str, typer.Option(help="Dtype of the peak for --device-kind.")] = "bf16",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """MFU from a published throughput: FLOPs/token = 6·N + 12·L·H·Q·T (TorchTitan)."""
    from trainready.metrics.mfu import format_text

    result = api.mfu(
        model,
        seq_len=seq_len,
        tokens_per_s=tokens_per_s,
        devices=devices,
        device_kind=device_kind,
        peak_tflops=peak_tflops,
        dtype=dtype,
    )
    if as_json:
        sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    else:
        console.print(format_text(result), highlight=False)
