#!/usr/bin/env bash
# CI's xla step: every suite's smoke preset (ops aside, see below) on torch_xla's PJRT CPU device (`--device xla`, no
# --import: naming the device imports torch_xla), in the torch venv torch_range.sh keeps for the
# torch that torch_xla pins, then scripts/ci/check_smoke.py on the store (the torch-range step's
# check: every planned case ran, none failed, every case that did not pass says why).
#
#   scripts/ci/xla_smoke.sh
#
# XLA_VERSION: torch_xla's version, and torch's, which it pins (default 2.9.0).
# XLA_PYTHON: the interpreter to run (default: torch_range.sh's venv for torch XLA_VERSION under
#   TRAINREADY_VENVS, made by running torch_range.sh XLA_VERSION when it is missing). torch_xla is
#   installed into it when it cannot be imported, with torch pinned so pip leaves torch alone.
# XLA_SMOKE_OUT: the run store (default $TMPDIR/trainready-xla-smoke), made afresh.
# XLA_SMOKE_LIMIT_S: the smoke run's time limit (default 2400 s: lazy graphs compile on 2 cores).
# PJRT_DEVICE: CPU unless set (the step tests PJRT's CPU device).
# Timings go to stdout; benchmarks/results/xla-cpu.md has what each case ended as, and why.
set -euo pipefail
cd "$(dirname "$0")/../.."
V=${XLA_VERSION:-2.9.0}
VENVS=${TRAINREADY_VENVS:-$HOME/.cache/trainready/venvs}
PY_XLA=${XLA_PYTHON:-$VENVS/torch-$V/bin/python}
OUT=${XLA_SMOKE_OUT:-${TMPDIR:-/tmp}/trainready-xla-smoke}
LIMIT=${XLA_SMOKE_LIMIT_S:-2400}
export PJRT_DEVICE=${PJRT_DEVICE:-CPU}

t0=$SECONDS
if [ ! -x "$PY_XLA" ]; then
  # The venv torch_range.sh makes and reuses (CI runs that step first, so it is normally there).
  scripts/ci/torch_range.sh "$V"
fi
if ! "$PY_XLA" -c "import torch_xla" 2>/dev/null; then
  "$PY_XLA" -m pip install -q "torch_xla==$V" "torch==$V"
fi
"$PY_XLA" -m pip install -q --no-deps -e .  # this checkout's code, whoever made the venv
echo "xla: venv ready in $((SECONDS - t0)) s ($("$PY_XLA" -c \
  'import torch, torch_xla; print(f"torch {torch.__version__}, torch_xla {torch_xla.__version__}")'))"

rm -rf "$OUT"
mkdir -p "$(dirname "$OUT")"
t0=$SECONDS
rc=0
# Every suite but ops: torch_xla's op coverage is a finding (36 of 672 smoke cases fail on
# torch_xla 2.9.0, benchmarks/results/xla-cpu.md), not a smoke that should pass.
timeout "$LIMIT" "$PY_XLA" -m trainready run matmul flex parity train dist --device xla \
  --preset smoke --out "$OUT" \
  > "$OUT.log" 2>&1 || rc=$?
echo "xla: smoke exit $rc in $((SECONDS - t0)) s (log: $OUT.log)"
# The run exits 0 whatever its cases did (the checker judges them): anything else is the tool's
# own failure (an error, a crash, 124 from the time limit).
if [ "$rc" -ne 0 ]; then
  tail -n 30 "$OUT.log"
  exit 1
fi
# torch_xla's own gaps that the smoke meets (benchmarks/results/xla-cpu.md): such a case may fail,
# with this reason only; any other failure fails the step.
KNOWN=(
  # XLA's autocast lists leave out scaled_dot_product_attention: q, k (through RoPE) stay fp32
  "train/qwen3-debug/T64/B4/bf16: fail_run: eager/cold: RuntimeError: Expected query, key, and value to have the same dtype"
)
check=0
report=$("${PYTHON:-python3}" scripts/ci/check_smoke.py "$OUT") || check=$?
echo "$report"
[ "$check" -eq 0 ] && exit 0
unexplained=$(grep '^FAIL ' <<<"$report" | grep -v -F -f <(printf 'FAIL %s\n' "${KNOWN[@]}") || true)
if [ -n "$unexplained" ]; then
  echo "xla: failures that are not known torch_xla gaps:" >&2
  echo "$unexplained" >&2
  exit 1
fi
echo "xla: every failure is a known torch_xla gap (KNOWN above)"
