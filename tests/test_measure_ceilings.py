"""The ceilings runner on a fake kernel library and a fake GPU: rates, best-of variants, per-clock
flags, the fitted power model and the sweep fitness, all against hand calculations."""

import pytest

from carm_advisor.carm import fitting as F
from carm_advisor.measure import ceilings as C
from carm_advisor.profiles import build as P
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


def test_best_runs_keep_the_highest_variant_as_the_roof():
    runs = [F.BenchmarkRun("a", "compute", "tc_bf16", "", "rand", 600e12, 0, 3, None, None, 0.1),
            F.BenchmarkRun("b", "compute", "tc_bf16", "", "zero", 800e12, 0, 3, None, None, 0.1),
            F.BenchmarkRun("c", "memory", "hbm", "hbm", "copy", 3.5e12, 0, 3, None, None, 0.1)]
    best = F.best_runs(runs)
    assert best["tc_bf16"].name == "b" and best["hbm"].name == "c"


def test_per_clock_maximum_of_hopper_fp32():
    # 132 SMs x 256 FLOP/clk x 1980 MHz = 66.9 TFLOP/s (the H100/H200 datasheet's 67)
    assert F.per_clock_max("fp32", 90, 132, 1980) == pytest.approx(132 * 256 * 1980e6)
    assert F.per_clock_max("fp32", 75, 132, 1980) is None


def test_power_model_fit_is_dynamic_power_over_rate():
    runs = [F.BenchmarkRun("r", "compute", "tc_bf16", "", "rand", 600e12, 0, 3, 700.0, 1500, 0.1, flops_per_s=600e12),
            F.BenchmarkRun("z", "compute", "tc_bf16", "", "zero", 800e12, 0, 3, 500.0, 1900, 0.1, flops_per_s=800e12),
            F.BenchmarkRun("h", "memory", "hbm", "hbm", "read", 4e12, 0, 3, 500.0, 1980, 0.1, bytes_per_s=4e12)]
    pm = F.fit_power_model(runs, idle_w=100.0, power_limit_w=700.0)
    assert pm["joules_per_flop"] == {"tc_bf16": pytest.approx(600 / 600e12)}   # zero-data run ignored
    assert pm["joules_per_byte"]["hbm"] == pytest.approx(400 / 4e12)
    assert pm["constant_w"] == 100.0


def test_sweep_fitness_counts_points_within_ten_percent_of_min_roofs():
    runs = [F.BenchmarkRun("m1", "mixed", "fp32", "hbm", "c8", 0, 0, 1, None, None, 0.1, flops_per_s=14.5e12, intensity=4.0),
            F.BenchmarkRun("m2", "mixed", "fp32", "hbm", "c64", 0, 0, 1, None, None, 0.1, flops_per_s=40e12, intensity=64.0)]
    fit = F.sweep_fitness(runs, {"fp32": 60e12}, {"hbm": 4e12})
    # m1: min(60, 4*4=16) -> 14.5/16 = 0.906 (within); m2: min(60, 256) = 60 -> 0.667 (outside)
    assert fit["fitness"] == pytest.approx(0.5)
    assert [round(p["ratio"], 3) for p in fit["points"]] == [0.906, 0.667]


def test_sweep_fitness_takes_the_fastest_implementation_of_each_point_and_flags_any_above_the_roofs():
    mk = lambda name, ai, f: F.BenchmarkRun(name, "mixed", "fp32", "hbm", name, 0, 0, 1, None, None, 0.1,  # noqa: E731
                                            flops_per_s=f, intensity=ai)
    runs = [mk("plain_c8", 4.0, 12e12), mk("pipe_c8", 4.0, 15e12),      # bound 16e12: 0.75 and 0.9375
            mk("plain_c64", 64.0, 50e12), mk("pipe_c64", 64.0, 70e12)]  # bound 60e12: 0.833 and 1.167 (a bug)
    fit = F.sweep_fitness(runs, {"fp32": 60e12}, {"hbm": 4e12})
    assert fit["sweep_points"] == 2
    assert fit["fitness"] == pytest.approx(0.5)          # pipe_c8 within 10%, pipe_c64 above by 17%
    assert fit["missed"] == ["pipe_c64"] and fit["above_roofs"] == ["pipe_c64"]
    assert [p["stands_for_point"] for p in fit["points"]] == [False, True, False, True]


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


def test_cached_profiles_are_told_apart_by_kernel_source_hash(tmp_path, monkeypatch):
    from carm_advisor.profiles.cache import cached_profile_for, store_profile
    from carm_advisor.profiles.profile import SCHEMA, profile_from_dict

    monkeypatch.setenv("CARM_ADVISOR_CACHE", str(tmp_path))

    def profile(hash_, value):
        return profile_from_dict({
            "schema": SCHEMA, "device": {"name": "G", "uuid": "GPU-1", "driver": "580", "sm_clock_max_mhz": 1980},
            "provenance": {"source": "measured", "kernel_source_hash": hash_},
            "ceilings": {"fp32": {"kind": "compute", "value": value, "provenance": {"source": "measured"}},
                         "hbm": {"kind": "memory", "value": 1e12, "provenance": {"source": "measured"}}}})

    store_profile(profile("aaaaaaaaaaaaaaaa", 1e13))
    store_profile(profile("bbbbbbbbbbbbbbbb", 2e13))
    device = {"uuid": "GPU-1", "driver": "580"}
    assert cached_profile_for(device, "aaaaaaaaaaaaaaaa").ceilings["fp32"].value == 1e13
    assert cached_profile_for(device, "bbbbbbbbbbbbbbbb").ceilings["fp32"].value == 2e13
    assert cached_profile_for(device, "cccccccccccccccc") is None
    assert cached_profile_for({"uuid": "GPU-2", "driver": "580"}) is None


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


def test_reselect_recorded_leaves_out_dropped_runs_and_keeps_every_figure_as_measured():
    run = lambda name, kind, key, rate, **kw: F.BenchmarkRun(name, kind, key, key if kind == "memory" else kw.pop("level", ""),  # noqa: E731
                                                             "v", rate, 0.01, 3, 500.0, 1980.0, 0.1, **kw).to_dict()
    doc = {"device": {"idle_power_w": 100.0, "power_limit_w": 700.0}, "provenance": {"created": "2026-12-02T23:00:00",
                                                                                     "flags": ["stale flag"]},
           "counter_check": [{"name": "x", "flops_ratio": 1.1, "bytes_ratio": None, "ok": False}],
           "benchmarks": [run("fp32_fma", "compute", "fp32", 60e12, flops_per_s=60e12),
                          run("hbm_read", "memory", "hbm", 4.6e12, bytes_per_s=4.6e12),
                          run("hbm_read_bulk", "memory", "hbm", 5.0e12, bytes_per_s=5.0e12),
                          run("mix_c8", "mixed", "fp32", 0, level="hbm", flops_per_s=17.5e12, bytes_per_s=4.375e12,
                              intensity=4.0)]}
    out = P.reselect_recorded(doc, {"hbm_read_bulk": "flawed walk"})
    assert out["ceilings"]["hbm"]["value"] == 4.6e12           # the next best HBM run, unchanged
    assert out["ceilings"]["hbm"]["provenance"]["date"] == "2026-12-02"
    # the sweep point against the new slope: 17.5e12 / (4.6e12 * 4) = 0.951 (0.875 against the 5e12 slope)
    assert out["sweep"]["points"][0]["ratio"] == pytest.approx(17.5 / 18.4)
    assert out["provenance"]["dropped"] == {"hbm_read_bulk": "flawed walk"}
    assert out["provenance"]["flags"][0].startswith("hbm_read_bulk: left out")
    assert "x: counters see flops x1.1, bytes xNone of what it declares" in out["provenance"]["flags"]
    assert "stale flag" not in out["provenance"]["flags"]        # flags are derived again, not carried
    assert out["power_model"]["joules_per_byte"]["hbm"] == pytest.approx(400 / 4.6e12)
    assert out["power_model"]["provenance"]["date"] == "2026-12-02"   # the run's day, not the day of re-selection
    assert P.reselect_recorded(doc, {})["ceilings"]["hbm"]["value"] == 5.0e12
    with pytest.raises(C.MeasurementError, match="does not hold"):
        P.reselect_recorded(doc, {"nope": "?"})
