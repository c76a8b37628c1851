"""The ceilings runner on a fake kernel library and a fake GPU, through to the measured profile: rates,
best-of variants, per-clock flags, exclusions and counter-undercounted rows, against hand calculations.
(The pure fitting is tested in test_carm_fitting.py, re-selection and the cache in test_profiles_build.py.)"""

import pytest

from carm_advisor.measure import ceilings as C
from carm_advisor.measure import profile as P
from carm_advisor.measure.kernels import BenchmarkInfo, DeviceInfo, RunResult
from carm_advisor.power.fake import FakeGPU


def info(i, name, kind, key, variant, flops_item, bytes_item, memory_key=""):
    return BenchmarkInfo(index=i, name=name, kind=kind, carm_key=key, memory_key=memory_key, variant=variant,
                         instruction="x", item="x", min_arch=80, max_arch=0, flops_per_item=flops_item,
                         bytes_per_item=bytes_item, intensity_param=0, size_is_bytes=kind != "compute")


class FakeLibrary:
    """Each benchmark does `rate` units per second of simulated GPU time."""

    source_hash = "fakehash"

    def __init__(self, gpu=None):
        self.gpu = gpu   # a FakeGPU on virtual time: each call advances it by the simulated seconds
        self.table = [
            (info(0, "tc_bf16_rand", "compute", "tc_bf16", "rand", 1e6, 0), 600e12),
            (info(1, "tc_bf16_zero", "compute", "tc_bf16", "zero", 1e6, 0), 800e12),
            (info(2, "fp32_fma", "compute", "fp32", "chains", 1e6, 0), 60e12),
            (info(3, "hbm_read", "memory", "hbm", "read", 0, 1e6, "hbm"), 4e12),
            (info(4, "hbm_copy", "memory", "hbm", "copy", 0, 1e6, "hbm"), 3.5e12),
            (info(5, "mix_fp32_hbm_c8", "mixed", "fp32", "c8", 4e6, 1e6, "hbm"), 14e12),   # AI 4: bound 16e12
        ]
        self.calls = 0

    def benchmarks(self):
        return [b for b, _ in self.table]

    def device_info(self, device=0):
        return DeviceInfo("Fake H", 9, 0, 100, 1980.0, 3201.0, 5120, 50 * 2**20, 228 * 1024, 227 * 1024, 80 * 2**30, 2048, 65536, 90)

    def run(self, name, *, device=0, size=0, iterations=0, launches=1, warmup=1, config=0):
        self.calls += 1
        b, rate = next((b, r) for b, r in self.table if b.name == name)
        iterations = iterations or 10
        work = 1e6 * iterations                     # units of work per call
        seconds = work / rate
        items = work / 1e6
        if self.gpu is not None:
            self.gpu.advance(seconds * (1 + warmup))
        return RunResult(name, items * b.flops_per_item, items * b.bytes_per_item, seconds, items, 1.0, size,
                         iterations, launches, 1, 1, 0)


def test_measured_profile_has_best_variant_rates_and_fake_power():
    gpu = FakeGPU(power_w=300.0, sm_clock_mhz=1500.0)
    lib = FakeLibrary(gpu)
    settings = C.Settings(call_s=0.1, window_s=1.0, windows=2, sweep_call_s=0.001)
    b = lib.benchmarks()[1]
    run = C.run_benchmark(lib, b, 0, gpu, settings, clock=gpu.now_s)
    assert run.rate == pytest.approx(800e12)            # 1e6 FLOP items at the fake's 800e12 FLOP/s
    assert run.power_w == pytest.approx(300.0, rel=0.05)
    assert run.repeats >= 1 and run.spread == pytest.approx(0.0)


def test_measure_ceilings_end_to_end_flags_a_roof_above_its_per_clock_maximum(tmp_path, monkeypatch):
    monkeypatch.setenv("CARM_ADVISOR_CACHE", str(tmp_path))
    monkeypatch.setattr(C, "Settings", type("S", (C.Settings,), {"for_mode": classmethod(
        lambda cls, quick: cls(call_s=0.1, window_s=1.0, windows=1, sweep_call_s=0.05))}))
    monkeypatch.setattr(C, "idle_power_w", lambda gpu, seconds=0.5: 100.0)
    gpu = FakeGPU(power_w=300.0, sm_clock_mhz=1000.0)
    lib = FakeLibrary(gpu)
    profile = P.measure_ceilings(library=lib, gpu=gpu, progress=False, clock=gpu.now_s)
    assert profile.source == "measured"
    assert profile.ceilings["tc_bf16"].value == pytest.approx(800e12)
    assert profile.ceilings["hbm"].value == pytest.approx(4e12)
    # fp32 at 60e12 on 100 SMs at 1000 MHz: per-clock max 100*256*1e9 = 25.6e12 -> flagged
    assert any(f.startswith("fp32_fma") for f in profile.provenance["flags"])
    assert profile.extra["sweep"]["fitness"] == pytest.approx(0.0)   # 14/16 = 0.875: outside 10%
    from carm_advisor.profiles.cache import cached_profile_for

    cached = cached_profile_for({"uuid": gpu.uuid(), "driver": gpu.driver_version()})
    assert cached is not None and cached.ceilings["tc_bf16"].value == pytest.approx(800e12)


def test_mma_sync_rows_are_skipped_on_hopper_unless_asked():
    mma = BenchmarkInfo(0, "tc_bf16_mma_rand", "compute", "tc_bf16", "", "rand", "mma.m16n8k16.f32.bf16", "x", 80, 0, 1, 0, 0, False)
    wg = BenchmarkInfo(1, "tc_bf16_wgmma_rand", "compute", "tc_bf16", "", "rand", "wgmma.m64n256k16", "x", 90, 90, 1, 0, 0, False)
    assert not C._runnable(mma, 90) and C._runnable(mma, 90, everything=True)
    assert C._runnable(mma, 80) and not C._runnable(wg, 80) and C._runnable(wg, 90)


def test_source_hash_changes_with_the_kernel_sources(tmp_path):
    from carm_advisor.measure.build import source_hash

    (tmp_path / "a.cu").write_text("__global__ void k() {}")
    first = source_hash(tmp_path)
    (tmp_path / "a.cu").write_text("__global__ void k() { }")
    assert source_hash(tmp_path) != first


def test_benchmarks_the_counters_undercount_set_no_roof_and_no_sweep_point(tmp_path, monkeypatch):
    monkeypatch.setenv("CARM_ADVISOR_CACHE", str(tmp_path))
    monkeypatch.setattr(C, "idle_power_w", lambda gpu, seconds=0.5: 100.0)
    gpu = FakeGPU(power_w=300.0, sm_clock_mhz=1980.0)
    lib = FakeLibrary(gpu)
    lib.table.append((info(6, "hbm_read_fast", "memory", "hbm", "cached", 0, 1e6, "hbm"), 6e12))
    lib.table.append((info(7, "mix_fp32_hbm_fast_c8", "mixed", "fp32", "c8", 4e6, 1e6, "hbm"), 15e12))
    settings = C.Settings(call_s=0.1, window_s=0.2, windows=1, sweep_call_s=0.05)
    runs = [C.run_benchmark(lib, b, 0, gpu, settings, clock=gpu.now_s) for b in lib.benchmarks()]
    # hbm_read_fast: half its declared bytes reach HBM (served by a cache above it): 6e12 is not an HBM rate
    check = [{"name": "hbm_read_fast", "flops_ratio": None, "bytes_ratio": 0.5, "ok": False},
             {"name": "hbm_read", "flops_ratio": None, "bytes_ratio": 1.01, "ok": True},
             {"name": "mix_fp32_hbm_c8", "flops_ratio": 1.0, "bytes_ratio": 1.2, "ok": False},   # extra bytes: kept
             {"name": "mix_fp32_hbm_fast_c8", "flops_ratio": 0.9, "bytes_ratio": 1.0, "ok": False}]  # too few FLOPs
    profile = P.build_profile(runs, lib.device_info(), gpu, 100.0, 90, wall_s=1.0, counter_check=check)
    assert profile.ceilings["hbm"].value == pytest.approx(4e12)          # from hbm_read, not the 6e12 row
    assert [p["name"] for p in profile.extra["sweep"]["points"]] == ["mix_fp32_hbm_c8"]   # not the undercounted one
    unchecked_sweep = P.build_profile(runs, lib.device_info(), gpu, 100.0, 90, wall_s=1.0).extra["sweep"]
    assert [p["name"] for p in unchecked_sweep["points"]] == ["mix_fp32_hbm_c8", "mix_fp32_hbm_fast_c8"]
    assert any(f.startswith("hbm_read_fast: left out") for f in profile.provenance["flags"])
    unchecked = P.build_profile(runs, lib.device_info(), gpu, 100.0, 90, wall_s=1.0)
    assert unchecked.ceilings["hbm"].value == pytest.approx(6e12)        # without counters the max stands


def test_measure_ceilings_skips_excluded_benchmarks_and_rejects_unknown_names(tmp_path, monkeypatch):
    monkeypatch.setenv("CARM_ADVISOR_CACHE", str(tmp_path))
    monkeypatch.setattr(C, "idle_power_w", lambda gpu, seconds=0.5: 100.0)
    gpu = FakeGPU(power_w=300.0, sm_clock_mhz=1000.0)
    lib = FakeLibrary(gpu)
    profile = P.measure_ceilings(library=lib, gpu=gpu, progress=False, clock=gpu.now_s, quick=True, exclude=("hbm_copy",))
    ran = [b["name"] for b in profile.extra["benchmarks"]]
    assert "hbm_copy" not in ran and {"hbm_read", "fp32_fma", "mix_fp32_hbm_c8"} <= set(ran)
    with pytest.raises(C.MeasurementError, match="cannot exclude unknown benchmark"):
        P.measure_ceilings(library=lib, gpu=gpu, progress=False, clock=gpu.now_s, quick=True, exclude=("nope",))
