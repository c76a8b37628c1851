"""carm_advisor: how well Keras models use NVIDIA Tensor Cores, why, and what to change for more work per joule.

    import keras, carm_advisor as advisor
    report = advisor.analyze(keras.applications.VGG16(weights=None), batch_size=64)
    report.print(); report.plot("vgg16-carm.png"); report.to_json("vgg16.json")

Names are imported on first use, so `import carm_advisor` (and the CLI's start) stays fast and does
not pull in Keras or a backend before it is needed.
"""

from importlib import import_module

__version__ = "0.1.0"

_LAZY = {
    "analyze": "carm_advisor.advise.analyze",
    "load_profile": "carm_advisor.profiles.profile",
    "Profile": "carm_advisor.profiles.profile",
    "Report": "carm_advisor.report.model",
    "Predictor": "carm_advisor.predict",
    "CARM": "carm_advisor.carm.roofline",
    "PowerModel": "carm_advisor.carm.power_model",
    "CarmError": "carm_advisor.errors",
    "tune": "carm_advisor.tune",
    "TuneResult": "carm_advisor.tune",
}


_NEEDS_KERAS = {"analyze"}


def __getattr__(name):
    if name in _LAZY:
        if name in _NEEDS_KERAS:   # our first Keras import: quiet, and a missing backend says what to install
            import_module("carm_advisor.models.keras_import").import_keras()
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'carm_advisor' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


def measure_ceilings(device: int = 0, quick: bool = False, progress: bool = True):
    """Measure every CARM roof of GPU `device` with its power; returns (and caches) a measured Profile."""
    from carm_advisor.measure.profile import measure_ceilings as _measure

    return _measure(device=device, quick=quick, progress=progress)


__all__ = [
    "analyze", "measure_ceilings", "load_profile", "Profile", "Report", "Predictor", "CARM", "PowerModel", "CarmError",
    "tune", "TuneResult",
]
