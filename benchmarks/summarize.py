"""Markdown tables of recorded GPU measurements, read from benchmarks/results (for README.md and docs/).

    python benchmarks/summarize.py                     # the README's tables: the H200 ceilings and VGG16 layer runs
    python benchmarks/summarize.py --date 2026-12-04   # every table of the result files of that date
    python benchmarks/summarize.py --cli 'DIR/cli'     # `carm-advise analyze` timed by gpu_call.sh's cli stage
    python benchmarks/summarize.py --compare 'nvidia-h100-80gb-hbm3-power-model-*-2026-12-06*'  # validations side by side

--date DATE (default 2026-12-02) prints, for each kind of result file of that date found: the ceilings run beside
its library references, the VGG16 layer runs, the VGG16 tuning studies, the tuning grid summary, the held-out
prediction accuracy and the power-model validation (its figures against the targets, its test record sets scored
alone and the form choices it holds). --cli GLOB: folders (relative to benchmarks/results, or absolute) of the
analyze results gpu_call.sh's cli stage writes (NAME.json, NAME.txt, NAME.time). --compare GLOB: the headline
figures of the power-model validations matching GLOB, one row each. A selection that matches no file is a one-line
error (exit 2).
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import statistics
import sys
from pathlib import Path

from carm_advisor.files import COMPRESSED_SUFFIXES, read_json

RESULTS = Path(__file__).resolve().parent / "results"
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
# How a record folder's name after its date tells which set of records it belongs to, as the validation files name
# those sets in their test keys and choice texts (benchmarks/results/INDEX.md, Former names).
RECORD_SET = re.compile(r"(\d{4}-\d{2}-\d{2})(-s\d+h?)(?=c\d|-|$)")
RECORD_SET_KEY = re.compile(r"-s\d+h?\b")
TEST_SETS = "session_tests"   # a validation file's key of its test record sets, each scored alone


class NoMatch(Exception):
    """No result file matches the selection."""


def matches(pattern: str) -> list[Path]:
    """The result files matching `pattern` (*.json), else their compressed copies (*.json.xz, or *.json.gz for older
    ones: validation results are kept compressed)."""
    # relative to benchmarks/results; an absolute pattern (a result written elsewhere) as it is
    base = "" if Path(pattern).is_absolute() else str(RESULTS) + "/"
    found = sorted(Path(p) for p in glob.glob(base + pattern))
    for suffix in COMPRESSED_SUFFIXES:
        found = found or sorted(Path(p) for p in glob.glob(base + pattern + suffix))
    return found


def dated(what: str, date: str) -> list[Path]:
    """The result files of kind `what` of `date`, `<gpu>-<what>[-<variant>]-<date>.json` compressed or not, at the top
    of benchmarks/results and one folder down (a characterisation folder)."""
    found = {p for where in ("*", "*/*") for suffix in ("", *COMPRESSED_SUFFIXES)
             for p in glob.glob(f"{RESULTS}/{where}-{what}-*{date}.json{suffix}")}
    return sorted(map(Path, found))


def ceilings_table(d: dict) -> str:
    c, r = d["ceilings"], d["references"]
    by_name = {b["name"]: b for b in d["benchmarks"]}

    def tf(x):
        return f"{x / 1e12:.0f}"

    rows = ["| roof | ours | beside it, same run |", "| --- | --- | --- |"]
    rand, zero = by_name.get("tc_bf16_wgmma_rand"), by_name.get("tc_bf16_wgmma_zero")
    if rand and zero:
        rows.append(f"| BF16 Tensor Core (wgmma, zero / random data) | {tf(zero['rate'])} / {tf(rand['rate'])} TFLOP/s "
                    f"({zero['power_w']:.0f} / {rand['power_w']:.0f} W) | cuBLAS 8192^3: {tf(r['cublas_bf16']['value'])} "
                    f"TFLOP/s ({r['cublas_bf16']['power_w']:.0f} W) |")
    rows.append(f"| FP16 / TF32 / FP8 e4m3 Tensor Core | {tf(c['tc_fp16']['value'])} / {tf(c['tc_tf32']['value'])} / "
                f"{tf(c['tc_fp8_e4m3']['value'])} TFLOP/s | cuBLAS {tf(r['cublas_fp16']['value'])} / "
                f"{tf(r['cublas_tf32']['value'])}, `_scaled_mm` {tf(r['scaled_mm_fp8_e4m3']['value'])} |")
    q = d["ratios"]
    rows.append(f"| FP32 FMA | {c['fp32']['value'] / 1e12:.1f} TFLOP/s ({q['fp32_vs_per_clock_max']:.2f} of the per-clock "
                f"maximum at {c['fp32']['sm_clock_mhz']:.0f} MHz) | cuBLAS FP32 {r['cublas_fp32']['value'] / 1e12:.1f} |")
    rows.append(f"| shared memory | {c['shared']['value'] / 1e12:.1f} TB/s ({q['shared_vs_per_clock_max']:.2f} of the "
                f"per-clock maximum) | |")
    how = {k: c[k].get("provenance", {}).get("method", "") for k in ("l2", "hbm")}
    ldg = [by_name[n]["rate"] / 1e12 for n in ("l2_read_full_u8", "hbm_read") if n in by_name]
    rows.append(f"| L2 / HBM read | {c['l2']['value'] / 1e12:.2f} / {c['hbm']['value'] / 1e12:.2f} TB/s"
                + (" (TMA bulk copies" + (f"; `ld.global`: {ldg[0]:.2f} / {ldg[1]:.2f}" if len(ldg) == 2 else "") + ")"
                   if "bulk" in how["l2"] + how["hbm"] else "")
                + f" | torch `copy_` 4 GiB: {r['torch_copy_4gib']['value'] / 1e12:.2f} TB/s |")
    checks = (d.get("counter_check") or {}).get("rows") or []
    worst = [x for x in checks if not x["ok"]]
    rows.append("")
    quick = d.get("ceilings_quick_wall_s")   # None where the run skipped --quick
    rows.append(f"All ceilings with power: {d['ceilings_wall_s']:.0f} s"
                + (f", `--quick` {quick:.0f} s" if quick is not None else "") + ". "
                f"CARM fitness of the mixed sweep: {q['sweep_fitness']:.2f}{_sweep_detail(d.get('sweep') or {})}. "
                f"Nsight Compute counter check: "
                f"{len(checks) - len(worst)} of {len(checks)} benchmarks within 5% of their declared FLOPs and bytes"
                + _counter_detail(worst) + ".")
    return "\n".join(rows)


def _counter_detail(worst: list) -> str:
    from carm_advisor.carm.fitting import undercounted

    def ratios(x):
        return [v for v in (x.get("flops_ratio"), x.get("bytes_ratio")) if v is not None]

    left_out = undercounted(worst)   # the rows the profile leaves out of roofs and sweep
    under = [x["name"] for x in worst if x["name"] in left_out]
    over = [x for x in worst if x["name"] not in under and ratios(x)]
    unread = [x["name"] for x in worst if not ratios(x)]
    parts = []
    if over:
        lo, hi = min(max(ratios(x)) for x in over), max(max(ratios(x)) for x in over)
        parts.append(f"{len(over)} see {lo:.2f}-{hi:.2f}x the declared work at their level, more never less "
                     f"(instruction fetches from L2 at high C, TMA traffic): {', '.join(x['name'] for x in over)}")
    if under:
        parts.append(f"{len(under)} see less than declared and are left out of roofs and sweep: {', '.join(under)}")
    if unread:
        parts.append(f"{len(unread)} not profiled: {', '.join(unread)}")
    return " (" + "; ".join(parts) + ")" if parts else ""


def _sweep_detail(sweep: dict) -> str:
    n, missed = sweep.get("sweep_points"), sweep.get("missed")
    if not n or missed is None:
        return ""
    ratios = {p["name"]: p["ratio"] for p in sweep.get("points", [])}
    off = ", ".join(f"{m} {ratios[m]:.2f}" for m in missed)
    return f" ({n - len(missed)} of {n} points within 10% of min(roofs)" + (f"; off: {off}" if off else "") + ")"


def vgg_table(paths: list[Path]) -> str:
    """The VGG16 layer runs (benchmarks/vgg16_layers.py): whole model eager and graph-replayed, the layers' sum, the
    counters' FLOPs against the analytic count; a configuration measured again is labelled a repeat."""
    rows = [("| backend, layout | precision | model (eager) | model (CUDA graph) | sum of layers | ratio | "
            "counter / analytic FLOPs |"), "| --- | --- | --- | --- | --- | --- | --- |"]
    for path in paths:
        d = read_json(path)
        g = d.get("model_graph_time_s")
        ratio = d.get("sum_layers_vs_model_graph") or d["sum_layers_vs_model"]
        cf = d.get("counters_flops_vs_analytic")
        repeat = " (repeat)" if "-repeat-" in path.name else ""
        rows.append(f"| {d['backend']} {d['layout']}{repeat} | {d['precision']} | "
                    f"{d['model_time_s'] * 1e3:.2f} ms | {'-' if g is None else f'{g * 1e3:.2f} ms'} | "
                    f"{d['sum_layer_time_s'] * 1e3:.2f} ms | {ratio:.3f} | {'-' if cf is None else f'{cf:.3f}'} |")
    return "\n".join(rows)


def _cfg(t: dict | None) -> str:
    if not t:
        return "-"
    c = t["config"]
    return f"{c['backend']} {c['compiler']}, {c['precision']}, batch {c['batch_size']}, {c['layout']}"


def tuning_table(paths: list[Path]) -> str:
    """Measured VGG16 tuning studies (not the grids, not the summaries): baseline, best, gain, time."""
    rows = ["| study (file) | baseline, GFLOP/s per W | best, GFLOP/s per W | gain | trials | study wall |",
            "| --- | --- | --- | --- | --- | --- |"]
    for path in paths:
        d = read_json(path)
        b, t = d["baseline"], d["best"]
        rows.append(f"| {path.stem} | {_cfg(b)}: {b['gflops_per_watt']:.1f} | {_cfg(t)}: {t['gflops_per_watt']:.1f} | "
                    f"{d['gain_gflops_per_watt']:.2f}x | {len(d['trials'])} | {d['study_wall_s']:.0f} s |")
    return "\n".join(rows)


def grid_summary(d: dict) -> str:
    """A study against its grids (vgg16_tuning.py --summarize): grid coverage, grid best, trials to within 2%, noise."""
    g, n, u = d["grid_best"], d["within_2pct_noise"] or {}, d.get("grid_unmeasured") or {}
    top = u.get("best_bound") or {}
    unmeasured = (f"the {u['n']} unmeasured have CARM bounds of at most {top['bound']:.1f} "
                  f"({u['best_bound_with_margin']:.1f} with the {u['margin']:.0%} power-model margin: cannot win "
                  f"{u['cannot_beat_grid_best']})" if top else "none left unmeasured")
    return (f"grid {d['grid_measured']} of {d['grid_size']} configurations measured, best {g['key']} "
            f"{g['value']:.1f} GFLOP/s per W (spread {g['spread']:.1%}); {unmeasured}; the study came within 2% of the grid best at trial "
            f"{d['trials_to_within_2pct_of_grid_best']} (study best / grid best {n.get('study_best_over_grid_best', 0):.3f}, "
            f"study best spread {n.get('study_best_spread', 0):.1%}: inside the noise {n.get('judgement_inside_noise')})")


def cli_table(folders: list[Path]) -> str:
    """`carm-advise analyze` timed on the GPU (gpu_call.sh's cli stage: NAME.json, NAME.txt, NAME.time in each
    folder): the CLI's own phase timings, the whole process, and the layers' sum against the CUDA-graph time."""
    rows = [("| folder / model | keras import | model build | analysis | since start-up | whole process | "
            "sum of layers / CUDA graph |"), "| --- | --- | --- | --- | --- | --- | --- |"]
    for path in (p for folder in folders for p in sorted(folder.glob("*.json"))):
        if "timings_s" not in (d := json.loads(path.read_text())):
            continue   # call.json, or a result of another command
        t = d.get("timings_s") or {}
        txt = path.with_suffix(".txt").read_text() if path.with_suffix(".txt").exists() else ""
        found = re.search(r"([0-9.]+) s since\s+start-up", txt)
        timed = path.with_suffix(".time")   # /usr/bin/time's whole-process wall
        wall = re.search(r"wall ([0-9.]+) s", timed.read_text()) if timed.exists() else None
        graph = (d["measurement"].get("inference_graph") or {}).get("time_s")
        ratio = d["totals"]["sum_layer_time_s"] / graph if graph else None
        rows.append(f"| {path.parent.name} {path.stem} | {t.get('keras_import', 0):.1f} s | {t.get('model_build', 0):.1f} s | "
                    f"{t.get('analysis', 0):.1f} s | {found.group(1) + ' s' if found else '-'} | "
                    f"{wall.group(1) + ' s' if wall else '-'} | {'-' if ratio is None else f'{ratio:.3f}'} |")
    return "\n".join(rows)


def accuracy_table(d: dict) -> str:
    """Calibrated prediction on held-out models (benchmarks/prediction_accuracy.py --train-models)."""
    batches = ", ".join(str(b) for b in sorted({e["batch_size"] for e in d.get("details") or []}))
    rows = [f"Held out: {', '.join(d['models'])}; trained on {', '.join(d.get('train_models') or [])}"
            + (f" (batch {batches})." if batches else "."), "",
            "| backend | per-layer median abs. error | whole model: median abs. error (max) | n (layers, whole-model runs) |",
            "| --- | --- | --- | --- |"]
    for backend, b in sorted(d["by_backend"].items()):
        whole = ", ".join(f"{k.split('/')[-1]} {v:.1%} ({b['whole_model_max_abs_err'][k]:.0%})"
                          for k, v in sorted(b["whole_model_abs_err"].items()))
        n = b["n"]
        layer = b["per_layer_median_abs_err"]
        rows.append(f"| {backend} | {'- (whole-model records only)' if layer is None else f'{layer:.1%}'} | {whole} | "
                    f"{n['layers']}, {sum(n['whole_models'].values())} |")
    return "\n".join(rows)


def record_set_labels(d: dict) -> dict[str, str]:
    """What each set of records a validation file names by its folders' key (RECORD_SET) holds, from the file's own
    runs: "the DATE record set (BACKENDS, batch SIZES)"."""
    layers = d.get("layers") if isinstance(d.get("layers"), dict) else {}   # compact_layers' runs table
    runs = [dict(zip(layers["runs_columns"], r)) for r in layers.get("runs") or []]
    found: dict[str, dict] = {}
    for r in runs + [m for m in d.get("models") or [] if isinstance(m, dict)]:
        m = RECORD_SET.search(r.get("source") or "")
        if m:
            s = found.setdefault(m.group(2), {"dates": set(), "backends": set(), "batches": set()})
            s["dates"].add(m.group(1))
            s["backends"].add(r["backend"])
            s["batches"].add(r["batch_size"])
    return {key: f"the {', '.join(sorted(s['dates']))} record set ({' and '.join(sorted(s['backends']))}, batch "
                 f"{', '.join(str(b) for b in sorted(s['batches']))})" for key, s in found.items()}


def _plain(text: str, labels: dict[str, str]) -> str:
    """A validation file's text with each set of records it names by its folders' key told by what it holds."""
    return RECORD_SET_KEY.sub(lambda m: labels.get(m.group(0), "a record set this file does not hold"), text)


def power_table(d: dict) -> str:
    """The power model against measured layers and whole models (benchmarks/power_model_validation.py): the headline
    figures against their targets, each test record set scored alone, the form choices the file holds."""
    v = d["validation"]
    if "targets" not in v:   # a validation written before the targets and the whole-model headline
        m = v.get("models") or {}
        return "\n".join([
            "| figure | median abs. error | n |", "| --- | --- | --- |",
            f"| per-layer power | {_pct(v.get('power_median_abs_err'))} | {v.get('n')} |",
            f"| per-layer energy, measured time | {_pct(v.get('energy_median_abs_err'))} | {v.get('n')} |",
            f"| whole-model power | {_pct(m.get('power_median_abs_err'))} | {m.get('n')} |"])
    t, h = v["targets"], v["models"]["headline"]

    def ok(key: str) -> str:
        return "met" if t[f"{key}_met"] else "NOT met"

    return _plain("\n".join([
        f"Headline variant: {v['headline_variant']}.", "",
        "| figure | median abs. error | n | target |", "| --- | --- | --- | --- |",
        f"| per-layer power | {v['power_median_abs_err']:.1%} | {v['n']} | <= {t['layer_power']:.0%}: {ok('layer_power')} |",
        (f"| per-layer energy, measured time | {v['energy_median_abs_err']:.1%} | {v['n']} | "
        f"<= {t['layer_energy_given_time']:.0%}: {ok('layer_energy_given_time')} |"),
        f"| whole-model power | {h['power_median_abs_err']:.1%} | {h['n']} | <= {t['model_power']:.0%}: {ok('model_power')} |",
        (f"| whole-model energy per sample, calibrated time (leave one model out) | "
        f"{h['energy_per_sample_median_abs_err_calibrated_time']:.1%} | {h['n']} | "
        f"<= {t['model_energy_per_sample_calibrated_time']:.0%}: {ok('model_energy_per_sample_calibrated_time')} |"),
        (f"| the same with the in-sample calibrated time | {h['energy_per_sample_median_abs_err_in_sample_calibrated_time']:.1%} "
        f"| {h['n']} | - |"),
        *_measured_time_row(v),
        *_test_set_rows(v),
        *_form_choice_rows(v),
    ]), record_set_labels(d))


def _test_set_rows(v: dict) -> list[str]:
    """The four target figures on each test record set's rows alone (TEST_SETS: records made after the forms they
    test were fixed), whole models by backend and model beside them (signed medians)."""
    rows = []
    for key, st in (v.get(TEST_SETS) or {}).items():
        lay, m, t = st["layers"], st["models"], st["targets"]
        if not lay["n"] and not m["n"]:
            continue
        rows += ["", f"Test on {key} alone:", "",
                 "| figure | median abs. error | n | target |", "| --- | --- | --- | --- |",
                 f"| per-layer power | {_pct(lay['power_median_abs_err'])} | {lay['n']} | <= {t['layer_power']:.0%} |",
                 (f"| per-layer energy, measured time | {_pct(lay['energy_median_abs_err_given_time'])} | {lay['n']} | "
                 f"<= {t['layer_energy_given_time']:.0%} |"),
                 f"| whole-model power | {_pct(m['power_median_abs_err'])} | {m['n']} | <= {t['model_power']:.0%} |",
                 (f"| whole-model energy per sample, calibrated time (leave one model out) | "
                 f"{_pct(m['energy_per_sample_median_abs_err'])} | {m['n']} | "
                 f"<= {t['model_energy_per_sample_calibrated_time']:.0%} |"),
                 "", "| whole models | n | power (signed) | energy per sample (signed) | time (signed) |",
                 "| --- | --- | --- | --- | --- |"]
        for name, g in st["models_by_backend_model"].items():
            rows.append(f"| {name} | {g['n']} | " + " | ".join(
                f"{_pct(g[f'{k}_median_abs_err'])} ({_signed(g[f'{k}_median_signed_err'])})"
                for k in ("power", "energy_per_sample", "time")) + " |")
    return rows


def _signed(x) -> str:
    return "-" if x is None else f"{x:+.1%}"


def _measured_time_row(v: dict) -> list[str]:
    """Per-layer power with the MEASURED time per call (the power model without the time prediction)."""
    m = (v.get("variants") or {}).get("duty_lomo_measured_time")
    if not m or m.get("power_median_abs_err") is None:
        return []
    return [(f"| per-layer power, measured time per call (not the headline) | {m['power_median_abs_err']:.1%} | "
            f"{m['n']} | - |")]


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def _form_choice_rows(v: dict) -> list[str]:
    """The duty form's choice (validation.duty_form_choice) and the jit whole-model weighting's
    (validation.whole_model_jit_choice): each candidate on its choosing and its test records."""
    c, j = v.get("duty_form_choice"), v.get("whole_model_jit_choice")
    rows = []
    if c and c.get("candidates") and "form_test" in next(iter(c["candidates"].values())):
        made = DATE.search(c.get("session") or "")   # the date the choice was made on
        rows += ["", (f"Duty form choice{f' ({made.group(0)})' if made else ''}: chosen {c['chosen']} (incumbent "
                 f"{c.get('incumbent', '-')}, in use {c['in_use']}); per-layer power of GPU-paced layers at the "
                 "calibrated time, fitted leave one model out on the choosing records, then fitted on all of them "
                 "and scored on the test records:"), "",
                 "| form | choosing (leave one model out) | test |", "| --- | --- | --- |"]
        for form, t in c["candidates"].items():
            ch, te = t["choosing_lomo"], t["form_test"]
            rows.append(f"| {form} | {_pct(ch['calibrated_time_power_median_abs_err'])} (n={ch['n']}) | "
                        f"{_pct(te['calibrated_time_power_median_abs_err'])} (n={te['n']}) |")
    if j:
        rows += ["", (f"Compiled (jit) whole models, layers weighted at dispatch vs in-model times: chosen "
                 f"{j['chosen']}; whole-model power on the choosing records "
                 f"{_pct(j['choosing']['dispatch_times_power_median_abs_err'])} vs "
                 f"{_pct(j['choosing']['in_model_power_median_abs_err'])} (n={j['choosing']['n']}), on the test records "
                 f"{_pct(j['test']['dispatch_times_power_median_abs_err'])} vs "
                 f"{_pct(j['test']['in_model_power_median_abs_err'])} (n={j['test']['n']}).")]
    w = v.get("whole_model_power_choice")
    if w:
        rows += ["", f"Whole-model power from the layers: chosen {w['chosen']}, in use {w['in_use']} ({w['rule']}): "
                 + "; ".join(f"{name} {_pct(t['choosing']['power_median_abs_err'])} (n={t['choosing']['n']}) on the "
                             f"choosing records, {_pct(t['test']['power_median_abs_err'])} (n={t['test']['n']}) on the test"
                             for name, t in w["candidates"].items()) + "."]
    return (rows + _dispatch_choice_rows(v.get("dispatch_overlap_choice")) + _replay_choice_rows(v.get("replay_pacing_choice"))
            + _replay_choice_rows(v.get("duty_fill_choice"), "The duty curve's size term")
            + _replay_choice_rows(v.get("duty_size_fill_choice"), "The duty curve's size terms together")
            + _jit_whole_rows(v.get("jit_host_choice"), "jit whole models, host and GPU time")
            + _jit_whole_rows(v.get("jit_other_share_choice"), "jit whole models, the non-matmul layers' share of the bound")
            + _jit_whole_rows(v.get("jit_fusion_choice"), "jit whole models, the bound without the layers fused into a matmul")
            + _jit_whole_rows(v.get("jit_split_choice"), "jit whole models, one efficiency or two (matmul, the rest)")
            + _jit_whole_rows(v.get("jit_gpu_choice"), "jit whole models, fused layers (none, epilogue, chain) x "
                              "one efficiency or two (matmul, the rest)")
            + _jit_whole_rows(v.get("jit_floor_choice"), "jit whole models, the launch floors busy or idle in the "
                              "GPU share (chosen by power)")
            + _jit_whole_rows(v.get("jit_dtype_choice"), "jit whole models, one fit over every dtype or one per dtype")
            + _cell_choice_rows(v.get("cell_statistic_choice"))
            + _cell_choice_rows(v.get("kin_dtype_choice"), "A kin dtype's cell of the same size",
                                ("choosing", "weak_test", "test"))
            + _unit_choice_rows(v.get("duty_unit_choice"))
            + _unit_choice_rows(v.get("duty_path_choice"), "A duty curve per compute path", ("choosing", "test"))
            + _duty_busy_rows(v.get("duty_busy_choice")) + _layout_test_rows(v.get("layout_copies_test"))
            + _layout_test_rows(v.get("layout_copy_form_test"), "The copies' form test"))


def _duty_busy_rows(c: dict | None) -> list[str]:
    """What the duty curve scales (validation.duty_busy_choice): per form, the per-layer and whole-model power over
    every record (each form's figures on the test records alone are those of a validation run with it as the
    headline)."""
    if not c:
        return []
    # a file without "headline" holds the run's headline in "in_use"
    rows = ["", f"What the duty curve scales: this run's headline {c.get('headline', c['in_use'])}"
                + (f", in use {c['in_use']}" if "headline" in c else "") + " (every record):", "",
            "| form | per-layer power | at the measured time | in sample | whole-model power |",
            "| --- | --- | --- | --- | --- |"]
    for name, t in c["candidates"].items():
        rows.append(f"| {name} | {_pct(t['power_median_abs_err'])} (n={t['layers_n']}) | "
                    f"{_pct(t['duty_lomo_measured_time_power_median_abs_err'])} | "
                    f"{_pct(t['duty_in_sample_measured_time_power_median_abs_err'])} | "
                    f"{_pct(t['models_power_median_abs_err'])} (n={t['models_n']}) |")
    return rows


def _layout_test_rows(t: dict | None, title: str = "The layout copies' test") -> list[str]:
    """The layout copies' test (validation.layout_copies_test; the copies' form test, layout_copy_form_test, reads the
    same on its own records): the torch channels_last time errors and the paired layouts' measured and calibrated
    cost."""
    if not t or not (t["whole_models_channels_last"]["n"] or t["layers_with_copies"] or t["paired_layouts"]):
        return []   # none of its records in the file
    w = t["whole_models_channels_last"]
    rows = ["", f"{title} ({t['test']}, torch channels_last): whole-model time "
                f"{_pct(w['time_median_abs_err'])} (n={w['n']}); layers with copies: "
            + "; ".join(f"{k} {_pct(v['time_median_abs_err'])} (signed {_signed(v['time_median_signed_err'])}, "
                        f"n={v['n']})" for k, v in t["layers_with_copies"].items()), ""]
    if t["paired_layouts"]:
        rows += ["| model | measured channels_last / channels_first | calibrated |", "| --- | --- | --- |"]
        rows += [f"| {k} | {v['measured_last_over_first']:.2f} | {v['calibrated_last_over_first']:.2f} |"
                 for k, v in t["paired_layouts"].items()]
    return rows


def _unit_choice_rows(c: dict | None, title: str = "A duty curve per compute unit",
                      parts: tuple = ("choosing", "weak_test", "test")) -> list[str]:
    """A duty curve per compute unit or per path (validation.duty_unit_choice, duty_path_choice): per candidate, the
    pooled per-layer power and the whole-model power on the choosing, (weak-test) and test records."""
    if not c:
        return []
    verdict = f", test verdict {c['test_verdict']}" if c.get("test_verdict") else ""
    rows = ["", f"{title}: chosen {c['chosen']}{verdict}, in use {c['in_use']} ({c['rule']}):", "",
            "| candidate | " + " | ".join(f"{p}: per-layer power | whole-model power" for p in parts) + " |",
            "| --- |" + " --- | --- |" * len(parts)]
    for name, t in c["candidates"].items():
        rows.append(f"| {name} | " + " | ".join(
            f"{_pct(t[p]['power_median_abs_err'])} (n={t[p]['n']}) | {_pct(t[p]['models_power_median_abs_err'])} "
            f"(n={t[p]['models_n']})" for p in parts) + " |")
    return rows


def _cell_choice_rows(c: dict | None, title: str = "A calibration cell's efficiency",
                      parts: tuple = ("choosing", "test")) -> list[str]:
    """A choice of what the calibration cells say (validation.cell_statistic_choice, kin_dtype_choice): per candidate,
    the whole models the cells predict (time, power, energy per sample) and the pooled per-layer power, on each of
    `parts` (choosing and test records; the kin choice has a weak test too)."""
    if not c:
        return []
    keys = ("whole_time_median_abs_err", "whole_power_median_abs_err", "whole_energy_per_sample_median_abs_err",
            "layers_power_median_abs_err")
    rows = ["", f"{title}: chosen {c['chosen']}, in use {c['in_use']} ({c['rule']}):", "",
            "| candidate | " + " | ".join(f"{p}: time | power | energy per sample | per-layer power" for p in parts) + " |",
            "| --- |" + " --- | --- | --- | --- |" * len(parts)]
    for name, t in c["candidates"].items():
        rows.append(f"| {name} | " + " | ".join(
            f"{_pct(t[part][k])}" + (f" (n={t[part]['whole_n']})" if k == keys[0] else "")
            + (f" (n={t[part]['layers_n']})" if k == keys[-1] else "") for part in parts
            for k in keys) + " |")
    return rows


def _jit_whole_rows(c: dict | None, title: str) -> list[str]:
    """A choice over the jit whole models (validation.jit_host_choice, jit_other_share_choice, jit_fusion_choice,
    jit_split_choice): per candidate,
    their time, power and energy per sample, on the choosing and on the test records."""
    if not c:
        return []
    keys = ("time_median_abs_err", "power_median_abs_err", "energy_per_sample_median_abs_err")
    rows = ["", f"{title}: chosen {c['chosen']}, in use {c['in_use']} ({c['rule']}):", "",
            "| candidate | choosing: time | power | energy per sample | test: time | power | energy per sample |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, t in c["candidates"].items():
        rows.append(f"| {name} | " + " | ".join(
            f"{_pct(t[part][k])}" + (f" (n={t[part]['n']})" if k == keys[0] else "") for part in ("choosing", "test")
            for k in keys) + " |")
    return rows


def _replay_choice_rows(c: dict | None, title: str = "Replayed layers' busy share") -> list[str]:
    """A choice scored by validate() once per candidate (validation.replay_pacing_choice, duty_fill_choice): per
    candidate, the per-layer headline pooled and on the torch layers, and the whole-model power, on the choosing
    and on the test records."""
    if not c:
        return []
    rows = ["", f"{title}: chosen {c['chosen']}, in use {c['in_use']} ({c['rule']}):", "",
            ("| candidate | choosing: all layers | choosing: torch layers | choosing: whole models | test: all layers "
            "| test: torch layers | test: whole models |"), "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, t in c["candidates"].items():
        rows.append("| " + name + " | " + " | ".join(
            f"{_pct(t[part][key])} (n={t[part][n]})" for part in ("choosing", "test")
            for key, n in (("power_median_abs_err", "n"), ("torch_power_median_abs_err", "torch_n"),
                           ("models_power_median_abs_err", "models_n"))) + " |")
    return rows


def _dispatch_choice_rows(c: dict | None) -> list[str]:
    """The wall time of a jax layer jitted alone (validation.dispatch_overlap_choice): per candidate, the
    per-layer headline pooled and on the jax layers, on the choosing and on the test records."""
    if not c:
        return []
    rows = ["", f"Jitted-alone wall time per call: chosen {c['chosen']}, in use {c['in_use']} ({c['rule']}):", "",
            "| candidate | choosing: all layers | choosing: jax layers | test: all layers | test: jax layers |",
            "| --- | --- | --- | --- | --- |"]
    for name, t in c["candidates"].items():
        ch, te = t["choosing"], t["test"]
        rows.append(f"| {name} | {_pct(ch['power_median_abs_err'])} (n={ch['n']}) | "
                    f"{_pct(ch['jax_power_median_abs_err'])} (n={ch['jax_n']}) | {_pct(te['power_median_abs_err'])} "
                    f"(n={te['n']}) | {_pct(te['jax_power_median_abs_err'])} (n={te['jax_n']}) |")
    return rows


def compare_table(pattern: str) -> str:
    """The headline figures of the power-model results matching `pattern`, one row each: per layer (power, energy at
    the measured time, calibrated time) and per whole model (power, energy per sample and time with the calibrated
    time, and the CARM bound's time summed over the layers the validation matched to the record: close to what a
    user gets with no calibration where every layer matched)."""
    rows = [("| file | layers | layer power | layer energy | layer time | models | model power | model energy/sample "
            "| model time | model time at the CARM bound of the scored layers |"), "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    paths = matches(pattern)
    if not paths:
        raise NoMatch(f"no result file matches {pattern} (relative to {RESULTS}, or absolute)")
    for path in paths:
        d = read_json(path)
        v = d.get("validation") or {}
        m = (v.get("models") or {}).get("headline") if isinstance(v.get("models"), dict) else None
        if m is None:   # an older result, before the whole-model headline
            rows.append(f"| {path.name} | no whole-model headline in this file |" + " |" * 8)
            continue
        bound_errs = [abs(r["carm_bound_time_s"] / r["measured_time_s"] - 1) for r in d["models"]
                      if r.get("carm_bound_time_s") and r.get("measured_time_s")]
        bound = statistics.median(bound_errs) if bound_errs else None
        rows.append(f"| {path.name} | {v['n']} | {_pct(v['power_median_abs_err'])} | {_pct(v['energy_median_abs_err'])} "
                    f"| {_pct(v['time_median_abs_err'])} | {m['n']} | {_pct(m['power_median_abs_err'])} "
                    f"| {_pct(m['energy_per_sample_median_abs_err_calibrated_time'])} | {_pct(m['time_median_abs_err'])} "
                    f"| {_pct(bound)} |")
    return "\n".join(rows)


def date_tables(date: str) -> list[str]:
    """Every table of the result files of `date` (dated): the ceilings runs, the VGG16 layer runs, the tuning
    studies and their grid summary, the held-out prediction accuracy and the power-model validations; a table of
    one file each (accuracy, validation) after the file's name."""
    out = [ceilings_table(read_json(p)) for p in dated("ceilings", date)]
    if layers := dated("vgg16-layers", date):
        out.append(vgg_table(layers))
    tuning = dated("vgg16-tuning", date)
    if studies := [p for p in tuning if "summary" not in p.name and "resume" not in p.name]:
        out.append(tuning_table(studies))
    out += [grid_summary(read_json(p)) for p in tuning if "summary" in p.name]
    out += [f"`{p.name}`:\n\n" + accuracy_table(read_json(p)) for p in dated("prediction-accuracy", date)]
    out += [f"`{p.name}`:\n\n" + power_table(read_json(p)) for p in dated("power-model", date)]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    select = parser.add_mutually_exclusive_group()
    select.add_argument("--date", default="2026-12-02",
                        help="the result files of this date (YYYY-MM-DD; default 2026-12-02: the README's tables)")
    select.add_argument("--cli", metavar="GLOB",
                        help="folders of gpu_call.sh's cli stage (relative to benchmarks/results, or absolute)")
    select.add_argument("--compare", metavar="GLOB", help="power-model result files in benchmarks/results, side by side")
    args = parser.parse_args(argv)
    try:
        if args.compare:
            print(compare_table(args.compare))
        elif args.cli:
            base = "" if Path(args.cli).is_absolute() else str(RESULTS) + "/"
            folders = sorted(Path(p) for p in glob.glob(base + args.cli) if Path(p).is_dir())
            if not folders:
                raise NoMatch(f"no folder matches {args.cli} (relative to {RESULTS}, or absolute)")
            print(cli_table(folders))
        else:
            if not DATE.fullmatch(args.date):
                raise NoMatch(f"--date expects YYYY-MM-DD, received: {args.date}")
            tables = date_tables(args.date)
            if not tables:
                raise NoMatch(f"no result file of {args.date} in {RESULTS}")
            print("\n\n".join(tables))
    except NoMatch as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
