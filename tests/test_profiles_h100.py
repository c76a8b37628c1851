"""The shipped H100 profile, rebuilt from its recorded files by benchmarks/embed_profile.py, and the one choice of
the profile a measurement on a GPU is placed under (measure/profile.profile_for_gpu): this GPU's cached measured
profile, else the profile shipped for its model, else its roofs measured first; never another GPU model's."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import keras
import numpy as np
import pytest
from _power_fit import assert_ships_the_fit
from _same_json import assert_same_json

from carm_advisor.errors import ProfileError
from carm_advisor.files import read_json
from carm_advisor.measure import backends
from carm_advisor.measure import profile as P
from carm_advisor.power.fake import FakeGPU
from carm_advisor.profiles.cache import store_profile
from carm_advisor.profiles.profile import SCHEMA, load_profile, profile_from_dict, shipped_profile_name

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
RUN = RESULTS / "nvidia-h100-80gb-hbm3-characterisation-2026-12-06"
MEASURED = RUN / "measured_profile.json"
SIDE = RUN / "nvidia-h100-80gb-hbm3-ceilings-2026-12-06.json"
SWEEP = RUN / "nvidia-h100-80gb-hbm3-power-sweep-2026-12-06.json"
FLOOR = RESULTS / "nvidia-h100-80gb-hbm3-launch-floor-2026-12-07.json"
DUTY = RESULTS / "nvidia-h100-80gb-hbm3-power-model-layout-copies-data-movement-2026-12-06.json.xz"
SHIPPED = ROOT / "carm_advisor" / "profiles" / "nvidia_h100_80gb_hbm3.json"
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def _embed_profile():
    spec = importlib.util.spec_from_file_location("embed_profile", ROOT / "benchmarks" / "embed_profile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- the shipped profile ------------------------------------------------------------------------------------


def test_the_shipped_h100_profile_is_rebuilt_from_its_recorded_files(tmp_path):
    out = tmp_path / "h100.json"
    args = [str(MEASURED), str(SIDE), str(out), "--launch-floor", str(FLOOR), "--power-fit", "sweep",
            "--power-sweep", str(SWEEP), "--duty", str(DUTY)]
    assert _embed_profile().main(args) == 0
    assert_same_json(out.read_bytes(), SHIPPED.read_bytes())   # the sweep fit's floats to 1e-9


def test_its_roofs_are_the_measured_runs_and_the_docs_table_quotes_them():
    measured = json.loads(MEASURED.read_text())
    shipped = load_profile("nvidia_h100_80gb_hbm3")
    assert {k: c.value for k, c in shipped.ceilings.items()} == {k: c["value"] for k, c in measured["ceilings"].items()}
    assert {k: c["value"] for k, c in json.loads(SIDE.read_text())["ceilings"].items()} == \
        {k: c.value for k, c in shipped.ceilings.items()}
    # docs/measurements.md (H100 ceilings table, TFLOP/s and TB/s as printed there)
    quoted = {"tc_bf16": 989e12, "tc_fp16": 924e12, "tc_tf32": 507e12, "tc_fp8_e4m3": 1879e12, "fp32": 64.3e12,
              "hbm": 3.15e12, "l2": 7.85e12, "shared": 33.4e12}
    for key, value in quoted.items():
        assert shipped.ceilings[key].value == pytest.approx(value, rel=2e-3), key
    assert shipped.device["idle_power_w"] == pytest.approx(113.0, abs=0.05)
    assert "uuid" not in shipped.device                              # not the user's GPU
    assert shipped.source == "recorded"
    assert shipped.provenance["from"].startswith(f"benchmarks/results/{RUN.name}/measured_profile.json")


def test_its_launch_floor_power_model_and_duty_curves_come_from_the_files_named():
    shipped = load_profile("h100")
    floor = json.loads(FLOOR.read_text())
    assert shipped.launch_floor_s == floor["launch_floor"]["value_s"]
    assert shipped.launch_floor["provenance"]["from"] == f"benchmarks/results/{FLOOR.name}"
    validation = read_json(DUTY)
    fit, pm = validation["fit"], shipped.power_model
    # the sweep fit the H100 validation scored (the ceilings run and its power sweep, 100 rows)
    assert_ships_the_fit(pm, fit, 100)
    assert shipped.power_model_provenance["from"] == [f"benchmarks/results/{RUN.name}/{MEASURED.name}",
                                                      f"benchmarks/results/{RUN.name}/{SWEEP.name}"]
    # the duty curves that validation fitted on every H100 layer record against that fit
    for curve, fitted in ((pm.duty, validation["duty_curves"]["in_sample"]),
                          (pm.duty_tensor_core, validation["duty_curves"]["tensor_core_in_sample"])):
        assert (curve.variable, curve.gamma, curve.t_size_s, curve.gamma_size) == \
            (fitted["variable"], fitted["gamma"], fitted["t_size_s"], fitted["gamma_size"])
        assert "H100 layer records" in curve.source and DUTY.name in curve.source
    assert "carried" not in pm.duty.source


def test_the_h100_profile_and_calibration_name_the_same_gpu_model():
    calibration = json.loads((ROOT / "carm_advisor" / "profiles" / "nvidia_h100_80gb_hbm3_calibration.json").read_text())
    assert load_profile("h100").name == calibration["provenance"]["device"] == H100
    assert json.loads(FLOOR.read_text())["device"]["name"] == H100


def test_a_measured_h100_profile_carries_the_h100_duty_curves_and_another_model_the_h200s():
    pm = {"constant_w": 110.0, "joules_per_flop": {"fp32": 2e-12}, "joules_per_byte": {"hbm": 1e-10}}
    h100 = json.loads(SHIPPED.read_text())["power_model"]
    own = P.with_carried_duty(pm, H100)
    for key in ("duty", "duty_tensor_core"):
        assert {k: v for k, v in own[key].items() if k != "source"} == {k: v for k, v in h100[key].items() if k != "source"}
        assert own[key]["source"] == f"carried from the embedded {H100} profile ({h100[key]['source']})"
    other = P.with_carried_duty(pm, A100)
    assert other["duty"]["source"].startswith("carried from the embedded NVIDIA H200 profile")
    assert other["duty"]["source"].endswith(f"checked on another GPU: {P.CARRIED_DUTY_CHECK}")


# ---- the shipped profile of a GPU model, by name ---------------------------------------------------------


@pytest.mark.parametrize("gpu_name, expected", [
    ("NVIDIA H100 80GB HBM3", "nvidia_h100_80gb_hbm3"), ("H100 80GB HBM3", "nvidia_h100_80gb_hbm3"),
    ("NVIDIA H200", "nvidia_h200"), ("NVIDIA H100 PCIe", None), ("NVIDIA H200 NVL", None), (A100, None),
    ("NVIDIA H200 (fake)", None), (None, None), ("", None)])
def test_the_shipped_profile_of_a_gpu_model_is_found_by_its_whole_nvml_name(gpu_name, expected):
    assert shipped_profile_name(gpu_name) == expected


def test_on_a_cpu_the_default_stays_the_h200_and_the_h100_is_picked_by_name():
    assert load_profile().name == "NVIDIA H200"
    assert load_profile("h100").to_dict() == load_profile("nvidia_h100_80gb_hbm3").to_dict()
    assert load_profile("h200").name == "NVIDIA H200"


# ---- analyze() on a (fake) GPU -----------------------------------------------------------------------------


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CARM_ADVISOR_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def small_model():
    inputs = keras.Input((16,))
    return keras.Model(inputs, keras.layers.Dense(8, name="fc")(keras.layers.Dense(32, name="hidden")(inputs)))


def fake_gpu(name: str) -> FakeGPU:
    return FakeGPU(name=name, power_w=250.0, sm_clock_mhz=1755.0, clock=time.perf_counter)


def gpu_here(monkeypatch, name: str) -> None:
    """NVML and the Keras backend see one GPU, named `name` (analyze looks both up in its own namespace)."""
    import carm_advisor.advise.analyze as analysis

    monkeypatch.setattr(analysis, "gpu_count", lambda: 1)
    monkeypatch.setattr(backends.get(), "has_gpu", lambda: True)
    monkeypatch.setattr(backends.get(), "device_name", lambda: name)


MEASURE = {"training_step": False, "min_window_s": 0.02, "repeats": 1, "warmup": 1, "model_min_window_s": 0.02,
           "model_repeats": 1}


def measured_analysis(name: str):
    from carm_advisor import analyze

    return analyze(small_model(), batch_size=4, measure=True, measure_options=dict(gpu=fake_gpu(name), **MEASURE),
                   progress=False)


def numbers(node) -> set[float]:
    """Every number in a parsed JSON document."""
    if isinstance(node, dict):
        return set().union(*(numbers(v) for v in node.values())) if node else set()
    if isinstance(node, list):
        return set().union(*(numbers(v) for v in node)) if node else set()
    return {float(node)} if isinstance(node, (int, float)) and not isinstance(node, bool) else set()


def roofs(profile) -> set[float]:
    return {c.value for c in profile.ceilings.values()}


def no_measuring(*args, **kwargs):
    raise AssertionError("measure_ceilings called where a profile was there to use")


def test_a_measurement_on_an_h100_is_placed_under_the_shipped_h100_profile_and_calibration(monkeypatch, cache):
    gpu_here(monkeypatch, H100)
    monkeypatch.setattr(P, "measure_ceilings", no_measuring)
    report = measured_analysis(H100)
    assert report.device.name == report.device.profile == H100 and report.device.profile_source == "recorded"
    assert roofs(report.profile) == roofs(load_profile("h100"))
    seen = numbers(json.loads(report.to_json_text()))
    assert seen & roofs(load_profile("h100")) and not seen & roofs(load_profile("h200"))
    # the H100's shipped calibration (no cached one: the cache is empty), not the H200's
    h100_records = json.loads((ROOT / "carm_advisor" / "profiles" / "nvidia_h100_80gb_hbm3_calibration.json")
                              .read_text())["provenance"]["records"]
    assert report.calibration["records"] == len(h100_records)


def a100_profile(gpu: FakeGPU) -> dict:
    """A profile as a quick ceilings run on the fake A100 would record it (hand figures, none of them shipped)."""
    measured = {"source": "measured", "date": "2026-12-07"}
    return {"schema": SCHEMA, "device": {"name": gpu.name(), "uuid": gpu.uuid(), "driver": gpu.driver_version(),
                                         "sm_clock_max_mhz": 1410.0, "l2_usable_bytes": 32 * 2**20,
                                         "memory_bytes": 80 * 2**30},
            "provenance": {"source": "measured", "quick": True, "kernel_source_hash": P.current_kernel_source_hash()},
            "ceilings": {"fp32": {"kind": "compute", "value": 1.875e13, "provenance": measured},
                         "tc_tf32": {"kind": "compute", "value": 1.5e14, "provenance": measured},
                         "l2": {"kind": "memory", "value": 5.5e12, "provenance": measured},
                         "hbm": {"kind": "memory", "value": 1.75e12, "provenance": measured}},
            "power_model": {"constant_w": 62.5, "joules_per_flop": {"fp32": 1.25e-11, "tc_tf32": 2.5e-12},
                            "joules_per_byte": {"l2": 5e-11, "hbm": 1.5e-10}, "power_limit_w": 400.0,
                            "provenance": measured}}


def test_a_gpu_with_no_profile_has_its_roofs_measured_first_once_and_no_other_gpus_roofs(monkeypatch, cache, capsys):
    gpu_here(monkeypatch, A100)
    calls = []

    def quick_ceilings(device=0, quick=False, progress=True, gpu=None, command=None, **kwargs):
        calls.append({"quick": quick, "command": command})
        profile = profile_from_dict(a100_profile(fake_gpu(A100)), origin="fake quick run")
        store_profile(profile)   # as measure_ceilings does
        return profile

    monkeypatch.setattr(P, "measure_ceilings", quick_ceilings)
    report = measured_analysis(A100)
    assert [c["quick"] for c in calls] == [True]
    said = [line for line in capsys.readouterr().err.splitlines() if "measuring its roofs first" in line]
    assert len(said) == 1 and A100 in said[0] and "carm-advise ceilings --quick" in said[0]
    assert report.device.profile == A100 and report.device.profile_source == "measured"
    assert roofs(report.profile) == {1.875e13, 1.5e14, 5.5e12, 1.75e12}
    seen = numbers(json.loads(report.to_json_text()))
    assert {1.875e13, 1.75e12} <= seen
    assert not seen & (roofs(load_profile("h200")) | roofs(load_profile("h100")))
    # no other model's calibration: only how the model runs (runs_as) beside the bound's source
    assert {k: v for k, v in report.calibration.items() if k != "runs_as"} == {"source": "none: figures are CARM bounds"}
    # the next analysis finds them in the cache: not measured again
    again = measured_analysis(A100)
    assert len(calls) == 1 and roofs(again.profile) == roofs(report.profile)


def test_a_failed_measurement_of_the_roofs_is_one_line_and_no_other_profile(monkeypatch, cache):
    from carm_advisor.errors import KernelBuildError

    gpu_here(monkeypatch, A100)

    def no_compiler(*args, **kwargs):
        raise KernelBuildError("nvcc not found on PATH")

    monkeypatch.setattr(P, "measure_ceilings", no_compiler)
    with pytest.raises(ProfileError, match=r"^no profile of NVIDIA A100-SXM4-80GB is cached or shipped .*measuring "
                                           r"its roofs failed: nvcc not found on PATH; give one") as exc:
        measured_analysis(A100)
    assert "\n" not in str(exc.value)


def test_a_replayed_record_of_a_gpu_with_no_profile_is_refused_without_measuring(monkeypatch, cache):
    from carm_advisor import analyze
    from carm_advisor.measure.run import measure_run

    model = small_model()
    model(np.zeros((4, 16), "float32"))
    run = measure_run(model, batch_size=4, gpu=fake_gpu(A100), progress=False, **MEASURE)
    assert run.device["name"] == A100
    monkeypatch.setattr(P, "measure_ceilings", no_measuring)
    with pytest.raises(ProfileError, match=r"^no profile of NVIDIA A100-SXM4-80GB is cached here and none ships .*"
                                           r"\(--profile FILE, profile=\.\.\.\)$"):
        analyze(model, batch_size=4, from_measurements=run, progress=False)
    # a profile given is used as given
    assert analyze(model, batch_size=4, from_measurements=run, profile="h100", progress=False).profile.name == H100


# ---- a measured tune study ---------------------------------------------------------------------------------


class MeasuredRunner:
    """Trials as a GPU would measure them (hand figures)."""

    source = "measured"

    def run(self, config):
        from carm_advisor.trials.runner import Measurement

        return Measurement(time_s=1e-3, energy_j=0.25, flops=1e9, batch_size=config.batch_size, source="measured")

    def close(self) -> None:
        pass


def measured_study(tmp_path, monkeypatch, name: str):
    from carm_advisor import tune
    from carm_advisor.trials.space import SearchSpace, TrialConfig

    monkeypatch.setattr(P, "open_visible_gpu", lambda: fake_gpu(name))   # the GPU the study measures on
    path = tmp_path / "net.keras"
    small_model().save(path)
    backend = keras.backend.backend()
    space = SearchSpace(backends=(backend,), precisions=("float32",), batch_sizes=(4,), layouts=("channels_last",))
    return tune(str(path), runner=MeasuredRunner(), n_trials=1, storage=str(tmp_path / "s.db"), study_name=name,
                space=space, progress=False, baseline=TrialConfig(backend, "float32", 4, "channels_last",
                                                                   space.compilers[backend][0]))


def test_a_measured_study_on_an_h100_bounds_its_trials_by_the_h100_profile(tmp_path, monkeypatch, cache):
    monkeypatch.setattr(P, "measure_ceilings", no_measuring)
    result = measured_study(tmp_path, monkeypatch, H100)
    assert result.study.user_attrs["run"]["profile"] == "nvidia_h100_80gb_hbm3"   # what its workers load


def test_a_measured_study_on_a_gpu_with_no_profile_measures_its_roofs_first(tmp_path, monkeypatch, cache):
    calls = []

    def quick_ceilings(device=0, quick=False, progress=True, gpu=None, command=None, **kwargs):
        calls.append((quick, gpu.name()))
        profile = profile_from_dict(a100_profile(gpu), origin="fake quick run")
        store_profile(profile)
        return profile

    monkeypatch.setattr(P, "measure_ceilings", quick_ceilings)
    result = measured_study(tmp_path, monkeypatch, A100)
    assert calls == [(True, A100)]
    stored = result.study.user_attrs["run"]["profile"]
    assert Path(stored).parent == cache / "profiles" and load_profile(stored).name == A100
