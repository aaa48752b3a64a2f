"""Per-type fixes of the task zoo (`models/zoo/hf_tasks.py`), kept as data: one module per family of
models, each with the reason beside every entry. A module may define any of:

    ADJUST:      {type: fn(config dict)}  the shrunk config's fields, after the generic shrink
    INPUTS:      {type: fn(model, config, generator, batch) -> batch}  inputs the model needs
                 beyond its modality's (boxes, prompts, visual features...), or replacing them
    HEAD:        {type: task}  the head trained when the first of `hf_tasks.HEADS` cannot be
    ATTENTION:   {type: implementation}  where eager attention is broken for the type ("sdpa")
    UNSUPPORTED: {type: reason}  a type that cannot be trained tiny here, and exactly why

The tables below merge every module's; a type is named by one module only (checked on import).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from trainready.models.zoo.fixes import audio, float64_path, image_text, text_docs, vision

_MODULES: tuple[ModuleType, ...] = (vision, image_text, text_docs, audio, float64_path)


def _merged(name: str) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for module in _MODULES:
        for key, value in getattr(module, name, {}).items():
            if key in table:
                raise ValueError(f"task fix {name}[{key!r}] is named twice ({module.__name__})")
            table[key] = value
    return table


ADJUST: dict[str, Callable[[dict[str, Any]], None]] = _merged("ADJUST")
INPUTS: dict[str, Callable[..., dict[str, Any]]] = _merged("INPUTS")
HEAD: dict[str, str] = _merged("HEAD")
ATTENTION: dict[str, str] = _merged("ATTENTION")
UNSUPPORTED: dict[str, str] = _merged("UNSUPPORTED")
