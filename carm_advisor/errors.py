"""One root error and its few children.

Every failure a user can cause or meet (bad input, no GPU, no NVML, no permission, a failed
kernel build) is one of these; the CLI turns them into a one-line message and exit code 2.
"""


class CarmError(Exception):
    """Root of every error carm_advisor raises on purpose."""


class ProfileError(CarmError):
    """A GPU profile is missing, malformed or inconsistent."""


class ModelLoadError(CarmError):
    """A model name or file could not be turned into a Keras model."""


class MappingError(CarmError):
    """A layer could not be mapped onto the CARM (unknown layer with strict=True, unbuilt model)."""


class UnknownLayerError(MappingError):
    """A layer class has no cost model."""


class MeasurementError(CarmError):
    """A measurement could not be taken or its recording could not be read."""


class GPUUnavailableError(MeasurementError):
    """No NVIDIA GPU (or no driver) is usable here."""


class PowerError(CarmError):
    """NVML is missing, or a power/clock query or setting failed."""


class NotSupportedError(PowerError):
    """The GPU or driver does not support this NVML query or setting."""


class NoPermissionError(PowerError):
    """Changing clocks or power limits needs privileges this process does not have."""


class KernelBuildError(CarmError):
    """The CUDA micro-benchmarks could not be compiled or loaded."""


class BackendUnavailableError(CarmError):
    """The Keras backend asked for (KERAS_BACKEND) or Keras itself is not installed."""
