"""The configuration space: which precisions, batch sizes, layouts, compilers, backends and clocks a
study may try, each only where the backend supports it.

Parameters by name (Optuna's): `backend`, `precision`, `batch_size`, `layout`, then one compile
parameter per backend (`compile_torch`: eager or torch.compile; `compile_tensorflow`: graph or xla;
jax always compiles with XLA: Keras on jax without jit runs op by op, which nobody deploys) and,
with --apply-clocks only, `sm_clock_mhz`.

Precisions: "float32" is the backend's default float32 math (what a user runs today: torch TF32
convolutions and FP32 matmuls, jax and tensorflow TF32 for both); "float32_tf32" turns TF32 on for
convolutions and matmuls; "float32_no_tf32" turns it off (IEEE FP32 on CUDA cores); "mixed_float16"
and "mixed_bfloat16" are Keras' mixed policies. "int8" and "float8" are Keras' quantisation
(`model.quantize(mode)`) of the model built under mixed_bfloat16: Keras refuses int8 under a float16 compute
dtype (keras/src/layers/layer.py _check_quantize_args), and its float8 Dense rounds the bias through bfloat16 for
XLA's fused FP8 matmul (layers/core/dense.py _float8_call), so both take the bfloat16 policy, which also makes
"mixed_bfloat16" the configuration they differ from by the quantisation alone. model.quantize converts Dense and
EinsumDense (and int8 Embedding) layers only: the quantised precisions are searched only where the layers it
converts carry at least QUANTIZE_MIN_FLOPS_SHARE of the model's FLOPs (with_quantization; a transformer's
projections and feed-forward layers), not in a CNN whose convolutions it leaves as they are. Their output error is
measured against float32 with TF32 off on the same weights, as every precision's (--max-output-error).

Each precision is one row of PRECISION_SETUP (its Keras policy, compute dtype, TF32 switch, quantisation mode):
the trial worker reads the policy and the TF32 switch from it (TrialConfig.keras_policy, .tf32), and
`TrialConfig.keras_code` (the lines a user types to run the configuration) every field, so a precision added there
(a quantised one: `quantize="int8"`) is printed as it is set up.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from carm_advisor.models.loader import application_names


@dataclass(frozen=True)
class PrecisionSetup:
    """How one precision name is set up: the Keras dtype policy its model is built under, the dtype its layers
    compute in, the float32 TF32 switch (True on, False off, None the backend's default) and the Keras
    quantisation mode applied to the built model (`model.quantize(mode)`; None: not quantised)."""

    policy: str
    compute_dtype: str
    tf32: bool | None = None
    quantize: str | None = None


PRECISION_SETUP = {
    "float32": PrecisionSetup("float32", "float32"),
    "float32_tf32": PrecisionSetup("float32", "float32", tf32=True),
    "float32_no_tf32": PrecisionSetup("float32", "float32", tf32=False),
    "mixed_float16": PrecisionSetup("mixed_float16", "float16"),
    "mixed_bfloat16": PrecisionSetup("mixed_bfloat16", "bfloat16"),
    "int8": PrecisionSetup("mixed_bfloat16", "bfloat16", quantize="int8"),
    "float8": PrecisionSetup("mixed_bfloat16", "bfloat16", quantize="float8"),
}
PRECISIONS = tuple(PRECISION_SETUP)
QUANTIZED_PRECISIONS = tuple(name for name, setup in PRECISION_SETUP.items() if setup.quantize)
# The least share of a model's FLOPs the layers model.quantize converts must carry for its quantised precisions to be
# searched: the rest keep their time whatever the quantised layers gain, so below a tenth even infinitely fast
# quantised layers save less than 10% of the compute (1 / (1 - 0.1) = 1.11x), for the accuracy quantisation costs.
QUANTIZE_MIN_FLOPS_SHARE = 0.10
LAYOUTS = ("channels_last", "channels_first")
BACKENDS = ("torch", "jax", "tensorflow")
COMPILERS = {"torch": ("eager", "torch.compile"), "tensorflow": ("graph", "xla"), "jax": ("xla",)}
DEFAULT_BATCH_SIZES = (32, 64, 128, 256)
# What Keras runs when the user changes nothing (model.predict / model(x) on each backend).
DEFAULT_COMPILER = {"torch": "eager", "tensorflow": "graph", "jax": "xla"}
DEFAULT_BATCH_SIZE = 32  # keras.Model.predict's default batch size
# What model.predict compiles with on a GPU when the user sets nothing (jit_compile="auto": keras/src/trainers/
# trainer.py, _resolve_auto_jit_compile: eager on torch, XLA elsewhere where every layer supports it).
PREDICT_DEFAULT_COMPILER = {"torch": "eager", "tensorflow": "xla", "jax": "xla"}
# Where no float32 math switch changes anything, two precision names are the same configuration.
_SAME_AS_DEFAULT_FLOAT32 = {"jax": "float32_tf32", "tensorflow": "float32_tf32"}
PRECISION_DTYPE = {name: setup.compute_dtype for name, setup in PRECISION_SETUP.items()}
KERAS_POLICY = {name: setup.policy for name, setup in PRECISION_SETUP.items()}

# The lines that set float32's TF32 switch on each backend ({on}: True/False; jax's {jax}: its matmul precision), as
# the trial worker sets it (measure/backends: float32_math): torch's cuBLAS and cuDNN flags, jax's default matmul
# precision, TensorFlow's TF32 execution flag.
TF32_CODE = {
    "torch": ("import torch", "torch.backends.cuda.matmul.allow_tf32 = {on}", "torch.backends.cudnn.allow_tf32 = {on}"),
    "jax": ("import jax", 'jax.config.update("jax_default_matmul_precision", "{jax}")'),
    "tensorflow": ("import tensorflow as tf", "tf.config.experimental.enable_tensor_float_32_execution({on})"),
}
JAX_MATMUL_PRECISION = {True: "tensorfloat32", False: "float32"}
# Each compiler as `model.compile(jit_compile=...)` sets it (the trial worker compiles so), and what that is.
JIT_COMPILE = {"eager": (False, "eager: each layer dispatched from Python"),
               "torch.compile": (True, "torch.compile of Keras' predict step"),
               "graph": (False, "tf.function without XLA"),
               "xla": (True, "XLA")}
DEFAULT_MODEL_EXPR = "build_model()"


@dataclass(frozen=True)
class TrialConfig:
    """One point of the space. sm_clock_mhz None: the GPU's own clock management."""

    backend: str
    precision: str = "float32"
    batch_size: int = DEFAULT_BATCH_SIZE
    layout: str = "channels_last"
    compiler: str = "eager"
    sm_clock_mhz: float | None = None

    @property
    def key(self) -> str:
        """Canonical identity: two configurations that run the same way share it."""
        precision = self.precision
        if _SAME_AS_DEFAULT_FLOAT32.get(self.backend) == precision:
            precision = "float32"
        clock = "auto" if self.sm_clock_mhz is None else f"{self.sm_clock_mhz:g}MHz"
        return f"{self.backend}/{precision}/b{self.batch_size}/{self.layout}/{self.compiler}/{clock}"

    @property
    def keras_policy(self) -> str:
        return KERAS_POLICY[self.precision]

    @property
    def compute_dtype(self) -> str:
        return PRECISION_DTYPE[self.precision]

    @property
    def tf32(self) -> bool | None:
        """TF32 for float32 work: True on, False off, None the backend's default."""
        return PRECISION_SETUP[self.precision].tf32

    @property
    def quantize(self) -> str | None:
        """The Keras quantisation mode applied to the built model (`model.quantize(mode)`), None: not quantised."""
        return PRECISION_SETUP[self.precision].quantize

    def keras_code(self, model_expr: str = DEFAULT_MODEL_EXPR) -> str:
        """The Python lines that run the model in this configuration: the backend chosen before Keras is imported,
        the TF32 switch where the precision sets one, the dtype policy and image data format set before the model
        is built (`model_expr`: the expression that builds it), its quantisation, its compilation and the batch
        size of the calls. The clock is no Keras setting: a locked SM clock is said in a comment."""
        setup = PRECISION_SETUP[self.precision]
        backend = self.backend
        lines = ["import os",
                 f'os.environ["KERAS_BACKEND"] = "{backend}"  # before `import keras` (or KERAS_BACKEND={backend} '
                 "in the shell)", "import keras"]
        if setup.tf32 is not None:
            first, *switches = TF32_CODE[backend]
            lines += [first, ""]
            lines += [line.format(on=setup.tf32, jax=JAX_MATMUL_PRECISION[setup.tf32]) for line in switches]
            lines[-1] += "  # float32 " + ("with TF32 Tensor Cores" if setup.tf32 else "without TF32 (IEEE FP32)")
        else:
            lines.append("")
        lines += [f'keras.mixed_precision.set_global_policy("{setup.policy}")',
                  f'keras.config.set_image_data_format("{self.layout}")',
                  f"model = {model_expr}  # built after these lines: it takes their policy and format"]
        if setup.quantize is not None:
            lines.append(f'model.quantize("{setup.quantize}")  # its Dense and EinsumDense layers to {setup.quantize}; '
                         f"the others stay {setup.policy}")
        jit, what = JIT_COMPILE[self.compiler]
        lines.append(f"model.compile(jit_compile={jit})  # {what}")
        lines.append(f"y = model.predict(x, batch_size={self.batch_size})  # or predict_on_batch on {self.batch_size} "
                     "samples")
        if self.sm_clock_mhz is not None:
            lines.append(f"# SM clock locked at {self.sm_clock_mhz:g} MHz (root): "
                         f"nvidia-smi --lock-gpu-clocks={self.sm_clock_mhz:g},{self.sm_clock_mhz:g}")
        return "\n".join(lines) + "\n"

    def label(self) -> str:
        precision = self.precision
        if self.quantize is not None:
            precision += f" (model.quantize on {PRECISION_SETUP[self.precision].policy})"
        parts = [self.backend, precision, f"b{self.batch_size}", self.layout, self.compiler]
        if self.sm_clock_mhz is not None:
            parts.append(f"SM {self.sm_clock_mhz:g} MHz")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The fields, and for a quantised precision "quantize" (its mode) and "policy" (the dtype policy the model
        is built under before it): what a result file names a quantised configuration by."""
        out = asdict(self)
        if self.quantize is not None:
            out.update(quantize=self.quantize, policy=self.keras_policy)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialConfig:
        return cls(**{k: data[k] for k in ("backend", "precision", "batch_size", "layout", "compiler", "sm_clock_mhz")
                      if k in data})

    def params(self) -> dict[str, Any]:
        """The Optuna parameters that produce this configuration (for enqueue_trial)."""
        out: dict[str, Any] = {"backend": self.backend, "precision": self.precision,
                               "batch_size": self.batch_size, "layout": self.layout}
        if len(COMPILERS[self.backend]) > 1:
            out[f"compile_{self.backend}"] = self.compiler
        if self.sm_clock_mhz is not None:
            out["sm_clock_mhz"] = self.sm_clock_mhz
        return out


def installed_backends() -> tuple[str, ...]:
    """Keras backends whose framework is importable here (found without importing it)."""
    return tuple(b for b in BACKENDS if importlib.util.find_spec(b if b != "tensorflow" else "tensorflow") is not None)


@dataclass(frozen=True)
class SearchSpace:
    backends: tuple[str, ...]
    precisions: tuple[str, ...] = PRECISIONS
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    layouts: tuple[str, ...] = LAYOUTS
    compilers: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(COMPILERS))
    sm_clocks_mhz: tuple[float, ...] = ()  # empty: the clock is not searched (measured at the GPU's own)

    def __post_init__(self):
        if not self.backends:
            raise ValueError("Expected at least one Keras backend in the space, Received: none installed or named")
        for b in self.backends:
            if b not in BACKENDS:
                raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, received: {b!r}")
        for p in self.precisions:
            if p not in PRECISIONS:
                raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, received: {p!r}")
        for lay in self.layouts:
            if lay not in LAYOUTS:
                raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, received: {lay!r}")
        if not self.batch_sizes or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in self.batch_sizes):
            raise ValueError(f"batch sizes must be positive integers, received: {self.batch_sizes!r}")

    @classmethod
    def default(cls, backends: Iterable[str] | None = None, batch_sizes: Iterable[int] | None = None,
                sm_clocks_mhz: Iterable[float] = (), require_installed: bool = True) -> SearchSpace:
        """require_installed=False (a predicted study: nothing runs) accepts named backends that are not
        installed here; the default backends are still the installed ones."""
        available = installed_backends()
        if backends is None:
            chosen = available
        else:
            chosen = tuple(backends)
            missing = [b for b in chosen if b in BACKENDS and b not in available]
            if missing and require_installed:
                raise ValueError(f"backend {', '.join(missing)} is not installed here (installed: {', '.join(available) or 'none'})")
        return cls(backends=tuple(chosen), batch_sizes=tuple(sorted(batch_sizes or DEFAULT_BATCH_SIZES)),
                   sm_clocks_mhz=tuple(sm_clocks_mhz))

    def suggest(self, trial) -> TrialConfig:
        """Draw a configuration from an Optuna trial (define-by-run; compile is conditional on the backend)."""
        backend = trial.suggest_categorical("backend", list(self.backends))
        precision = trial.suggest_categorical("precision", list(self.precisions))
        batch_size = trial.suggest_categorical("batch_size", list(self.batch_sizes))
        layout = trial.suggest_categorical("layout", list(self.layouts))
        compilers = self.compilers[backend]
        compiler = trial.suggest_categorical(f"compile_{backend}", list(compilers)) if len(compilers) > 1 else compilers[0]
        clock = trial.suggest_categorical("sm_clock_mhz", list(self.sm_clocks_mhz)) if self.sm_clocks_mhz else None
        return TrialConfig(backend, precision, batch_size, layout, compiler, clock)

    def grid(self, with_clocks: bool = False) -> list[TrialConfig]:
        """Every distinct configuration (by key), clocks aside unless asked."""
        seen: dict[str, TrialConfig] = {}
        clocks = self.sm_clocks_mhz if (with_clocks and self.sm_clocks_mhz) else (None,)
        for backend in self.backends:
            for p, b, lay, c, clk in itertools.product(self.precisions, self.batch_sizes, self.layouts,
                                                        self.compilers[backend], clocks):
                cfg = TrialConfig(backend, p, b, lay, c, clk)
                seen.setdefault(cfg.key, cfg)
        return list(seen.values())

    def to_dict(self) -> dict[str, Any]:
        return {"backends": list(self.backends), "precisions": list(self.precisions),
                "batch_sizes": list(self.batch_sizes), "layouts": list(self.layouts),
                "compilers": {b: list(self.compilers[b]) for b in self.backends},
                "sm_clocks_mhz": list(self.sm_clocks_mhz)}


def with_quantization(space: SearchSpace, shares: Mapping[str, tuple[float, float]] | None, model_name: str,
                      keep: Iterable[str] = ()) -> tuple[SearchSpace, list[str]]:
    """(the space without the quantised precisions whose mode converts layers carrying less than
    QUANTIZE_MIN_FLOPS_SHARE of the model's FLOPs, the one-line warning that names them and why). `shares`: {mode:
    (FLOPs of the layers model.quantize(mode) converts, FLOPs of the model)} (mapping.layers_dense.
    quantizable_flops); None: nothing known, the space as it is. Precisions in `keep` (the baseline's) stay."""
    if shares is None:
        return space, []
    dropped: dict[str, float] = {}
    for precision in space.precisions:
        mode = PRECISION_SETUP[precision].quantize
        if mode is None or precision in keep:
            continue
        converted, total = shares.get(mode, (0.0, 0.0))
        share = converted / total if total else 0.0
        if share < QUANTIZE_MIN_FLOPS_SHARE:
            dropped[precision] = share
    if not dropped:
        return space, []
    kept = tuple(p for p in space.precisions if p not in dropped)
    by_share: dict[str, list[str]] = {}
    for precision, share in dropped.items():
        by_share.setdefault(f"{share:.1%}", []).append(precision)
    carry = "; ".join(f"{'/'.join(names)}: {pct}" for pct, names in by_share.items()) if len(by_share) > 1 \
        else next(iter(by_share))
    note = (f"{'/'.join(dropped)} not searched: the layers model.quantize converts (Dense, EinsumDense and attention "
            f"projections) carry {carry} of {model_name}'s FLOPs; quantisation is searched from "
            f"{QUANTIZE_MIN_FLOPS_SHARE:.0%} (below it the quantised layers could save at most that share of the "
            "compute, the other layers keeping their time)")
    return dataclasses.replace(space, precisions=kept), [note]


def baseline_config(backend: str, layout: str = "channels_last") -> TrialConfig:
    """The user's configuration when they change nothing: Keras defaults on the current backend."""
    return TrialConfig(backend=backend, precision="float32", batch_size=DEFAULT_BATCH_SIZE, layout=layout,
                       compiler=DEFAULT_COMPILER[backend])


def application_expression(name: str) -> str:
    """The expression that builds a keras.applications model named `name` (vgg16 -> keras.applications.VGG16()),
    DEFAULT_MODEL_EXPR for any other name: the code that builds the user's own model is theirs."""
    constructor = application_names().get(str(name).lower())
    return f"keras.applications.{constructor}()" if constructor else DEFAULT_MODEL_EXPR


def keras_default_config(backend: str) -> TrialConfig:
    """The configuration model.predict runs on a GPU when the user sets nothing: float32, channels_last, batch 32,
    compiled as jit_compile="auto" resolves there (PREDICT_DEFAULT_COMPILER)."""
    return TrialConfig(backend=backend, precision="float32", batch_size=DEFAULT_BATCH_SIZE, layout="channels_last",
                       compiler=PREDICT_DEFAULT_COMPILER[backend])
