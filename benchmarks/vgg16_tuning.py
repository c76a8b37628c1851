"""The issue-8 study on the GPU: VGG16 inference tuned for GFLOP/s per W, every trial measured, with
its gain over the Keras defaults, the CARM pruning it did, and (from --grid runs) how many trials it
took to come within 2% of the exhaustive grid's best.

    KERAS_BACKEND=torch CARM_ADVISOR_NO_CLOCK_CONTROL=1 python3 benchmarks/vgg16_tuning.py --trials 30 \
        --backends torch,jax --storage $OUT/vgg16-study.db --budget-s 480 --out $OUT
    # the same command again resumes the study (carry the .db); --grid measures the whole space instead:
    ... --grid --storage $OUT/vgg16-grid.db --budget-s 480 --out $OUT
    # and a study run names the grid files to compare with: --grid-storage A.db --grid-storage B.db

Several GPUs: `--gpus 0,1,2,3` runs the study with one worker process per GPU;
`--gpus 0,1,2,3 --compare-1-vs-n` runs the same study (same space, trials and seed, fresh storages
<storage>-1gpu.db and <storage>-<N>gpu.db) on the first GPU alone, then on all N, and writes
<out>/<gpu>x<N>-vgg16-tuning-<date>.json with both wall times, the speedup against the target (N-GPU
wall time <= 1.2 / N of the single GPU's) and the best configuration each found:

    KERAS_BACKEND=torch CARM_ADVISOR_NO_CLOCK_CONTROL=1 python3 benchmarks/vgg16_tuning.py --trials 32 \
        --backends torch,jax --compilers eager,xla --gpus 0,1,2,3 --compare-1-vs-n --storage $OUT/s.db --out $OUT

Writes <out>/<gpu>-vgg16-tuning-<date>.json (or -grid-) with {"device", "baseline", "best",
"gain_gflops_per_watt", "gain_samples_per_joule", "trials", "grid_best",
"trials_to_within_2pct_of_grid_best", "pruned_by_carm", "wall_s", "command"} and more. Both the study
and the grid stop cleanly before --budget-s and resume from their storage. --fake runs on the CPU with
made-up figures (FakeRunner) for tests.

Offline (no GPU, nothing measured): `--summarize` rebuilds that JSON from an existing --storage study
and the grids it is compared with (--grid-storage SQLite files, --grid-json for a grid that survives
only as an earlier JSON of this script); every run of a configuration is kept with its spread, the
one with the lowest spread stands for it, and the JSON says whether the 2% judgement is inside the
measurement noise (the spreads of the grid best and the study best):

    python benchmarks/vgg16_tuning.py --summarize \
        --storage benchmarks/results/nvidia-h200-vgg16-tuning-all-compilers-2026-12-03.db \
        --grid-storage benchmarks/results/nvidia-h200-vgg16-grid-half-precision-2026-12-04.db \
        --grid-json benchmarks/results/nvidia-h200-vgg16-grid-2026-12-03.json \
        --out-json benchmarks/results/nvidia-h200-vgg16-tuning-all-compilers-summary-2026-12-04.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import result_path, write  # noqa: E402

STUDY = "vgg16-tuning"
GRID_STUDY = "vgg16-grid"
OBJECTIVE = "gflops_per_watt"


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(t) for t in text.split(",") if t.strip())


def _names(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


def _gpus(text: str) -> tuple[int, ...]:
    from carm_advisor.tune.parallel import parse_gpus

    try:
        return parse_gpus(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="vgg16", help="application name or module:function (tests use a tiny one)")
    p.add_argument("--trials", type=int, default=30)
    p.add_argument("--backends", type=_names, default=None, help="default: those installed")
    p.add_argument("--batch-sizes", type=_ints, default=(32, 64, 128, 256))
    p.add_argument("--precisions", type=_names, default=None, help="default: all five")
    p.add_argument("--compilers", type=_names, default=None,
                   help="keep only these compilers, e.g. eager,xla (torch.compile of VGG16 costs ~1 min a trial)")
    p.add_argument("--storage", required=True, help="SQLite file of this run's study (or grid); reused to resume")
    p.add_argument("--grid", action="store_true", help="measure every configuration of the space (clocks aside)")
    p.add_argument("--grid-storage", action="append", default=[], help="grid files to compare with (repeatable)")
    p.add_argument("--budget-s", type=float, default=None, help="stop cleanly before this wall time")
    p.add_argument("--window-s", type=float, default=2.0, help="NVML energy window per repeat (>= 2 s)")
    p.add_argument("--min-windows", type=int, default=None, help="energy windows per trial at least (worker default)")
    p.add_argument("--max-windows", type=int, default=None, help="energy windows per trial at most, added while "
                                                                 "the spread is over --spread-target")
    p.add_argument("--spread-target", type=float, default=None, help="relative spread of energy per call to reach")
    p.add_argument("--idle-gap-s", type=float, default=None, help="idle seconds between configurations")
    p.add_argument("--summarize", action="store_true", help="run nothing: rebuild the result JSON from --storage "
                                                            "and the grid files")
    p.add_argument("--grid-json", action="append", default=[],
                   help="with --summarize: a grid known only from an earlier JSON of this script (repeatable)")
    p.add_argument("--out-json", default=None, help="with --summarize: the JSON to write (default in --out)")
    p.add_argument("--trial-timeout-s", type=float, default=300.0,
                   help="a trial (torch.compile of VGG16 included) running longer fails and its worker restarts")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    p.add_argument("--fake", action="store_true", help="CPU: made-up figures (FakeRunner), for tests")
    p.add_argument("--fake-delay-s", type=float, default=0.0, help="--fake: seconds each trial takes")
    p.add_argument("--gpus", type=_gpus, default=None, help="NVML indices to tune on at once, e.g. 0,1,2,3")
    p.add_argument("--compare-1-vs-n", action="store_true",
                   help="with --gpus: the same study on the first GPU alone, then on all of them")
    p.add_argument("--runner-factory", default=None, help=argparse.SUPPRESS)   # tests: workers without Keras
    return p.parse_args(argv)


def main(argv=None) -> int:
    start_s = time.perf_counter()
    args = parse(argv)
    if args.summarize:
        return summarize(args, start_s)
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import optuna

    from carm_advisor.models.builder import model_spec
    from carm_advisor.trials.predicted import ConfigPredictor
    from carm_advisor.trials.runner import FakeRunner
    from carm_advisor.trials.space import SearchSpace
    from carm_advisor.tune.objectives import get_objective
    from carm_advisor.tune.options import TuneOptions
    from carm_advisor.tune.storage import open_storage
    from carm_advisor.tune.study import tune

    space = SearchSpace.default(args.backends, args.batch_sizes)
    compilers = space.compilers
    if args.compilers:
        compilers = {b: tuple(c for c in cs if c in args.compilers) for b, cs in space.compilers.items()}
        compilers = {b: cs for b, cs in compilers.items() if cs}
        if any(b not in compilers for b in space.backends):
            raise SystemExit(f"--compilers {','.join(args.compilers)} leaves a backend without a compiler")
    if args.precisions or args.compilers:
        space = SearchSpace(space.backends, args.precisions or space.precisions, space.batch_sizes, space.layouts,
                            compilers)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    spec = model_spec(args.model)
    predictor = ConfigPredictor(spec)
    runner = FakeRunner(predictor, delay_s=args.fake_delay_s) if args.fake and not args.runner_factory else None
    objective = get_objective(OBJECTIVE)
    budget_s = None if args.budget_s is None else max(1.0, args.budget_s - (time.perf_counter() - start_s))
    settings = worker_settings(args)
    common = TuneOptions(objective=OBJECTIVE, storage=args.storage, space=space, runner=runner, predictor=predictor,
                         worker_settings=settings, budget_s=budget_s, progress=sys.stderr.isatty(),
                         trial_timeout_s=args.trial_timeout_s, log_dir=args.out,
                         log=lambda line: print(line, file=sys.stderr, flush=True), runner_factory=args.runner_factory)
    if args.compare_1_vs_n:
        if args.grid or not args.gpus or len(args.gpus) < 2:
            raise SystemExit("--compare-1-vs-n needs --gpus with two or more GPUs (and no --grid)")
        return compare_1_vs_n(spec, args, common, objective, start_s)
    if args.gpus:
        common = common.replace(gpus=args.gpus)
    if args.grid:
        grid = space.grid()
        study = optuna.create_study(storage=open_storage(args.storage, spec.name), study_name=GRID_STUDY,
                                    direction=objective.direction, load_if_exists=True)
        have = {t.user_attrs.get("config_key") for t in study.get_trials(deepcopy=False)
                if t.state.is_finished() and "error" in t.user_attrs or t.state in
                (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.WAITING)}
        for cfg in grid:
            if cfg.key not in have:
                study.enqueue_trial(cfg.params(), user_attrs={"role": "grid"})
        result = tune(spec.spec if spec.kind != "callable" else spec.fn,
                      common.replace(study_name=GRID_STUDY, n_trials=len(grid), carm_pruning=False, carm_order=False))
    else:
        result = tune(spec.spec if spec.kind != "callable" else spec.fn,
                      common.replace(study_name=STUDY, n_trials=args.trials))
    grid_rows = merged_grid([args.storage] if args.grid else args.grid_storage + [], spec.name, objective)
    doc = summary(result, objective, grid_rows, args)
    doc["wall_s"] = time.perf_counter() - start_s
    device = (result.device or {}).get("name") or ("fake GPU" if args.fake else "cpu")
    path = write(result_path(args.out, device, "vgg16-grid" if args.grid else "vgg16-tuning"), doc)
    print(f"wrote {path}  ({doc['wall_s']:.0f} s, {len(result.trials)} trials, "
          f"best {doc['best'] and doc['best']['key']}, gain {doc['gain_gflops_per_watt']})")
    return 0


def compare_1_vs_n(spec, args, common, objective, start_s: float) -> int:
    """The same study on one GPU, then on N; both wall times and both best configurations."""
    from carm_advisor.tune.study import tune

    model = spec.spec if spec.kind != "callable" else spec.fn
    runs = {}
    stem = Path(args.storage)
    for gpus in (args.gpus[:1], args.gpus):
        storage = str(stem.with_name(f"{stem.stem}-{len(gpus)}gpu{stem.suffix or '.db'}"))
        options = common.replace(storage=storage, gpus=gpus if len(gpus) > 1 else None,
                                 study_name=f"{STUDY}-{len(gpus)}gpu", n_trials=args.trials)
        saved = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
        if len(gpus) == 1:   # the single-GPU run's workers are pinned like each worker of the N-GPU run
            os.environ.update(CUDA_VISIBLE_DEVICES=str(gpus[0]), CUDA_DEVICE_ORDER="PCI_BUS_ID")
        try:
            result = tune(model, options)
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        runs[len(gpus)] = summary(result, objective, {}, args)
    one, many = runs[1], runs[len(args.gpus)]
    n = len(args.gpus)
    best1, bestn = one["best"] or {}, many["best"] or {}
    spread = best1.get("energy_spread") or best1.get("time_spread") or 0.0
    same = best1.get("key") == bestn.get("key") or (
        best1.get("gflops_per_watt") and bestn.get("gflops_per_watt")
        and abs(bestn["gflops_per_watt"] / best1["gflops_per_watt"] - 1) <= spread)
    doc = {"gpus": list(args.gpus), "n_gpus": n, "trials": args.trials, "source": one["source"],
           "wall_s_1gpu": one["study_wall_s"], f"wall_s_{n}gpu": many["study_wall_s"],
           "speedup": one["study_wall_s"] / many["study_wall_s"] if many["study_wall_s"] else None,
           "target_wall_s": 1.2 * one["study_wall_s"] / n,
           "meets_target": many["study_wall_s"] <= 1.2 * one["study_wall_s"] / n,
           "best_1gpu": best1, f"best_{n}gpu": bestn, "same_best_within_spread": bool(same),
           "runs": {"1gpu": one, f"{n}gpu": many}, "wall_s": time.perf_counter() - start_s}
    device = (one["device"] or {}).get("name") or ("fake GPU" if args.fake else "cpu")
    path = write(result_path(args.out, f"{device}x{n}", "vgg16-tuning"), doc)
    print(f"wrote {path}  (1 GPU {doc['wall_s_1gpu']:.1f} s, {n} GPUs {doc[f'wall_s_{n}gpu']:.1f} s, "
          f"speedup {doc['speedup']:.2f}, best {best1.get('key')} / {bestn.get('key')})")
    return 0


def worker_settings(args):
    """The measurement policy of the workers: the flags given, the worker's defaults for the rest."""
    from carm_advisor.trials.runner import WorkerSettings

    chosen = {k: getattr(args, k) for k in ("min_windows", "max_windows", "spread_target", "idle_gap_s")
              if getattr(args, k, None) is not None}
    settings = WorkerSettings(window_s=args.window_s, **chosen)
    if settings.min_windows < 1 or settings.max_windows < settings.min_windows:
        raise SystemExit(f"--min-windows {settings.min_windows} / --max-windows {settings.max_windows}: "
                         "expected 1 <= min <= max")
    if not settings.spread_target > 0 or settings.idle_gap_s < 0:
        raise SystemExit("--spread-target must be > 0 and --idle-gap-s >= 0")
    return settings


def _spread_of(m: dict):
    return m.get("energy_spread") if m.get("energy_spread") is not None else m.get("time_spread")


def merged_grid(files: list[str], model_name: str, objective, json_files: list[str] = ()) -> dict[str, dict]:
    """Every configuration measured by the grid studies in `files` (SQLite) and `json_files` (earlier
    JSONs of this script, whose "grid" lists each configuration's run): the run with the lowest spread
    stands for it, every run is kept under "runs" (file, trial, value, spread)."""
    import json

    import optuna

    from carm_advisor.tune.storage import open_storage

    runs: dict[str, list[dict]] = {}
    for f in files:
        try:
            study = optuna.load_study(study_name=GRID_STUDY, storage=open_storage(f, model_name))
        except KeyError:
            continue
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            m = t.user_attrs.get("measurement")
            if not m or "repeat_of" in t.user_attrs:
                continue
            runs.setdefault(t.user_attrs["config_key"], []).append(
                {"key": t.user_attrs["config_key"], "value": t.values[0], "spread": _spread_of(m), "run": str(f),
                 "trial": t.number, "output_error": m.get("output_error")})
    for f in json_files:
        doc = json.loads(Path(f).read_text())
        for r in doc.get("grid") or []:
            runs.setdefault(r["key"], []).append({**r, "run": f"{r.get('run')} (as recorded in {f})"})
    rows: dict[str, dict] = {}
    for key, rs in runs.items():
        pick = min(rs, key=lambda r: (r["spread"] is None, r["spread"] or 0.0))
        rows[key] = {**pick, "runs": rs}
    return rows


def unmeasured_bounds(space, grid_rows: dict[str, dict], predictor, objective, grid_best: dict | None,
                      margin: float = 0.10) -> dict:
    """The CARM bound of every configuration of the space the grids did not measure: where even the best
    bound, with the tuner's pruning margin for the power model (tune.objective.PRUNE_MARGIN), is beaten by the
    measured grid best, the grid is exhaustive for the question 'which wins'."""
    rows = []
    for cfg in space.grid():
        if cfg.key in grid_rows:
            continue
        rows.append({"key": cfg.key, "bound": objective.value(predictor.predict(cfg))})
    rows.sort(key=lambda r: -r["bound"] if objective.direction == "maximize" else r["bound"])
    top = rows[0] if rows else None
    optimistic = None if top is None else (top["bound"] * (1 + margin) if objective.direction == "maximize"
                                           else top["bound"] / (1 + margin))
    return {
        "n": len(rows), "best_bound": top, "margin": margin, "best_bound_with_margin": optimistic,
        "cannot_beat_grid_best": None if top is None or grid_best is None
        else not objective.better(optimistic, grid_best["value"]),
        "note": "CARM bound: time from the roofs (no run is faster), energy from the profile's fitted power model "
                "(not a guaranteed bound), so the bound gets the tuner's pruning margin; a configuration left "
                "unmeasured whose bound, with the margin, is below the measured grid best cannot be the best of the space",
        "configs": rows,
    }


def summary(result, objective, grid_rows: dict[str, dict], args, predictor=None) -> dict:
    from carm_advisor.tune.records import TOP1_CAVEAT

    def brief(t):
        if t is None:
            return None
        m = t.measurement or {}
        return {"key": t.config.key if t.config else None, "config": t.config.to_dict() if t.config else None,
                "gflops_per_watt": t.values[0] if t.values else None,
                "samples_per_joule": (m["batch_size"] / m["energy_j"]) if m.get("energy_j") else None,
                "samples_per_s": (m["batch_size"] / m["time_s"]) if m.get("time_s") else None,
                "energy_spread": m.get("energy_spread"), "time_spread": m.get("time_spread"),
                "power_w": m.get("power_w"), "sm_clock_mhz": m.get("sm_clock_mhz"), "compile_s": m.get("compile_s"),
                "output_error": m.get("output_error"), "top1_agreement": m.get("top1_agreement"),
                "source": m.get("source")}

    trials = [{"number": t.number, "state": t.state, "key": t.config.key if t.config else None,
               "value": t.values[0] if t.values else None, "repeat_of": t.repeat_of,
               "pruned_reason": t.pruned_reason, "error": t.error,
               "spread": (t.measurement or {}).get("energy_spread")} for t in result.trials]
    grid_best = None
    if grid_rows:
        values = [r["value"] for r in grid_rows.values()]
        grid_best = list(grid_rows.values())[objective.select(values)]
    within = None
    if grid_best is not None:
        best_so_far = None
        for i, t in enumerate(sorted(result.trials, key=lambda r: r.number), start=1):
            if t.state == "COMPLETE" and t.feasible and t.values:
                v = t.values[0]
                best_so_far = v if best_so_far is None or objective.better(v, best_so_far) else best_so_far
            if best_so_far is not None and best_so_far >= 0.98 * grid_best["value"]:
                within = i
                break
    noise = None
    if grid_best is not None and result.best is not None and result.best.values:
        m = result.best.measurement or {}
        study_spread = _spread_of(m)
        spreads = [x for x in (grid_best.get("spread"), study_spread) if x is not None]
        ratio = result.best.values[0] / grid_best["value"]
        noise = {
            "grid_best_spread": grid_best.get("spread"), "study_best_spread": study_spread,
            "study_best_over_grid_best": ratio,
            "judgement_inside_noise": bool(spreads) and max(spreads) > 0.02,
            "difference_inside_noise": bool(spreads) and abs(ratio - 1) <= max(spreads),
            "note": ("spread = (max - min) / median of energy per call over one trial's windows; where the larger "
                     "of the two bests' spreads exceeds 2%, 'within 2% of the grid best' cannot be told apart from "
                     "noise, and a study best within max(spread) of the grid best is as good as it"),
        }
    return {
        "device": result.device, "source": result.source, "study": result.study_name, "storage": result.storage_url,
        "space": result.space.to_dict(), "baseline": brief(result.baseline), "best": brief(result.best),
        "gain_gflops_per_watt": result.gain("gflops_per_watt"), "gain_samples_per_joule": result.gain("samples_per_joule"),
        "slowdown": result.slowdown, "next_best": [brief(t) for t in result.next_best], "trials": trials,
        "grid_best": grid_best, "grid_measured": len(grid_rows), "grid_size": len(result.space.grid()),
        "grid": sorted(grid_rows.values(), key=lambda r: r["key"]),
        "trials_to_within_2pct_of_grid_best": within, "within_2pct_noise": noise,
        "caveats": {"top1_agreement": TOP1_CAVEAT},
        "pruned_by_carm": result.counts["pruned_by_carm"],
        "counts": result.counts, "blind_search": result.blind_search, "layer_changes": result.layer_changes,
        "clock_recommendation": result.clock_recommendation, "budget_stopped": result.budget_stopped,
        "study_wall_s": result.wall_s,
        "grid_unmeasured": None if predictor is None or not grid_rows
        else unmeasured_bounds(result.space, grid_rows, predictor, objective, grid_best,
                               margin=result.limits["prune_margin"]),
    }


def summarize(args, start_s: float) -> int:
    """--summarize: the result JSON from an existing study and grid files; nothing runs, no GPU needed."""
    import json

    import optuna

    from carm_advisor.models.builder import model_spec
    from carm_advisor.trials.predicted import ConfigPredictor
    from carm_advisor.trials.space import SearchSpace, TrialConfig
    from carm_advisor.tune.objectives import get_objective
    from carm_advisor.tune.options import TuneOptions
    from carm_advisor.tune.result import build_result
    from carm_advisor.tune.storage import open_storage, storage_url

    for f in [args.storage, *args.grid_storage, *args.grid_json]:
        if not Path(f).is_file():
            raise SystemExit(f"--summarize: no such file {f}")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    spec = model_spec(args.model)
    store = open_storage(args.storage, spec.name)
    names = [s.study_name for s in optuna.get_all_study_summaries(store)]
    name = STUDY if STUDY in names else GRID_STUDY if GRID_STUDY in names else None
    if name is None:
        raise SystemExit(f"--summarize: no study {STUDY!r} or {GRID_STUDY!r} in {args.storage} (found {names})")
    study = optuna.load_study(study_name=name, storage=store)
    a = study.user_attrs
    sp = a["space"]
    space = SearchSpace(tuple(sp["backends"]), tuple(sp["precisions"]), tuple(sp["batch_sizes"]), tuple(sp["layouts"]),
                        {b: tuple(c) for b, c in sp["compilers"].items()}, tuple(sp.get("sm_clocks_mhz") or ()))
    objectives = [get_objective(n) for n in a.get("objectives", [OBJECTIVE])]
    run = TuneOptions.from_run(a.get("run") or {})
    trials = study.get_trials(deepcopy=False)
    starts = [t.datetime_start for t in trials if t.datetime_start]
    ends = [t.datetime_complete for t in trials if t.datetime_complete]
    elapsed_s = (max(ends) - min(starts)).total_seconds() if starts and ends else None
    gpus = sorted({(t.user_attrs.get("gpu") or {}).get("name") for t in trials} - {None})
    predictor = ConfigPredictor(spec, calibration=False)
    result = build_result(study, objectives, space, predictor,
                          TrialConfig.from_dict(a["baseline"]), source=a.get("source", "measured"),
                          storage_url=storage_url(args.storage, spec.name), wall_s=elapsed_s or 0.0,
                          device={"name": ", ".join(gpus) or None}, command="",
                          prune_margin=run.prune_margin, max_slowdown=run.max_slowdown,
                          max_output_error=run.max_output_error)
    grid_rows = merged_grid(args.grid_storage, spec.name, objectives[0], args.grid_json)
    doc = summary(result, objectives[0], grid_rows, args, predictor=predictor)
    doc.update({"summarized_from": {"study": args.storage, "grid_storage": args.grid_storage,
                                    "grid_json": args.grid_json},
                "study_wall_s": elapsed_s,
                "study_wall_s_note": "first trial start to last trial end, from the study's own timestamps",
                "wall_s": time.perf_counter() - start_s,
                "wall_s_note": "this summary's time (nothing was measured)"})
    path = Path(args.out_json) if args.out_json else result_path(args.out, gpus[0] if gpus else "cpu",
                                                                   "vgg16-tuning-summary")
    write(path, doc)
    best, gb = doc["best"] or {}, doc["grid_best"] or {}
    print(f"wrote {path}: best {best.get('key')} {best.get('gflops_per_watt')}, grid best {gb.get('key')} "
          f"{gb.get('value')} ({doc['grid_measured']} of {doc['grid_size']} measured), trials to within 2% "
          f"{doc['trials_to_within_2pct_of_grid_best']}, unmeasured {(doc['grid_unmeasured'] or {}).get('n')} with best "
          f"CARM bound {((doc['grid_unmeasured'] or {}).get('best_bound') or {}).get('bound')}, noise {json.dumps(doc['within_2pct_noise'] and {k: v for k, v in doc['within_2pct_noise'].items() if k != 'note'})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
