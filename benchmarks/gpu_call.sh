#!/usr/bin/env bash
# One GPU run: stages picked by STAGES (space-separated), each bounded in time,
# everything under $OUT. Never touches the GPU's clocks or power limit (CARM_ADVISOR_NO_CLOCK_CONTROL=1).
#   kernels   build-kernels, then `carm-advise ceilings --quick` timed as a fresh process, then the launch floor
#   floor     the launch floor alone (builds the kernels when the cache has none)
#   tune      benchmarks/vgg16_tuning.py (TUNE_BUDGET_S, TUNE_TRIALS, TUNE_ARGS), resuming $OUT/$STUDY_DB
#             (default vgg16-study.db) when a carried copy sits in carry/ (the resume test)
#   grid      the same space measured exhaustively (GRID_BUDGET_S), resuming carry/vgg16-grid.db
#   records   benchmarks/record_layers.py (RECORD_BUDGET_S; RECORD_ARGS replaces the models/precisions/... choice)
#   sweep     benchmarks/power_sweep.py (SWEEP_BUDGET_S)
#   hf        benchmarks/hf_reference.py (HF_ARGS; HF_BUDGET_S): Hugging Face BERT and ViT run by hand, the reference
#             a tuned Keras transformer is held against, measured in the same call as the tuning
#   ttune     a measured tuning study of a transformer builder (TTUNE_MODEL, TTUNE_TRIALS, TTUNE_BUDGET_S,
#             TTUNE_ARGS) with carm-advise tune, resuming $OUT/$TTUNE_DB when a carried copy sits in carry/; the best
#             samples per joule the hf stage measured in the same call is its --reference
#   cli       carm-advise analyze timed on CLI_MODELS (default vgg16 resnet50 mobilenetv2; whole process, cli/M.time);
#             the stage's first process runs under -X importtime (cli/importtime-cold.txt: the cold import profile
#             of the very run timed), vgg16 runs a second time with a warm page cache (cli/vgg16-warm.*); then
#             with CLI_VERIFY=1 `analyze vgg16 --verify` timed too
#   xla       benchmarks/xla_kernel_breakdown.py under ncu on XLA_CONFIGS (default "resnet50:mixed_bfloat16:256
#             mobilenetv2:mixed_bfloat16:256 vgg16:mixed_bfloat16:256 resnet50:float32:256"; jax), xla/*.json
set -u
export PYTHONUNBUFFERED=1 CARM_ADVISOR_NO_CLOCK_CONTROL=1 MPLBACKEND=Agg XLA_PYTHON_CLIENT_PREALLOCATE=false
export CARM_ADVISOR_CACHE=${CARM_ADVISOR_CACHE:-/tmp/carm_cache} KERAS_BACKEND=${KERAS_BACKEND:-torch}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
step() { echo "=== $(date -u +%H:%M:%S) $*"; }
# Every stage's timeout is capped by what is left of CALL_S (default 570 s, under the device's 600 s per
# call), so the packing at the end always runs and the results come back.
START_S=$(date +%s)
cap() { local left=$(( ${CALL_S:-570} - ($(date +%s) - START_S) )); [ "$left" -lt 1 ] && left=1; [ "$1" -lt "$left" ] && echo "$1" || echo "$left"; }
has() { case " ${STAGES:-kernels tune} " in *" $1 "*) return 0 ;; esac; return 1; }
if [ -d .whl ]; then
  # Byte-compiled at install, as a user's pip install is: with --no-compile the first CLI process of a
  # fresh machine compiles Keras itself and its timing pays for it.
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} || exit 1
fi
step nvidia-smi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv | tee "$OUT/nvidia-smi-before.csv"
SPACE="--compilers ${TUNE_COMPILERS:-eager,xla} --backends ${TUNE_BACKENDS:-torch,jax}"
if has kernels; then
  step build-kernels
  /usr/bin/time -f "build-kernels wall %e s" timeout $(cap 200) python3 -m carm_advisor.cli build-kernels 2>&1 | tail -n 8
  step "ceilings --quick (fresh process, kernels built)"
  /usr/bin/time -f "ceilings --quick wall %e s" timeout $(cap 120) python3 -m carm_advisor.cli ceilings --quick --json "$OUT/ceilings-quick.json" > "$OUT/ceilings-quick.txt" 2>&1
  tail -n 3 "$OUT/ceilings-quick.txt"
fi
if has kernels || has floor; then
  step launch-floor
  timeout $(cap 120) python3 benchmarks/launch_floor.py --out "$OUT" --budget-s 30 2>&1 | tail -n 5
fi
if has cli; then
  mkdir -p "$OUT/cli"
  # The stage's first Python process runs under -X importtime: a separate profiling process before it would
  # warm the page cache for the cold run being timed. Its stderr is the profile.
  PROFILE_NEXT=1
  cli_run() {  # NAME MODEL: one whole `analyze` process, timed, into cli/NAME.{txt,json,time}
    local xopt=() err="$OUT/cli/$1.txt"
    if [ "$PROFILE_NEXT" = 1 ]; then xopt=(-X importtime); err="$OUT/cli/importtime-cold.txt"; PROFILE_NEXT=0; fi
    step "cli analyze $2 ($1${xopt[*]:+, ${xopt[*]}})"
    /usr/bin/time -o "$OUT/cli/$1.time" -f "$1 CLI wall %e s" timeout $(cap 150) python3 ${xopt[@]+"${xopt[@]}"} \
        -m carm_advisor.cli analyze "$2" --batch-size 64 --precision mixed_bfloat16 --layout channels_first \
        --json "$OUT/cli/$1.json" > "$OUT/cli/$1.txt" 2> "$err"
    [ "$err" = "$OUT/cli/$1.txt" ] || grep -v '^import time:' "$err" >> "$OUT/cli/$1.txt"   # the CLI's own stderr
    tail -n 2 "$OUT/cli/$1.txt"; cat "$OUT/cli/$1.time"
  }
  for m in ${CLI_MODELS:-vgg16 resnet50 mobilenetv2}; do
    cli_run "$m" "$m"
    [ "$m" = vgg16 ] && cli_run vgg16-warm vgg16   # the same run again, its files now in the page cache
  done
  if [ -s "$OUT/cli/importtime-cold.txt" ]; then
    echo "cold import profile (cli/importtime-cold.txt), top level by cumulative us, then modules by self us:"
    grep -E '^import time: +[0-9]+ \| +[0-9]+ \| [^ ]' "$OUT/cli/importtime-cold.txt" | sort -t'|' -k2 -n | tail -n 5
    grep '^import time:' "$OUT/cli/importtime-cold.txt" | sort -t: -k2 -n | tail -n 12
  fi
  if [ -n "${CLI_VERIFY:-}" ]; then
    step "cli analyze vgg16 --verify"
    /usr/bin/time -f "vgg16 --verify CLI wall %e s" timeout $(cap ${CLI_VERIFY_TIMEOUT_S:-150}) python3 -m carm_advisor.cli analyze vgg16 \
        --batch-size 64 --precision mixed_bfloat16 --layout channels_first --verify --json "$OUT/cli/vgg16-verify.json" \
        > "$OUT/cli/vgg16-verify.txt" 2>&1
    tail -n 30 "$OUT/cli/vgg16-verify.txt"
  fi
fi
if has tune; then
  DB=${STUDY_DB:-vgg16-study.db}
  [ -f "carry/$DB" ] && { cp "carry/$DB" "$OUT/"; echo "resuming the carried study"; }
  step "vgg16 tuning study"
  timeout $(cap $(( ${TUNE_BUDGET_S:-400} + 90 ))) python3 benchmarks/vgg16_tuning.py --trials "${TUNE_TRIALS:-30}" $SPACE \
      --storage "$OUT/$DB" --budget-s "${TUNE_BUDGET_S:-400}" --out "$OUT" ${TUNE_ARGS:-} 2>&1 | tee "$OUT/tune.log" | tail -n 60
fi
if has grid; then
  [ -f carry/vgg16-grid.db ] && { cp carry/vgg16-grid.db* "$OUT/"; echo "resuming the carried grid"; }
  step "vgg16 grid"
  timeout $(cap $(( ${GRID_BUDGET_S:-300} + 90 ))) python3 benchmarks/vgg16_tuning.py --grid ${GRID_SPACE:-$SPACE} --storage "$OUT/vgg16-grid.db" \
      --budget-s "${GRID_BUDGET_S:-300}" --out "$OUT/grid" ${GRID_ARGS:-} 2>&1 | tee "$OUT/grid.log" | tail -n 40
fi
if has records; then
  step record-layers
  mkdir -p "$OUT/records"; [ -d carry/records ] && cp carry/records/*.json "$OUT/records/" 2>/dev/null
  timeout $(cap $(( ${RECORD_BUDGET_S:-200} + 60 ))) python3 benchmarks/record_layers.py ${RECORD_ARGS:---models vgg16,resnet50,mobilenetv2 \
      --precisions float32,mixed_bfloat16,mixed_float16 --batch-sizes 64,32,128 --backends torch,jax} \
      --budget-s "${RECORD_BUDGET_S:-200}" --out "$OUT/records" 2>&1 | grep -v '^I0000\|^W0000\|USDT' | tee "$OUT/record_layers.log" | tail -n 40
fi
if has sweep; then
  step power-sweep
  timeout $(cap $(( ${SWEEP_BUDGET_S:-120} + 60 ))) python3 benchmarks/power_sweep.py --budget-s "${SWEEP_BUDGET_S:-120}" --out "$OUT" 2>&1 | tail -n 10
fi
if has xla; then
  mkdir -p "$OUT/xla"
  for cfg in ${XLA_CONFIGS:-resnet50:mixed_bfloat16:256 mobilenetv2:mixed_bfloat16:256 vgg16:mixed_bfloat16:256 resnet50:float32:256}; do
    IFS=: read -r m p b <<< "$cfg"
    step "xla kernel breakdown $m $p b$b"
    KERAS_BACKEND=jax timeout $(cap 150) python3 benchmarks/xla_kernel_breakdown.py --model "$m" --precision "$p" \
        --batch-size "$b" --out "$OUT/xla/$m-jax-$p-b$b.json" 2>&1 | grep -v '^I0000\|^W0000\|^E0000' | tail -n 8
  done
fi
if has hf; then
  step "hugging face reference"
  timeout $(cap $(( ${HF_BUDGET_S:-90} + 60 ))) python3 benchmarks/hf_reference.py ${HF_ARGS:-} --budget-s "${HF_BUDGET_S:-90}" \
      --out "$OUT/hf" 2>&1 | grep -v '^I0000\|^W0000' | tee "$OUT/hf.log" | tail -n 20
fi
if has ttune; then
  DB=${TTUNE_DB:-transformer-study.db}
  [ -f "carry/$DB" ] && { cp "carry/$DB" "$OUT/"; echo "resuming the carried study"; }
  # The best samples per joule the hf stage measured in this call, as the study's --reference (none: no reference)
  REF=$(python3 benchmarks/hf_reference.py --reference-flag "$OUT/hf")
  step "tuning study of ${TTUNE_MODEL:-benchmarks.transformer_models:bert_base_s128} ${REF}"
  timeout $(cap $(( ${TTUNE_BUDGET_S:-300} + 60 ))) python3 -m carm_advisor.cli tune "${TTUNE_MODEL:-benchmarks.transformer_models:bert_base_s128}" \
      --objective samples_per_joule --trials "${TTUNE_TRIALS:-12}" --timeout "${TTUNE_BUDGET_S:-300}" --storage "$OUT/$DB" \
      --json "$OUT/transformer-tune.json" ${REF} ${TTUNE_ARGS:-} 2>&1 | grep -v '^I0000\|^W0000' | tee "$OUT/ttune.log" | tail -n 60
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$OUT/nvidia-smi-after.csv"
# Few files may be copied back from the GPU machine: pack the many small ones into one archive.
tar czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null
find "$OUT" -mindepth 1 -maxdepth 1 ! -name results.tgz ! -name '*.db' -exec rm -rf {} +
step done
