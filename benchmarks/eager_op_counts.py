"""What a torch eager whole model dispatches per mapped row, and the host time per row, transformers beside CNNs.

    KERAS_BACKEND=torch python benchmarks/eager_op_counts.py [--device cpu|cuda] [--precision mixed_bfloat16]
        [--models bert12_tiny,resnet50,mobilenetv2,vgg16] [--batch-size 1] [--calls 30] [--out benchmarks/results]

The torch eager prediction is max(GPU time, host time per layer call x layer calls) (calibration/whole.py). A
transformer would need another host term where one of its mapped rows dispatches more framework work than a CNN's.
For one eager call of each model this counts, against its mapped rows (map_model) and those with a CARM bound (the
rows the eager prediction counts): Keras Layer.__call__ calls, torch functions called from Python
(torch.overrides.TorchFunctionMode), aten ops dispatched (torch.utils._python_dispatch.TorchDispatchMode) and the
aten ops that are not views; and the least wall time of `--calls` eager calls (cuda: synchronised after each).
Models: keras.applications at `--image-size` (channels_first, no top) and keras_hub BERT backbones on `--seq-len`
tokens: bert12_tiny (12 layers, hidden 32: no compute to speak of, the host's work alone), bert_base.
Writes <out>/<device>-eager-op-counts-<precision>-<date>.json.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from _common import result_path, write

APPLICATIONS = {"resnet50": "ResNet50", "mobilenetv2": "MobileNetV2", "vgg16": "VGG16"}


def build(name: str, args):
    """(model, its eager input) for a model name."""
    import keras
    import keras_hub
    import torch

    from examples.transformers import _fixed_length

    if name in APPLICATIONS:
        model = getattr(keras.applications, APPLICATIONS[name])(
            weights=None, include_top=False, input_shape=(3, args.image_size, args.image_size))
        return model, torch.rand(args.batch_size, 3, args.image_size, args.image_size, device=args.device)
    sizes = {"bert12_tiny": {"num_layers": 12, "num_heads": 2, "hidden_dim": 32, "intermediate_dim": 64},
             "bert_base": {"num_layers": 12, "num_heads": 12, "hidden_dim": 768, "intermediate_dim": 3072}}
    if name not in sizes:
        raise SystemExit(f"Expected --models among {sorted([*APPLICATIONS, *sizes])}, Received: {name}")
    backbone = keras_hub.models.BertBackbone(vocabulary_size=30522 if name == "bert_base" else 100,
                                             max_sequence_length=max(512, args.seq_len), **sizes[name])
    shape = (args.batch_size, args.seq_len)
    x = {k: torch.zeros(shape, dtype=torch.int32, device=args.device) for k in ("token_ids", "segment_ids")}
    x["padding_mask"] = torch.ones(shape, dtype=torch.int32, device=args.device)
    return _fixed_length(backbone, args.seq_len), x


def counts(model, x) -> dict:
    """What one eager call of `model` on `x` calls and dispatches."""
    import keras
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Dispatched(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: collections.Counter = collections.Counter()
            self.views = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[str(func.overloadpacket.__name__)] += 1
            self.views += bool(func.is_view)
            return func(*args, **(kwargs or {}))

    class Called(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))

    layer_calls = [0]
    original = keras.Layer.__call__

    def counted(layer, *a, **k):
        layer_calls[0] += 1
        return original(layer, *a, **k)

    dispatched, called = Dispatched(), Called()
    keras.Layer.__call__ = counted
    try:
        with torch.no_grad(), called, dispatched:
            model(x)
    finally:
        keras.Layer.__call__ = original
    aten = sum(dispatched.ops.values())
    return {"keras_layer_calls": layer_calls[0], "torch_function_calls": called.n, "aten_ops": aten,
            "aten_ops_not_views": aten - dispatched.views, "aten_by_op": dict(dispatched.ops.most_common())}


def least_time_s(model, x, calls: int, device: str) -> float:
    import torch

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    times = []
    with torch.no_grad():
        for _ in range(5):
            model(x)
        for _ in range(calls):
            sync()
            t = time.perf_counter()
            model(x)
            sync()
            times.append(time.perf_counter() - t)
    return min(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--precision", default="mixed_bfloat16")
    parser.add_argument("--models", default="bert12_tiny,resnet50,mobilenetv2,vgg16")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=8)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    if os.environ.get("KERAS_BACKEND") != "torch":
        print(f"Expected KERAS_BACKEND=torch, Received: {os.environ.get('KERAS_BACKEND')!r}", file=sys.stderr)
        return 2
    import keras
    import torch

    from carm_advisor.mapping.model import map_model

    torch.set_num_threads(args.threads)
    models = {}
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        keras.backend.clear_session()   # resets the global dtype policy too: set after it
        keras.config.set_dtype_policy(args.precision)
        keras.config.set_image_data_format("channels_first")
        model, x = build(name, args)
        rows = map_model(model, args.batch_size)
        found = counts(model, x)
        bounded = sum(1 for r in rows if r.known and r.op_class != "none")
        t = least_time_s(model, x, args.calls, args.device)
        per_row = {k: found[k] / len(rows) for k in ("keras_layer_calls", "torch_function_calls", "aten_ops",
                                                     "aten_ops_not_views")}
        models[name] = {"rows": len(rows), "rows_with_work": bounded, **found, "per_row": per_row,
                        "per_row_with_work": {k: found[k] / bounded for k in per_row},
                        "least_time_s": t, "time_per_row_s": t / len(rows), "time_per_row_with_work_s": t / bounded}
        print(f"{name}: {len(rows)} rows ({bounded} with work), per row {', '.join(f'{k} {v:.2f}' for k, v in per_row.items())}; "
              f"{t * 1e3:.2f} ms, {t / len(rows) * 1e6:.0f} us per row", flush=True)
    doc = {"device": args.device, "precision": args.precision, "batch_size": args.batch_size,
           "image_size": args.image_size, "seq_len": args.seq_len, "threads": args.threads,
           "torch": torch.__version__, "keras": keras.__version__, "models": models,
           "note": ("rows_with_work: mapped rows whose op class is not 'none' (Dropout at inference, ExpandDims, "
                    "Cast and other views carry no CARM bound)")}
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    path = write(result_path(args.out, gpu, f"eager-op-counts-{args.precision}"), doc)
    print(f"-> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
