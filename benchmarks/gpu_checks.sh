#!/usr/bin/env bash
# The GPU checks the issues ask for, prepared as one script for a lent GPU machine (one H200,
# 10 minutes a call, 15 minutes of device time a session): each check runs under its own time
# limit, in the order given, and everything finished so far is packed into $OUT even when a later
# check runs out of time. Run from the repository root on the GPU machine:
#
#   OUT=/some/dir bash benchmarks/gpu_checks.sh [CHECK...]
#
# CHECK (default: sanity dist matmul train flex):
#   sanity   one 8192^3 bf16 matmul through the suite's timing probe (H200: ~780 TFLOP/s)
#   dist     the dist suite on one rank over nccl (proves the path)
#   matmul   the matmul sweep in bf16, preset $MATMUL_PRESET (default full)
#   train    Qwen3-1.7B at sequence 4096, bf16, eager and compiled, every scenario
#   flex     the FlexAttention standard grid in bf16 ($FLEX_JOBS compile workers, default 8)
#   parity   the parity standard preset on cuda, to store as a --baseline for other devices
#   profile  the train suite's debug model with --profile, for the explorer
# Per-check limits in seconds: LIMIT_<CHECK> (e.g. LIMIT_MATMUL=300). DEVICE (default cuda) lets
# the plumbing be tried on the CPU first: DEVICE=cpu OUT=/tmp/o bash benchmarks/gpu_checks.sh dist
# The results: $OUT/gpu-results.tar.gz (each run's store and reports) and $OUT/summary.txt;
# commit them under benchmarks/results/ with this command line.
set -u
OUT=${OUT:-runs-gpu}
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
WORK=${WORK:-/tmp/trainready-gpu}
mkdir -p "$OUT" "$WORK"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
checks=("$@")
[ ${#checks[@]} -gt 0 ] || checks=(sanity dist matmul train flex)

limit() { # limit CHECK DEFAULT -> the check's time limit
  local var="LIMIT_${1^^}"
  echo "${!var:-$2}"
}

trainready() { "$PY" -m trainready "$@"; }

one() { # one CHECK: run it under its limit, log to $WORK/CHECK.log
  local check=$1 start rc
  start=$(date +%s)
  case $check in
    sanity) timeout "$(limit sanity 120)" "$PY" -m benchmarks.matmul_sanity --device "$DEVICE" ;;
    dist) timeout "$(limit dist 180)" trainready run dist --device "$DEVICE" --nproc 1 \
      --preset quick --out "$WORK/dist" ;;
    matmul) timeout "$(limit matmul 420)" trainready run matmul --device "$DEVICE" \
      --preset "${MATMUL_PRESET:-full}" --out "$WORK/matmul" ;;
    train) timeout "$(limit train 540)" "$PY" -m benchmarks.train_qwen3 --device "$DEVICE" \
      --model 1.7B --seq-len 4096 --out "$WORK/train" --json "$WORK/train-qwen3.json" ;;
    flex) timeout "$(limit flex 540)" trainready run flex --device "$DEVICE" --preset standard \
      --jobs "${FLEX_JOBS:-8}" --out "$WORK/flex" ;;
    parity) timeout "$(limit parity 540)" trainready run parity --device "$DEVICE" \
      --preset standard --jobs 4 --out "$WORK/parity" ;;
    profile) timeout "$(limit profile 300)" trainready run train --device "$DEVICE" --profile \
      --set model=debug --out "$WORK/profile" ;;
    *) echo "unknown check '$check'; valid: sanity dist matmul train flex parity profile" >&2
      (exit 2) ;;
  esac > "$WORK/$check.log" 2>&1
  rc=$?
  # timeout's 124 means the limit was hit: a run stopped there keeps what it stored (--resume).
  echo "$check: exit $rc after $(($(date +%s) - start)) s" | tee -a "$WORK/summary.txt"
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  git rev-parse HEAD 2>/dev/null; echo "checks: ${checks[*]}"; } > "$WORK/summary.txt" 2>&1
for check in "${checks[@]}"; do one "$check"; done
cp "$WORK/summary.txt" "$OUT/summary.txt"
tar -czf "$OUT/gpu-results.tar.gz" -C "$WORK" .
