"""Print trainready's runtime requirements from pyproject.toml, one per line, torch left out.

    python scripts/ci/runtime_deps.py [EXTRA...]

What `pip install --no-deps -e .` leaves to install beside a torch chosen on purpose (a vendor's
build, or one version of the supported range), plus the requirements of each EXTRA named (e.g.
`hf`). Environment markers are kept, so pip drops what does not apply to its Python.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: trainready depends on tomli there
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def requirements(extras: list[str]) -> list[str]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(f"error: no extra {', '.join(unknown)}; valid: {', '.join(optional)}")
    reqs = [*project["dependencies"], *(r for e in extras for r in optional[e])]
    return [
        r for r in dict.fromkeys(reqs) if re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0] != "torch"
    ]


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1:])))
