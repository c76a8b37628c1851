"""The power model and the calibration validated on recorded runs, offline: records.py lays each recorded
RunMeasurement out on its model's predicted rows (in-sample and leave-one-model-out calibrated times); scoring.py
fits the duty curves leave one model out and scores every layer and whole model. benchmarks/power_model_validation.py
runs it on named record sets and writes the result files the docs quote."""

from carm_advisor.validation.records import load_runs, whole_reference  # noqa: F401
from carm_advisor.validation.scoring import (  # noqa: F401
    EXCLUSIONS,
    HEADLINE,
    TARGETS,
    VARIANTS,
    compact_layers,
    exclusion,
    summary,
    validate,
)
