#!/usr/bin/env bash
# One full GPU run: build the kernels, measure the ceilings beside the references, measure VGG16
# layer by layer (float32 and mixed_bfloat16, torch backend, channels_first; counters on bf16), time
# the CLI's whole analysis. Everything lands under $OUT/results (packed as $OUT/results.tgz).
# Knobs: SKIP_CEILINGS=1 (layers only), SKIP_VGG=1 (ceilings only), SKIP_JAX=1, VGG_COUNTERS (extra vgg16_layers.py flags; default
# --counters on bf16 only). Never touches the GPU's clocks or power limit (CARM_ADVISOR_NO_CLOCK_CONTROL=1).
set -u
export PYTHONUNBUFFERED=1 KERAS_BACKEND=${KERAS_BACKEND:-torch} CARM_ADVISOR_NO_CLOCK_CONTROL=1
export CARM_ADVISOR_CACHE=${CARM_ADVISOR_CACHE:-/tmp/carm_cache} MPLBACKEND=Agg
OUT=${OUT:-/tmp/out}
R=$OUT/results
mkdir -p "$R"
step() { echo "=== $(date -u +%H:%M:%S) $*"; }
# A command on the GPU machine is killed at 600 s (or less): pack whatever exists by WATCHDOG_S (default 550 s;
# the final pack overwrites it).
( sleep "${WATCHDOG_S:-550}"; tar czf "$OUT/results.tgz" -C "$OUT" results ) &
WATCHDOG=$!
step nvidia-smi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv | tee "$R/nvidia-smi-before.csv"
step build-kernels
[ -n "${SKIP_CEILINGS:-}" ] || /usr/bin/time -f "build wall %e s" timeout 300 python3 -m carm_advisor.cli build-kernels --arch sm_90a
step sass
[ -n "${SKIP_CEILINGS:-}" ] || timeout 60 python3 benchmarks/sass_summary.py --out "$R/sass-summary.json"
step probe
# One short call of each kernel family first, each in its own process: a family that fails or hangs
# is left out of the ceilings run (and says so here) instead of taking the whole run down.
EXCLUDE=""
probe() {  # probe NAME [FAMILY-PATTERN]
  timeout 60 python3 -c "import sys; from carm_advisor.measure.build import detect_arch; from carm_advisor.measure.kernels import KernelLibrary as K
L = K.load(arch=detect_arch()); r = L.run(sys.argv[1]); print(sys.argv[1], round(r.bytes / r.seconds / 1e12, 3), 'TB/s', round(r.flops / r.seconds / 1e12, 3), 'TFLOP/s')" "$1" \
  || { echo "probe failed: $1 (leaving out ${2:-$1})"; EXCLUDE="$EXCLUDE,$(python3 -c "import re, sys; from carm_advisor.measure.build import detect_arch; from carm_advisor.measure.kernels import KernelLibrary as K
print(','.join(b.name for b in K.load(arch=detect_arch()).benchmarks() if re.fullmatch(sys.argv[1], b.name)))" "${2:-$1}")"; }
}
[ -n "${SKIP_CEILINGS:-}" ] || { probe l2_read_bulk '.*_read_bulk.*'; probe mix_bf16_wgmma_hbm_c4 'mix_bf16_wgmma_.*'; probe mix_fp32_l2_tma_c16 'mix_fp32_.*_tma_c.*'; }
step size-sweep
case ",$EXCLUDE," in *,l2_read_bulk*) ROWS=l2_read_partition,l2_read_partition_u8,hbm_read ;; *) ROWS=l2_read_bulk,l2_read_partition,l2_read_partition_u8,hbm_read ;; esac
[ -n "${SKIP_CEILINGS:-}" ] || timeout 120 python3 benchmarks/size_sweep.py --rows "$ROWS" --out "$R"
step ceilings-vs-reference
[ -n "${SKIP_CEILINGS:-}" ] || timeout 330 python3 benchmarks/ceilings_vs_reference.py --verify-counters --exclude "${EXCLUDE#,}" --out "$R" --profile-out "$R/measured_profile.json"
if [ -z "${SKIP_VGG:-}" ]; then
step vgg16-float32
timeout 120 python3 benchmarks/vgg16_layers.py --precision float32 --layout channels_first ${VGG_COUNTERS:-} --out "$R" \
    --record "$R/record-vgg16-float32.json" --plot "$R/vgg16-float32.png"
step vgg16-bf16-counters
timeout 200 python3 benchmarks/vgg16_layers.py --precision mixed_bfloat16 --layout channels_first ${VGG_COUNTERS:---counters} --out "$R" \
    --record "$R/record-vgg16-mixed_bfloat16.json" --plot "$R/vgg16-mixed_bfloat16.png"
step vgg16-bf16-jax
[ -n "${SKIP_JAX:-}" ] || KERAS_BACKEND=jax XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 150 python3 benchmarks/vgg16_layers.py --precision mixed_bfloat16 \
    --layout channels_last --out "$R" --record "$R/record-vgg16-mixed_bfloat16-jax.json" --tag jax
step cli-analyze-timed
/usr/bin/time -f "cli analyze wall %e s" timeout 120 python3 -m carm_advisor.cli analyze vgg16 --batch-size 64 \
    --precision mixed_bfloat16 --layout channels_first --json "$R/cli-vgg16-bf16.json" --top 5
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit --format=csv > "$R/nvidia-smi-after.csv"
step pack
kill $WATCHDOG 2>/dev/null
tar czf "$OUT/results.tgz" -C "$OUT" results && rm -rf "$R"
ls -la "$OUT"
