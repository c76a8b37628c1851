"""The GPU profile: CARM ceilings + device facts + power model + provenance, as versioned JSON."""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from carm_advisor.carm.power_model import DutyCurve, PowerModel, VoltageCurve
from carm_advisor.carm.roofline import CARM, COMPUTE_PATHS, MEMORY_LEVELS
from carm_advisor.errors import ProfileError

SCHEMA = "carm-advisor/profile/1"
# The recorded profiles that ship, by name: each measured on one GPU model (its device.name, NVML's name for that
# model) and built by benchmarks/embed_profile.py from files under benchmarks/results (its docstring says which).
SHIPPED = {"nvidia_h200": "nvidia_h200.json", "nvidia_h100_80gb_hbm3": "nvidia_h100_80gb_hbm3.json"}
# Short names a user may give instead (load_profile("h100"), carm-advise analyze --profile h100).
SHORT_NAMES = {"h200": "nvidia_h200", "h100": "nvidia_h100_80gb_hbm3"}
EMBEDDED = {**SHIPPED, **{short: SHIPPED[name] for short, name in SHORT_NAMES.items()}}
# Where no GPU is measured (a CPU machine), the profile analyze() and a predicted study place a model on.
DEFAULT_EMBEDDED = "nvidia_h200"
_SOURCES = ("measured", "reference", "datasheet", "per_clock_max", "estimate")
# Physical plausibility: far above any GPU we know of (H200: ~2e15 FP8 FLOP/s dense, ~3.4e13 B/s
# shared memory over all SMs), so only a unit slip or a corrupt file fails; a value there would
# otherwise pass and break later (a chart axis at 1e308).
MAX_VALUE = {"compute": 1e17, "memory": 1e15}   # FLOP/s, bytes/s
# A kernel launch + synchronisation takes microseconds; a "floor" of 10 ms or more is not one.
MAX_LAUNCH_FLOOR_S = 1e-2
# Every layer whose working set exceeds L2 is placed on this slope; without it the prediction would
# silently move such layers to a faster cache's slope, so a profile must have it.
REQUIRED_MEMORY = "hbm"


@dataclass(frozen=True)
class Ceiling:
    """One roof (kind "compute", FLOP/s) or slope (kind "memory", bytes/s) with where it came from."""

    key: str
    kind: str
    value: float
    provenance: dict[str, Any]
    sm_clock_mhz: float | None = None     # SM clock observed while it ran
    power_w: float | None = None          # average board power while it ran
    repeats: int | None = None
    spread: float | None = None           # relative: (max - min) / median of the repeats

    @property
    def unit(self) -> str:
        return "FLOP/s" if self.kind == "compute" else "B/s"

    @property
    def label(self) -> str:
        return (COMPUTE_PATHS if self.kind == "compute" else MEMORY_LEVELS).get(self.key, self.key)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("key")
        d["unit"] = self.unit
        return d


@dataclass(frozen=True)
class Profile:
    device: dict[str, Any]
    ceilings: dict[str, Ceiling]
    power_model: PowerModel | None
    provenance: dict[str, Any]
    power_model_provenance: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)   # measurements, sweeps, references: kept verbatim
    launch_floor: dict[str, Any] | None = None             # {"value_s": ..., "provenance": {...}} when measured

    @property
    def launch_floor_s(self) -> float | None:
        """Shortest time one kernel launch + synchronisation takes on this GPU; None when not measured."""
        return None if self.launch_floor is None else float(self.launch_floor["value_s"])

    @property
    def name(self) -> str:
        return str(self.device.get("name", "unknown GPU"))

    @property
    def source(self) -> str:
        """'measured' when the ceilings were measured on the GPU in use now, else 'recorded'."""
        return str(self.provenance.get("source", "recorded"))

    def compute_roofs(self) -> dict[str, float]:
        return {k: c.value for k, c in self.ceilings.items() if c.kind == "compute"}

    def memory_slopes(self) -> dict[str, float]:
        return {k: c.value for k, c in self.ceilings.items() if c.kind == "memory"}

    def carm(self) -> CARM:
        return CARM(self.compute_roofs(), self.memory_slopes())

    @property
    def l2_usable_bytes(self) -> int:
        return int(self.device.get("l2_usable_bytes") or self.device.get("l2_bytes") or 0)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "schema": SCHEMA,
            "device": self.device,
            "provenance": self.provenance,
            "ceilings": {k: c.to_dict() for k, c in self.ceilings.items()},
        }
        if self.power_model is not None:
            pm = self.power_model
            d["power_model"] = {
                "constant_w": pm.constant_w,
                "power_limit_w": pm.power_limit_w,
                "joules_per_flop": pm.joules_per_flop,
                "joules_per_byte": pm.joules_per_byte,
                "provenance": self.power_model_provenance,
            }
            # Optional keys (the sweep fit's): written only when present, so a profile without them round-trips.
            if pm.data_factor:
                d["power_model"]["data_factor"] = pm.data_factor
                d["power_model"]["default_data"] = "random"
            if pm.voltage is not None:
                d["power_model"]["dvfs"] = pm.voltage.to_dict()
            if pm.fit:
                d["power_model"]["fit"] = pm.fit
            if pm.duty is not None:
                d["power_model"]["duty"] = pm.duty.to_dict()
            if pm.duty_tensor_core is not None:
                d["power_model"]["duty_tensor_core"] = pm.duty_tensor_core.to_dict()
            if pm.duty_by_path:
                d["power_model"]["duty_by_path"] = {k: c.to_dict() for k, c in pm.duty_by_path.items()}
        if self.launch_floor is not None:
            d["launch_floor"] = self.launch_floor
        d.update(self.extra)
        return d

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")


def _number(value: Any, where: str, *, positive: bool = True, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProfileError(f"{where} must be a number, received: {value!r}")
    if positive and value <= 0:
        raise ProfileError(f"{where} must be > 0, received: {value!r}")
    return float(value)


def profile_from_dict(data: Any, origin: str = "profile") -> Profile:
    """Validate a profile document and build a Profile; every defect is a one-line ProfileError."""
    if not isinstance(data, dict):
        raise ProfileError(f"{origin}: expected a JSON object, received: {type(data).__name__}")
    if data.get("schema") != SCHEMA:
        raise ProfileError(f"{origin}: expected schema '{SCHEMA}', received: {data.get('schema')!r}")
    for key in ("device", "ceilings", "provenance"):
        if not isinstance(data.get(key), dict):
            raise ProfileError(f"{origin}: '{key}' must be an object")
    if not isinstance(data["device"].get("name"), str):
        raise ProfileError(f"{origin}: device.name must be a string")
    ceilings: dict[str, Ceiling] = {}
    for key, c in data["ceilings"].items():
        where = f"{origin}: ceilings.{key}"
        if not isinstance(c, dict):
            raise ProfileError(f"{where} must be an object")
        kind = c.get("kind")
        known = COMPUTE_PATHS if kind == "compute" else MEMORY_LEVELS if kind == "memory" else None
        if known is None:
            raise ProfileError(f"{where}.kind must be 'compute' or 'memory', received: {kind!r}")
        if key not in known:
            raise ProfileError(f"{where}: unknown {kind} key; expected one of {', '.join(known)}")
        prov = c.get("provenance")
        if not isinstance(prov, dict) or prov.get("source") not in _SOURCES:
            raise ProfileError(f"{where}.provenance.source must be one of {', '.join(_SOURCES)}")
        repeats = c.get("repeats")
        if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1):
            raise ProfileError(f"{where}.repeats must be a positive integer, received: {repeats!r}")
        ceilings[key] = Ceiling(
            key=key,
            kind=kind,
            value=_bounded(c.get("value"), f"{where}.value", MAX_VALUE[kind], "FLOP/s" if kind == "compute" else "B/s"),
            provenance=prov,
            sm_clock_mhz=_number(c.get("sm_clock_mhz"), f"{where}.sm_clock_mhz", optional=True),
            power_w=_number(c.get("power_w"), f"{where}.power_w", optional=True),
            repeats=repeats,
            spread=_number(c.get("spread"), f"{where}.spread", positive=False, optional=True),
        )
    if not any(c.kind == "compute" for c in ceilings.values()) or not any(c.kind == "memory" for c in ceilings.values()):
        raise ProfileError(f"{origin}: needs at least one compute and one memory ceiling")
    if REQUIRED_MEMORY not in ceilings:
        raise ProfileError(f"{origin}: ceilings.{REQUIRED_MEMORY} is missing; every layer larger than L2 is placed on "
                           f"the {MEMORY_LEVELS[REQUIRED_MEMORY]} slope, so a profile must measure it")
    launch_floor = _launch_floor(data.get("launch_floor"), origin)
    power_model = None
    pm_prov: dict[str, Any] = {}
    pm = data.get("power_model")
    if pm is not None:
        if not isinstance(pm, dict):
            raise ProfileError(f"{origin}: power_model must be an object")
        for table in ("joules_per_flop", "joules_per_byte"):
            if not isinstance(pm.get(table), dict):
                raise ProfileError(f"{origin}: power_model.{table} must be an object")
        power_model = PowerModel(
            constant_w=_number(pm.get("constant_w"), f"{origin}: power_model.constant_w", positive=False),
            joules_per_flop=dict(pm["joules_per_flop"]),
            joules_per_byte=dict(pm["joules_per_byte"]),
            power_limit_w=_number(pm.get("power_limit_w"), f"{origin}: power_model.power_limit_w", optional=True),
            **_power_model_options(pm, origin),
        )
        pm_prov = pm.get("provenance") or {}
    known_keys = {"schema", "device", "ceilings", "provenance", "power_model", "launch_floor"}
    extra = {k: v for k, v in data.items() if k not in known_keys}
    return Profile(
        device=dict(data["device"]),
        ceilings=ceilings,
        power_model=power_model,
        provenance=dict(data["provenance"]),
        power_model_provenance=pm_prov,
        extra=extra,
        launch_floor=launch_floor,
    )


def _bounded(value: Any, where: str, maximum: float, unit: str) -> float:
    number = _number(value, where)
    if number >= maximum:
        raise ProfileError(f"{where} = {number:g} {unit} is beyond any GPU (expected below {maximum:g} {unit})")
    return number


def _launch_floor(floor: Any, origin: str) -> dict[str, Any] | None:
    """The optional measured launch + sync floor: {"value_s": seconds, "provenance": {"source": ...}}."""
    if floor is None:
        return None
    where = f"{origin}: launch_floor"
    if not isinstance(floor, dict):
        raise ProfileError(f"{where} must be an object like {{\"value_s\": 5e-06, \"provenance\": {{...}}}}")
    value = _bounded(floor.get("value_s"), f"{where}.value_s", MAX_LAUNCH_FLOOR_S, "s")
    prov = floor.get("provenance")
    if not isinstance(prov, dict) or prov.get("source") not in _SOURCES:
        raise ProfileError(f"{where}.provenance.source must be one of {', '.join(_SOURCES)}")
    return {**floor, "value_s": value}


def _power_model_options(pm: dict, origin: str) -> dict[str, Any]:
    """The optional keys of a power model (data factors, voltage curve, fit quality), validated."""
    out: dict[str, Any] = {}
    factor = pm.get("data_factor")
    if factor is not None:
        if not isinstance(factor, dict) or not all(isinstance(v, dict) for v in factor.values()):
            raise ProfileError(f"{origin}: power_model.data_factor must map each path to {{data: factor}}")
        out["data_factor"] = {k: {d: _number(x, f"{origin}: power_model.data_factor.{k}.{d}", positive=False)
                                  for d, x in v.items()} for k, v in factor.items()}
    if pm.get("default_data", "random") != "random":
        raise ProfileError(f"{origin}: power_model.default_data must be 'random', received: {pm.get('default_data')!r}")
    if pm.get("dvfs") is not None:
        if not isinstance(pm["dvfs"], dict):
            raise ProfileError(f"{origin}: power_model.dvfs must be an object")
        out["voltage"] = VoltageCurve.from_dict(pm["dvfs"])
    if pm.get("duty") is not None:
        if not isinstance(pm["duty"], dict):
            raise ProfileError(f"{origin}: power_model.duty must be an object")
        out["duty"] = DutyCurve.from_dict(pm["duty"])
    if pm.get("duty_tensor_core") is not None:
        if not isinstance(pm["duty_tensor_core"], dict):
            raise ProfileError(f"{origin}: power_model.duty_tensor_core must be an object")
        out["duty_tensor_core"] = DutyCurve.from_dict(pm["duty_tensor_core"])
    if pm.get("duty_by_path") is not None:
        by_path = pm["duty_by_path"]
        if not isinstance(by_path, dict) or not all(isinstance(c, dict) for c in by_path.values()):
            raise ProfileError(f"{origin}: power_model.duty_by_path must map each compute path to a duty curve")
        out["duty_by_path"] = {k: DutyCurve.from_dict(c) for k, c in by_path.items()}
    if pm.get("fit") is not None:
        if not isinstance(pm["fit"], dict):
            raise ProfileError(f"{origin}: power_model.fit must be an object")
        out["fit"] = dict(pm["fit"])
    return out


def embedded_profile_doc(name: str = DEFAULT_EMBEDDED) -> dict[str, Any]:
    """The JSON document of an embedded profile (EMBEDDED: a name of SHIPPED or a short name), as shipped."""
    return json.loads(resources.files("carm_advisor.profiles").joinpath(EMBEDDED[name]).read_text())


@functools.cache
def _shipped_models() -> dict[str, str]:
    """{GPU model name (the shipped file's device.name): shipped profile name}, read from the files themselves."""
    return {embedded_profile_doc(name)["device"]["name"]: name for name in SHIPPED}


def _model(gpu_name: str) -> str:
    """A GPU's model name as NVML gives it, compared with the "NVIDIA " prefix older drivers leave out."""
    return gpu_name.strip().removeprefix("NVIDIA ")


def shipped_profile_name(gpu_name: str | None) -> str | None:
    """The name (SHIPPED) of the profile recorded on GPU model `gpu_name` (NVML's name, e.g. "NVIDIA H100 80GB
    HBM3"), or None where none ships. The whole name must match: "NVIDIA H100 PCIe" or "NVIDIA H200 NVL" (other
    clocks, power limits and memory) are not the SXM boards these profiles were measured on."""
    if not gpu_name:
        return None
    wanted = _model(str(gpu_name))
    return next((name for model, name in _shipped_models().items() if _model(model) == wanted), None)


def shipped_gpu_models() -> list[str]:
    """The GPU models a profile ships for (their device names)."""
    return list(_shipped_models())


def load_profile(path_or_name: str | Path | None = None) -> Profile:
    """A profile from a JSON file, or a shipped one by name: None is the recorded NVIDIA H200 (DEFAULT_EMBEDDED);
    "nvidia_h200" / "h200" and "nvidia_h100_80gb_hbm3" / "h100" name the recorded H200 and H100 80GB HBM3 profiles
    (SHIPPED, SHORT_NAMES). A name of a shipped profile is read before a file of that name."""
    if path_or_name is None or str(path_or_name) in EMBEDDED:
        name = DEFAULT_EMBEDDED if path_or_name is None else str(path_or_name)
        return profile_from_dict(embedded_profile_doc(name), origin=f"embedded profile {name}")
    path = Path(path_or_name)
    if path.is_dir():
        raise ProfileError(f"expected a profile JSON file, received a directory: {path}")
    if not path.is_file():
        raise ProfileError(f"profile file not found: {path}")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: not valid JSON ({exc.__class__.__name__}: {str(exc).splitlines()[0]})") from None
    return profile_from_dict(data, origin=str(path))
