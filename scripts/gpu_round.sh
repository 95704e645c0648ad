#!/usr/bin/env bash
# One GPU session's measurements in one command (install offline, then the named sections);
# logs and JSON go to $OUT. Sections: tests-cell tests-torch tests-jax floor lookback
# tests-delta (DELTA_TESTS_K: a -k filter) tests-inputs (the fused delta inputs, float32 delta tests) delta-few-rows (the W-free output pass: tests, then time and peak)
# jax-delta-profile (jax-triton's delta rule: wall vs GPU events vs torch; JAX_DELTA_SHAPES) delta-profile delta-bench (DELTA_VARIANTS="default reg_state=1 ..." sweeps;
# e.g. "default stages.fwd_state=2;stages.bwd_state=2"; DELTA_SHAPES, DELTA_NH, DELTA_DTYPE, DELTA_DECAY=1, DELTA_CHECK=1: error and peak memory per variant, DELTA_CHECK_GRADS=1: gradient error too, DELTA_NO_FLA=1: ours only) delta-bench (DELTA_BACKENDS, DELTA_OPS: the gpu-delta case filter; DELTA_BENCH_SHAPES, e.g. d64; DELTA_BENCH_TIMEOUT; DELTA_BENCH_OUT, the folder under $OUT; DELTA_TIMER: events, wall or loop) delta-fp32 (fp32 rows vs compile)
# delta-mixer (DeltaMinGRU fwd, fwd+bwd at B16 T4096 d256 vs compile(eager)) mixer-profile (one mixer's kernels by family per backend: MIXER, MIXER_PRECISION, MIXER_BACKENDS) delta-fused (the
# backward and forward in one launch each, forced: GPU tests, then time against separate launches; DELTA_FUSED_NH="2 1", DELTA_JAX_TESTS=0 skips its jax-triton tests) delta-state-sweep (the
# state kernels' variants at few rows, nh2 decay bf16: 16-bit operands, stages, warps, state_vs)
# delta-sanitize (the forced micro-chunk-64 few-rows layout once under compute-sanitizer memcheck)
# rotation-cells (the Givens and rotation mixers' fused cells: GPU tests, then both mixers against the plain form)
# layout (the scans' layout switches, unmasked whole tiles and a column per thread, against the shipped kernels: GPU tests, shipped plans, walk tiles at the big shape; LAYOUT_SHAPES, LAYOUT_OPS, LAYOUT_BWD=1, LAYOUT_TILES, LAYOUT_TILE_OPS)
# jax-lookback (linear_recurrence forward through jax-triton and PyTorch on the look-back and the chunked strategy, forced; JAX_LB_SHAPES)
# jax-16k (memory_floor.py and jax_triton_vs_torch.py on the same 16k rows, to reconcile them, and each framework's own cost of a synced call there: --call-floor)
# bounds (the training step, small and medium: compile(eager), compile(floor), compile(triton), auto, paired)
# mixer-floor (MinGRU and SignedMinGRU fwd+bwd against compile(eager), the peers and the cell floor)
# adamw (the training step with PyTorch's default AdamW against fused=True, paired)
# host-round (host time paired in one process: cached launches A/B, the fwd+bwd breakdown, optionally under taskset HOST_CPUS, the training step's backward thread)
# walk-bwd (the backward walks' tiles at the big shape, the backward's own time; WALK_OPS, WALK_TILES, WALK_SHAPES, WALK_DENSE=1)
# walk (the long walk's tiles x loop_stages at the big shape; WALK_OPS, WALK_TILES, WALK_SHAPES,
# WALK_BWD=1 for fwd+bwd; walk-only: the sweep without the pipelining tests),
# cells-train (the cells' plans at the mixer and training-step shapes, bf16; CELL_SHAPES, CELL_DTYPE,
# CELL_STRATEGIES, CELL_TILES), tests-new (this round's new GPU tests), layer-norm (the fused
# LayerNorm against PyTorch's), triton-new (the sections after it run on the Triton in .tri/), train-triton (train-step auto / triton / compile(eager)), ladder (every frontend's kernels against its eager path at B16 D128, T = 128 ... 32768). Usage: scripts/gpu_round.sh floor mixers ...
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} || exit 1
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 \
  || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
t0=$SECONDS
for s in "$@"; do
  echo "=== $s (t=$((SECONDS - t0)) s)"
  case "$s" in
    tests-cell) timeout 240 python3 -m pytest -q -x -p no:cacheprovider -m gpu \
        tests/kernels/test_mingru_cell.py 2>&1 | tail -5 ;;
    tests-scans) timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu \
        tests/kernels/test_linear_recurrence.py tests/kernels/test_mingru_cell.py \
        tests/kernels/test_parallel_scan_log.py tests/kernels/test_linear_scan.py \
        tests/kernels/test_elementwise_plan.py 2>&1 | tail -8 ;;
    layout)
      # The scans' layout switches (the plan's even: unmasked whole tiles; scalar: a column per
      # thread) against the shipped kernels: their GPU tests, then each op's shipped plan under
      # every combination (LAYOUT_SHAPES, LAYOUT_OPS, LAYOUT_BWD=1), then walk tiles at the big
      # shape under every combination (LAYOUT_TILES, LAYOUT_TILE_OPS).
      timeout "${LAYOUT_TESTS_TIMEOUT:-200}" python3 -m pytest -q -p no:cacheprovider -m gpu \
        --tb=line tests/kernels/test_elementwise_plan.py 2>&1 | tail -6
      for dir in "" ${LAYOUT_BWD:+--bwd}; do
        timeout 200 python3 scripts/plan_sweep.py --even 0,1 --scalar 0,1 --tiles default \
          --top 4 $dir --shapes "${LAYOUT_SHAPES:-big,16k}" \
          --ops "${LAYOUT_OPS:-parallel_scan_log,mingru_cell,signed_mingru_cell,linear_recurrence}" \
          2>&1 | tee -a "$OUT/layout.log" | grep --line-buffered -v -i warn
      done
      # Walk tiles with their offline sm_90 instructions per element (shipped -> even+scalar;
      # log scan fast path / MinGRU cell): 64x32x2 47.8 -> 36.4 / 50.4 -> 41.9 (768 warps at the
      # big shape), 64x32x4 61.1 -> 48.6 / 60.4 -> 49.6 (1536), 32x32x1 36.6 -> 25.5 /
      # 40.4 -> 31.4, 32x64x2 41.6 -> 25.5 / 45.1 -> 31.3, 32x128x4 42.6 -> 25.5 / 45.9 -> 31.3
      # (384 warps each).
      timeout 250 python3 scripts/plan_sweep.py --even 0,1 --scalar 0,1 --top 20 \
        --strategy walk --shapes big --ops "${LAYOUT_TILE_OPS:-parallel_scan_log,mingru_cell}" \
        --tiles "${LAYOUT_TILES:-64x32x2x3,64x32x4x3,32x32x1x4,32x64x2x3,32x128x4x3}" 2>&1 \
        | tee -a "$OUT/layout.log" | grep --line-buffered -v -i warn ;;
    tests-log) timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu --tb=line \
        tests/kernels/test_parallel_scan_log.py tests/kernels/test_linear_scan.py \
        tests/kernels/test_elementwise_plan.py 2>&1 | tail -6 ;;
    tests-walk) timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu --tb=line \
        -k "long_walk or pipelined" tests/kernels 2>&1 | grep --line-buffered -v -i warn | tail -6 ;;
    tests-torch)
      # Compiles dominate (over 300 s in one process on an H100): spread them over workers.
      workers=""; python3 -c "import xdist" 2>/dev/null && workers="-n ${TORCH_WORKERS:-6}"
      ( time timeout "${TORCH_TESTS_TIMEOUT:-420}" python3 -m pytest -q -p no:cacheprovider \
        tests/torch tests/kernels -m gpu $workers --durations=10 ) 2>&1 | tail -22 ;;
    tests-jax)
      # The suite's time is Triton / XLA compiles, CPU-bound: spread them over workers when
      # pytest-xdist is there (put its wheel and execnet's in .whl/: pip download --no-deps).
      workers=""; python3 -c "import xdist" 2>/dev/null && workers="-n ${JAX_WORKERS:-8}"
      ( time timeout 300 python3 -m pytest -q -p no:cacheprovider tests/jax $workers \
        --durations=10 ) 2>&1 | tail -25 ;;
    lookback) timeout 200 python3 -m pytest -q -x -p no:cacheprovider -m gpu -k lookback \
        tests/kernels/test_linear_recurrence.py tests/kernels/test_mingru_cell.py 2>&1 | tail -5
      for dir in "" --bwd; do
        timeout 300 python3 scripts/plan_sweep.py --strategy lookback $dir \
          --ops linear_recurrence,mingru_cell,signed_mingru_cell --shapes big,16k \
          --tiles "${LOOKBACK_TILES:-32x32x4,64x32x4,32x64x4,64x64x4,128x32x4,16x64x2,32x32x2,64x16x2,32x128x4,64x128x8,16x128x4}" \
          2>&1 | tee -a "$OUT/lookback-sweep.log" | grep -v Warn
      done ;;
    tests-delta) workers=""; python3 -c "import xdist" 2>/dev/null && workers="-n ${DELTA_WORKERS:-4}"
      timeout "${DELTA_TESTS_TIMEOUT:-300}" python3 -m pytest -q -p no:cacheprovider -m gpu $workers \
        ${DELTA_TESTS_K:+-k "$DELTA_TESTS_K"} tests/kernels/test_delta_rule.py \
        tests/torch/test_delta_packing.py 2>&1 | tail -5
      # The jax-triton launcher's delta-rule GPU tests (one process: JAX holds the GPU).
      timeout 150 python3 -m pytest -q -p no:cacheprovider tests/jax/test_launch.py \
        -k "TestGPU and delta" 2>&1 | tail -3 ;;
    delta-profile) timeout "${DELTA_TIMEOUT:-200}" python3 scripts/profile_delta.py --repeats 5 \
        --shapes ${DELTA_SHAPES:-128,1024,4,64 128,256,4,64 128,1024,4,16} --nh "${DELTA_NH:-1}" --dtype "${DELTA_DTYPE:-bfloat16}" \
        ${DELTA_DECAY:+--decay} ${DELTA_CHECK:+--check} ${DELTA_CHECK_GRADS:+--check-grads} ${DELTA_NO_FLA:+--no-fla} ${DELTA_VARIANTS:+--variants $DELTA_VARIANTS} \
        2>&1 | grep --line-buffered -v -i warn | tee -a "$OUT/delta-profile.txt" | grep -E "GPU-busy|check:" ;;
    rotation-cells)
      # GivensMinGRU's and RotationMinGRU's fused cells: their GPU tests (and the Givens
      # recurrence's, whose kernels they share), then both mixers on their cells against the
      # plain form (CELLS_SHAPES).
      timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_givens_cell.py \
        tests/kernels/test_rotation_cell.py tests/kernels/test_givens_recurrence.py 2>&1 | tail -4
      timeout 300 python3 benchmarks/rotation_cells.py --shapes "${CELLS_SHAPES:-16x4096x256,8x2048x1024}" \
        --json "$OUT/rotation-cells.jsonl" 2>&1 | grep --line-buffered -v -i warn ;;
    delta-sanitize)
      # The forced micro-chunk-64 few-rows layout whose backward died with an illegal memory
      # access (twenty-first round), once under compute-sanitizer's memcheck: the first bad
      # access names the kernel and the address (DELTA_SANITIZE_SHAPES, DELTA_SANITIZE_VARIANTS).
      timeout "${DELTA_SANITIZE_TIMEOUT:-400}" compute-sanitizer --tool memcheck --show-backtrace no \
        python3 scripts/profile_delta.py --once --nh 2 --decay --dtype bfloat16 \
        --shapes ${DELTA_SANITIZE_SHAPES:-32,512,4,16 32,4096,4,16} --variants \
        ${DELTA_SANITIZE_VARIANTS:-"lp=64;wu_in_state=0;out_pass=1;wu_half=1;saved_tm=1;fused_bwd=1"} \
        2>&1 | grep --line-buffered -v -i warn | tee -a "$OUT/delta-sanitize.txt" | tail -40 ;;
    delta-fp32) timeout 500 python3 -m mingru bench --device cuda --groups gpu-delta --ops float32 \
        --backends triton,compile --out "$OUT/delta-fp32" 2>&1 | grep --line-buffered -v -i warn | tail -15 ;;
    delta-mixer) timeout 500 python3 -m mingru bench --device cuda --groups mixers --ops delta \
        --shapes long --backends triton,compile-eager --out "$OUT/delta-mixer" 2>&1 \
        | grep --line-buffered -v -i warn | tail -15 ;;
    delta-bench) timeout "${DELTA_BENCH_TIMEOUT:-500}" python3 -m mingru bench --device cuda --groups gpu-delta \
        --backends "${DELTA_BACKENDS:-eager,compile,triton,fla}" ${DELTA_OPS:+--ops "$DELTA_OPS"} \
        ${DELTA_BENCH_SHAPES:+--shapes $DELTA_BENCH_SHAPES} ${DELTA_TIMER:+--timer $DELTA_TIMER} \
        --out "$OUT/${DELTA_BENCH_OUT:-delta}" 2>&1 | grep --line-buffered -v -i warn | tee -a "$OUT/delta-bench.log" | tail -40 ;;
    jax-delta-profile)
      # The jax-triton delta rule's wall time against its GPU events and PyTorch's launcher.
      timeout "${JAX_DELTA_TIMEOUT:-200}" python3 scripts/profile_jax_delta.py --torch --repeats 50 \
        --dtype "${JAX_DELTA_DTYPE:-bfloat16}" \
        --shapes ${JAX_DELTA_SHAPES:-128,256,4,16 128,1024,4,16 128,256,4,64} 2>&1 \
        | grep --line-buffered -v -i warn | tee -a "$OUT/jax-delta-profile.txt" | grep -E "wall|HLO" ;;
    tests-inputs)
      # The delta mixer's fused inputs, then the float32 delta-rule tests (split products, the
      # output pass at few rows) on the GPU.
      timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_delta_inputs.py \
        2>&1 | tail -3
      timeout "${DELTA_TESTS_TIMEOUT:-200}" python3 -m pytest -q -p no:cacheprovider -m gpu \
        -k "${DELTA_TESTS_K:-float32_products or gradients_vs_float64}" \
        tests/kernels/test_delta_rule.py 2>&1 | tail -3 ;;
    mixer-profile)
      # One mixer's do_bench time and its kernels by family, per backend (MIXER, MIXER_PRECISION,
      # MIXER_BACKENDS, MIXER_SHAPE).
      timeout "${MIXER_TIMEOUT:-300}" python3 scripts/profile_mixer.py --mixer "${MIXER:-delta}" \
        --precision "${MIXER_PRECISION:-fp32}" --backends "${MIXER_BACKENDS:-triton,compile(eager)}" \
        --shape "${MIXER_SHAPE:-16,4096,256}" 2>&1 | grep --line-buffered -v -i warn | tee -a "$OUT/mixer-profile.txt" ;;
    delta-few-rows)
      # The W-free output pass (STORE_W off) on the GPU: its bf16 tests, then its time, error
      # and peak against the default and fla where B·H is at most the SM count (B32 H4) and
      # where it is not (B128 H4).
      timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_delta_rule.py \
        -k "reg_state_bf16_head64 or (gradients_vs_float64 and bf16 and 64)" 2>&1 | tail -4
      timeout 200 python3 scripts/profile_delta.py --repeats 5 --dtype bfloat16 --nh 2 --decay \
        --check --shapes 32,4096,4,64 32,4096,4,16 128,1024,4,64 --variants default \
        "wu_in_state=0;out_pass=1;wu_half=1;saved_tm=0" 2>&1 | grep --line-buffered -v -i warn \
        | tee -a "$OUT/delta-few-rows.txt" | grep -E "GPU-busy|check:|refused" ;;
    delta-fused)
      # The backward and the forward in one launch each (fused_bwd, fused_fwd; forced): their
      # GPU tests first (forced layouts, packed sequences, the jax-triton forced plans), each
      # under a limit in case a wait never ends, then their time, error and peak against the
      # separate launches at few rows, nh2 with decay and nh1, d = 64 and 16.
      timeout "${DELTA_TESTS_TIMEOUT:-150}" python3 -m pytest -q -p no:cacheprovider -m gpu \
        -k "(reg_state_bf16_head64 and (fused or two)) or many_sequences_head64" \
        tests/kernels/test_delta_rule.py tests/torch/test_delta_packing.py 2>&1 | tail -4
      [ "${DELTA_JAX_TESTS:-1}" = 1 ] && timeout 150 python3 -m pytest -q -p no:cacheprovider \
        tests/jax/test_launch.py -k "TestGPU and delta" 2>&1 | tail -3
      for nh in ${DELTA_FUSED_NH:-2 1}; do
        if [ $nh = 2 ]; then v='default fused_bwd=1 fused_fwd=1 fused_bwd=1;fused_fwd=1'
        else v='default fused_bwd=1 out_pass=1 out_pass=1;fused_fwd=1;fused_bwd=1'; fi
        timeout "${DELTA_TIMEOUT:-200}" python3 scripts/profile_delta.py --repeats 5 --dtype bfloat16 \
          --nh $nh $([ $nh = 2 ] && echo --decay) --check --check-grads \
          --shapes ${DELTA_SHAPES:-32,4096,4,64 32,4096,4,16} --variants $v \
          2>&1 | grep --line-buffered -v -i warn | tee -a "$OUT/delta-fused.txt" | grep -E "GPU-busy|check:|refused"
      done ;;
    delta-state-sweep)
      # The few-rows gap (nh2 decay, B32 T4096: B·H = 128 serial state programs): the state
      # kernels' 16-bit operands, stages, warps and column split, with errors and peak.
      timeout "${DELTA_TIMEOUT:-300}" python3 scripts/profile_delta.py --repeats 5 --dtype bfloat16 \
        --nh 2 --decay --check --check-grads --shapes ${DELTA_SHAPES:-32,4096,4,64 32,4096,4,16} \
        --variants ${DELTA_VARIANTS:-default state_half_ops=1 "state_half_ops=1;half_ops=1" stages.fwd_state=1 \
        stages.fwd_state=3 stages.bwd_state=3 warps.fwd_state=8 warps.bwd_state=8 state_vs=32} \
        2>&1 | grep --line-buffered -v -i warn | tee -a "$OUT/delta-state-sweep.txt" | grep -E "GPU-busy|check:|refused" ;;
    floor) timeout 300 python3 benchmarks/memory_floor.py --out "$OUT" --repeats 20 \
        ${FLOOR_OPS:+--ops $FLOOR_OPS} 2>&1 | tail -30 ;;
    walk) timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -k pipelined --tb=line \
        tests/kernels 2>&1 | grep --line-buffered -v -i warn | tail -6
      timeout "${WALK_TIMEOUT:-420}" python3 scripts/plan_sweep.py --strategy walk \
        --shapes "${WALK_SHAPES:-big}" ${WALK_BWD:+--bwd} --top 40 \
        --ops "${WALK_OPS:-mingru_cell,signed_mingru_cell,linear_recurrence,parallel_scan_log}" \
        --tiles "${WALK_TILES:-64x32x8x1,64x32x8x2,64x32x8x3,32x32x4x1,32x32x4x2,32x32x4x3,64x32x4x1,64x32x4x2,64x32x4x3,32x64x2x1,32x64x2x2,32x64x2x3,32x64x4x1,32x64x4x2,64x64x4x2,16x64x2x3,16x64x2x4,32x32x2x3,16x32x2x3,128x32x4x1,128x32x4x2,16x128x4x2,32x128x4x2,64x16x4x2}" \
        2>&1 | tee -a "$OUT/walk-sweep.log" | grep --line-buffered -v -i warn ;;
    jax-lookback)
      # linear_recurrence's forward through jax-triton kept the chunked strategy until the
      # twenty-fourth round (the look-back measured slower before the one-warp look-back tiles).
      # Both frontends on each strategy, forced, wall clock with a sync.
      for plan in strategy=lookback strategy=chunked ""; do
        timeout 150 python3 scripts/jax_triton_vs_torch.py --ops linear_recurrence --no-eager \
          --shapes "${JAX_LB_SHAPES:-16x16384x128,16x32768x128,16x8192x128}" ${plan:+--plan $plan} \
          --json "$OUT/jax-lookback-${plan#strategy=}.json" 2>&1 | grep --line-buffered -v -i warn \
          | tee -a "$OUT/jax-lookback.log" | tail -9
      done ;;
    walk-bwd)
      # The backward walks' tiles at the big shape (their plan has no measured walk tile: the
      # default 64x32, 4 warps, unpipelined). Offline sm_90 instructions per element, log scan /
      # linear_recurrence / MinGRU cell, * = spills: 64x32x4x1 62.0 / 50.0 / 90.7, 32x32x2x3
      # 67.1 / 46.5 / 88.2, 64x32x4x2 69.2 / 53.0 / 93.7, 32x32x1x4 59.0* / 36.2 / 80.1*.
      # WALK_DENSE=1: a dense output gradient instead of a sum's expanded (stride-0) one.
      timeout "${WALK_TIMEOUT:-420}" python3 scripts/plan_sweep.py --strategy walk --bwd \
        ${WALK_DENSE:+--dense-grad} --shapes "${WALK_SHAPES:-big}" --top 12 \
        --ops "${WALK_OPS:-parallel_scan_log,linear_recurrence,mingru_cell}" \
        --tiles "${WALK_TILES:-64x32x4x1,32x32x2x3,64x32x4x2,32x32x1x4,32x64x2x3,64x32x2x2}" 2>&1 \
        | tee -a "$OUT/walk-bwd.log" | grep --line-buffered -v -i warn ;;
    walk-only) timeout "${WALK_TIMEOUT:-420}" python3 scripts/plan_sweep.py --strategy walk \
        --shapes "${WALK_SHAPES:-big}" ${WALK_BWD:+--bwd} --top 40 --ops "${WALK_OPS}" \
        --tiles "${WALK_TILES}" 2>&1 | tee -a "$OUT/walk-sweep.log" | grep --line-buffered -v -i warn ;;
    cells-train)
      # The fused cells at the mixers' and the training step's shapes (bf16, as under autocast):
      # every strategy over a few tiles, forward then fwd+bwd.
      for dir in "" --bwd; do
        timeout "${CELL_TIMEOUT:-200}" python3 scripts/plan_sweep.py --ops mingru_cell,signed_mingru_cell \
          --shapes "${CELL_SHAPES:-train,mixer,mixer-wide}" --dtype "${CELL_DTYPE:-bfloat16}" $dir \
          --strategy "${CELL_STRATEGIES:-lookback,chunked,walk}" --top 8 \
          --tiles "${CELL_TILES:-16x32x1,16x128x1,32x32x2,32x64x4,64x32x4,64x64x4,128x32x4}" \
          2>&1 | grep --line-buffered -v -i warn | tee -a "$OUT/cell-sweep.log"
      done ;;
    tests-new) timeout 420 python3 -m pytest -q -p no:cacheprovider -m gpu --tb=line \
        tests/kernels/test_layer_norm.py tests/torch/test_mixer_compile.py \
        tests/kernels/test_delta_rule.py -k "layer_norm or reduce_overhead or head_sizes or gpu_matches" \
        2>&1 | grep --line-buffered -v -i warn | tail -12 ;;
    host-round)
      # Host time, each comparison paired inside one process (hosts drift between processes):
      # cached launches against Triton's own path, the fwd+bwd breakdown (with HOST_CPUS, e.g.
      # 0-1, once more pinned by taskset: is the device thread's cost core migration?), and the
      # training step's backward on the device thread against the calling thread.
      timeout 200 python3 scripts/profile_overhead.py --shape 16,1024,64 --ab-cache 2>&1 \
        | grep --line-buffered -v -i warn | tee -a "$OUT/host-round.log"
      for cpus in "" ${HOST_CPUS:-}; do
        echo "--- breakdown${cpus:+, taskset -c $cpus}" | tee -a "$OUT/host-round.log"
        timeout 150 ${cpus:+taskset -c $cpus} python3 scripts/profile_overhead.py \
          --shape 16,1024,64 --breakdown 2>&1 | head -24 | tee -a "$OUT/host-round.log"
      done
      timeout 200 python3 scripts/train_step_threads.py --rounds 9 2>&1 \
        | grep --line-buffered -v -i warn | tee -a "$OUT/host-round.log" ;;
    jax-16k)
      # memory_floor.py and jax_triton_vs_torch.py disagreed on jax-triton's forward at
      # B16 T16384 D128 (2.2x against 0.92x PyTorch's wall time, twenty-fifth and twenty-fourth
      # rounds): both harnesses on the same shape in one call (they agreed in the twenty-sixth;
      # --call-floor adds each framework's own cost of a synced call of that size).
      timeout 200 python3 benchmarks/memory_floor.py --ops linear_recurrence,parallel_scan_log \
        --shapes 16k --repeats 50 --out "$OUT/jax-16k-floor" 2>&1 | grep --line-buffered '^{' \
        | tee -a "$OUT/jax-16k.log"
      timeout 200 python3 scripts/jax_triton_vs_torch.py --ops linear_recurrence,parallel_scan_log \
        --shapes 16x16384x128 --call-floor --json "$OUT/jax-16k-vs-torch.json" 2>&1 \
        | grep --line-buffered -v -i warn | tail -12 | tee -a "$OUT/jax-16k.log" ;;
    bounds)
      # The fused-cell issue's training-step rows with the cell-floor bound beside them, paired
      # in one process per shape (about 2 minutes each on an H100, compile warm-ups included).
      for shape in 8,2048,512,4 4,4096,1024,8; do
        timeout "${BOUNDS_TIMEOUT:-260}" python3 benchmarks/train_step_paired.py --shape "$shape" \
          --backends "compile(eager),compile(floor),compile(triton),auto" --rounds 7 --steps 5 \
          --json "$OUT/bounds.jsonl" 2>&1 | grep --line-buffered '^{' | tee -a "$OUT/bounds.log"
      done ;;
    mixer-floor)
      # The fused-cell issue's mixer rows (MinGRU, SignedMinGRU; both shapes, fp32 and bf16)
      # beside the peers and the cell-floor bound (about 5 minutes on an H100).
      timeout "${MIXER_FLOOR_TIMEOUT:-540}" python3 benchmarks/mixer_floor.py --rounds 3 \
        --json "$OUT/mixer-floor.jsonl" 2>&1 | grep --line-buffered '^{' \
        | tee -a "$OUT/mixer-floor.log" ;;
    adamw)
      # PyTorch's default AdamW against fused=True in the training step, paired in one process
      # (the optimizer took 1.1 ms of the small step's GPU time in the twenty-sixth round):
      # whether mingru train should pass fused=True on CUDA.
      timeout "${ADAMW_TIMEOUT:-400}" python3 benchmarks/train_step_paired.py \
        --backends "auto,auto+fused-adamw,compile(eager),compile(eager)+fused-adamw" \
        --rounds 7 --json "$OUT/adamw.jsonl" 2>&1 | grep --line-buffered '^{' \
        | tee -a "$OUT/adamw.log" ;;
    layer-norm) timeout 200 python3 benchmarks/layer_norm.py --json "$OUT/layer-norm.jsonl" 2>&1 \
        | grep --line-buffered -v -i warn | tail -14 ;;
    train-triton) timeout 400 python3 -m mingru bench --device cuda --groups train-step \
        --ops "${TRAIN_OPS:-log,signed}" --shapes small --backends auto,triton,compile-eager \
        --profile-steps 0 --out "$OUT/train-triton" 2>&1 | grep --line-buffered -v -i warn | tail -20 ;;
    ladder) timeout 400 python3 benchmarks/memory_floor.py --ladder --repeats 20 \
        --out "$OUT/ladder" ${FLOOR_OPS:+--ops $FLOOR_OPS} 2>&1 | tail -45 ;;
    triton-new)
      # A newer Triton for the sections after this one (fla refuses its nh >= 2 backward on
      # Triton < 3.7.1 on Hopper): a stripped build packed as .tri/triton-*.tar.xz (see
      # docs/how-to/run-benchmarks.md), unpacked ahead of the image's Triton on the path.
      tarball=$(ls .tri/triton-*.tar.xz 2>/dev/null | head -1)
      [ -n "$tarball" ] || { echo "no .tri/triton-*.tar.xz"; continue; }
      mkdir -p /tmp/tri && python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall('/tmp/tri')" "$tarball"
      export PYTHONPATH=/tmp/tri:$PYTHONPATH TRITON_CACHE_DIR=/tmp/tri-cache
      python3 -c "import triton, torch; print('triton', triton.__version__, triton.__file__, 'torch', torch.__version__)" ;;
    *) echo "unknown section $s" ;;
  esac
done
echo "=== done (t=$((SECONDS - t0)) s)"
