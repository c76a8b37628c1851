"""Recommendations derived from the CARM placement, each with its predicted gain.

Every gain is a ratio of two predictions of the same model (current configuration against the changed one):
of the whole model as its user runs it where a calibration can say (torch eager, where the host may set the
pace, and jax jit: the report's own whole-model time, measured_advice.whole_model_now_and_changed), else of the
layers' sums (calibrated where they are, else CARM bounds: what the roofs allow, not what a library reaches).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from carm_advisor.advise.measured import COMPILERS, measured_recommendations, whole_model_now_and_changed
from carm_advisor.calibration import policy as calibration_policy
from carm_advisor.carm.placement import is_convolution, missing_roof
from carm_advisor.mapping.registry import dtype_bytes_of
from carm_advisor.report.model import Report
from carm_advisor.results import LayerRow, Recommendation
from carm_advisor.trials.space import BACKENDS, PRECISION_SETUP, TrialConfig, application_expression
from carm_advisor.units import named_list, plural, seconds

if TYPE_CHECKING:
    from carm_advisor.predict import ModelPredictor

# A recommendation is shown only when the CARM predicts at least this much (time or energy).
MIN_GAIN = 1.03
_LOW_PRECISION = {"bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "int8"}
# Channel multiples Tensor Core tiles need to be full (cuDNN/cuBLAS pad otherwise), by element size.
_TC_MULTIPLE = {4: 4, 2: 8, 1: 16}


def _time(rows: list[LayerRow]) -> float:
    """The calibrated prediction where the layer has one, else its CARM bound."""
    return sum(r.expected_time_s or 0.0 for r in rows if r.known)


def _energy(rows: list[LayerRow]) -> float:
    return sum((r.calibrated_energy_j if r.calibrated_energy_j is not None else r.predicted_energy_j) or 0.0
               for r in rows if r.known)


def _gain_text(speedup: float | None, energy_ratio: float | None, source: str = "CARM prediction") -> str:
    parts = []
    if speedup:
        parts.append(f"{speedup:.2f}x faster")
    if energy_ratio:
        parts.append(f"{energy_ratio:.2f}x less energy")
    return (", ".join(parts) or "not quantified") + f" ({source})"


def _share(rows: list[LayerRow], pick) -> float:
    """The picked rows' share of the model's time, both on _time's basis (calibrated where there is one)."""
    total = _time(rows)
    return _time([r for r in rows if pick(r)]) / total if total else 0.0


def recommend(report: Report, predict: ModelPredictor) -> list[Recommendation]:
    """What to change, each with its predicted gain; `predict` re-predicts the analysed model changed."""
    rows = [r for r in report.layers if r.known]
    if not rows or _time(rows) <= 0:
        return []
    recs = [
        _mixed_precision(report, rows, predict),
        _larger_batch(report, rows, predict),
        _fusion(report, rows),
        _layout(report, rows, predict),
        _tensor_core_alignment(report, rows, model_output_layers(getattr(predict, "model", None))),
        _depthwise(report, rows),
    ]
    recs = [r for r in recs if r is not None]
    recs = one_compile_advice(report, rows, measured_recommendations(report, rows, recs, predict))
    for rec in recs:
        if rec.change:
            rec.code = configuration_code(report, rec.change)
    return sorted(recs, key=lambda r: -advised_gain(r))


# A change's compile value -> the tuner's compiler (TrialConfig.compiler); "cuda_graph" is no Keras setting.
_COMPILER_OF_CHANGE = {"torch.compile": "torch.compile", "xla": "xla"}


def runs_as(report) -> str | None:
    """How the analysed model runs as a whole: measured, else as analyze took it (the report's calibration
    "runs_as": torch eager, jax jit, tensorflow under XLA unless compiled without it); None where unknown."""
    inference = (report.measurement.inference if report.measurement else None) or {}
    return inference.get("execution") or (getattr(report, "calibration", None) or {}).get("runs_as")


def configuration_code(report, change: dict) -> str | None:
    """The Python lines that run the analysed model with `change` applied (TrialConfig.keras_code): its backend,
    precision, layout, batch size and compilation, each changed or as analysed (the current compilation: torch
    eager, jax XLA, tensorflow XLA or graph as it runs, runs_as). None where the configuration is none Keras sets
    (a CUDA-graph replay) or the model's precision is no precision the tuner knows (a pure float16 policy)."""
    m = report.model
    backend = change.get("backend", m.backend)
    precision = change.get("precision", m.precision or "float32")
    if backend not in BACKENDS or precision not in PRECISION_SETUP or change.get("compile") == "cuda_graph":
        return None
    if "compile" in change:
        compiler = _COMPILER_OF_CHANGE.get(change["compile"])
    elif backend != m.backend:
        compiler = {"torch": "eager", "jax": "xla", "tensorflow": "xla"}[backend]
    else:
        compiler = {"torch": "eager", "jax": "xla"}.get(backend) or ("graph" if runs_as(report) == "eager" else "xla")
    if compiler is None:
        return None
    config = TrialConfig(backend, precision, int(change.get("batch_size", m.batch_size)),
                         change.get("layout", m.layout or "channels_last"), compiler)
    return config.keras_code(application_expression(m.name))


def advised_gain(rec: Recommendation) -> float:
    """The larger of a recommendation's advised gains (time, energy; 1 where it gives none): what ranks it."""
    return max(rec.speedup or 1.0, rec.energy_ratio or 1.0)


def _runs_low_precision(precision: str | None) -> bool:
    """True for a model whose dtype policy (ModelInfo.precision: the one most of its layers hold) computes below
    float32: a mixed or half policy. Its float32 layers are pinned there (a mixed model's output layer), and
    mixed_bfloat16 would not change them: no advice to switch to it."""
    name = str(precision or "")
    return name.startswith("mixed_") or name in _LOW_PRECISION


def _layers_by_type(rows: list[LayerRow], noun: str, also: str = "") -> str:
    """'4 matrix-multiply layers (1 MultiHeadAttention, 3 Dense; `also`)': how many, and of which classes."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.type] = counts.get(r.type, 0) + 1
    types = ", ".join(f"{n} {t}" for t, n in counts.items())
    return f"{plural(len(rows), noun)} ({types}{'; ' + also if also else ''})"


def _mixed_precision(report, rows, predict) -> Recommendation | None:
    # Not the precision in use: a mixed or half model, or one whose matmul layers already run at bfloat16 (its
    # float32 ones are pinned there, and the policy would not change them).
    if _runs_low_precision(report.model.precision) or any(r.tensor_core and r.dtype == "bfloat16" for r in rows):
        return None
    slow = [r for r in rows if r.tensor_core and r.dtype not in _LOW_PRECISION and r.flops]
    if not slow:
        return None
    alt = predict.rows(dtype="bfloat16")
    if _time(alt) <= 0:
        return None
    # A gain is a ratio of two placements; where the profile lacks the roof either side runs on (TF32 now, BF16
    # after), that side sits on another roof and the ratio says nothing of this GPU: no figure, the reason instead.
    lacking = sorted({m[1] for r in (*slow, *alt) if r.known and (m := missing_roof(r.notes))})
    if lacking:
        speedup, energy_ratio = None, None
        expected = (f"not quantified (the profile has no {' and no '.join(f'{x} roof' for x in lacking)}: a gain would compare "
                    "placements on roofs these layers do not run on)")
    else:
        speedup = _time(rows) / _time(alt)
        energy_ratio = _energy(rows) / _energy(alt) if _energy(alt) else None
        speedup, energy_ratio, source = _as_whole_model(report, rows, alt, predict, speedup, energy_ratio)
        if max(speedup, energy_ratio or 0) < MIN_GAIN:
            return None
        expected = _gain_text(speedup, energy_ratio, source)
    paths = sorted({r.path for r in slow})
    roofs = report.ceilings
    now = ", ".join(f"{roofs[p]['label']} {roofs[p]['value'] / 1e12:.0f} TFLOP/s" for p in paths if p in roofs)
    bf16 = roofs.get("tc_bf16", {}).get("value")
    share = _share(rows, lambda r: r in slow)
    detail = (
        f"{_layers_by_type(slow, 'matrix-multiply layer', f'{share:.0%} of the predicted time')} "
        f"{'runs' if len(slow) == 1 else 'run'} at {'/'.join(sorted({r.dtype for r in slow}))} "
        f"{'placed ' if lacking else ''}on {now}. Under keras.mixed_precision.set_global_policy('mixed_bfloat16') "
        "they run on BF16 Tensor Cores"
        + (f" ({bf16 / 1e12:.0f} TFLOP/s)" if bf16 else "")
        + " and every activation moves half the bytes; keep the output layer in float32"
        " (dtype='float32'), as Keras' mixed-precision guide advises."
    )
    return Recommendation(
        title="Use mixed_bfloat16: BF16 Tensor Cores and half the activation bytes",
        detail=detail, expected_gain=expected, speedup=speedup,
        energy_ratio=energy_ratio, layers=[r.name for r in slow], change={"precision": "mixed_bfloat16"},
    )


def _as_whole_model(report, rows, changed, predict, speedup, energy_ratio) -> tuple[float, float | None, str]:
    """(speedup, energy ratio, source) of a change as the whole model runs, where a calibration can say (torch
    eager: a host that sets the pace of each call is not sped up by faster layers, and the layers' sum cannot see
    that; the report's own whole-model time says it), else the layers' sums given."""
    whole = whole_model_now_and_changed(report, rows, changed, predict)
    if whole is None:
        return speedup, energy_ratio, "CARM prediction"
    (t_now, e_now, measured), (t_new, e_new) = whole
    source = "measured now vs calibrated, whole model" if measured else "calibrated prediction, whole model"
    return t_now / t_new, (e_now / e_new if e_now and e_new else None), source


def _larger_batch(report, rows, predict) -> Recommendation | None:
    batch = report.batch_size
    memory_bound = [r for r in rows if r.bound.startswith("memory:") and r.flops]
    if not memory_bound or batch >= 1024:
        return None
    new_batch = min(batch * 4, 1024) if batch >= 8 else 32
    alt = predict.rows(batch_size=new_batch)
    per_sample_now, per_sample_new = _time(rows) / batch, _time(alt) / new_batch
    e_now, e_new = _energy(rows) / batch, (_energy(alt) / new_batch if _energy(alt) else 0)
    source = "CARM prediction"
    # The whole model as its user runs it, where a calibration can say (torch eager: a host that sets the
    # pace of each call is paid per call, so a larger batch divides it; the layers' sum cannot see that).
    whole = whole_model_now_and_changed(report, rows, alt, predict)
    if whole is not None:
        (t_now, energy_now, measured), (t_new, energy_new) = whole
        per_sample_now, per_sample_new = t_now / batch, t_new / new_batch
        e_now = energy_now / batch if energy_now else None
        e_new = energy_new / new_batch if energy_now and energy_new else 0
        source = "measured now vs calibrated, whole model" if measured else "calibrated prediction, whole model"
    speedup = per_sample_now / per_sample_new
    energy_ratio = e_now / e_new if e_new else None
    if max(speedup, energy_ratio or 0) < MIN_GAIN:
        return None
    weight_bound = [r.name for r in memory_bound if r.type in ("Dense", "EinsumDense", "LSTM", "GRU", "MultiHeadAttention")]
    detail = (
        f"{plural(len(memory_bound), 'layer')} {'sits' if len(memory_bound) == 1 else 'sit'} under a memory slope at batch {batch}"
        + (f"; {len(weight_bound)} of them {'re-reads its' if len(weight_bound) == 1 else 're-read their'} weights "
           f"for every batch ({named_list(weight_bound)})" if weight_bound else "")
        + f". At batch {new_batch} weights are read once for {new_batch} samples and the intensity rises: "
        f"per-sample time {seconds(per_sample_now)} -> {seconds(per_sample_new)} (if latency allows)."
    )
    return Recommendation(
        title=f"Raise the batch size from {batch} to {new_batch}",
        detail=detail, expected_gain=_gain_text(speedup, energy_ratio, source) + " per sample", speedup=speedup,
        energy_ratio=energy_ratio, layers=[r.name for r in memory_bound], change={"batch_size": new_batch},
    )


FUSE_TITLE = "Fuse memory-bound elementwise layers into their producers"


def _fusible(rows: list[LayerRow]) -> list[LayerRow]:
    return [r for r in rows if r.bound.startswith("memory:") and _is_elementwise(r)]


def _fusion_what(rows: list[LayerRow], fusible: list[LayerRow]) -> str:
    """'118 elementwise layers (53 BatchNormalization, ...; 60% of the predicted time) only stream their tensor
    through memory once more'."""
    share = _time(fusible) / _time(rows)
    one = len(fusible) == 1
    return (f"{_layers_by_type(fusible, 'elementwise layer', f'{share:.0%} of the predicted time')} only "
            f"{'streams its' if one else 'stream their'} tensor through memory once more")


def _fold(fusible: list[LayerRow]) -> str:
    """Only BatchNormalization folds into the preceding convolution (its statistics are constants at inference);
    GroupNormalization or LayerNormalization compute theirs from each input, so a compiler fuses them instead."""
    return "fold BatchNormalization into the preceding convolution for inference" \
        if any(r.type == "BatchNormalization" for r in fusible) else ""


def _fusion(report, rows) -> Recommendation | None:
    fusible = _fusible(rows)
    if not fusible:
        return None
    saved = _time(fusible)          # on _time's and _energy's basis: calibrated where a layer has one
    total = _time(rows)
    saved_e = _energy(fusible)
    speedup = total / (total - saved) if total > saved else None
    energy_ratio = _energy(rows) / (_energy(rows) - saved_e) if _energy(rows) > saved_e > 0 else None
    if not speedup or speedup < MIN_GAIN:
        return None
    fold = _fold(fusible)
    how = {
        "jax": "jax.jit already fuses these under XLA: make sure the model runs jitted (model.compile(jit_compile=True) / keras' jax trainer)",
        "torch": "compile the model (model.compile(jit_compile=True) on the torch backend uses torch.compile)"
                 + (f" or {fold}" if fold else ""),
        "tensorflow": ("XLA fuses these, as Keras' model.predict compiles on a GPU (jit_compile='auto'): keep it "
                       "(no jit_compile=False)" if runs_as(report) == "jit" else
                       "compile with XLA (model.compile(jit_compile=True))" + (f" or {fold}" if fold else "")),
    }.get(report.model.backend, "fuse them into the producing kernel (XLA / torch.compile)")
    one = len(fusible) == 1
    return Recommendation(
        title=FUSE_TITLE,
        detail=(f"{_fusion_what(rows, fusible)}. Fused into the preceding layer's kernel {'it costs' if one else 'they cost'} "
                f"no traffic: {how}."),
        expected_gain=_gain_text(speedup, energy_ratio), speedup=speedup, energy_ratio=energy_ratio,
        layers=[r.name for r in fusible],
    )


def one_compile_advice(report, rows: list[LayerRow], recs: list[Recommendation]) -> list[Recommendation]:
    """One recommendation about compiling, with one figure or one stated reason.

    On a backend whose user compiles by choice (torch, tensorflow: measured.COMPILERS), fusing the elementwise
    layers is what the compiler does, so the fusion advice and the compile advice are one: with the compiled
    model's calibrated time, that figure (the fusion is said in its detail); without it, the fusion's CARM figure,
    said to count the fused traffic alone. Where the calibrated compiled model gains nothing (no compile advice
    although the model runs uncompiled), the fusion's figure would contradict it: no fusion advice either.
    EfficientNetB3 at batch 64 on tensorflow was advised 'compile with XLA' at 2.65x and, four items below,
    'compile with XLA: not quantified'."""
    fusion = next((r for r in recs if r.title == FUSE_TITLE), None)
    if fusion is None or report.model.backend not in COMPILERS:
        return recs
    compiled = next((r for r in recs if (r.change or {}).get("compile") == COMPILERS[report.model.backend][0]),
                    None)
    if compiled is None:   # runs compiled already (tensorflow under XLA), or compiling gains nothing
        return [r for r in recs if r is not fusion] if runs_as(report) in (None, "eager") else recs
    fusible = [r for r in rows if r.name in set(fusion.layers)]
    fold = _fold(fusible)
    without = f" Without compiling, {fold}." if fold else ""
    if compiled.speedup is None and compiled.energy_ratio is None:   # the fusion's figure is the compile's
        source = "calibrated prediction" if any(r.calibrated_time_s for r in fusible) else "CARM prediction"
        merged = Recommendation(
            title=compiled.title,
            detail=(f"{_fusion_what(rows, fusible)}; compiled, they are fused into the preceding layer's kernel and "
                    f"cost no traffic. {compiled.detail}{without}"),
            expected_gain=_gain_text(fusion.speedup, fusion.energy_ratio,
                                     f"{source} of the fused elementwise traffic alone; the compiled model's own time "
                                     "is not calibrated here"),
            speedup=fusion.speedup, energy_ratio=fusion.energy_ratio, layers=fusion.layers, basis=fusion.basis,
            change=compiled.change)
    else:
        merged = Recommendation(
            title=compiled.title,
            detail=f"{compiled.detail} Compiling also fuses the elementwise layers: {_fusion_what(rows, fusible)}.{without}",
            expected_gain=compiled.expected_gain, speedup=compiled.speedup, energy_ratio=compiled.energy_ratio,
            layers=fusion.layers, basis=compiled.basis, change=compiled.change)
    return [merged if r is compiled else r for r in recs if r is not fusion]


def _is_elementwise(r: LayerRow) -> bool:
    return r.type in (
        "Activation", "ReLU", "LeakyReLU", "PReLU", "ELU", "BatchNormalization", "LayerNormalization",
        "GroupNormalization", "Add", "Multiply", "Subtract", "Rescaling", "Normalization",
    )


def _has_tensor_cores(report) -> bool:
    cc = str((report.profile.device if report.profile else {}).get("compute_capability") or "9.0")
    try:
        return float(cc) >= 7.0
    except ValueError:
        return True


def _layout(report, rows, predict) -> Recommendation | None:
    backend, layout = report.model.backend, report.model.layout
    convs = [r for r in rows if is_convolution(r.type) or "Pooling" in r.type]
    gpu = report.profile.name if report.profile else "the GPU"
    if not convs:
        return None
    if backend == "torch" and layout == "channels_last":
        # Keras' torch backend copies every channels_last conv input to NCHW and then to torch's channels_last
        # memory format, and every pooling input to NCHW (LayerRow.layout_copy_s: the copies' CARM bound,
        # calibration.layout_copy_bytes). The calibrated time already holds them.
        copied = [r for r in rows if r.known and r.layout_copy_s]
        if not copied:
            return None

        def copies_s(r):   # as the calibration counts them (Calibration.copies_time_s) where it does, else their bound
            return r.layout_copy_calibrated_s if r.layout_copy_calibrated_s is not None else r.layout_copy_s

        extra_s = sum(copies_s(r) for r in copied)
        traffic = sum(calibration_policy.layout_copy_bytes(backend, r.type, layout, r.input_bytes) for r in copied)
        with_copies = _time(rows) + sum(copies_s(r) for r in copied if not r.calibrated_time_s)
        calibrated_copies = any(copies_s(r) != r.layout_copy_s for r in copied)
        speedup = with_copies / (with_copies - extra_s)
        # the whole model without the copies, where the calibration counts them in its layers' times
        without = [replace(r, calibrated_time_s=max(0.0, r.calibrated_time_s - copies_s(r)))
                   if r.calibrated_time_s and r.layout_copy_s else r for r in rows]
        speedup, energy_ratio, source = _as_whole_model(report, rows, without, predict, speedup, None)
        if max(speedup, energy_ratio or 0) < MIN_GAIN:   # a host that sets the pace hides the copies
            return None
        return Recommendation(
            title="Use channels_first on the torch backend",
            detail=(
                f"Keras' torch backend copies the input of each of the {len(copied)} channels_last convolution and pooling "
                f"layers at every call (a convolution's twice: to NCHW, then to torch's channels_last memory format; a "
                f"pooling layer's once): {_bytes_text(traffic)} of extra traffic per batch on {gpu}; "
                f"keras.config.set_image_data_format('channels_first') removes those copies."
            ),
            expected_gain=_gain_text(speedup, energy_ratio, source), speedup=speedup, energy_ratio=energy_ratio,
            layers=[r.name for r in copied],
            basis=("calibrated prediction of the copies (the backend's data-movement efficiency)" if calibrated_copies
                   else "CARM prediction of the transpose traffic"), change={"layout": "channels_first"},
        )
    if backend == "tensorflow" and layout == "channels_first" and _has_tensor_cores(report):
        return Recommendation(
            title="Use channels_last (NHWC) on the TensorFlow backend",
            detail=f"cuDNN's Tensor Core convolutions on {gpu} work in NHWC; TensorFlow transposes NCHW tensors around "
                   "each conv.",
            expected_gain="not quantified (layout transposes)", layers=[r.name for r in convs], basis="backend behaviour",
        )
    return None


def _bytes_text(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def model_output_layers(model) -> set[tuple[str, ...]]:
    """The layers that produce the model's outputs, each as the path of names a row's name holds ("o1";
    "blk/dense" for a nested model's output layer), for every output of a multi-output model; empty where the
    model has no symbolic outputs (a subclassed model)."""
    found: set[tuple[str, ...]] = set()

    def walk(m, prefix: tuple[str, ...]) -> None:
        try:
            outputs = list(getattr(m, "outputs", None) or [])
        except (AttributeError, ValueError):   # a subclassed model has no symbolic outputs
            return
        for tensor in outputs:
            op = getattr(getattr(tensor, "_keras_history", None), "operation", None)
            if op is None:
                continue
            if hasattr(op, "layers") and getattr(op, "outputs", None):   # a nested model: its own output layers
                walk(op, prefix + (op.name,))
            else:
                found.add(prefix + (op.name,))

    walk(model, ())
    return found


def _row_path(name: str) -> tuple[str, ...]:
    """A row's name as its layer path: "blk#1/ic" (the second call of nested model blk) -> ("blk", "ic"); a
    part of a layer the cost model splits ("sep:pointwise") -> the layer ("sep",)."""
    return tuple(part.split("#", 1)[0].split(":", 1)[0] for part in name.split("/"))


def _tensor_core_alignment(report, rows, outputs: set[tuple[str, ...]] = frozenset()) -> Recommendation | None:
    # A model output layer's output width is the task's (10 classes, 1 regression target): the task fixes it. Every
    # output layer of the model (`outputs`, model_output_layers), and the last matmul-class layer (an output
    # behind an activation layer, or a model without symbolic outputs).
    matmuls = [r for r in rows if r.channels]
    output_layer = matmuls[-1] if matmuls else None
    misaligned = []
    for r in rows:
        if not (r.tensor_core and r.path.startswith("tc_")):
            continue
        multiple = _TC_MULTIPLE.get(dtype_bytes_of(r.dtype), 8)
        channels = [c for c in r.channels if c]
        if (r is output_layer or _row_path(r.name) in outputs) and len(channels) == 2:
            channels = channels[:1]
        off = tuple(c for c in channels if c % multiple)
        if off:
            misaligned.append((r, off, multiple))
    if not misaligned:
        return None
    names = named_list([f"{r.name} ({'/'.join(map(str, off))} channels, multiple of {m} needed)" for r, off, m in misaligned], 4)
    share = _share(rows, lambda r: any(r is x[0] for x in misaligned))
    # Padding can win back at most the empty part of each tile: 1 - c / (c rounded up to the multiple).
    total = _time(rows)
    bound = sum((r.expected_time_s or 0.0) * _empty_tile_fraction(off, m) for r, off, m in misaligned) / total
    return Recommendation(
        title="Pad channel counts to Tensor Core multiples",
        detail=f"{plural(len(misaligned), 'Tensor Core layer')} ({share:.0%} of the predicted time) "
        f"{'has' if len(misaligned) == 1 else 'have'} channel counts that leave Tensor Core tiles partly empty: {names}. "
        "Pad channels (or accept it for a 3-channel image input).",
        expected_gain=(f"at most {bound:.0%}" if bound >= 0.005 else "under 0.5%")
        + " of the model's time, the empty part of their tiles (not modelled)",
        layers=[r.name for r, _, _ in misaligned], basis="Tensor Core tile shapes",
    )


def _empty_tile_fraction(channels: tuple[int, ...], multiple: int) -> float:
    used = 1.0
    for c in channels:
        used *= c / (-(-c // multiple) * multiple)
    return 1.0 - used


def _is_depthwise(r) -> bool:
    """A depthwise convolution: DepthwiseConv, a SeparableConv's depthwise half, or a grouped Conv with one input
    channel per group (ConvNeXt's 7x7 convs; the mapping notes it and gives it no Tensor Core)."""
    return (r.type.startswith("Depthwise") or r.name.endswith(":depthwise")
            or (r.type.startswith("Conv") and not r.tensor_core and "depthwise" in (r.notes or "")))


def _depthwise(report, rows) -> Recommendation | None:
    dw = [r for r in rows if _is_depthwise(r)]
    share = _share(rows, lambda r: r in dw)
    if not dw or share < 0.05:
        return None
    return Recommendation(
        title="Depthwise convolutions run on CUDA cores",
        detail=f"{plural(len(dw), 'depthwise convolution')} take{'s' if len(dw) == 1 else ''} {share:.0%} of the predicted time and cannot use Tensor Cores; "
        "they are memory-bound by construction. Fusing them with the following pointwise conv or using grouped convs with "
        "more channels per group moves that work onto Tensor Cores.",
        expected_gain=f"up to {1 / (1 - share):.2f}x if their time were hidden", speedup=None,
        layers=[r.name for r in dw], basis="CARM placement",
    )

