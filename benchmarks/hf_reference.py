"""The reference a Keras configuration is held against: the same architecture in Hugging Face transformers, run by
hand in PyTorch as its users run it, time and energy per batch measured the way the tuner measures a trial.

    python benchmarks/hf_reference.py --models bert-base,vit-b16 --dtypes bfloat16 --compilers eager,torch.compile \
        --batch-sizes 64,256 --seq-len 128 --out DIR

Models are built from their default configurations (BertConfig: BERT-base, 12 layers, hidden 768, 12 heads; ViTConfig:
ViT-B/16 at 224x224), random weights, nothing downloaded: the work per sample is the architecture's, not the
checkpoint's. Inputs: token ids below the vocabulary and an all-ones attention mask (BERT), standard-normal pixels
(ViT). Every configuration is timed in NVML energy windows of >= --window-s, --repeats times (carm_advisor.power:
the same windows as the tuner's trials), under torch.no_grad(), after a warm-up (torch.compile's compile time apart).
Writes `<gpu>-hf-reference-<date>.json` with the GPU, driver, clocks, command and commit beside every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import device_record, result_path, write  # noqa: E402

DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def build(name: str, seq_len: int):
    """(model, make_inputs(batch) -> kwargs, FLOP-free description) for a Hugging Face architecture by short name."""
    import torch
    import transformers

    if name == "bert-base":
        config = transformers.BertConfig()
        model = transformers.BertModel(config, add_pooling_layer=False)

        def inputs(batch: int) -> dict:
            ids = torch.randint(0, config.vocab_size, (batch, seq_len), device="cuda")
            return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

        return model, inputs, f"BertModel(BertConfig()), no pooler, seq {seq_len}"
    if name == "vit-b16":
        config = transformers.ViTConfig()
        model = transformers.ViTModel(config, add_pooling_layer=False)

        def inputs(batch: int) -> dict:
            return {"pixel_values": torch.randn(batch, 3, config.image_size, config.image_size, device="cuda")}

        return model, inputs, "ViTModel(ViTConfig()), no pooler, 224x224"
    raise SystemExit(f"hf_reference.py: unknown model {name!r}; expected bert-base or vit-b16")


def measure(name: str, dtype: str, compiler: str, batch: int, seq_len: int, gpu, window_s: float, repeats: int) -> dict:
    import torch

    from carm_advisor.power.energy import measure_energy

    torch.manual_seed(0)
    model, make_inputs, what = build(name, seq_len)
    model = model.to("cuda", dtype=getattr(torch, DTYPES[dtype])).eval()
    kwargs = make_inputs(batch)
    if "pixel_values" in kwargs:
        kwargs["pixel_values"] = kwargs["pixel_values"].to(getattr(torch, DTYPES[dtype]))
    run = torch.compile(model) if compiler == "torch.compile" else model
    with torch.no_grad():
        started = time.perf_counter()
        run(**kwargs)
        torch.cuda.synchronize()
        first_call_s = time.perf_counter() - started
        m = measure_energy(lambda: run(**kwargs), gpu, min_window_s=window_s, repeats=repeats,
                           sync=torch.cuda.synchronize, warmup=3)
    model = run = None   # free the GPU memory before the next configuration
    torch.cuda.empty_cache()
    torch._dynamo.reset()
    samples_per_joule = batch / m.energy_per_call_j if m.energy_per_call_j else None
    return {"model": name, "architecture": what, "dtype": dtype, "compiler": compiler, "batch_size": batch,
            "seq_len": seq_len if name == "bert-base" else None, "time_s": m.time_per_call_s,
            "time_spread": m.time_spread_rel, "energy_j": m.energy_per_call_j, "energy_spread": m.energy_spread_rel,
            "power_w": m.power_w, "sm_clock_mhz": m.sm_clock_mhz, "samples_per_s": batch / m.time_per_call_s,
            "samples_per_joule": samples_per_joule, "first_call_s": first_call_s, "windows": m.n_windows}


def reference_flag(folder: str) -> str:
    """`--reference NAME=VALUE` for carm-advise tune: the best samples per joule among the rows of the result files in
    `folder` (a configuration that failed has none), named by its configuration; "" where none measured any."""
    rows = [r for f in sorted(Path(folder).glob("*.json")) for r in json.loads(f.read_text()).get("rows", [])
            if r.get("samples_per_joule")]
    if not rows:
        return ""
    best = max(rows, key=lambda r: r["samples_per_joule"])
    return ("--reference hf-{model}-{dtype}-{compiler}-b{batch_size}={samples_per_joule:.6g}").format(**best)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--reference-flag"]:   # what gpu_call.sh passes to the study it runs next
        print(reference_flag(argv[1]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="bert-base,vit-b16")
    p.add_argument("--dtypes", default="bfloat16")
    p.add_argument("--compilers", default="eager,torch.compile")
    p.add_argument("--batch-sizes", default="64,256")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--window-s", type=float, default=2.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--budget-s", type=float, default=240.0, help="no configuration starts after this")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)

    import torch
    import transformers

    from carm_advisor.power.nvml import open_visible_gpu

    gpu = open_visible_gpu()
    started = time.perf_counter()
    rows, skipped = [], []
    for name in args.models.split(","):
        for dtype in args.dtypes.split(","):
            for compiler in args.compilers.split(","):
                for batch in (int(b) for b in args.batch_sizes.split(",")):
                    key = f"{name} {dtype} {compiler} b{batch}"
                    if time.perf_counter() - started > args.budget_s:
                        skipped.append(key)
                        continue
                    try:
                        row = measure(name, dtype, compiler, batch, args.seq_len, gpu, args.window_s, args.repeats)
                    except Exception as exc:  # one configuration's failure (out of memory) is recorded, not fatal
                        row = {"model": name, "dtype": dtype, "compiler": compiler, "batch_size": batch,
                               "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
                        torch.cuda.empty_cache()
                    rows.append(row)
                    print(key, {k: row.get(k) for k in ("time_s", "samples_per_joule", "power_w", "error")}, flush=True)
    device = device_record(gpu)
    doc = {"what": "Hugging Face transformers run by hand in PyTorch: time and energy per batch",
           "device": device, "torch": torch.__version__,
           "transformers": transformers.__version__, "rows": rows, "skipped_at_budget": skipped,
           "window_s": args.window_s, "repeats": args.repeats}
    path = write(result_path(args.out, device.get("name") or "gpu", "hf-reference"), doc)
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
