"""Counter verification of the micro-benchmarks: declared vs counted, hand-made counter records."""

from carm_advisor.measure.counters import LayerCounters
from carm_advisor.measure.verify import compare, verify_with_counters


def test_counted_flops_and_bytes_are_compared_on_the_intended_path_and_level():
    infos = {
        "tc_bf16_wgmma_rand": {"kind": "compute", "carm_key": "tc_bf16", "memory_key": ""},
        "fp16x2_fma": {"kind": "compute", "carm_key": "fp16x2", "memory_key": ""},
        "shared_read": {"kind": "memory", "carm_key": "shared", "memory_key": "shared"},
        "hbm_read": {"kind": "memory", "carm_key": "hbm", "memory_key": "hbm"},
        "mix_fp32_l2_c8": {"kind": "mixed", "carm_key": "fp32", "memory_key": "l2"},
    }
    declared = {
        "tc_bf16_wgmma_rand": {"flops": 1e12, "bytes": 0},
        "fp16x2_fma": {"flops": 4e9, "bytes": 0},
        "shared_read": {"flops": 0, "bytes": 2e9},
        "hbm_read": {"flops": 0, "bytes": 1e9},
        "mix_fp32_l2_c8": {"flops": 8e9, "bytes": 2e9},
    }
    counted = {
        "tc_bf16_wgmma_rand": LayerCounters("a", 1, {"tensor_bf16": 1.01e12}),
        "fp16x2_fma": LayerCounters("b", 1, {"cuda_fp16": 2e9}),   # half: HFMA2 counted as one FMA
        "shared_read": LayerCounters("c", 1, {}, {"shared": 2e9}),
        "hbm_read": LayerCounters("d", 1, {}, {}, {"hbm": 0.5e9}),  # half the declared traffic reached HBM
        "mix_fp32_l2_c8": LayerCounters("e", 1, {"cuda_fp32": 8e9}, {}, {"l2": 2.04e9}),
    }
    rows = {r["name"]: r for r in compare(infos, declared, counted)}
    assert rows["tc_bf16_wgmma_rand"]["ok"] and abs(rows["tc_bf16_wgmma_rand"]["flops_ratio"] - 1.01) < 1e-9
    assert not rows["fp16x2_fma"]["ok"] and rows["fp16x2_fma"]["flops_ratio"] == 0.5
    assert rows["shared_read"]["ok"] and rows["shared_read"]["bytes_ratio"] == 1.0
    assert not rows["hbm_read"]["ok"] and rows["hbm_read"]["bytes_ratio"] == 0.5
    assert rows["mix_fp32_l2_c8"]["ok"] and abs(rows["mix_fp32_l2_c8"]["bytes_ratio"] - 1.02) < 1e-9


def test_a_benchmark_missing_from_the_profile_is_not_ok():
    infos = {"fp32_fma": {"kind": "compute", "carm_key": "fp32", "memory_key": ""}}
    (row,) = compare(infos, {"fp32_fma": {"flops": 1, "bytes": 0}}, {})
    assert not row["ok"] and row["note"] == "not profiled"


def test_without_ncu_verification_returns_none(monkeypatch, tmp_path):
    from carm_advisor.measure import counters

    monkeypatch.setattr(counters, "ncu_path", lambda: None)
    assert verify_with_counters(tmp_path / "lib.so") is None
