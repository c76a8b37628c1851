"""Rule 3H's two carried-curve profiles (README, nineteenth session): the embedded H200 profile with its duty curves
replaced by those fitted in sample on every H200 record through -s13, (u) per unit, (p) per unit plus per path.
Run from the repository root: python benchmarks/results/nvidia-h100-80gb-hbm3-rule3h-2026-12-06-s19/make_profiles.py"""
import json
from pathlib import Path

from carm_advisor.carm.power_model import DutyCurve
from carm_advisor.profiles.profile import load_profile
from carm_advisor.result_files import read_json

HERE = Path(__file__).resolve().parent
SOURCE = "nvidia-h200-power-model-2026-12-06-s18-in-use-after-separable-fix.json.xz"
fit = read_json(HERE.parent / SOURCE)
base = json.loads((HERE.parents[2] / "carm_advisor" / "profiles" / "nvidia_h200.json").read_text())


def curve(raw: dict, what: str) -> dict:
    c = DutyCurve.from_dict(raw).to_dict()   # checked as a curve
    c["source"] = f"fitted in sample on every H200 record through -s13 ({what}; benchmarks/results/{SOURCE})"
    return c


unit = {"duty": curve(fit["duty_curves"]["in_sample"], "per unit"),
        "duty_tensor_core": curve(fit["duty_curves"]["tensor_core_in_sample"], "Tensor Core layers")}
by_path = {p: curve(c, f"path {p}") for p, c in fit["validation"]["duty_path_choice"]["curves"]["by_path_in_sample"].items()}
for name, extra in (("u", {}), ("p", {"duty_by_path": by_path})):
    doc = json.loads(json.dumps(base))
    pm = {k: v for k, v in doc["power_model"].items() if k not in ("duty", "duty_tensor_core", "duty_by_path")}
    doc["power_model"] = {**pm, **unit, **extra}
    out = HERE / f"h200-curves-{name}.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    pmodel = load_profile(str(out)).power_model
    print(out.name, "duty_by_path:", sorted(pmodel.duty_by_path))
