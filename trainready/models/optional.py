"""Optional model libraries (timm, diffusers): a module that imports under their name but is not
them.

`import timm` succeeds on any directory named `timm` on sys.path, a working directory's
included (`python -m` puts it first): a namespace package with none of the library's code. The
zoo then failed at planning with "module 'timm' has no attribute 'list_models'" and took the
whole run down (a run's output directory named timm, in the directory the next run started
from). Such a module is the library being unavailable, with the reason.
"""

from __future__ import annotations

from types import ModuleType


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
