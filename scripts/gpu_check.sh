#!/usr/bin/env bash
# One command on a CUDA machine: install (offline wheels from .whl/ if present), run the
# GPU-marked tests and the kernel tests natively, then the GPU benchmark; logs go to $OUT.
#   usage: scripts/gpu_check.sh tests [pytest args...]
#          scripts/gpu_check.sh bench [mingru bench args...]
#          scripts/gpu_check.sh all        (GPU-marked tests, then the full benchmark)
set -uo pipefail
what=${1:-all}; shift || true
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 \
  || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
rc=0
case "$what" in
  tests) python3 -m pytest -p no:cacheprovider "$@" 2>&1 | tee "$OUT/gpu-tests.log"; rc=${PIPESTATUS[0]} ;;
  bench) python3 -m mingru bench --device cuda --out "$OUT" "$@" 2>&1 | tee "$OUT/bench.log"; rc=${PIPESTATUS[0]} ;;
  all)
    python3 -m pytest -p no:cacheprovider -m gpu tests 2>&1 | tee "$OUT/gpu-tests.log"; rc=${PIPESTATUS[0]}
    python3 -m mingru bench --device cuda --out "$OUT" 2>&1 | tee "$OUT/bench.log" ;;
  *) echo "usage: $0 tests|bench|all [args...]" >&2; exit 2 ;;
esac
exit $rc
