"""benchmarks/tuning_prediction_check.py on a tiny hand-made Optuna SQLite file and a table predictor:
which trials it reads, the errors, medians and Spearman's rho, all worked out by hand below."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import optuna
import pytest

from carm_advisor.trials.predicted import VALUE_CALIBRATED, Prediction

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "tuning_prediction_check.py"


def _module():
    spec = importlib.util.spec_from_file_location("tuning_prediction_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cfg(backend, batch, compiler):
    return {"backend": backend, "precision": "mixed_float16", "batch_size": batch, "layout": "channels_last",
            "compiler": compiler, "sm_clock_mhz": None}


def _key(c):
    return f"{c['backend']}/{c['precision']}/b{c['batch_size']}/{c['layout']}/{c['compiler']}/auto"


# (backend, batch, compiler): measured (time_s, energy_j), predicted (time_s, energy_j); 1e9 FLOPs per sample
TABLE = {
    ("torch", 32, "eager"): ((0.02, 4.0), (0.01, 2.0)),    # GF/W measured 32/4 = 8, predicted 16: +100%; time -50%
    ("torch", 64, "eager"): ((0.04, 4.0), (0.05, 8.0)),    # 16 vs 8: -50%; time +25%
    ("jax", 32, "xla"): ((0.01, 2.0), (0.011, 1.6)),       # 16 vs 20: +25%; time +10%
    ("jax", 64, "xla"): ((0.02, 2.0), (0.02, 2.5)),        # 32 vs 25.6: -20%; time 0
}


class Table:
    def value_prediction(self, config):
        t, e = TABLE[(config.backend, config.batch_size, config.compiler)][1]
        return Prediction(t, e, 1e9 * config.batch_size, config.batch_size, "predicted (calibrated)", [],
                          value_source=VALUE_CALIBRATED)

    def predict(self, config):
        t, e = TABLE[(config.backend, config.batch_size, config.compiler)][1]
        return Prediction(t / 2, e / 2, 1e9 * config.batch_size, config.batch_size, rows=[])


def _db(path):
    study = optuna.create_study(storage=f"sqlite:///{path}", study_name="vgg16-tuning", direction="maximize")
    for (backend, batch, compiler), ((t, e), _) in TABLE.items():
        c = _cfg(backend, batch, compiler)
        m = {"time_s": t, "energy_j": e, "flops": 1e9 * batch, "batch_size": batch, "source": "measured",
             "energy_spread": 0.01}
        study.add_trial(optuna.trial.create_trial(value=1e9 * batch / e / 1e9, user_attrs={
            "config": c, "config_key": _key(c), "measurement": m}))
    c = _cfg("torch", 32, "eager")   # a repeat of a configuration, and a trial that is not a measurement: skipped
    study.add_trial(optuna.trial.create_trial(value=1.0, user_attrs={
        "config": c, "config_key": _key(c), "repeat_of": 0, "measurement": {"time_s": 9, "energy_j": 9, "flops": 1}}))
    c = _cfg("jax", 128, "xla")
    study.add_trial(optuna.trial.create_trial(value=1.0, user_attrs={
        "config": c, "config_key": _key(c), "measurement": {"time_s": 9, "energy_j": 9, "flops": 1, "source": "fake"}}))


def test_check_reads_measured_trials_and_computes_errors_and_rank(tmp_path):
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    _db(tmp_path / "m.db")
    mod = _module()
    rows = mod.measured_rows([str(tmp_path / "m.db")])
    assert len(rows) == 4 and {r["file"] for r in rows} == {"m.db"}
    doc = mod.check(rows, Table())
    g = doc["per_backend_compiler"]
    assert g["all"]["n"] == 4
    # |GF/W errors| 1.0, 0.5, 0.25, 0.2 -> median 0.375; torch 0.75; jax 0.225
    assert g["all"]["median_abs_err_gflops_per_watt"] == pytest.approx(0.375)
    assert g["torch/eager"]["median_abs_err_gflops_per_watt"] == pytest.approx(0.75)
    assert g["jax/xla"]["median_abs_err_gflops_per_watt"] == pytest.approx(0.225)
    # |time errors| 0.5, 0.25, 0.1, 0 -> median 0.175
    assert g["all"]["median_abs_err_time_per_batch"] == pytest.approx(0.175)
    # measured GF/W 8, 16, 16, 32 -> ranks 1, 2.5, 2.5, 4; predicted 16, 8, 20, 25.6 -> 2, 1, 3, 4;
    # Pearson of the ranks: 3 / sqrt(4.5 * 5) = 0.63246
    assert g["all"]["spearman_gflops_per_watt"] == pytest.approx(3 / (4.5 * 5) ** 0.5)
    assert g["torch/eager"]["spearman_gflops_per_watt"] is None   # two points: no rank correlation
    assert doc["top"]["measured_best"]["key"] == "jax/mixed_float16/b64/channels_last/xla/auto"
    assert doc["top"]["predicted_rank_of_measured_best"] == 1


def test_rank_averages_ties():
    assert _module().rank([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]
