"""The Report: every figure the advisor computed for one model on one GPU profile."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from carm_advisor.carm.power_model import gflops_per_watt

REPORT_SCHEMA = "carm-advisor/report/1"


@dataclass
class LayerRow:
    name: str
    type: str
    dtype: str
    flops: int                        # per batch
    bytes: int                        # per batch (analytic, compulsory traffic)
    ai: float | None                  # FLOP/byte; measured (counters) where available, else analytic
    ai_source: str                    # "analytic" | "counters"
    path: str                         # compute roof key
    level: str                        # memory slope key
    bound: str                        # "compute:<path>", "memory:<level>", "none", "unknown", "above-roof"
    attainable_flops_per_s: float | None
    predicted_time_s: float | None
    predicted_energy_j: float | None
    tensor_core: bool
    known: bool
    time_s: float | None = None       # measured
    energy_j: float | None = None     # measured
    power_w: float | None = None      # measured
    sm_clock_mhz: float | None = None  # measured
    time_spread: float | None = None
    measured: bool = False
    notes: str = ""
    channels: tuple[int, ...] = ()    # (input, output) channels of matmul-class layers; () where n/a
    analytic_ai: float | None = None  # FLOP/byte from the cost model, kept when counters replace `ai`
    predicted_bound: str = ""         # the analytic bound, kept when a measurement rebinds the layer
    input_bytes: int = 0              # activations read (bytes minus weights and outputs), per batch
    output_elements: int = 0          # elements the layer writes, per batch (its outputs' sizes): how far it fills the GPU
    layout_copy_s: float = 0.0        # CARM bound of the copies the backend makes around it for its data format
                                      # (calibration.layout_copy_passes: Keras' torch backend, channels_last), per batch
    layout_copy_calibrated_s: float | None = None   # the same copies as the calibration counts them
                                      # (predict.layout_copies_time_s; None: not calibrated)
    # A calibration's figures beside the CARM bound's (predicted_*); serialised only when one was applied.
    # (carm_advisor/calibration.py: what this backend is expected to reach; JSON: bound_time_s is the bound.)
    calibrated_time_s: float | None = None
    calibrated_energy_j: float | None = None
    predicted_power_w: float | None = None  # board power at its CARM operating point (cap included), predicted
    energy_optimal_sm_clock_mhz: float | None = None  # predicted, where the profile has a voltage curve
    energy_optimal_gain: float | None = None  # predicted energy at the default clock / at the optimal one
    calibration: str = ""             # the calibration key and its sample count, "none", or "" (not asked)

    @property
    def achieved_flops_per_s(self) -> float | None:
        if self.time_s and self.flops:
            return self.flops / self.time_s
        return None

    @property
    def efficiency(self) -> float | None:
        a = self.achieved_flops_per_s
        if a is None or not self.attainable_flops_per_s:
            return None
        return a / self.attainable_flops_per_s

    @property
    def calibrated_power_w(self) -> float | None:
        """The layer's predicted board power at its calibrated time, inside the model (the duty power; benchmarks/
        power_model_validation.py validates it per layer against layers replayed alone, scaled there by the GPU's
        busy share of each replay, which a layer inside a model does not pay), None without a calibration."""
        if self.calibrated_energy_j and self.calibrated_time_s:
            return self.calibrated_energy_j / self.calibrated_time_s
        return None

    @property
    def effective_time_s(self) -> float | None:
        """Measured time where there is one, else the CARM's prediction."""
        return self.time_s if self.measured else self.predicted_time_s

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("calibrated_time_s", "calibrated_energy_j"):
            if d[key] is None:
                del d[key]
        if not d["layout_copy_s"]:
            del d["layout_copy_s"]
        if d["layout_copy_calibrated_s"] is None or d["layout_copy_calibrated_s"] == d.get("layout_copy_s"):
            del d["layout_copy_calibrated_s"]   # only where the calibration counts the copies apart from their bound
        d["achieved_flops_per_s"] = self.achieved_flops_per_s
        d["efficiency"] = self.efficiency
        d["bound_time_s"] = self.predicted_time_s
        d["bound_energy_j"] = self.predicted_energy_j
        return d

    @property
    def expected_time_s(self) -> float | None:
        """The calibrated prediction where there is one, else the CARM bound."""
        return self.calibrated_time_s if self.calibrated_time_s is not None else self.predicted_time_s


@dataclass
class Recommendation:
    title: str
    detail: str
    expected_gain: str                # human-readable, e.g. "1.8x faster, 1.6x less energy (predicted)"
    speedup: float | None = None      # predicted time ratio current/new
    energy_ratio: float | None = None  # predicted energy ratio current/new
    layers: list[str] = field(default_factory=list)
    basis: str = "CARM prediction"
    # A configuration change `--verify` can apply and measure: keys of measure/trial.py's config
    # (precision, layout, batch_size, backend, compile); None for advice that is not a switch.
    change: dict[str, Any] | None = None
    verified: dict[str, Any] | None = None   # measured beside predicted gain (verify_recommendations)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ModelInfo:
    """What was analysed: the model and the configuration it ran (or is predicted to run) in."""

    name: str
    batch_size: int
    precision: str                    # the Keras dtype policy name, or the precision asked for
    layout: str                       # "channels_last" | "channels_first"
    backend: str                      # the Keras backend
    math_mode: dict[str, str]         # what float32 ran as: {"conv": "tf32"|"fp32", "matmul": ..., "source": ...}
    params: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class DeviceInfo:
    """The GPU the figures are for, and the profile whose roofs placed them."""

    name: str | None
    source: str                       # "measured" | "profile"
    profile: str                      # the profile's device name
    profile_source: str               # "measured" | "recorded" | ...
    profile_provenance: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)  # what the measuring run recorded (uuid, driver, ...)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        d.update({k: v for k, v in self.extra.items() if k not in d})
        return d


@dataclass
class MeasurementInfo:
    """Whole-model measurements of the run the report merged (each a ModelMeasurement as a dict)."""

    inference: dict[str, Any] | None
    training_step: dict[str, Any] | None
    inference_graph: dict[str, Any] | None
    date: str | None
    command: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
        from carm_advisor.files import write_text_atomic

        write_text_atomic(path, self.to_json_text())

    def print(self, console=None) -> None:
        from carm_advisor.report.render import print_report

        print_report(self, console)

    def __rich_console__(self, console, options):
        from carm_advisor.report.render import renderables

        yield from renderables(self, width=options.max_width)

    def plot(self, path: str | Path, kind: str = "carm") -> Path:
        """Write a chart to `path` (a file name; its suffix picks PNG/SVG/PDF), whole or not at all.

        kind "carm": the performance CARM with the layer dots; "energy": GFLOP/s per W against AI.
        """
        from carm_advisor.files import check_output_path, write_atomic
        from carm_advisor.report.plot import check_plot_format, plot_report

        if kind not in ("carm", "energy"):
            from carm_advisor.errors import CarmError

            raise CarmError(f"plot kind must be 'carm' or 'energy', received: {kind!r}")
        if kind == "energy":
            from carm_advisor.report.plot_energy import plot_energy as plot_report  # noqa: F811

        check_plot_format(check_output_path(path))
        return write_atomic(path, lambda tmp: plot_report(self, tmp))


def _jsonable(obj):
    if hasattr(obj, "item"):
        return obj.item()
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    return str(obj)
