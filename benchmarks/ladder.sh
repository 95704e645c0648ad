#!/usr/bin/env bash
# The expressivity ladder recorded in docs/results/ladder.md: every run is one `mingru train`
# command. Results land in $OUT/<run>/ as train_results.json + train_accuracy.png; summarize with
#   python benchmarks/summarize_train.py $OUT/*/train_results.json
#   benchmarks/ladder.sh OUT        the CPU ladder: trained at T=64, evaluated at 64/256/1024
#   benchmarks/ladder.sh OUT gpu    the GPU ladder: parity, S3, S5 and MQAR, every mixer, three
#                                   seeds, trained at T=256, evaluated at 256/1024/4096
set -euo pipefail
OUT=${1:-ladder-runs}
mkdir -p "$OUT"
run() { local name=$1; shift; python -m mingru train --no-progress --out "$OUT/$name" "$@"; }

if [ "${2:-cpu}" = gpu ]; then
  lengths=(--device cuda --train-len 256 --val-len 256 --eval-lens 256,1024,4096)
  every=(--mixer log --mixer signed --mixer rotation --mixer givens --mixer delta)
  for s in 0 1 2; do
    run "gpu-parity-seed$s" --task parity --steps 1000 "${every[@]}" "${lengths[@]}" --seed "$s"
    run "gpu-s3-seed$s" --task s3 --steps 2000 "${every[@]}" "${lengths[@]}" --seed "$s"
    run "gpu-s5-seed$s" --task s5 --steps 4000 "${every[@]}" "${lengths[@]}" --seed "$s"
    # Recall needs two layers: MinGRU first (it carries the key to the value), then the memory.
    run "gpu-mqar-seed$s" --task mqar --layers 2 --steps 2000 --mixer log,log --mixer log,signed \
      --mixer log,rotation --mixer log,givens --mixer log,delta "${lengths[@]}" --seed "$s"
  done
  exit 0
fi

# Parity: SignedMinGRU vs MinGRU (the no-flag default), three seeds.
for s in 0 1 2; do run "parity-seed$s" --seed "$s"; done
# The same default through the Flax frontend.
run parity-jax-seed0 --framework jax --seed 0
# S3 word problem: Givens vs Rotation vs MinGRU; then Givens and a signed+givens stack.
run s3-seed0 --task s3 --mixer givens --mixer rotation --mixer log --seed 0
run s3-seed1 --task s3 --mixer givens --mixer signed,givens --seed 1
# S5 word problem: Givens vs MinGRU; then a 2-layer Givens stack with a larger budget.
run s5-seed0 --task s5 --seed 0
run s5-2layer-seed0 --task s5 --mixer givens --layers 2 --steps 3000 --seed 0
# MQAR: MinGRU + DeltaMinGRU vs two MinGRU layers.
run mqar-seed0 --task mqar --seed 0
