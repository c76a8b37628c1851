"""The trial worker: a child process that runs under one Keras backend and measures configurations.

    KERAS_BACKEND=jax python -m carm_advisor.trials.worker     (started by runner.WorkerRunner)

Protocol, one JSON object per line: the parent sends {"op": "init", "model", "settings", "input_shapes"} then
{"op": "measure", "config"} messages ("input_shapes": the model's input shapes as mapping.input_shapes.shapes_json
text, or null); the worker answers each with {"ok": true, ...} or
{"ok": false, "kind": "oom" | "error", "error": "..."}. Its stdout carries only these lines
(anything a library prints goes to stderr, which the parent keeps in a log file).

Per configuration: the model is built once per (dtype policy, layout, quantisation mode) and kept (weights
copied from the float32 model built with a fixed seed, so every trial runs the same weights; a quantised
precision's model quantised after that copy, `model.quantize(mode)`: builder.quantize_model, whose one-line error
fails the trial); it is compiled the
trial's way (`model.compile(jit_compile=...)`: torch.compile for torch, XLA for jax and tensorflow)
and run with `predict_on_batch` on inputs already on the device. The first call is timed apart
(compile time); then warm-up calls, then NVML energy windows through power.energy.measure_energy,
more windows while their spread exceeds the target. Accuracy: the first `accuracy_samples` outputs of
the trial against the float32 model with TF32 off on the same inputs (reference computed once per layout).
Compiled functions are dropped and device caches freed after each trial, then an idle gap.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import OrderedDict
from typing import Any

from carm_advisor.errors import MeasurementError
from carm_advisor.mapping.given_shapes import call_shapes
from carm_advisor.mapping.input_shapes import shapes_from_json
from carm_advisor.measure import backends
from carm_advisor.measure.backends import is_out_of_memory
from carm_advisor.measure.inputs import (
    functional_inputs,
    functional_structure,
    ids_as_floats,
    ids_high,
    model_int_high,
    subclassed_call_specs,
)
from carm_advisor.models.builder import build, model_spec, quantize_model
from carm_advisor.power.energy import measure_energy
from carm_advisor.power.nvml import gpu_count, open_visible_gpu
from carm_advisor.trials.runner import WorkerSettings
from carm_advisor.trials.space import TrialConfig

_KEEP_MODELS = 3  # trial models kept besides the float32 weight sources (VGG16: 0.55 GB each in float32)


class Worker:
    def __init__(self, message: dict[str, Any]) -> None:
        import keras

        self.keras = keras
        self.backend = backends.active_backend()
        self.shapes = shapes_from_json(message.get("input_shapes"))
        self.spec = model_spec(message["model"], input_shapes=self.shapes)
        self.settings = WorkerSettings(**message.get("settings", {}))
        self.gpu = self._open_gpu()
        self.references: dict[str, Any] = {}   # layout -> float32 model (the weights every trial runs)
        self.built: dict[str, Any] = {}        # layout -> that model as built (CallArguments aside)
        self.reference_outputs: dict[str, Any] = {}
        self.models: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self.inputs: dict[tuple[str, int], Any] = {}

    def _open_gpu(self):
        try:
            return open_visible_gpu() if backends.get().has_gpu() and gpu_count() > 0 else None
        except Exception:  # no NVML: times only
            return None

    def info(self) -> dict[str, Any]:
        device = {"backend": self.backend, "backend_version": backends.get(self.backend).version(),
                  "backend_device": backends.get(self.backend).device_name(), "energy": self.gpu is not None}
        if self.gpu is not None:
            device["name"] = self.gpu.name()
        return {"ok": True, "device": device, "math_mode": backends.get(self.backend).math_mode()}

    # --- models and inputs ------------------------------------------------------------------------

    def reference(self, layout: str):
        if layout not in self.references:
            self.built[layout] = build(self.spec, "float32", layout, seed=self.settings.seed)
            self.references[layout] = self._runnable(self.built[layout])
        return self.references[layout]

    def _runnable(self, model):
        """The model as predict_on_batch runs it: itself, or inside CallArguments where its call() takes several
        tensors (on the input shapes given)."""
        return call_arguments_model(model) if _takes_several(model, self.shapes) else model

    def model_for(self, policy: str, layout: str, quantize: str | None = None):
        """The model of a trial: built under `policy` with the reference's weights, then quantised in `quantize`
        mode where the precision names one (its int8 kernels are the reference's weights quantised)."""
        ref = self.reference(layout)
        if quantize is None and (policy == "float32" or not self.spec.rebuilds_per_precision):
            return ref
        key = (policy, layout, quantize)
        if key in self.models:
            self.models.move_to_end(key)
            return self.models[key]
        built = build(self.spec, policy, layout, seed=self.settings.seed)
        built.set_weights(self.built[layout].get_weights())  # the same weights as every other trial
        if quantize is not None:
            quantize_model(built, quantize, self.spec.name)
        model = self._runnable(built)
        self.models[key] = model
        while len(self.models) > _KEEP_MODELS:
            self.models.popitem(last=False)
        return model

    def host_inputs(self, layout: str, batch_size: int):
        """Inputs in the model's own shapes and dtypes: every input of a Functional model (a list where it has
        several), what a subclassed one was built on; integer ids inside its Embeddings' vocabulary. The first
        rows are the same for every batch size (one seed per input)."""
        key = (layout, batch_size)
        if key not in self.inputs:
            self.reference(layout)
            self.inputs = {k: v for k, v in self.inputs.items() if k[0] == layout}  # one layout's inputs at a time
            self.inputs[key] = _host_inputs(self.built[layout], batch_size, self.settings.seed + 1, self.shapes)
        return self.inputs[key]

    def reference_outputs_for(self, layout: str):
        """float32 outputs with TF32 off (IEEE FP32) of the first accuracy samples, once per layout."""
        import numpy as np

        if layout not in self.reference_outputs:
            k = self.settings.accuracy_samples
            x = self.keras.tree.map_structure(lambda a: a[:k], self.host_inputs(layout, max(k, 1)))
            with backends.get(self.backend).float32_math(False), backends.get(self.backend).inference_context():
                y = self.reference(layout)(_on_device(x), training=False)
            self.reference_outputs[layout] = np.asarray(self.keras.ops.convert_to_numpy(_first(y)), dtype="float64")
        return self.reference_outputs[layout]

    # --- one trial ------------------------------------------------------------------------------

    def measure(self, cfg_dict: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        cfg = TrialConfig.from_dict(cfg_dict)
        if cfg.backend != self.backend:
            raise ValueError(f"Expected a {self.backend} configuration, Received: {cfg.backend}")
        s = self.settings
        keras = self.keras
        try:
            with backends.get(self.backend).float32_math(cfg.tf32):
                model = self.model_for(cfg.keras_policy, cfg.layout, cfg.quantize)
                x_host = self.host_inputs(cfg.layout, cfg.batch_size)
                x = _on_device(x_host)
                jit = cfg.compiler in ("torch.compile", "xla")
                if s.mode == "training":
                    weights = model.get_weights()
                    model.compile(optimizer="sgd", loss="mse", jit_compile=jit)
                    y0 = model.predict_on_batch(x)
                    target = keras.ops.convert_to_tensor(np.random.default_rng(7).standard_normal(np.shape(_first(y0))).astype("float32"))
                    fn = lambda: model.train_on_batch(x, target)  # noqa: E731  (returns host numbers: synchronous)
                else:
                    weights = None
                    model.compile(jit_compile=jit)
                    fn = lambda: model.predict_on_batch(x)  # noqa: E731  (returns numpy: synchronous)
                start_s = time.perf_counter()
                first = fn()
                first_call_s = time.perf_counter() - start_s
                m = measure_energy(fn, self.gpu, min_window_s=s.window_s, repeats=s.min_windows, warmup=s.warmup_calls)
                windows = m.n_windows
                if _spread(m) > s.spread_target and s.max_windows > s.min_windows:
                    again = measure_energy(fn, self.gpu, min_window_s=s.window_s, repeats=s.max_windows, warmup=0)
                    windows += again.n_windows
                    m = again if _spread(again) < _spread(m) else m
                output_error = top1 = None
                if s.mode == "inference" and s.accuracy_samples > 0:
                    output_error, top1 = _accuracy(np.asarray(_first(first), dtype="float64")[: s.accuracy_samples],
                                                   self.reference_outputs_for(cfg.layout))
                if weights is not None:
                    model.set_weights(weights)
        finally:
            backends.get(self.backend).reset_compiled()
            if s.idle_gap_s > 0:
                time.sleep(s.idle_gap_s)  # the GPU cools to its idle state between configurations
        return {
            "time_s": m.time_per_call_s, "energy_j": m.energy_per_call_j, "flops": 0.0, "batch_size": cfg.batch_size,
            "source": "measured" if self.gpu is not None else "measured (time only: no NVML)",
            "time_spread": m.time_spread_rel, "energy_spread": m.energy_spread_rel, "power_w": m.power_w,
            "sm_clock_mhz": m.sm_clock_mhz, "compile_s": max(0.0, first_call_s - m.time_per_call_s),
            "windows": windows, "output_error": output_error, "top1_agreement": top1,
            "reference": "float32 with TF32 off, same weights and inputs",
            "device": self.gpu.name() if self.gpu is not None else None,
            "extra": {"window_s": s.window_s, "first_call_s": first_call_s, "calls_per_window": m.calls_per_window},
        }


def _takes_several(model, shapes) -> bool:
    """Whether ``model`` is a subclassed model whose call() is traced (on the input shapes given) on more than one
    positional tensor: CallArguments runs it then."""
    if functional_inputs(model, shapes):
        return False
    with call_shapes(model, shapes):
        try:
            args, kwargs = subclassed_call_specs(model, 1)
        except MeasurementError:   # nothing to feed it: _host_inputs says so
            return False
    return len(args) != 1 or bool(kwargs)


def call_arguments_model(model):
    """A one-input keras.Model around a subclassed ``model`` whose call() takes several tensors: its x is
    {"args": [...], "kwargs": {...}}, so predict_on_batch and train_on_batch (one x each) can feed every argument.
    Its weights are the model's own, in the same order."""
    import keras

    class CallArguments(keras.Model):
        def __init__(self, inner):
            super().__init__(name=inner.name)
            self.inner = inner

        def call(self, x):
            return self.inner(*x["args"], **x["kwargs"])

    return CallArguments(model)


def _host_inputs(model, batch_size: int, seed: int, shapes=None):
    """numpy inputs of one batch for ``model`` as built (Worker.host_inputs), on the input shapes given (``shapes``,
    as mapping.input_shapes.normalized reads them); CallArguments' x for a call() of several tensors."""
    import keras
    import numpy as np

    inputs = functional_inputs(model, shapes)
    if inputs:
        specs = functional_structure(model, inputs)
    else:   # a subclassed model: the arguments the mapping traces its call() on
        with call_shapes(model, shapes):
            try:
                args = subclassed_call_specs(model, batch_size)
            except MeasurementError as exc:
                raise ValueError(f"{exc}; a measured study feeds the model what its call() is traced on: give "
                                 "its input shapes (input_shapes= / --input-shape)") from None
        specs = args[0][0] if len(args[0]) == 1 and not args[1] else {"args": list(args[0]), "kwargs": dict(args[1])}
    high = model_int_high(model)
    whole = ids_as_floats(model)
    index = iter(range(10**6))

    def array(spec):
        shape = (batch_size,) + tuple(spec.shape[1:])
        dtype = keras.backend.standardize_dtype(spec.dtype)
        rng = np.random.default_rng(seed + next(index))
        if dtype == "bool":
            return rng.integers(0, 2, shape).astype(bool)
        if "int" in dtype:
            return rng.integers(0, max(high, 1), shape).astype(dtype)
        if whole:   # ids Keras recorded no dtype for (measure.inputs.ids_as_floats)
            return rng.integers(0, ids_high(high), shape).astype(dtype if "float" in dtype else "float32")
        return rng.standard_normal(shape).astype(dtype if "float" in dtype else "float32")

    return keras.tree.map_structure(array, specs)


def _on_device(host):
    import keras

    return keras.tree.map_structure(keras.ops.convert_to_tensor, host)


def _first(y):
    """The first output of a model's outputs in Keras' flattening order (a dict's by sorted key): predict_on_batch
    and a direct call may return a dict of outputs in different orders (keras_hub's BERT on jax: pooled_output
    first from one, sequence_output from the other)."""
    import keras

    return keras.tree.flatten(y)[0]


def _spread(m) -> float:
    return m.energy_spread_rel if m.energy_spread_rel is not None else m.time_spread_rel


def _accuracy(y, ref) -> tuple[float, float | None]:
    """(max |y - ref| / max |ref|, top-1 agreement or None when the output is not one score per class)."""
    import numpy as np

    y = y.reshape(ref.shape)
    scale = float(np.max(np.abs(ref))) or 1.0
    error = float(np.max(np.abs(y - ref))) / scale
    top1 = None
    if ref.ndim == 2 and ref.shape[1] > 1:
        top1 = float(np.mean(np.argmax(y, axis=1) == np.argmax(ref, axis=1)))
    return error, top1


def _error_reply(exc: BaseException) -> dict[str, Any]:
    text = str(exc).strip().splitlines()
    return {"ok": False, "kind": "oom" if is_out_of_memory(exc) else "error",
            "error": f"{type(exc).__name__}: {text[0] if text else ''}"[:500]}


def main() -> int:
    # Our protocol owns the real stdout; everything else printed in this process goes to stderr.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    worker: Worker | None = None
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        message = json.loads(line)
        try:
            if message.get("op") == "init":
                worker = Worker(message)
                reply = worker.info()
            elif message.get("op") == "measure" and worker is not None:
                reply = {"ok": True, "measurement": worker.measure(message["config"])}
            else:
                reply = {"ok": False, "kind": "error", "error": f"unexpected message {message.get('op')!r}"}
        except Exception as exc:  # one trial's failure is reported; the worker stays up for the next
            reply = _error_reply(exc)
        proto.write(json.dumps(reply) + "\n")
        proto.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
