"""Measured profiles: built from a ceilings run (measure/ceilings.py) through the roof selection of
carm/fitting.py, selected again from a recorded run, and found again in the cache for this GPU; and the one
choice of the profile a measurement on a GPU is placed under (profile_for_gpu)."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import sys
import time
from pathlib import Path

from carm_advisor.carm.fitting import BenchmarkRun, select_roofs
from carm_advisor.errors import CarmError, KernelBuildError, MeasurementError, ProfileError
from carm_advisor.measure.build import source_hash
from carm_advisor.measure.ceilings import run_ceilings
from carm_advisor.measure.launch_floor import measure_launch_floor
from carm_advisor.power.nvml import open_gpu, open_visible_gpu
from carm_advisor.profiles.cache import cached_profile_path, store_profile
from carm_advisor.profiles.profile import (
    SCHEMA,
    Profile,
    embedded_profile_doc,
    load_profile,
    profile_from_dict,
    shipped_gpu_models,
    shipped_profile_name,
)


def measure_ceilings(device: int = 0, quick: bool = False, progress: bool = True, gpu=None, library=None,
                     command: str | None = None, clock=time.perf_counter, everything: bool = False,
                     verify_counters: bool = False, exclude: tuple[str, ...] = (), binding: str | None = None) -> Profile:
    """Run every benchmark the GPU supports and return a measured Profile (also cached for analyze).
    library: a loaded Binding (else `binding`, 'ctypes' or 'tensorflow', is built and loaded; None picks
    the default, see measure/binding.py); exclude: benchmark names not to run."""
    if gpu is None and library is None:
        from carm_advisor.errors import GPUUnavailableError
        from carm_advisor.power.nvml import gpu_count

        if gpu_count() == 0:   # say so before spending a minute compiling kernels
            raise GPUUnavailableError("no NVIDIA GPU is visible here (NVML sees none): measuring ceilings needs one; "
                                      "'carm-advise ceilings --show' and 'analyze' work on the recorded profile")
    started = time.perf_counter()
    if library is None:
        from carm_advisor.measure.build import detect_arch
        from carm_advisor.measure.kernels import open_binding

        library = open_binding(binding, arch=detect_arch())   # only the visible GPU's arch: a faster build
    load_s = time.perf_counter() - started   # a compile on a cold kernel cache shows here
    gpu = gpu if gpu is not None else open_gpu(device)
    measured = run_ceilings(library, gpu, device=device, quick=quick, progress=progress, clock=clock,
                            everything=everything, verify_counters=verify_counters, exclude=exclude)
    floor_started = time.perf_counter()
    floor = measure_launch_floor(library, device, arch=measured.arch, clock=clock)
    phases_s = {"load_kernels": load_s, "benchmarks": measured.wall_s, "launch_floor": time.perf_counter() - floor_started}
    profile = build_profile(measured.runs, measured.device, gpu, measured.idle_w, measured.arch, wall_s=measured.wall_s,
                            quick=quick, command=command, source_hash=measured.source_hash or current_kernel_source_hash(),
                            counter_check=measured.counter_check)
    profile = dataclasses.replace(profile, launch_floor=floor, provenance={**profile.provenance, "phases_s": phases_s})
    store_profile(profile)
    return profile


def current_kernel_source_hash() -> str | None:
    """The hash of the kernel sources next to the package: what a profile measured today is keyed by."""
    try:
        return source_hash()
    except KernelBuildError:   # sources not found: the profile says so by a null hash
        return None


def build_profile(runs, dev, gpu, idle_w, arch, wall_s, quick=False, command=None, source_hash=None,
                  counter_check=None) -> Profile:
    """A measured Profile from runs: roofs, flags, power model and sweep by carm/fitting.select_roofs;
    the device's identity from `dev` (the binding's DeviceInfo) and `gpu` (NVML: uuid, driver, limits)."""
    driver = _safe(gpu.driver_version)
    power_limit = _safe(gpu.power_limit_w)
    sel = select_roofs(runs, counter_check, idle_w, power_limit, _dt.date.today().isoformat())
    ceilings, flags, pm, fitness = sel["ceilings"], sel["flags"], sel["power_model"], sel["sweep"]
    doc = {
        "schema": SCHEMA,
        "device": {
            "name": dev.name, "uuid": _safe(gpu.uuid), "driver": driver, "compute_capability": f"{dev.cc_major}.{dev.cc_minor}",
            "sm_count": dev.sm_count, "l2_bytes": dev.l2_bytes, "l2_usable_bytes": int(dev.l2_bytes * 0.8),
            "memory_bytes": dev.global_mem_bytes, "sm_clock_max_mhz": _safe(gpu.max_sm_clock_mhz),
            "power_limit_w": power_limit, "idle_power_w": idle_w,
        },
        "provenance": {"source": "measured", "created": _dt.datetime.now().isoformat(timespec="seconds"),
                       "command": command, "quick": quick, "wall_s": wall_s, "kernel_source_hash": source_hash,
                       "flags": flags},
        "ceilings": ceilings,
        "benchmarks": [r.to_dict() for r in runs],
        "sweep": fitness,
    }
    if counter_check is not None:
        doc["counter_check"] = counter_check
    if pm:
        doc["power_model"] = with_carried_duty(pm, dev.name)
    return profile_from_dict(doc, origin="measured profile")


# The duty curves (carm/power_model.DutyCurve) are fitted on measured layers, which a ceilings run has none of.
# A measured profile takes those of the shipped profile of its GPU model, else the default embedded profile's
# (the H200's). The H200's were checked on another GPU with none of its layers fitted (H100 records, H100 sweep
# fit and roofs: per-layer power 11.0% over n=550, whole-model power 6.7% over n=24, in docs/measurements.md):
CARRIED_DUTY_CHECK = "benchmarks/results/nvidia-h100-80gb-hbm3-power-model-h200-duty-2026-12-06.json.xz"
DUTY_KEYS = ("duty", "duty_tensor_core", "duty_by_path")


def with_carried_duty(pm: dict, gpu_name: str | None = None) -> dict:
    """A measured power model (profile JSON) with the duty curves of the shipped profile of its GPU model
    (`gpu_name`), else of the default embedded profile, where it has none of its own; each curve's source says
    where it comes from. Without a carried curve the product would predict every layer at its busy power (the
    CARM operating point)."""
    if any(pm.get(k) for k in DUTY_KEYS):
        return pm
    own = shipped_profile_name(gpu_name)
    ref = embedded_profile_doc(own) if own else embedded_profile_doc()
    ref_pm, name = ref.get("power_model") or {}, ref["device"]["name"]
    checked = "" if own else f"; checked on another GPU: {CARRIED_DUTY_CHECK}"

    def carried(curve: dict) -> dict:
        return {**curve, "source": f"carried from the embedded {name} profile ({curve.get('source')}){checked}"}

    out = dict(pm)
    for key in DUTY_KEYS:
        curve = ref_pm.get(key)
        if curve:
            out[key] = {p: carried(c) for p, c in curve.items()} if key == "duty_by_path" else carried(curve)
    return out


def reselect_recorded(doc: dict, drop: dict[str, str]) -> dict:
    """A measured profile's JSON with its roofs, power model and sweep selected again from its own recorded
    runs, leaving out `drop` ({benchmark name: why}); every figure stays as measured."""
    runs = [BenchmarkRun(**b) for b in doc["benchmarks"]]
    unknown = sorted(set(drop) - {r.name for r in runs})
    if unknown:
        raise MeasurementError(f"cannot drop benchmark(s) the record does not hold: {', '.join(unknown)}")
    date = (doc.get("provenance", {}).get("created") or "")[:10] or None
    sel = select_roofs(runs, doc.get("counter_check"), doc["device"].get("idle_power_w"),
                       doc["device"].get("power_limit_w"), date, drop)
    out = dict(doc)
    out["ceilings"], out["sweep"] = sel["ceilings"], sel["sweep"]
    out.pop("power_model", None)
    if sel["power_model"]:   # no duty curve: the embedded reference is built from this (embed_profile.py --duty)
        out["power_model"] = sel["power_model"]
    out["provenance"] = {**doc.get("provenance", {}), "flags": sel["flags"], "dropped": dict(drop)}
    return out


def measured_profile_path(device: dict) -> Path | None:
    """The file of this GPU's cached measured profile: roofs measured with today's kernel sources first, else the
    newest measured on it; None when it was never measured."""
    current = current_kernel_source_hash()
    return (current and cached_profile_path(device, current)) or cached_profile_path(device)


def measured_profile_for(device: dict) -> Profile | None:
    """This GPU's cached measured profile (measured_profile_path), or None."""
    path = measured_profile_path(device)
    return load_profile(path) if path is not None else None


@dataclasses.dataclass(frozen=True)
class GPUProfile:
    """The profile chosen for a GPU, how (`how`: "cached", "shipped" or "measured now"), and `ref`, what
    load_profile reads it back from (the cached file, or the shipped profile's name): a worker process of a tune
    study loads it by that."""

    profile: Profile
    how: str
    ref: str | None


def profile_for_gpu(device: dict, can_measure: bool, progress: bool = True, gpu=None,
                    cuda_device: int = 0) -> GPUProfile:
    """The profile a measurement on the GPU `device` (a record's device: NVML's name, uuid, driver) is placed
    under; never another GPU model's, whose roofs would misplace every layer (an H100's HBM slope is 3.15 TB/s,
    the H200's 4.65 TB/s). In order:
      (a) this GPU's cached measured profile (measured_profile_path);
      (b) the profile shipped for its GPU model (profiles/profile.shipped_profile_name: by NVML name);
      (c) where the GPU is here to measure (`can_measure`: a measurement taken now, not a replayed record), its
          roofs measured first, as `carm-advise ceilings --quick` does (measure_ceilings(quick=True), ~12 s on the
          H200), and cached for the next run; one line on stderr says so.
    Without any, or where measuring fails, a ProfileError (one line) says how to give one. analyze() (its
    _default_profile) and a measured tune() study choose by this; a profile given to either (profile=,
    --profile FILE) is used as given. `gpu`: the GPU to measure in (c) (default NVML's index `cuda_device`)."""
    path = measured_profile_path(device)
    if path is not None:
        return GPUProfile(load_profile(path), "cached", str(path))
    gpu_name = device.get("name")
    name = shipped_profile_name(gpu_name)
    if name is not None:
        return GPUProfile(load_profile(name), "shipped", name)
    shipped = ", ".join(shipped_gpu_models())
    if not can_measure:
        raise ProfileError(f"no profile of {gpu_name or 'the GPU the record names'} is cached here and none ships "
                           f"(shipped: {shipped}): measure it on that GPU (carm-advise ceilings) and give it "
                           "(--profile FILE, profile=...)")
    print(f"carm_advisor: no profile of {gpu_name} is cached or shipped (shipped: {shipped}): measuring its roofs "
          "first (carm-advise ceilings --quick, ~12 s), cached for the next run", file=sys.stderr, flush=True)
    try:
        profile = measure_ceilings(cuda_device, quick=True, progress=progress, gpu=gpu,
                                   command="carm-advise ceilings --quick (before placing a measurement on this GPU)")
    except CarmError as exc:
        raise ProfileError(f"no profile of {gpu_name} is cached or shipped (shipped: {shipped}), and measuring its "
                           f"roofs failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; give "
                           "one (--profile FILE, profile=...)") from None
    stored = measured_profile_path(device)
    return GPUProfile(profile, "measured now", str(stored) if stored is not None else None)


def profile_for_this_gpu(index: int | None = None, progress: bool = True) -> GPUProfile:
    """profile_for_gpu for the GPU this process measures on: NVML's `index`, else the CUDA device 0 it sees
    (open_visible_gpu)."""
    gpu = open_gpu(index) if index is not None else open_visible_gpu()
    device = {"name": _safe(gpu.name), "uuid": _safe(gpu.uuid), "driver": _safe(gpu.driver_version)}
    return profile_for_gpu(device, can_measure=True, progress=progress, gpu=gpu,
                           cuda_device=index if index is not None else 0)


def _safe(fn):
    try:
        return fn()
    except Exception:
        return None
