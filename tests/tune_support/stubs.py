"""Hand-built predictors and runners for the tuner's tests: every figure is typed here, none computed
by the code under test."""

from __future__ import annotations

from carm_advisor.trials.predicted import Prediction
from carm_advisor.trials.runner import Measurement, TrialFailed, TrialOutOfMemory


class TablePredictor:
    """CARM bounds from a table keyed by precision: (time_s, energy_j) per batch of 32; scaled with the batch."""

    def __init__(self, table: dict[str, tuple[float, float]], flops_per_sample: float = 1e9) -> None:
        self.table = table
        self.flops_per_sample = flops_per_sample
        self.profile = None

    def predict(self, config) -> Prediction:
        time_s, energy_j = self.table[config.precision]
        scale = config.batch_size / 32
        return Prediction(time_s * scale, energy_j * scale, self.flops_per_sample * config.batch_size,
                          config.batch_size, rows=[])

    def flops(self, config) -> float:
        return self.flops_per_sample * config.batch_size


class ScriptedRunner:
    """Measurements from a table keyed by precision (time_s, energy_j, output_error) per batch of 32."""

    source = "fake"

    def __init__(self, table, oom_from_batch: int | None = None, fail_precisions=(), flops_per_sample: float = 1e9):
        self.table = table
        self.oom_from_batch = oom_from_batch
        self.fail_precisions = set(fail_precisions)
        self.flops_per_sample = flops_per_sample
        self.calls: list[str] = []

    def run(self, config) -> Measurement:
        self.calls.append(config.key)
        if self.oom_from_batch is not None and config.batch_size >= self.oom_from_batch:
            raise TrialOutOfMemory(f"CUDA out of memory at batch {config.batch_size}")
        if config.precision in self.fail_precisions:
            raise TrialFailed(f"worker died on {config.precision}")
        time_s, energy_j, error = self.table[config.precision]
        scale = config.batch_size / 32
        return Measurement(time_s=time_s * scale, energy_j=energy_j * scale,
                           flops=self.flops_per_sample * config.batch_size, batch_size=config.batch_size,
                           source="fake", output_error=error)

    def close(self) -> None:
        pass


class BackendTablePredictor:
    """Bound and calibrated (time_s, energy_j) per BACKEND at batch 32 (32e9 FLOPs: GF/W = 32 / energy_j), for
    studies over torch eager / jax xla / tensorflow graph. `bound` and `calibrated` are the tables; a backend
    missing from `calibrated` (or calibrated=False) keeps its bound, labelled so."""

    def __init__(self, bound: dict, calibrated_table: dict, calibrated: bool = True) -> None:
        self.bound, self.calibrated_table, self.calibrated = bound, calibrated_table, calibrated
        self.profile = None
        self.calibration = None

    def predict(self, config):
        t, e = self.bound[config.backend]
        return Prediction(t, e, 32e9, 32, rows=[])

    def value_prediction(self, config):
        from carm_advisor.trials.predicted import VALUE_CALIBRATED

        if self.calibrates(config.backend, config.compiler):
            t, e = self.calibrated_table[config.backend]
            return Prediction(t, e, 32e9, 32, "predicted (calibrated)", [], value_source=VALUE_CALIBRATED)
        return self.predict(config)

    def calibrates(self, backend, compiler):
        return self.calibrated and backend in self.calibrated_table

    def flops(self, config):
        return 32e9


def three_backend_space():
    """torch eager, jax xla, tensorflow graph; float32, batch 32, channels_last: one configuration each."""
    from carm_advisor.trials.space import SearchSpace

    return SearchSpace(backends=("torch", "jax", "tensorflow"), precisions=("float32",), batch_sizes=(32,),
                       layouts=("channels_last",), compilers={"torch": ("eager",), "jax": ("xla",), "tensorflow": ("graph",)})
