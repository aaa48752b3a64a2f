#!/usr/bin/env bash
# The GPU checks the issues ask for, prepared as one script for a lent GPU machine (one H100 or
# H200, 10 minutes a call, 15 minutes of device time a session): each check runs under its own
# time limit, in the order given, and everything finished so far is packed into $OUT even when a
# later check runs out of time. Run from the repository root on the GPU machine:
#
#   OUT=/some/dir bash benchmarks/gpu_checks.sh [--dry-run] [CHECK...]
#
# CHECK (default: sanity dist matmul train flex):
#   sanity   one 8192^3 bf16 matmul through the suite's timing probe (H200: ~780 TFLOP/s)
#   dist     the dist suite on one rank over nccl (proves the path)
#   matmul   the matmul sweep in bf16, preset $MATMUL_PRESET (default full)
#   train    Qwen3-1.7B at sequence 4096, bf16, eager and compiled, every scenario
#   flex     the FlexAttention standard grid in bf16 ($FLEX_JOBS compile workers, default 8)
#   parity   the parity standard preset on cuda, to store as a --baseline for other devices
#   profile  the train suite's debug model with --profile, for the explorer
# Per-check limits in seconds: LIMIT_<CHECK> (e.g. LIMIT_MATMUL=300). DEVICE (default cuda).
#
# --dry-run proves the script before a GPU is lent: it prints each check's command as the GPU run
# gives it, then runs a trivially small version of it on the CPU (DEVICE=cpu, the smoke presets,
# the debug model's cold scenario, a 256^3 matmul; LIMIT_DRY seconds each, default 300), into
# $WORK (default /tmp/trainready-gpu-dry). Run it in a venv that mirrors the GPU machines (torch
# 2.11.0, transformers 5.17.0, no msgspec or isal): benchmarks/results/gpu-checks-dry-run.md.
#
# The GPU machines have neither msgspec (the trace loader: `--profile`'s trace summary, `analyze`)
# nor isal, and nothing can be fetched there. Where `import msgspec` or `import isal` fails, the
# script installs them from ./wheels into $WORK/site, first on PYTHONPATH; fetch them here first
# (`bash benchmarks/gpu_checks.sh --fetch-wheels`: cp311 and cp312 manylinux wheels, ~1 MB) and
# name `wheels` in the device tool's `carry`.
# The results: $OUT/gpu-results.tar.gz (each run's store and reports) and $OUT/summary.txt;
# commit them under benchmarks/results/ with this command line.
set -u
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-wheels}
CARRIED=(msgspec isal expecttest)  # what the GPU machines lack (expecttest: the ops suite); pyproject.toml's runtime requirements

fetch_wheels() { # the carried wheels for the GPU machines' Python (3.12) and this project's (3.11)
  local py
  for py in 3.11 3.12; do
    "$PY" -m pip download -q --no-deps --only-binary=:all: --implementation cp \
      --python-version "$py" --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d "$WHEELS" "${CARRIED[@]}" || return
  done
  ls "$WHEELS"
}

case "${1:-}" in
  --fetch-wheels) fetch_wheels; exit ;;
  --dry-run) DRY=1; shift ;;
  *) DRY= ;;
esac
if [ -n "$DRY" ]; then
  DEVICE=cpu
  WORK=${WORK:-/tmp/trainready-gpu-dry}
  OUT=${OUT:-$WORK-out}  # beside $WORK, which is packed into it
else
  DEVICE=${DEVICE:-cuda}
  WORK=${WORK:-/tmp/trainready-gpu}
  OUT=${OUT:-runs-gpu}
fi
mkdir -p "$OUT" "$WORK"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
checks=("$@")
[ ${#checks[@]} -gt 0 ] || checks=(sanity dist matmul train flex)

carry_in() { # install what this Python lacks of CARRIED from $WHEELS; says what it did
  local missing=() name
  for name in "${CARRIED[@]}"; do "$PY" -c "import $name" 2>/dev/null || missing+=("$name"); done
  if [ ${#missing[@]} -eq 0 ]; then echo "carried wheels: not needed"; return; fi
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" \
    --find-links "$WHEELS" "${missing[@]}" 2>&1 | tail -n 3
  export PYTHONPATH="$WORK/site:$PYTHONPATH"
  for name in "${missing[@]}"; do
    "$PY" -c "import $name" 2>/dev/null && echo "$name: from $WHEELS" ||
      echo "$name: missing (no wheel in $WHEELS for this Python; the checks that need it say so)"
  done
}

limit() { # limit CHECK DEFAULT -> the check's time limit (LIMIT_DRY in a dry run)
  local var="LIMIT_${1^^}"
  if [ -n "$DRY" ]; then echo "${LIMIT_DRY:-300}"; else echo "${!var:-$2}"; fi
}

command_of() { # command_of CHECK -> sets cmd (the argv) and default_limit, full or dry
  local run=("$PY" -m trainready run) dev=(--device "$DEVICE") out="$WORK/$1"
  case $1 in
    sanity) default_limit=120 cmd=("$PY" -m benchmarks.matmul_sanity "${dev[@]}")
      [ -z "$DRY" ] || cmd+=(--n 256) ;;
    dist) default_limit=180 cmd=("${run[@]}" dist "${dev[@]}" --nproc 1 --out "$out" --preset)
      cmd+=("$([ -n "$DRY" ] && echo smoke || echo quick)") ;;
    matmul) default_limit=420 cmd=("${run[@]}" matmul "${dev[@]}" --out "$out" --preset)
      cmd+=("$([ -n "$DRY" ] && echo smoke || echo "${MATMUL_PRESET:-full}")") ;;
    train) default_limit=540 cmd=("$PY" -m benchmarks.train_qwen3 "${dev[@]}" --out "$out"
      --json "$WORK/train-qwen3.json")
      if [ -n "$DRY" ]; then cmd+=(--model debug --seq-len 64 --batch-size 2 --steps 4 --warmup 1
        --scenarios cold)
      else cmd+=(--model 1.7B --seq-len 4096); fi ;;
    flex) default_limit=540 cmd=("${run[@]}" flex "${dev[@]}" --out "$out")
      if [ -n "$DRY" ]; then cmd+=(--preset smoke --jobs 1)
      else cmd+=(--preset standard --jobs "${FLEX_JOBS:-8}"); fi ;;
    parity) default_limit=540 cmd=("${run[@]}" parity "${dev[@]}" --out "$out")
      if [ -n "$DRY" ]; then cmd+=(--preset smoke --jobs 1); else cmd+=(--preset standard --jobs 4); fi ;;
    profile) default_limit=300 cmd=("${run[@]}" train "${dev[@]}" --profile --set model=debug
      --out "$out")
      [ -z "$DRY" ] || cmd+=(--preset smoke) ;;
    *) return 2 ;;
  esac
}

one() { # one CHECK: run it under its limit, log to $WORK/CHECK.log
  local check=$1 start rc cmd default_limit
  if ! command_of "$check"; then
    echo "unknown check '$check'; valid: sanity dist matmul train flex parity profile" |
      tee -a "$WORK/summary.txt" >&2
    return
  fi
  if [ -n "$DRY" ]; then  # what the GPU run gives, then the small version that runs here
    (DRY= DEVICE=cuda WORK=/tmp/trainready-gpu; command_of "$check"
      echo "$check on the GPU: ${cmd[*]} (limit $(DRY= limit "$check" "$default_limit") s)")
    echo "$check here: ${cmd[*]}"
  fi | tee -a "$WORK/summary.txt"
  start=$(date +%s)
  timeout "$(limit "$check" "$default_limit")" "${cmd[@]}" > "$WORK/$check.log" 2>&1
  rc=$?
  # timeout's 124 means the limit was hit: a run stopped there keeps what it stored (--resume).
  echo "$check: exit $rc after $(($(date +%s) - start)) s" | tee -a "$WORK/summary.txt"
  outcomes "$check" 2>&1 | sed 's/^/  /' | tee -a "$WORK/summary.txt"
}

outcomes() { # outcomes CHECK: what its cases ended as, each that did not pass with its reason
  if compgen -G "$WORK/$1/*/report.json" > /dev/null; then  # a `trainready run`'s store
    "$PY" scripts/ci/check_smoke.py "$WORK/$1"
  elif [ "$1" = train ] && [ -f "$WORK/train-qwen3.json" ]; then  # the API run: its summary
    "$PY" -c 'import json, sys
for c in json.load(open(sys.argv[1]))["cases"]:
    print(c["case"], c["status"], c["error"] or "")' "$WORK/train-qwen3.json"
  fi
}

{ if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  else echo "no nvidia-smi${DRY:+ (dry run on the CPU)}"; fi
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  "$PY" -c "import transformers; print('transformers', transformers.__version__)" 2>&1 | tail -n 1
  git rev-parse HEAD 2>/dev/null; echo "checks: ${checks[*]}${DRY:+ (dry run)}"; } \
  > "$WORK/summary.txt" 2>&1
carry_in > "$WORK/carried.txt"  # not in a pipe: its PYTHONPATH must reach the checks
tee -a "$WORK/summary.txt" < "$WORK/carried.txt"
for check in "${checks[@]}"; do one "$check"; done
cp "$WORK/summary.txt" "$OUT/summary.txt"
tar -czf "$OUT/gpu-results.tar.gz" -C "$WORK" --exclude=./site .
