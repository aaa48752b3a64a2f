"""Data shipped with trainready: real model configs and their matmul shapes, with sources.

`model_shapes.json` holds, for open-weight models, the Hugging Face style "config" block (transcribed
from the cited "source" entries) and the F.linear projection shapes derived from it. It is read
through importlib.resources so it works from a wheel or a zip as well as from a checkout.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

MODEL_SHAPES_FILE = "model_shapes.json"


@functools.cache
def _model_shapes_text() -> str:
    return resources.files(__name__).joinpath(MODEL_SHAPES_FILE).read_text(encoding="utf-8")


def load_model_shapes() -> dict[str, Any]:
    """The whole document: schema, conventions and "models" (each with name, hf_id, family, arch,
    source, config, projections). A fresh copy on every call, so callers may modify it."""
    return json.loads(_model_shapes_text())


def model_entries() -> list[dict[str, Any]]:
    """The "models" list of `model_shapes.json`, in file order."""
    return load_model_shapes()["models"]
