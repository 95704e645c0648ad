#!/usr/bin/env bash
# The one GPU command: install (offline wheels from .whl/ when present), then run the GPU tests
# or benchmark suites; logs go to $OUT (default out/), benchmark files to $OUT/bench.
#   scripts/gpu_check.sh tests [pytest args...]    (default: the whole suite on 8 workers)
#   scripts/gpu_check.sh bench [mingru bench args...]
#       e.g. bench --suite headline --json-out docs/benchmarks/h100   (then the page:
#       python -m mingru_benchmarks.page docs/benchmarks.md --json docs/benchmarks/h100)
#   scripts/gpu_check.sh all                        (the GPU tests, then the headline suite)
# MINGRU_COMMIT names the commit in the tables when the tree travels without .git.
set -uo pipefail
what=${1:-all}; shift || true
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 \
  || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
# Each test's time lands in $OUT/durations.tsv as it finishes (kept if the run is stopped),
# each Triton compile in $OUT/compiles.tsv with the test that asked for it.
tests() { rm -f "$OUT/durations.tsv" "$OUT/compiles.tsv"; MINGRU_TEST_DURATION_LOG="$OUT/durations.tsv" \
  MINGRU_TEST_COMPILE_LOG="$OUT/compiles.tsv" python3 -m pytest -q -p no:cacheprovider "$@" 2>&1 | tee "$OUT/gpu-tests.log"; return "${PIPESTATUS[0]}"; }
# On a GPU every test runs natively; slow-marked tests start first (tests/conftest.py).
SUITE="-n 8 --dist worksteal --durations=0 --durations-min=2 tests"
bench() { python3 -m mingru bench --device cuda --out "$OUT/bench" "$@" 2>&1 | tee -a "$OUT/bench.log"; return "${PIPESTATUS[0]}"; }
case "$what" in
  tests) [ $# -gt 0 ] || set -- $SUITE; tests "$@" ;;
  bench) bench "$@" ;;
  all) tests $SUITE; rc=$?; bench --suite headline || rc=$?; exit $rc ;;
  *) echo "usage: $0 tests|bench|all [args...]" >&2; exit 2 ;;
esac
