import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "vgg" / "compare_precisions.py"


def test_vgg_precision_example_ranks_bf16_above_float32(tmp_path):
    spec = importlib.util.spec_from_file_location("compare_precisions", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    table = module.main(["--batch-size", "8", "--out", str(tmp_path)])
    assert table.row_count == 3
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [f"vgg16-{p}.png" for p in sorted(module.POLICIES)]
    import json

    eff = {p: json.loads((tmp_path / f"vgg16-{p}.json").read_text())["totals"]["gflops_per_watt"] for p in module.POLICIES}
    # BF16 Tensor Cores halve the bytes and double the roof: the CARM must predict more work per joule.
    assert eff["mixed_bfloat16"] > eff["float32"]
