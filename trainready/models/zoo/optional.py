"""Optional model libraries (timm, diffusers, the torchvision timm needs): a module that imports
under their name but is not them, and a torchvision whose extension does not load.

`import timm` succeeds on any directory named `timm` on sys.path, a working directory's
included (`python -m` puts it first): a namespace package with none of the library's code. The
zoo then failed at planning with "module 'timm' has no attribute 'list_models'" and took the
whole run down (a run's output directory named timm, in the directory the next run started
from). Such a module is the library being unavailable, with the reason.

torchvision pins one exact torch, and PyPI's wheel is a CUDA build whose extension does not load
beside a CPU torch: `import torchvision` then fails on "operator torchvision::nms does not
exist" (its fake registrations need the schemas the extension would define; pytorch/vision#9085),
and so does everything that imports it: timm, and transformers' vision models (transformers
imports torchvision whenever it is installed). `mend_torchvision` declares those schemas (no
kernels: neither timm's models nor transformers' call them) so that it imports.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any

import torch

# The unguarded fake registrations of torchvision's _meta_registrations.py, by op schema.
_TORCHVISION_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_schema_lib: Any = None  # kept alive: dropping the Library would undefine the schemas
_mended = False


def the_library(module: ModuleType) -> ModuleType:
    """`module` where it is a real package; ImportError naming what it is where it is a
    namespace package (a directory of that name on sys.path, no code of the library's)."""
    if getattr(module, "__file__", None) is None:
        where = ", ".join(str(p) for p in getattr(module, "__path__", [])) or "?"
        raise ImportError(
            f"'{module.__name__}' resolves to the directory {where}, not the {module.__name__} "
            "library (a folder of that name on sys.path, e.g. in the working directory)"
        )
    return module


def forget(*packages: str) -> None:
    """Drop a failed import's modules, so the next import runs them again."""
    for name in [m for m in sys.modules if m.split(".")[0] in packages]:
        del sys.modules[name]


def mend_torchvision() -> None:
    """Where torchvision is installed but its extension does not load beside this torch, declare
    the op schemas its Python code needs, so that it (and what imports it) imports; nothing
    where it imports, is not installed, or fails for another reason (its importer reports that).
    Once per process."""
    global _mended, _schema_lib
    if _mended or importlib.util.find_spec("torchvision") is None:
        return
    _mended = True
    try:
        import torchvision  # noqa: F401 - the import is the check
    except RuntimeError as e:
        extension = sys.modules.get("torchvision.extension")
        if "torchvision::nms does not exist" not in str(e) or extension is None:
            return
        if extension._has_ops():  # the extension loaded: a different failure, not ours to mend
            return
        forget("torchvision")
        _schema_lib = torch.library.Library("torchvision", "DEF")
        for schema in _TORCHVISION_SCHEMAS:
            _schema_lib.define(schema)
    except Exception:  # noqa: BLE001 - any other failure is for its importer to report
        return
