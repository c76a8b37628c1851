"""The energy-efficiency tuner: an Optuna study over precision, batch size, layout, compilation, backend
(and SM clock), every trial measured on the GPU (or predicted from the CARM where there is none).

    import carm_advisor as advisor
    result = advisor.tune("vgg16", objective="gflops_per_watt", n_trials=30)
    print(result.best.config, result.gain()); result.to_json("vgg16-tune.json"); result.plot("plots/")

    from carm_advisor.tune import TuneOptions   # the same options as one checked value, to keep and derive
    options = TuneOptions(objective="gflops_per_watt", n_trials=30)
    result = advisor.tune("vgg16", options.replace(backends=("torch",)))

Modules: options (TuneOptions: everything tune() takes), objectives (what is optimised), study (tune itself, in
named steps) and study_setup (what it checks and builds first), objective (the Optuna objective, state and
callbacks), storage and study_files (where a study and its files live), parallel (several GPUs, joining
workers), fingerprint (what a resumed study must match), clocks, result, records, render, plots. The space,
the predictions and the trial runners are trials/.
"""

from importlib import import_module

# Imported on first use: the CLI builds its parser from objectives.py without loading Optuna.
_LAZY = {
    "tune": "carm_advisor.tune.study", "TuneResult": "carm_advisor.tune.result",
    "TuneOptions": "carm_advisor.tune.options",
    "SearchSpace": "carm_advisor.trials.space", "TrialConfig": "carm_advisor.trials.space",
    "baseline_config": "carm_advisor.trials.space", "installed_backends": "carm_advisor.trials.space",
    "OBJECTIVES": "carm_advisor.tune.objectives", "Objective": "carm_advisor.tune.objectives",
    "get_objective": "carm_advisor.tune.objectives",
}
__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'carm_advisor.tune' has no attribute {name!r}")


# `carm_advisor.tune` names both this package and the function: importing any tune module binds the
# package to that attribute of carm_advisor, so the package itself calls tune() when called.
import sys as _sys  # noqa: E402
import types as _types  # noqa: E402


class _CallablePackage(_types.ModuleType):
    def __call__(self, *args, **kwargs):
        from carm_advisor.tune.study import tune

        return tune(*args, **kwargs)


_sys.modules[__name__].__class__ = _CallablePackage
