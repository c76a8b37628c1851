"""Optuna's own matplotlib figures for a study, each titled with where its figures come from."""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path


def plot_study(result, directory: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as ovm

    if not directory.is_dir():
        raise OSError(f"plot directory does not exist: {directory}")
    study = result.study
    source = result.source
    written: list[Path] = []
    names = [o.name for o in result.objectives]
    with _quiet():
        for i, name in enumerate(names):
            target = (lambda t, i=i: t.values[i]) if len(names) > 1 else None
            ax = ovm.plot_optimization_history(study, target=target, target_name=name)
            ax.set_title(f"optimisation history: {name} ({source})")
            written.append(_save(ax, directory / f"{result.study_name}-history-{name}.png"))
            try:
                ax = ovm.plot_param_importances(study, target=target, target_name=name)
            except (ValueError, RuntimeError):  # too few complete trials to fit importances
                continue
            ax.set_title(f"parameter importance for {name} ({source})")
            written.append(_save(ax, directory / f"{result.study_name}-importance-{name}.png"))
        if len(names) > 1:
            ax = ovm.plot_pareto_front(study, target_names=names)
            ax.set_title(f"Pareto front ({source})")
            written.append(_save(ax, directory / f"{result.study_name}-pareto.png"))
    plt.close("all")
    return written


def _save(ax, path: Path) -> Path:
    fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def _quiet():
    @contextlib.contextmanager
    def quiet():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Optuna marks its matplotlib API experimental
            yield

    return quiet()
