"""The sweep power model end to end on recorded H200 files: the profile keys it adds, the embedded
profile regeneration, the validation script, and the energy-efficiency chart."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from carm_advisor.errors import CarmError, ProfileError
from carm_advisor.profiles.profile import load_profile, profile_from_dict

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MEASURED = RESULTS / "nvidia-h200-measured-profile-2026-12-02-run10.json"
CEILINGS = RESULTS / "nvidia-h200-ceilings-2026-12-02-run10.json"
DROP = ["hbm_read_bulk=its interleaved chunk walk lets drifting blocks re-read chunks from L2 (the same kernel read "
        "5.4 TB/s \"from HBM\" over 512 MiB in the run-10 size sweep); fixed in the kernels after run 10, not re-measured",
        "mix_fp32_hbm_tma_*=the same interleaved chunk walk as hbm_read_bulk"]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _embed(tmp_path, *extra):
    out = tmp_path / "profile.json"
    args = [str(MEASURED), str(CEILINGS), str(out)]
    for d in DROP:
        args += ["--drop", d]
    assert _load("embed_profile").main(args + list(extra)) == 0
    return out


def test_embed_profile_without_the_new_flag_still_regenerates_the_shipped_profile_byte_for_byte(tmp_path):
    out = _embed(tmp_path)
    assert out.read_bytes() == (ROOT / "carm_advisor" / "profiles" / "nvidia_h200.json").read_bytes()


def test_embed_profile_power_fit_sweep_writes_a_loadable_model_with_fit_quality_and_data_factors(tmp_path):
    profile = load_profile(_embed(tmp_path, "--power-fit", "sweep"))
    pm = profile.power_model
    assert pm.fit["n"] == 28            # run 10's roof rows with >= 0.9 s windows, hbm_read_bulk dropped
    assert pm.voltage is not None and pm.voltage.source == "assumed"
    assert 0.15 < pm.data_factor["tc_bf16"]["zero"] < 0.3
    assert "zero" not in pm.data_factor["fp32"]       # the FMA chains were not run on zeros
    assert pm.power_limit_w == 700.0
    again = profile_from_dict(json.loads(json.dumps(profile.to_dict())))
    assert again.power_model == pm


@pytest.mark.parametrize("mutate, message", [
    (lambda pm: pm.update(data_factor={"tc_bf16": {"zero": -1}}), "must be >= 0"),
    (lambda pm: pm.update(data_factor={"tc_bf16": 0.2}), "data_factor must map"),
    (lambda pm: pm.update(dvfs={"f0_mhz": 1980, "f_knee_mhz": 2500, "v_knee": 0.7}), "0 < f_knee < f0"),
    (lambda pm: pm.update(dvfs={"f0_mhz": 1980}), "dvfs must hold numbers"),
    (lambda pm: pm.update(default_data="zero"), "default_data must be 'random'"),
])
def test_malformed_sweep_power_model_keys_are_one_line_profile_errors(mutate, message):
    doc = load_profile().to_dict()
    mutate(doc["power_model"])
    with pytest.raises(ProfileError, match=message):
        profile_from_dict(doc)


def test_validation_script_fits_on_the_sweep_and_scores_recorded_layers_once_per_run(tmp_path):
    layers = RESULTS / "nvidia-h200-vgg16-layers-mixed_bfloat16-channels_first-2026-12-02-run4.json"
    copy = tmp_path / "records" / "same-run-again.json"
    copy.parent.mkdir()
    copy.write_text(layers.read_text())
    mod = _load("power_model_validation")
    assert mod.main(["--records", str(layers), "--records", str(copy.parent), "--ceilings", str(CEILINGS),
                     "--out", str(tmp_path)]) == 0
    doc = json.loads(next(tmp_path.glob("nvidia-h200-power-model-*.json")).read_text())
    assert set(doc) >= {"device", "fit", "validation", "command"}
    v = doc["validation"]
    assert v["n"] == 22                  # one run of VGG16's 22 layers, not two
    assert v["models"]["n"] == 1
    assert "mix_fp32_hbm_tma_c1" in doc["fit"]["left_out"]   # the embedded profile's dropped rows
    row = next(r for r in doc["layers"] if r["layer"] == "block4_conv2")
    # A heavy BF16 convolution is predicted at the 700 W cap; energy given time is that power x measured time.
    assert row["predicted_power_w"] == pytest.approx(700.0)
    assert row["predicted_energy_j_given_time"] == pytest.approx(700.0 * row["measured_time_s"])


def test_validation_script_refuses_a_missing_records_path(tmp_path, capsys):
    mod = _load("power_model_validation")
    assert mod.main(["--records", str(tmp_path / "nope"), "--ceilings", str(CEILINGS)]) == 2
    assert "not found" in capsys.readouterr().err


def test_report_plots_the_energy_efficiency_carm_and_refuses_an_unknown_kind(tmp_path):
    import keras

    import carm_advisor as advisor

    inputs = keras.Input((64,))
    model = keras.Model(inputs, keras.layers.Dense(256)(keras.layers.Dense(256)(inputs)))
    report = advisor.analyze(model, batch_size=128, measure=False, progress=False)
    assert all(r.predicted_power_w and r.predicted_power_w <= 700.0 for r in report.known_layers)
    row = report.known_layers[0]
    assert row.predicted_power_w == pytest.approx(row.predicted_energy_j / row.predicted_time_s)
    assert report.clocks is None                       # the shipped profile has no voltage curve yet
    path = report.plot(tmp_path / "ee.png", kind="energy")
    assert path.stat().st_size > 10_000
    with pytest.raises(CarmError, match="kind must be"):
        report.plot(tmp_path / "x.png", kind="power")


def test_analyze_predicts_energy_optimal_clocks_with_a_sweep_fitted_profile(tmp_path):
    import keras

    import carm_advisor as advisor

    profile = load_profile(_embed(tmp_path, "--power-fit", "sweep"))
    inputs = keras.Input((1024,))
    model = keras.Model(inputs, keras.layers.Dense(1024)(inputs))
    report = advisor.analyze(model, batch_size=4096, profile=profile, measure=False, progress=False)
    clocks = report.to_dict()["clocks"]
    assert clocks["model"]["source"] == "predicted"
    assert clocks["model"]["energy_gain"] >= 1.0
    layer = report.known_layers[0]
    assert layer.energy_optimal_sm_clock_mhz <= 1980.0 and layer.energy_optimal_gain >= 1.0
    import io

    from rich.console import Console

    out = io.StringIO()
    report.print(Console(file=out, width=200))
    assert f"Energy-optimal SM clock (predicted, voltage curve assumed): {clocks['model']['sm_clock_mhz']:.0f} MHz" \
        in out.getvalue()


class _FakeLibrary:
    """Two benchmarks on a FakeGPU in virtual time: each call 'runs' 0.1 s at a set power."""

    def __init__(self, gpu):
        from types import SimpleNamespace as NS

        self.gpu = gpu
        self.rows = {"mix_fp32_hbm_c4": (NS(name="mix_fp32_hbm_c4", kind="mixed", carm_key="fp32", memory_key="hbm",
                                           variant="c4", instruction="ffma", runs_on=lambda arch: True), 500.0, 2e12, 1e12),
                     "fp32_fma": (NS(name="fp32_fma", kind="compute", carm_key="fp32", memory_key="", variant="chains",
                                     instruction="ffma", runs_on=lambda arch: True), 270.0, 6e12, 0.0)}

    def benchmarks(self):
        return [info for info, *_ in self.rows.values()]

    def device_info(self, device=0):
        from types import SimpleNamespace as NS

        return NS(cc_major=9, cc_minor=0, sm_count=132)

    def run(self, name, iterations=0, launches=1, warmup=1):
        from types import SimpleNamespace as NS

        info, power_w, flops, bytes_ = self.rows[name]
        self.gpu.set_power_w(power_w)
        self.gpu.advance(0.1)
        self.gpu.set_power_w(120.0)
        return NS(seconds=0.1, flops=flops * 0.1, bytes=bytes_ * 0.1, iterations=iterations or 10)


def test_power_sweep_measures_each_row_over_a_full_window_and_its_output_feeds_the_fit():
    from carm_advisor.carm.power_fit import records_from_benchmarks
    from carm_advisor.power.fake import FakeGPU

    gpu = FakeGPU(power_w=120.0)
    doc = _load("power_sweep").sweep(_FakeLibrary(gpu), gpu, [], window_s=1.0, budget_s=60.0,
                                     clock=gpu.now_s, sleep=gpu.advance)
    assert doc["device"]["idle_power_w"] == pytest.approx(120.0)
    rows = {r["name"]: r for r in doc["benchmarks"]}
    # Every call draws its set power for its whole 0.1 s (the fake idles only between, for no time).
    assert rows["mix_fp32_hbm_c4"]["power_w"] == pytest.approx(500.0)
    assert rows["fp32_fma"]["power_w"] == pytest.approx(270.0)
    assert rows["mix_fp32_hbm_c4"]["flops_per_s"] == pytest.approx(2e12)
    assert min(rows["mix_fp32_hbm_c4"]["extra"]["window_s"]) >= 1.0
    records = records_from_benchmarks(doc["benchmarks"])
    assert {(r.path, r.level) for r in records} == {("fp32", "hbm"), ("fp32", None)}


def test_power_sweep_skips_rows_that_would_overrun_the_budget():
    from carm_advisor.power.fake import FakeGPU

    gpu = FakeGPU(power_w=120.0)
    doc = _load("power_sweep").sweep(_FakeLibrary(gpu), gpu, [], window_s=1.0, budget_s=4.0,
                                     clock=gpu.now_s, sleep=gpu.advance)
    assert len(doc["benchmarks"]) == 1 and len(doc["skipped_for_budget"]) == 1


def test_wide_report_table_shows_predicted_power_per_layer_and_narrow_one_leaves_it_out():
    import io

    import keras
    from rich.console import Console

    import carm_advisor as advisor

    inputs = keras.Input((64,))
    model = keras.Model(inputs, keras.layers.Dense(256, name="only_dense")(inputs))
    report = advisor.analyze(model, batch_size=128, measure=False, progress=False)
    watts = f"{report.known_layers[0].predicted_power_w:.0f} W"
    wide, narrow = io.StringIO(), io.StringIO()
    report.print(Console(file=wide, width=220))
    report.print(Console(file=narrow, width=80))
    assert "pred. power" in wide.getvalue() and watts in wide.getvalue()
    # At 80 columns the power columns are the first to go; the columns that carry the message stay.
    assert "pred. power" not in narrow.getvalue()
    assert all(column in narrow.getvalue() for column in ("layer", "bound", "share"))


def test_validation_script_fits_the_voltage_curve_to_capped_layer_clocks_and_scores_it_on_held_out_runs(tmp_path):
    runs = [RESULTS / f"nvidia-h200-vgg16-layers-mixed_bfloat16-channels_first-2026-12-02-run{n}.json" for n in (4, 7)]
    mod = _load("power_model_validation")
    args = ["--ceilings", str(CEILINGS), "--out", str(tmp_path), "--fit-clocks"]
    assert mod.main(args + [a for r in runs for a in ("--records", str(r))]) == 0
    doc = json.loads(next(tmp_path.glob("nvidia-h200-power-model-*.json")).read_text())
    vc = doc["voltage_from_capped_clocks"]
    assert vc["dvfs"]["source"] == "fitted to capped clocks"
    assert vc["n_held_out"] == vc["observations"] > 0      # every capped layer predicted from the other run's fit
    # The fitted curve is chosen to predict the capped clocks: in sample it does no worse than the sweep's prior.
    assert vc["median_abs_clock_err_mhz_in_sample"] <= vc["median_abs_clock_err_mhz_sweep_fit_curve"]


def test_power_sweep_leaves_out_excluded_rows():
    from carm_advisor.power.fake import FakeGPU

    gpu = FakeGPU(power_w=120.0)
    doc = _load("power_sweep").sweep(_FakeLibrary(gpu), gpu, [], window_s=1.0, budget_s=60.0,
                                     clock=gpu.now_s, sleep=gpu.advance, exclude=["mix_*"])
    assert [r["name"] for r in doc["benchmarks"]] == ["fp32_fma"]
