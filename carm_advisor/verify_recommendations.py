"""`analyze --verify`: apply each recommendation that is a configuration change, measure it, compare.

Each change (precision, layout, batch size, compilation, backend) is measured in a child process
(measure/trial.py) beside the unchanged configuration; the measured gain (per sample, so batch
changes compare fairly) is shown beside the predicted one and flagged when they differ by more
than VERIFY_TOLERANCE.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from carm_advisor.measure.trial import Runner, measure_config

VERIFY_TOLERANCE = 0.25


def baseline_config(report, model_spec: str) -> dict:
    m = report.model
    return {"model": model_spec, "precision": m.precision or "float32", "layout": m.layout or "channels_last",
            "batch_size": int(m.batch_size), "backend": m.backend or "torch", "compile": "none"}


def gain(base: dict, new: dict, key: str) -> float | None:
    """base / new figure per sample (time or energy): > 1 means the change helps."""
    b, n = base.get(key), new.get(key)
    if not b or not n:
        return None
    return (b / base["config"]["batch_size"]) / (n / new["config"]["batch_size"])


def verify_recommendations(report, runner: Runner | None = None, model_spec: str | None = None,
                           model=None) -> list[dict]:
    """Measure every recommendation with a `change`; fill rec.verified; return the verified entries."""
    runner = runner or measure_config
    pending = [rec for rec in report.recommendations if rec.change]
    if not pending:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        spec = model_spec or _saved(model, Path(tmp))
        base_cfg = baseline_config(report, spec)
        base = runner(base_cfg)
        out = []
        for rec in pending:
            cfg = {**base_cfg, **rec.change}
            new = runner(cfg) if base.get("ok") else {"ok": False, "error": f"the unchanged configuration failed: {base.get('error')}"}
            speedup = gain(base, new, "time_s") if new.get("ok") else None
            energy = gain(base, new, "energy_j") if new.get("ok") else None
            off = abs(speedup / rec.speedup - 1) if speedup and rec.speedup else None
            rec.verified = {
                "config": cfg, "measured_speedup": speedup, "measured_energy_ratio": energy,
                "predicted_speedup": rec.speedup, "predicted_energy_ratio": rec.energy_ratio,
                "off_by": off, "flagged": off is not None and off > VERIFY_TOLERANCE,
                "error": None if new.get("ok") else (new.get("error") or base.get("error")),
            }
            if rec.verified["flagged"]:
                report.warnings.append(
                    f"verify: '{rec.title}' predicted {rec.speedup:.2f}x, measured {speedup:.2f}x "
                    f"({off:.0%} off, more than {VERIFY_TOLERANCE:.0%})")
            out.append(rec.verified)
    return out


def verified_text(verified: dict | None) -> str:
    """One line for the report table: the measured gain, or why there is none."""
    if not verified:
        return ""
    if verified.get("error"):
        return f"verify failed: {verified['error']}"
    parts = [f"{verified['measured_speedup']:.2f}x faster" if verified.get("measured_speedup") else None,
             f"{verified['measured_energy_ratio']:.2f}x less energy" if verified.get("measured_energy_ratio") else None]
    text = "measured: " + ", ".join(p for p in parts if p)
    return text + (f" - OFF by {verified['off_by']:.0%}" if verified.get("flagged") else "")


def _saved(model, folder: Path) -> str:
    """A user's model object, saved where the child can load it."""
    if model is None:
        raise ValueError("verify needs the model's name (a keras.applications model) or the model itself")
    path = folder / "model.keras"
    model.save(path)
    return str(path)
