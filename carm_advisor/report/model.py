"""The Report: every figure the advisor computed for one model on one GPU profile, with its outputs (rich
text, JSON, charts). The rows and the advice it holds are plain data (carm_advisor.results)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from carm_advisor.carm.power_model import gflops_per_watt
from carm_advisor.errors import CarmError
from carm_advisor.files import check_output_path, write_atomic, write_text_atomic
from carm_advisor.report.plot import check_plot_format, plot_report
from carm_advisor.report.plot_energy import plot_energy
from carm_advisor.report.render import print_report, renderables
from carm_advisor.results import DeviceInfo, LayerRow, MeasurementInfo, ModelInfo, Recommendation

REPORT_SCHEMA = "carm-advisor/report/1"


@dataclass
class Report:
    model: ModelInfo
    device: DeviceInfo
    ceilings: dict[str, Any]
    layers: list[LayerRow]
    recommendations: list[Recommendation]
    measurement: MeasurementInfo | None = None   # whole-model measurements, when the GPU measured
    warnings: list[str] = field(default_factory=list)
    profile: Any = None                          # the Profile used (not serialised beyond ceilings)
    clocks: dict[str, Any] | None = None         # predicted energy-optimal SM clocks (carm/dvfs.clock_advice)
    # Whole-model calibrated prediction (calibration.whole_time_s) and where it came from.
    calibration: dict[str, Any] = field(default_factory=dict)
    # Wall-clock seconds of this run's phases (measured by the caller, e.g. the CLI: keras import, model build,
    # analysis with its measurement, report), so a slow analysis says where its time went.
    timings_s: dict[str, float] = field(default_factory=dict)

    # ---- totals -------------------------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        return int(self.model.batch_size)

    @property
    def known_layers(self) -> list[LayerRow]:
        return [r for r in self.layers if r.known]

    @property
    def unknown_layers(self) -> list[LayerRow]:
        return [r for r in self.layers if not r.known]

    @property
    def predicted_time_s(self) -> float:
        return sum(r.predicted_time_s or 0.0 for r in self.known_layers)

    @property
    def predicted_energy_j(self) -> float | None:
        """None when the profile has no power model: unknown energy is not zero energy."""
        energies = [r.predicted_energy_j for r in self.known_layers if r.predicted_energy_j is not None]
        return sum(energies) if energies else None

    def totals(self) -> dict[str, Any]:
        flops = sum(r.flops for r in self.known_layers)
        bytes_ = sum(r.bytes for r in self.known_layers)
        inference = (self.measurement.inference if self.measurement else None) or {}
        measured = bool(inference.get("time_s"))
        # The headline figures: measured where the model ran here, else the calibrated whole-model prediction
        # (its time and validated whole-model power) where a calibration gives one, else the CARM bound.
        calibrated_s, calibrated_w = self.calibration.get("whole_time_s"), self.calibration.get("whole_power_w")
        if measured:
            time_s, energy_j, source = inference.get("time_s"), inference.get("energy_j"), "measured"
        elif calibrated_s:
            time_s, source = calibrated_s, "calibrated prediction"
            energy_j = calibrated_w * calibrated_s if calibrated_w else None
        else:
            time_s, energy_j, source = self.predicted_time_s, self.predicted_energy_j, "CARM bound"
        return {
            "flops_per_sample": flops / self.batch_size,
            "flops": flops,
            "bytes": bytes_,
            "time_s": time_s,
            "energy_j": energy_j,
            "time_source": source,
            "predicted_time_s": self.predicted_time_s,
            "predicted_energy_j": self.predicted_energy_j,
            "sum_layer_time_s": sum(r.time_s for r in self.layers if r.measured and r.time_s) or None,
            "samples_per_s": self.batch_size / time_s if time_s else None,
            "samples_per_j": self.batch_size / energy_j if energy_j else None,
            "gflops_per_watt": gflops_per_watt(flops, energy_j) if energy_j else None,
            "unknown_layers": len(self.unknown_layers),
            "bound_time_s": self.predicted_time_s,
            "bound_energy_j": self.predicted_energy_j,
            "calibrated_time_s": self.calibration.get("whole_time_s"),
            **self._calibrated_vs_measured(),
            "calibrated_layer_sum_s": sum(r.calibrated_time_s for r in self.known_layers if r.calibrated_time_s) or None,
            # The whole model's calibrated energy: its calibrated power over its calibrated time (the pair above),
            # so that energy / time is the whole-model power; the layers' own energies summed stand apart, as
            # their times do (calibrated_layer_sum_s): a model does not take the sum of its layers' times.
            "calibrated_energy_j": calibrated_w * calibrated_s if calibrated_s and calibrated_w else None,
            "calibrated_power_w": calibrated_w if calibrated_s and calibrated_w else None,
            "calibrated_layer_energy_sum_j": sum(r.calibrated_energy_j for r in self.known_layers
                                                 if r.calibrated_energy_j) or None,
        }

    def _calibrated_vs_measured(self) -> dict[str, Any]:
        """The whole-model calibrated prediction's execution and source, and on a GPU the measurement of the
        same execution beside it: (calibrated - measured) / measured (eager and jit: `inference`; the torch
        CUDA graph: `inference_graph`)."""
        c = self.calibration
        out: dict[str, Any] = {"calibrated_execution": c.get("execution"),
                               "calibrated_source": c.get("whole_source") or c.get("source")}
        if c.get("graph_time_s") is not None:
            out["calibrated_graph_time_s"] = c["graph_time_s"]
        measured = {}
        if self.measurement is not None:
            for m in (self.measurement.inference, self.measurement.inference_graph):
                if m and m.get("time_s"):
                    measured.setdefault(m.get("execution") or "", m["time_s"])
        pairs = {"": (c.get("whole_time_s"), measured.get(c.get("execution") or "")),
                 "graph_": (c.get("graph_time_s"), measured.get("cuda_graph"))}
        for prefix, (predicted, seen) in pairs.items():
            if predicted and seen:
                out[f"measured_{prefix}time_s" if prefix else "measured_whole_time_s"] = seen
                out[f"calibrated_{prefix}rel_err"] = (predicted - seen) / seen
        return out

    def time_shares(self) -> dict[str, float]:
        """Each layer's share of the model's time (measured where measured, else predicted)."""
        times = {r.name: (r.effective_time_s or 0.0) for r in self.known_layers}
        total = sum(times.values())
        return {k: (v / total if total else 0.0) for k, v in times.items()}

    def energy_shares(self) -> dict[str, float]:
        """Each layer's share of the model's energy (measured where measured, else predicted)."""
        energy = {r.name: ((r.energy_j if r.measured else r.predicted_energy_j) or 0.0) for r in self.known_layers}
        total = sum(energy.values())
        return {k: (v / total if total else 0.0) for k, v in energy.items()}

    # ---- outputs ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        shares, energy_shares = self.time_shares(), self.energy_shares()
        layers = []
        for r in self.layers:
            d = r.to_dict()
            d["time_share"] = shares.get(r.name)
            d["energy_share"] = energy_shares.get(r.name)
            layers.append(d)
        return {
            "schema": REPORT_SCHEMA,
            "model": self.model.to_dict(),
            "device": self.device.to_dict(),
            "ceilings": self.ceilings,
            "layers": layers,
            "totals": self.totals(),
            "measurement": self.measurement.to_dict() if self.measurement else None,
            "recommendations": [r.to_dict() for r in self.recommendations],
            "calibration": self.calibration,
            "warnings": self.warnings,
            **({"clocks": self.clocks} if self.clocks else {}),
            **({"timings_s": self.timings_s} if self.timings_s else {}),
        }

    def to_json_text(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=_jsonable) + "\n"

    def to_json(self, path: str | Path) -> None:
        """Write the report as JSON; the file appears whole or not at all (an existing one stays on failure)."""
        write_text_atomic(path, self.to_json_text())

    def print(self, console=None) -> None:
        print_report(self, console)

    def __rich_console__(self, console, options):
        yield from renderables(self, width=options.max_width)

    def plot(self, path: str | Path, kind: str = "carm") -> Path:
        """Write a chart to `path` (a file name; its suffix picks PNG/SVG/PDF), whole or not at all.

        kind "carm": the performance CARM with the layer dots; "energy": GFLOP/s per W against AI.
        """
        if kind not in ("carm", "energy"):
            raise CarmError(f"plot kind must be 'carm' or 'energy', received: {kind!r}")
        draw = plot_energy if kind == "energy" else plot_report
        check_plot_format(check_output_path(path))
        return write_atomic(path, lambda tmp: draw(self, tmp))


def _jsonable(obj):
    if hasattr(obj, "item"):
        return obj.item()
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    return str(obj)
