"""Reading the JSON result files under benchmarks/results: plain (*.json) or compressed.

Validation results are large (a row per layer) and the working tree travels to the GPU machine under a size limit,
so they are kept xz-compressed (*.json.xz, `xz -9e`, lossless). Files compressed before that change were gzip
(*.json.gz); both still read.
"""
from __future__ import annotations

import gzip
import json
import lzma
from pathlib import Path

COMPRESSED_SUFFIXES = (".xz", ".gz")


def read_json(path: Path | str) -> dict:
    """The JSON document in `path`, decompressed by its suffix (.xz, .gz, else plain). Raises OSError for a missing,
    unreadable or badly gzip-compressed file and ValueError for bad xz data or malformed JSON."""
    path = Path(path)
    raw = path.read_bytes()
    if path.suffix == ".xz":
        try:
            raw = lzma.decompress(raw)
        except lzma.LZMAError as exc:
            raise ValueError(f"not xz data: {exc}") from None
    elif path.suffix == ".gz":
        raw = gzip.decompress(raw)
    return json.loads(raw)


def write_text(path: Path | str, text: str) -> Path:
    """Write `text` to `path`, xz-compressed (`xz -9e`'s preset) where the name ends in .xz, else plain; the folder
    is made where missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode()
    if path.suffix == ".xz":
        data = lzma.compress(data, preset=9 | lzma.PRESET_EXTREME)
    path.write_bytes(data)
    return path
