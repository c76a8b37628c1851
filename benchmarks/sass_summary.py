"""Instruction mix of each kernel in the built libcarm_bench.so (cuobjdump -sass): the machine-code
check that a benchmark runs the instructions it claims (FFMA, HGMMA, LDG, LDS) with no local-memory
spills (LDL/STL). Needs cuobjdump (CUDA toolkit). Writes a JSON {kernel: {opcode: count}}.

    python benchmarks/sass_summary.py [--lib PATH] [--match mix_,l2_bulk] --out FILE
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys

FUNCTION = re.compile(r"Function : (\S+)")
OPCODE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")


def summarize(sass: str, match: list[str]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    current = None
    for line in sass.splitlines():
        m = FUNCTION.search(line)
        if m:
            current = m.group(1) if any(s in m.group(1) for s in match) else None
            if current:
                out[current] = collections.Counter()
            continue
        if current:
            m = OPCODE.search(line)
            if m:
                out[current][m.group(1).split(".")[0]] += 1
    return {k: dict(sorted(v.items(), key=lambda kv: -kv[1])) for k, v in out.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib")
    ap.add_argument("--match", default="mix_,l2_bulk,wgmma_kernel,shared_read")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    tool = shutil.which("cuobjdump")
    if tool is None:
        print("sass_summary: cuobjdump not found on PATH (it comes with the CUDA toolkit)", file=sys.stderr)
        return 2
    lib = args.lib
    if lib is None:
        from carm_advisor.measure.build import build_kernels, detect_arch

        lib = str(build_kernels(arch=detect_arch(), with_tf=False).lib_path)
    sass = subprocess.run([tool, "-sass", lib], capture_output=True, text=True, check=True).stdout
    mix = summarize(sass, args.match.split(","))
    spills = {k: v.get("LDL", 0) + v.get("STL", 0) for k, v in mix.items() if v.get("LDL") or v.get("STL")}
    with open(args.out, "w") as f:
        json.dump({"library": lib, "kernels": mix, "spills": spills}, f, indent=1)
    print(f"sass_summary: {len(mix)} kernels, {len(spills)} with local-memory spills -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
