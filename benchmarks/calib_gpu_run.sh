#!/usr/bin/env bash
# The calibration records on the GPU in one command (~6 min of a 10 min GPU run): the layer/whole-model records
# (benchmarks/record_layers.py, BUDGET_S, default 240 s) that the calibration, the accuracy check and the
# power model learn from, then `carm-advise analyze` timed as a user runs it (whole CLI process) on
# VGG16, ResNet50 and MobileNetV2 at batch 64, and one --verify on VGG16. Everything lands under $OUT.
# Never touches the GPU's clocks or power limit.
set -u
export PYTHONUNBUFFERED=1 CARM_ADVISOR_NO_CLOCK_CONTROL=1 MPLBACKEND=Agg
export CARM_ADVISOR_CACHE=${CARM_ADVISOR_CACHE:-/tmp/carm_cache}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/records" "$OUT/cli"
step() { echo "=== $(date -u +%H:%M:%S) $*"; }
step nvidia-smi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv
step record_layers
python3 benchmarks/record_layers.py --models vgg16,resnet50,mobilenetv2 --precisions float32,mixed_bfloat16,mixed_float16 \
    --batch-sizes 32,64,128 --backends torch,jax --budget-s "${BUDGET_S:-240}" --out "$OUT/records" 2>&1 \
    | grep -v '^I0000\|^W0000\|USDT' | tee "$OUT/record_layers.log" | tail -n 80
for m in ${CLI_MODELS:-vgg16 resnet50 mobilenetv2}; do
  step "cli analyze $m (torch, mixed_bfloat16, channels_first, batch 64)"
  /usr/bin/time -f "$m CLI wall %e s" env KERAS_BACKEND=torch timeout 120 python3 -m carm_advisor.cli analyze "$m" \
      --batch-size 64 --precision mixed_bfloat16 --layout channels_first --json "$OUT/cli/$m.json" \
      --plot "$OUT/cli/$m.png" > "$OUT/cli/$m.txt" 2>&1
  tail -n 1 "$OUT/cli/$m.txt"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); t=d['totals']; m=d['measurement'] or {}; g=(m.get('inference_graph') or {}).get('time_s'); s=t['sum_layer_time_s']; print('layer sum', s, 'graph', g, 'ratio', s/g if s and g else None, 'eager', (m.get('inference') or {}).get('time_s'), 'bound', t['bound_time_s'], 'calibrated', t['calibrated_time_s'])" "$OUT/cli/$m.json" || true
done
if [ -z "${SKIP_VERIFY:-}" ]; then
  step "cli analyze vgg16 --verify"
  /usr/bin/time -f "vgg16 --verify CLI wall %e s" env KERAS_BACKEND=torch timeout 240 python3 -m carm_advisor.cli analyze vgg16 \
      --batch-size 64 --precision float32 --layout channels_first --verify --json "$OUT/cli/vgg16-verify.json" \
      > "$OUT/cli/vgg16-verify.txt" 2>&1
  tail -n 1 "$OUT/cli/vgg16-verify.txt"
fi
step done
ls "$OUT/records" | head -n 80
