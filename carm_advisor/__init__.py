"""carm_advisor: how well Keras models use NVIDIA Tensor Cores, why, and what to change for more work per joule.

    import keras, carm_advisor as advisor
    report = advisor.analyze(keras.applications.VGG16(weights=None), batch_size=64)
    report.print(); report.plot("vgg16-carm.png"); report.to_json("vgg16.json")
"""

from carm_advisor.analysis import analyze
from carm_advisor.carm.power import PowerModel
from carm_advisor.carm.roofline import CARM
from carm_advisor.errors import CarmError
from carm_advisor.profiles.profile import Profile, load_profile
from carm_advisor.report.model import Report

__version__ = "0.1.0"


def measure_ceilings(device: int = 0, quick: bool = False, progress: bool = True) -> Profile:
    """Measure every CARM roof of GPU `device` with its power; returns (and caches) a measured Profile."""
    from carm_advisor.measure.ceilings import measure_ceilings as _measure

    return _measure(device=device, quick=quick, progress=progress)


__all__ = ["analyze", "measure_ceilings", "load_profile", "Profile", "Report", "CARM", "PowerModel", "CarmError"]
