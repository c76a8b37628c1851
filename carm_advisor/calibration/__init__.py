"""Calibrated prediction: what a backend reaches, as a learned fraction of the CARM bound.

policy.py says which layers are pooled together and the constants of the forms in use; samples.py what is learned from;
table.py the per-layer efficiencies and whole.py the whole-model fits of one Calibration; store.py the calibrations
that ship, per GPU model, and this GPU's cache. Efficiencies are relative to one GPU model's roofs and kernels:
another GPU model's are never borrowed.
"""

from carm_advisor.calibration import policy  # noqa: F401
from carm_advisor.calibration.policy import (  # noqa: F401
    BOUND_EXECUTIONS,
    DEFAULT_SHIPPED,
    DISPATCH_OVERLAP_NORM,
    DISPATCHED_EXECUTIONS,
    GPU_TIME_EXECUTIONS,
    KERNEL_FLOOR_EXECUTIONS,
    LAYOUT_COPY_PASSES,
    MATMUL_CLASSES,
    MIN_SAMPLES,
    NEAR_SIZES,
    REPLAYED_EXECUTIONS,
    SHIPPED,
    SIMILAR_CLASS,
    copy_passes_of,
    family,
    is_kernel,
    layer_class,
    layout_copy_bytes,
    layout_copy_passes,
    size_bucket,
    whole_model_execution,
)
from carm_advisor.calibration.samples import (  # noqa: F401
    Estimate,
    Sample,
    WholeFit,
    WholeSample,
    bound_sums,
    bounded_rows,
    kernel_calls,
    layer_execution,
    layers_valid,
    less_floor,
    rows_dtype,
    samples_from_rows,
    whole_from_run,
)
from carm_advisor.calibration.store import (  # noqa: F401
    cached_calibration,
    calibration_path,
    load_calibration,
    load_without_unmarked_copy_samples,
    shipped_calibration,
    store_calibration,
)
from carm_advisor.calibration.table import SAMPLE_FIELDS, SCHEMA, Calibration, read_json  # noqa: F401
from carm_advisor.calibration.whole import WholeModelFits  # noqa: F401
