#!/usr/bin/env bash
# CI's torch-range step: the smoke preset of every suite on the oldest and the newest torch that
# trainready supports (trainready/device/compat.py: TORCH_FLOOR, TORCH_NEWEST), each in its own
# venv, installed as next to a vendor's torch: `torch==X`, then `pip install --no-deps -e .` and the
# runtime requirements pyproject.toml lists (scripts/ci/runtime_deps.py), with the `hf` extra so
# the parity suite's Hugging Face zoo runs as on the main torch. Then
# scripts/ci/check_smoke.py: every planned case ran, none failed (no fail_run, no crash…), and
# every case that did not pass says why (a known bug of that torch is `unsupported`, named).
#
#   scripts/ci/torch_range.sh [VERSION...]        (default: compat.py's TORCH_FLOOR TORCH_NEWEST)
#
# TRAINREADY_VENVS: where the venvs are kept between runs (default ~/.cache/trainready/venvs);
#   one is reused while its stamp (torch, Python, requirements) matches, else made again.
# TORCH_RANGE_OUT: the run stores (default $TMPDIR/trainready-torch-range/torch-X), made afresh.
# TORCH_RANGE_LIMIT_S: each smoke run's time limit (default 900 s).
# TORCH_INDEX_URL: an index to take torch from instead of pip's default (PyPI's CUDA builds pull
#   ~3 GB of nvidia-* wheels per version, kept in $TRAINREADY_VENVS/wheels for the next venv).
# PYTHON: the interpreter that makes the venvs (default python3).
# Timings (venv + install, smoke, check) go to stdout: benchmarks/results/test-runs.md has them.
set -euo pipefail
cd "$(dirname "$0")/../.."
versions=("$@")
[ ${#versions[@]} -gt 0 ] ||
  mapfile -t versions < <(sed -n 's/^TORCH_\(FLOOR\|NEWEST\) = "\([0-9.]*\)"$/\2/p' \
    trainready/device/compat.py)
PY=${PYTHON:-python3}
VENVS=${TRAINREADY_VENVS:-$HOME/.cache/trainready/venvs}
OUT=${TORCH_RANGE_OUT:-${TMPDIR:-/tmp}/trainready-torch-range}
LIMIT=${TORCH_RANGE_LIMIT_S:-900}
EXTRAS=(hf)

stamp() { # stamp VERSION -> what a reusable venv for VERSION was made from
  echo "torch==$1 $("$PY" -c 'import sys; print(sys.version.split()[0])')"
  "$PY" scripts/ci/runtime_deps.py "${EXTRAS[@]}"
}

make_venv() { # make_venv VERSION DIR: a fresh venv holding torch==VERSION and the requirements
  # (`one` runs in an `||` list, where set -e does not act: every step says so if it fails)
  local v=$1 dir=$2 deps
  rm -rf "$dir"
  "$PY" -m venv "$dir" || return
  "$dir/bin/python" -m pip install -q --upgrade pip || return
  # torch and its nvidia-* wheels are kept in $VENVS/wheels, which pip download fills only with
  # what is not there yet: pip's own cache does not keep them everywhere (a proxy that forbids
  # caching, a cleaned home), and they are ~3 GB a version.
  "$dir/bin/python" -m pip download -q -d "$VENVS/wheels" \
    ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==$v" || return
  "$dir/bin/python" -m pip install -q --no-index --find-links "$VENVS/wheels" "torch==$v" ||
    return
  mapfile -t deps < <("$PY" scripts/ci/runtime_deps.py "${EXTRAS[@]}")
  [ ${#deps[@]} -gt 0 ] && "$dir/bin/python" -m pip install -q "${deps[@]}"
}

one() { # one VERSION: (re)use its venv, run the smoke preset, check it
  local v=$1 dir="$VENVS/torch-$1" out="$OUT/torch-$1" t0 rc=0
  t0=$SECONDS
  if [ "$(cat "$dir/.trainready-stamp" 2>/dev/null)" != "$(stamp "$v")" ]; then
    make_venv "$v" "$dir" || { echo "torch $v: could not make its venv" >&2; return 1; }
    stamp "$v" > "$dir/.trainready-stamp"  # only once it is whole
    echo "torch $v: venv made and installed in $((SECONDS - t0)) s"
  fi
  # Always: the venv may have been made from another checkout, and the code is this one's.
  # (Its output, setuptools' deprecation notes, only where it fails.)
  "$dir/bin/python" -m pip install -q --no-deps -e . > "$dir/editable.log" 2>&1 ||
    { cat "$dir/editable.log"; return 1; }
  echo "torch $v: venv ready in $((SECONDS - t0)) s"
  rm -rf "$out"
  t0=$SECONDS
  timeout "$LIMIT" "$dir/bin/python" -m trainready run all --device cpu --preset smoke \
    --out "$out" > "$out.log" 2>&1 || rc=$?
  echo "torch $v: smoke exit $rc in $((SECONDS - t0)) s (log: $out.log)"
  # The run exits 0 whatever its cases did (the checker judges them): anything else is the
  # tool's own failure (an error, a crash, 124 from the time limit).
  if [ "$rc" -ne 0 ]; then
    tail -n 30 "$out.log"
    return 1
  fi
  "$PY" scripts/ci/check_smoke.py "$out"
}

mkdir -p "$VENVS" "$OUT"
failed=()
for v in "${versions[@]}"; do one "$v" || failed+=("$v"); done
if [ ${#failed[@]} -gt 0 ]; then
  echo "torch range: failed on ${failed[*]}" >&2
  exit 1
fi
echo "torch range: ${versions[*]} pass"
