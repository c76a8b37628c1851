"""Calibrated prediction: what a backend reaches, as a learned fraction of the CARM bound.

policy.py says which layers are pooled together and which forms the fits take; samples.py what is learned from;
table.py the per-layer efficiencies and whole.py the whole-model fits of one Calibration; store.py the calibrations
that ship, per GPU model, and this GPU's cache. Efficiencies are relative to one GPU model's roofs and kernels:
another GPU model's are never borrowed.
"""

from carm_advisor.calibration import policy  # noqa: F401
from carm_advisor.calibration.policy import (  # noqa: F401
    BOUND_EXECUTIONS,
    CELL_STATISTIC,
    CELL_STATISTICS,
    DEFAULT_SHIPPED,
    DISPATCH_OVERLAP_NORM,
    DISPATCHED_EXECUTIONS,
    EAGER_HOST,
    EAGER_HOST_FORMS,
    GPU_TIME_EXECUTIONS,
    JIT_FLOOR_BUSY,
    JIT_FUSION,
    JIT_FUSION_FORMS,
    JIT_HOST,
    JIT_HOST_FORMS,
    JIT_OTHER_SHARE,
    JIT_OTHER_SHARES,
    JIT_PER_DTYPE,
    JIT_SPLIT_E,
    KERNEL_FLOOR_EXECUTIONS,
    KIN_DTYPES,
    KIN_DTYPES_OF,
    LAYOUT_COPIES,
    LAYOUT_COPY_FORM,
    LAYOUT_COPY_FORMS,
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
    FUSION_SAVED,
    Estimate,
    Sample,
    WholeFit,
    WholeSample,
    bound_sums,
    bounded_rows,
    chained_bound_s,
    compiled_counts,
    eager_host_per_call_s,
    fused_bound_s,
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
