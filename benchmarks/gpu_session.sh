#!/usr/bin/env bash
# One device call of the 2026-12-03 session: stages picked by STAGES (space-separated), each bounded in time,
# everything under $OUT. Never touches the GPU's clocks or power limit (CARM_ADVISOR_NO_CLOCK_CONTROL=1).
#   kernels   build-kernels, then `carm-advise ceilings --quick` timed as a fresh process, then the launch floor
#   floor     the launch floor alone (builds the kernels when the cache has none)
#   tune      benchmarks/vgg16_tuning.py (TUNE_BUDGET_S, TUNE_TRIALS, TUNE_ARGS), resuming $OUT/vgg16-study.db
#             when a carried copy sits in carry/ (the resume test)
#   grid      the same space measured exhaustively (GRID_BUDGET_S), resuming carry/vgg16-grid.db
#   records   benchmarks/record_layers.py (RECORD_BUDGET_S)
#   sweep     benchmarks/power_sweep.py (SWEEP_BUDGET_S)
#   cli       carm-advise analyze timed on vgg16, resnet50, mobilenetv2 (whole process)
set -u
export PYTHONUNBUFFERED=1 CARM_ADVISOR_NO_CLOCK_CONTROL=1 MPLBACKEND=Agg XLA_PYTHON_CLIENT_PREALLOCATE=false
export CARM_ADVISOR_CACHE=${CARM_ADVISOR_CACHE:-/tmp/carm_cache} KERAS_BACKEND=${KERAS_BACKEND:-torch}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
step() { echo "=== $(date -u +%H:%M:%S) $*"; }
has() { case " ${STAGES:-kernels tune} " in *" $1 "*) return 0 ;; esac; return 1; }
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} || exit 1
fi
step nvidia-smi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv | tee "$OUT/nvidia-smi-before.csv"
SPACE="--compilers ${TUNE_COMPILERS:-eager,xla} --backends ${TUNE_BACKENDS:-torch,jax}"
if has kernels; then
  step build-kernels
  /usr/bin/time -f "build-kernels wall %e s" timeout 200 python3 -m carm_advisor.cli build-kernels 2>&1 | tail -n 8
  step "ceilings --quick (fresh process, kernels built)"
  /usr/bin/time -f "ceilings --quick wall %e s" timeout 120 python3 -m carm_advisor.cli ceilings --quick --json "$OUT/ceilings-quick.json" > "$OUT/ceilings-quick.txt" 2>&1
  tail -n 3 "$OUT/ceilings-quick.txt"
fi
if has kernels || has floor; then
  step launch-floor
  timeout 120 python3 benchmarks/launch_floor.py --out "$OUT" --budget-s 30 2>&1 | tail -n 5
fi
if has tune; then
  [ -f carry/vgg16-study.db ] && { cp carry/vgg16-study.db* "$OUT/"; echo "resuming the carried study"; }
  step "vgg16 tuning study"
  timeout $(( ${TUNE_BUDGET_S:-400} + 90 )) python3 benchmarks/vgg16_tuning.py --trials "${TUNE_TRIALS:-30}" $SPACE \
      --storage "$OUT/vgg16-study.db" --budget-s "${TUNE_BUDGET_S:-400}" --out "$OUT" ${TUNE_ARGS:-} 2>&1 | tee "$OUT/tune.log" | tail -n 60
fi
if has grid; then
  [ -f carry/vgg16-grid.db ] && { cp carry/vgg16-grid.db* "$OUT/"; echo "resuming the carried grid"; }
  step "vgg16 grid"
  timeout $(( ${GRID_BUDGET_S:-300} + 90 )) python3 benchmarks/vgg16_tuning.py --grid ${GRID_SPACE:-$SPACE} --storage "$OUT/vgg16-grid.db" \
      --budget-s "${GRID_BUDGET_S:-300}" --out "$OUT/grid" ${GRID_ARGS:-} 2>&1 | tee "$OUT/grid.log" | tail -n 40
fi
if has records; then
  step record-layers
  mkdir -p "$OUT/records"; [ -d carry/records ] && cp carry/records/*.json "$OUT/records/" 2>/dev/null
  timeout $(( ${RECORD_BUDGET_S:-200} + 60 )) python3 benchmarks/record_layers.py --models vgg16,resnet50,mobilenetv2 \
      --precisions float32,mixed_bfloat16,mixed_float16 --batch-sizes 64,32,128 --backends torch,jax \
      --budget-s "${RECORD_BUDGET_S:-200}" --out "$OUT/records" 2>&1 | grep -v '^I0000\|^W0000\|USDT' | tee "$OUT/record_layers.log" | tail -n 40
fi
if has sweep; then
  step power-sweep
  timeout $(( ${SWEEP_BUDGET_S:-120} + 60 )) python3 benchmarks/power_sweep.py --budget-s "${SWEEP_BUDGET_S:-120}" --out "$OUT" 2>&1 | tail -n 10
fi
if has cli; then
  mkdir -p "$OUT/cli"
  for m in ${CLI_MODELS:-vgg16 resnet50 mobilenetv2}; do
    step "cli analyze $m"
    /usr/bin/time -f "$m CLI wall %e s" timeout 150 python3 -m carm_advisor.cli analyze "$m" --batch-size 64 \
        --precision mixed_bfloat16 --layout channels_first --json "$OUT/cli/$m.json" > "$OUT/cli/$m.txt" 2>&1
    tail -n 2 "$OUT/cli/$m.txt"
  done
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$OUT/nvidia-smi-after.csv"
# The device tool brings back a limited number of files: pack the many small ones.
tar czf "$OUT/session.tgz" -C "$OUT" --exclude session.tgz . 2>/dev/null
find "$OUT" -mindepth 1 -maxdepth 1 ! -name session.tgz ! -name '*.db' -exec rm -rf {} +
step done
