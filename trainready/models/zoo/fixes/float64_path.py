"""Types whose float64 reference path breaks (a cast to float32 inside, a mask that overflows).

The common causes are generic and handled there, not here: a model's own `.float()`,
`dtype=torch.float32` and constants made with no dtype (`torch.full(shape, -inf)`), which drop
the reference to float32 or mix float32 into float64 matmuls, are made float64 by
`models/float64.float32_as_float64`, entered by the task model's forward when its parameters
are float64. A type lands here only when that is not enough (none of this group so far).

See `fixes/__init__.py` for the tables' contract; each entry says why it is needed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ADJUST: dict[str, Callable[[dict[str, Any]], None]] = {}
INPUTS: dict[str, Callable[..., dict[str, Any]]] = {}
HEAD: dict[str, str] = {}
UNSUPPORTED: dict[str, str] = {}
