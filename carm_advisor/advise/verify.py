"""`analyze --verify`: apply each recommendation that is a configuration change, measure it, compare.

Each change (precision, layout, batch size, compilation, backend) is measured in a child process
(measure/trial.py) beside the unchanged configuration; the measured gain (per sample, so batch
changes compare fairly) is shown beside the predicted one and flagged when they differ by more
than VERIFY_TOLERANCE, in time or in energy (a change can be as fast as predicted and still not save the
energy the advice promised: benchmarks/results/nvidia-h200-analyze-verify-vgg16-2026-12-04.json, a
CUDA-graph replay of VGG16 on the H200).

A compiler change the tuner knows (torch.compile on torch, XLA on tensorflow: tune/space.COMPILERS) is
measured by the tuner's own trial worker (tune/runner.WorkerRunner -> tune/worker.py: model.compile(
jit_compile=...) and predict_on_batch), against the same worker's uncompiled trial (torch eager,
tensorflow graph) rather than model(x): both sides run the same way, and the worker's measured
compile time (first call less a steady call, paid once) is kept beside the gain. The advice's gain is
against model(x) (measured_advice.current_time), so the prediction is put on the worker's baseline too:
predicted compiled time = model(x) time / advised speedup; predicted gain = the worker's measured
uncompiled time / that (off_by then compares the predicted compiled time with the measured one).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from carm_advisor.advise.measured import current_time
from carm_advisor.advise.recommend import advised_gain
from carm_advisor.mapping.input_shapes import portable_shapes
from carm_advisor.trials.child import Runner, fake_result, measure_config
from carm_advisor.trials.runner import TrialFailed, TrialOutOfMemory, WorkerRunner, WorkerSettings
from carm_advisor.trials.space import COMPILERS, DEFAULT_COMPILER, TrialConfig

VERIFY_TOLERANCE = 0.25


def tuner_compiler(cfg: dict) -> bool:
    """Whether the config's compile is one of the tuner's compilers for its backend (torch.compile, xla, ...)."""
    return cfg.get("compile") in COMPILERS.get(cfg.get("backend"), ()) and cfg.get("backend") != "jax"


def uncompiled_baseline(cfg: dict) -> dict:
    """The tuner's default compiler on the config's backend (torch eager, tensorflow graph)."""
    return {**cfg, "compile": DEFAULT_COMPILER[cfg["backend"]]}


class _NoFlops:
    """WorkerRunner asks its predictor for FLOPs to store; verify compares times and energies only."""

    def flops(self, config) -> float:
        return 0.0


class TrialRunners:
    """The default runner: measure/trial.py's child for model(x) configurations, the tuner's worker for
    its compilers (one persistent worker per backend, closed by close()); results cached per config."""

    def __init__(self, timeout_s: float = 600.0) -> None:
        self.timeout_s = timeout_s
        self._worker = None
        self._seen: dict[str, dict] = {}

    def __call__(self, cfg: dict) -> dict:
        key = json.dumps(cfg, sort_keys=True)
        if key not in self._seen:
            self._seen[key] = self._tuner(cfg) if tuner_compiler(cfg) else measure_config(cfg, timeout_s=self.timeout_s)
        return self._seen[key]

    def _tuner(self, cfg: dict) -> dict:
        fake = os.environ.get("CARM_ADVISOR_FAKE_TRIALS")
        if fake:
            return fake_result(cfg, fake)
        if self._worker is None:
            settings = WorkerSettings(window_s=0.5, min_windows=2, max_windows=4, idle_gap_s=0.5, accuracy_samples=0)
            self._worker = WorkerRunner(cfg["model"], _NoFlops(), settings=settings, trial_timeout_s=self.timeout_s,
                                        input_shapes=cfg.get("input_shapes"))
        trial = TrialConfig(backend=cfg["backend"], precision=cfg["precision"], batch_size=int(cfg["batch_size"]),
                            layout=cfg["layout"], compiler=cfg["compile"])
        try:
            m = self._worker.run(trial)
        except (TrialFailed, TrialOutOfMemory) as exc:
            return {"config": cfg, "ok": False, "time_s": None, "energy_j": None, "error": str(exc)[:300]}
        return {"config": cfg, "ok": True, "time_s": m.time_s, "energy_j": m.energy_j, "power_w": m.power_w,
                "execution": f"tuner worker: {cfg['compile']}", "compile_s": m.compile_s, "error": None}

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None


def baseline_config(report, model_spec: str, input_shapes: str | None = None) -> dict:
    """The configuration analysed, as a child measures it; with the model's input shapes (shapes_json text) where
    it was analysed on some (a Functional model's inputs of unknown size, an application's image size, a
    subclassed model's call() arguments)."""
    m = report.model
    cfg = {"model": model_spec, "precision": m.precision or "float32", "layout": m.layout or "channels_last",
           "batch_size": int(m.batch_size), "backend": m.backend or "torch", "compile": "none"}
    return cfg if input_shapes is None else {**cfg, "input_shapes": input_shapes}


def gain(base: dict, new: dict, key: str) -> float | None:
    """base / new figure per sample (time or energy): > 1 means the change helps."""
    b, n = base.get(key), new.get(key)
    if not b or not n:
        return None
    return (b / base["config"]["batch_size"]) / (n / new["config"]["batch_size"])


def verify_recommendations(report, runner: Runner | None = None, model_spec: str | None = None,
                           model=None) -> list[dict]:
    """Measure every recommendation with a `change`; fill rec.verified; return the verified entries."""
    pending = [rec for rec in report.recommendations if rec.change]
    if not pending:
        return []
    own = runner is None
    runner = runner or TrialRunners()
    try:
        out = _verify(report, pending, runner, model_spec, model)
    finally:
        if own:
            runner.close()
    report.recommendations = ranked_by_measurement(report.recommendations)
    return out


def _gain_key(rec) -> float:
    """The larger of a recommendation's gains (time, energy): measured where --verify measured it, else advised."""
    measured = rec.measured_gain
    return measured if measured is not None else advised_gain(rec)


def ranked_by_measurement(recs: list) -> list:
    """Most gain first, as recommend() ranks them, but a measured gain in place of the advised one (a
    measurement outranks a model): advice the GPU measured slower and costlier sinks below the rest."""
    return sorted(recs, key=lambda r: -_gain_key(r))


def _verify(report, pending, runner: Runner, model_spec: str | None, model) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        spec = model_spec or _saved(model, Path(tmp))
        base_cfg = baseline_config(report, spec, portable_shapes(model) if model is not None else None)
        bases: dict[str, dict] = {}
        out = []
        for rec in pending:
            cfg = {**base_cfg, **rec.change}
            # A tuner compiler is compared with the tuner's uncompiled trial of the same configuration.
            b_cfg = uncompiled_baseline(cfg) if tuner_compiler(cfg) else base_cfg
            b_key = json.dumps(b_cfg, sort_keys=True)
            if b_key not in bases:
                bases[b_key] = runner(b_cfg)
            base = bases[b_key]
            new = runner(cfg) if base.get("ok") else {"ok": False, "error": f"the unchanged configuration failed: {base.get('error')}"}
            speedup = gain(base, new, "time_s") if new.get("ok") else None
            energy = gain(base, new, "energy_j") if new.get("ok") else None
            predicted, predicted_e, against = rec.speedup, rec.energy_ratio, None
            if tuner_compiler(cfg) and rec.speedup:
                predicted, predicted_e, against = on_worker_baseline(report, rec, base, b_cfg)
            off = _off(speedup, predicted)
            off_e = _off(energy, predicted_e)
            flagged_on = [what for what, o in (("time", off), ("energy", off_e)) if o is not None and o > VERIFY_TOLERANCE]
            rec.verified = {
                "config": cfg, "measured_speedup": speedup, "measured_energy_ratio": energy,
                "predicted_speedup": predicted, "predicted_energy_ratio": predicted_e,
                "advised_speedup": rec.speedup, "advised_energy_ratio": rec.energy_ratio, "compared_against": against,
                "off_by": off, "energy_off_by": off_e, "flagged": bool(flagged_on), "flagged_on": flagged_on,
                "error": None if new.get("ok") else (new.get("error") or base.get("error")),
                "baseline": b_cfg, "compile_s": new.get("compile_s") if new.get("ok") else None,
            }
            for what, p, m, o in (("time", f"{predicted or 0:.2f}x", speedup, off),
                                  ("energy", f"{predicted_e or 0:.2f}x less energy", energy, off_e)):
                if what in flagged_on:
                    report.warnings.append(
                        f"verify: '{rec.title}' predicted {p}, measured {m:.2f}x "
                        + (f"(both against {against}) " if against else "")
                        + f"({o:.0%} off, more than {VERIFY_TOLERANCE:.0%})")
            out.append(rec.verified)
    return out


def _off(measured: float | None, predicted: float | None) -> float | None:
    """|measured / predicted - 1| of a gain, None where either is missing."""
    return abs(measured / predicted - 1) if measured and predicted else None


def on_worker_baseline(report, rec, base: dict, b_cfg: dict) -> tuple[float | None, float | None, str]:
    """A compile advice's predicted (speedup, energy ratio) rescaled from its model(x) baseline to the tuner
    worker's measured uncompiled run, and that baseline in words; (None, None, why) where it cannot be."""
    worker = f"the tuner worker's uncompiled ({b_cfg['compile']}) predict_on_batch"
    now = current_time(report)
    if now is None:
        return None, None, f"{worker}: not compared (no model(x) time behind the advised {rec.speedup:.2f}x)"
    t_now, source, e_now = now
    t_c = t_now / rec.speedup
    e_c = e_now / rec.energy_ratio if e_now and rec.energy_ratio else None
    if not base.get("ok") or not base.get("time_s"):
        return None, None, worker
    energy = base["energy_j"] / e_c if base.get("energy_j") and e_c else None
    return (base["time_s"] / t_c, energy,
            f"{worker}, measured {base['time_s'] * 1e3:.2f} ms; predicted compiled {t_c * 1e3:.2f} ms = model(x) "
            f"{t_now * 1e3:.2f} ms ({source}) / the advised {rec.speedup:.2f}x")


def _saved(model, folder: Path) -> str:
    """A user's model object, saved where the child can load it."""
    if model is None:
        raise ValueError("verify needs the model's name (a keras.applications model) or the model itself")
    path = folder / "model.keras"
    model.save(path)
    return str(path)
