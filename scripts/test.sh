#!/usr/bin/env bash
# The project's test command (README, "Tests"), which CI runs as it is (.ci/run), on a clean
# checkout of a 2-core machine whose pip serves torch's CPU wheel:
#   1. Debian's Chromium and Firefox ESR when missing (the explorer's and the scorecard's
#      browser tests);
#   2. the main torch (2.13.0) and trainready with its dev extras;
#   3. ruff, then the whole test suite on that torch (two pytest-xdist workers);
#   4. the smoke preset of every suite on the oldest and the newest supported torch, each in a
#      venv of its own that pip's cache and TRAINREADY_VENVS keep between runs
#      (scripts/ci/torch_range.sh);
#   5. the smoke preset of every suite on torch_xla's PJRT CPU device (`--device xla`), in the
#      venv of the torch that torch_xla pins (scripts/ci/xla_smoke.sh).
# How long each step takes: benchmarks/results/test-runs.md.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v chromium >/dev/null && command -v firefox-esr >/dev/null ||
  { apt-get update -qq && apt-get install -y -qq chromium firefox-esr >/dev/null; }
python -m pip install -q torch==2.13.0 -e ".[dev]"
ruff check .
ruff format --check .
python -m pytest -q -n 2 --dist loadfile
PYTHON=python scripts/ci/torch_range.sh
PYTHON=python scripts/ci/xla_smoke.sh
