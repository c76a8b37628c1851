"""Compile kernels/ into libcarm_bench.so (ctypes) and, when TensorFlow is importable, the
TensorFlow op library that wraps the same C ABI.

Builds are cached per architecture and per hash of (kernel sources, nvcc version, flags) under
``$CARM_ADVISOR_CACHE`` (default ``~/.cache/carm_advisor/kernels``); a build is redone only when one of
those changes. nvcc comes from PATH, ``$CUDA_HOME/bin``, or the CUDA pip wheels (nvidia-cuda-nvcc).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from carm_advisor.errors import KernelBuildError

LIB_NAME = "libcarm_bench.so"
TF_LIB_NAME = "tf_carm_ops.so"
# Its own name: in one process, a loaded library answers every later request for its name, so the
# host-only ABI must not stand in for (or be stood in by) the CUDA one.
HOST_LIB_NAME = "libcarm_bench_host.so"
CUDA_SOURCES = ("carm_bench.cu", "k_cudacore.cu", "k_tensor.cu")
TF_SOURCE = "tf_carm_ops.cc"
HOST_FAKE_SOURCE = "host_fake.cc"   # the C ABI without CUDA: known figures, for tests without a GPU
_CXX_FLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared")
# Every arch the sources compile for; wgmma rows only do work in the sm_90a image.
DEFAULT_ARCHS = ("sm_80", "sm_89", "sm_90a")
_NVCC_FLAGS = ("-std=c++17", "-O3", "-Xcompiler", "-fPIC", "-Xptxas", "-v", "-lineinfo")


@dataclass(frozen=True)
class BuildResult:
    """Where the build put its outputs. ``tf_op_path`` is None when the TF op was not built."""

    lib_path: Path
    tf_op_path: Path | None
    archs: tuple[str, ...]
    cache_dir: Path
    cached: bool
    nvcc: Path           # the compiler of libcarm_bench.so (the system C++ compiler for the host-only build)
    log_path: Path
    ptxas_report: str = field(default="", repr=False)


def kernels_dir() -> Path:
    """The kernels/ source folder: ``$CARM_KERNELS_DIR``, else the repository root next to the package."""
    env = os.environ.get("CARM_KERNELS_DIR")
    candidates = [Path(env)] if env else []
    here = Path(__file__).resolve()
    candidates += [here.parents[2] / "kernels", here.parents[1] / "kernels_src"]
    for c in candidates:
        if (c / "carm_bench.h").is_file():
            return c
    raise KernelBuildError(
        f"kernel sources not found: expected carm_bench.h in one of {', '.join(str(c) for c in candidates)} "
        "(set CARM_KERNELS_DIR)"
    )


def find_nvcc() -> Path:
    """nvcc from PATH, else $CUDA_HOME/bin/nvcc, else the nvidia-cuda-nvcc pip wheel."""
    on_path = shutil.which("nvcc")
    if on_path:
        return Path(on_path)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return Path(home) / "bin" / "nvcc"
    for site in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *sys.path}:
        for rel in ("nvidia/cuda_nvcc/bin/nvcc", "nvidia/cu13/bin/nvcc"):
            p = Path(site) / rel
            if p.is_file():
                return p
    raise KernelBuildError(
        "nvcc not found: expected it on PATH, in $CUDA_HOME/bin, or from the nvidia-cuda-nvcc pip wheel "
        "(pip install nvidia-cuda-nvcc)"
    )


def detect_arch() -> str | None:
    """The visible GPU's arch (e.g. 'sm_90a') from nvidia-smi, or None when no GPU answers."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"\s*(\d+)\.(\d+)", out)
    if not m:
        return None
    arch = f"sm_{m.group(1)}{m.group(2)}"
    return "sm_90a" if arch == "sm_90" else arch  # wgmma needs the arch-specific 90a target


def _gencode(arch: str) -> list[str]:
    m = re.fullmatch(r"sm_(\d+)(a?)", arch)
    if not m:
        raise KernelBuildError(f"unknown arch: expected 'sm_<NN>' or 'sm_90a', received {arch!r}")
    num = m.group(1) + m.group(2)
    return ["-gencode", f"arch=compute_{num},code=sm_{num}"]


def _tf_available() -> bool:
    return importlib.util.find_spec("tensorflow") is not None


def _tf_flags() -> tuple[list[str], list[str]]:
    try:
        import tensorflow as tf  # lazy: nothing else in the package needs TensorFlow
    except ImportError as exc:
        raise KernelBuildError(f"TensorFlow op requested but tensorflow cannot be imported: {exc}") from exc
    return list(tf.sysconfig.get_compile_flags()), list(tf.sysconfig.get_link_flags())


def _nvcc_version(nvcc: Path) -> str:
    try:
        return subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    except OSError as exc:
        raise KernelBuildError(f"nvcc at {nvcc} cannot run: {exc}") from exc


_SOURCE_SUFFIXES = (".cu", ".cuh", ".h", ".cc", ".inc")


def _hash_sources(h, src_dir: Path) -> None:
    for p in sorted(src_dir.iterdir()):
        if p.suffix in _SOURCE_SUFFIXES:
            h.update(p.name.encode())
            h.update(p.read_bytes())


def source_hash(src_dir: Path | None = None) -> str:
    """sha256 of the kernel sources alone: what a measured profile was measured with."""
    h = hashlib.sha256()
    _hash_sources(h, src_dir or kernels_dir())
    return h.hexdigest()[:16]


def cache_key(src_dir: Path, archs: Sequence[str], nvcc_version: str, with_tf: bool, extra: Sequence[str] = ()) -> str:
    """sha256 of every kernel source, the nvcc version and the flags."""
    h = hashlib.sha256()
    _hash_sources(h, src_dir)
    h.update(nvcc_version.encode())
    h.update(" ".join([*_NVCC_FLAGS, *archs, f"tf={with_tf}", *extra]).encode())
    return h.hexdigest()[:16]


CUDA_KEY_FILE = "cuda_key"   # beside each built library: the key of its CUDA part alone


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def default_cache_root() -> Path:
    env = os.environ.get("CARM_ADVISOR_CACHE")
    return Path(env) / "kernels" if env else Path.home() / ".cache" / "carm_advisor" / "kernels"


def _first_error(log: str) -> str:
    for line in log.splitlines():
        if re.search(r"\berror\b", line, re.IGNORECASE):
            return line.strip()
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def _run(cmd: list[str], log: list[str]) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:
        return 127, f"cannot run {cmd[0]}: {exc}"
    out = p.stdout + p.stderr
    log.append("$ " + " ".join(cmd) + "\n" + out)
    return p.returncode, out


def _cxx() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise KernelBuildError("building the host code needs a C++ compiler: g++ not found on PATH (set CXX)")
    return cxx


def _build_tf_op(src: Path, out_dir: Path, lib_name: str, tf_cflags: list[str], tf_lflags: list[str], log: list[str],
                 fail: Callable[[str, str], KernelBuildError]) -> None:
    """tf_carm_ops.so from kernels/tf_carm_ops.cc, linked against out_dir's lib_name (the CUDA or host-only ABI)."""
    tmp_tf = out_dir / (TF_LIB_NAME + ".tmp")
    # TensorFlow's own headers call deprecated absl functions: their warnings are not ours
    cmd = [_cxx(), *_CXX_FLAGS, "-Wno-deprecated-declarations", *tf_cflags, f"-I{src}", str(src / TF_SOURCE),
           "-o", str(tmp_tf), f"-L{out_dir}", "-l:" + lib_name, "-Wl,-rpath,$ORIGIN", *tf_lflags]
    rc, out = _run(cmd, log)
    if rc:
        raise fail(f"compiling {TF_SOURCE} failed", out)
    tmp_tf.replace(out_dir / TF_LIB_NAME)


def _failing(log: list[str], log_path: Path) -> Callable[[str, str], KernelBuildError]:
    def fail(what: str, output: str) -> KernelBuildError:
        log_path.write_text("\n".join(log))
        return KernelBuildError(f"{what}: {_first_error(output)} (full log: {log_path})")

    return fail


def build_host_fake(with_tf: bool | None = None, force: bool = False, cache_root: Path | None = None) -> BuildResult:
    """libcarm_bench_host.so from kernels/host_fake.cc with the system C++ compiler (no CUDA, no GPU: a small
    table and figures computed from each call's configuration), and the TF op library linked against it
    when TensorFlow is importable (with_tf as in build_kernels). Cached like build_kernels."""
    src = kernels_dir()
    log: list[str] = []
    if with_tf is None:
        with_tf = _tf_available()
    tf_cflags, tf_lflags = _tf_flags() if with_tf else ([], [])
    cxx = _cxx()
    _, version = _run([cxx, "--version"], [])
    key = cache_key(src, ("host",), version, with_tf, [*_CXX_FLAGS, *tf_cflags, *tf_lflags])
    out_dir = (cache_root or default_cache_root()) / f"host-{key}"
    lib = out_dir / HOST_LIB_NAME
    tf_lib = out_dir / TF_LIB_NAME if with_tf else None
    log_path = out_dir / "build.log"
    if not force and lib.is_file() and (tf_lib is None or tf_lib.is_file()):
        return BuildResult(lib, tf_lib, ("host",), out_dir, True, Path(cxx), log_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    fail = _failing(log, log_path)
    tmp_lib = out_dir / (HOST_LIB_NAME + ".tmp")
    # the soname lets ctypes and the op library share one loaded copy (one table, one last-run record)
    rc, out = _run([cxx, *_CXX_FLAGS, f"-I{src}", str(src / HOST_FAKE_SOURCE), f"-Wl,-soname,{HOST_LIB_NAME}",
                    "-o", str(tmp_lib)], log)
    if rc:
        raise fail(f"compiling {HOST_FAKE_SOURCE} failed", out)
    tmp_lib.replace(lib)
    if with_tf:
        _build_tf_op(src, out_dir, HOST_LIB_NAME, tf_cflags, tf_lflags, log, fail)
    log_path.write_text("\n".join(log))
    return BuildResult(lib, tf_lib, ("host",), out_dir, False, Path(cxx), log_path)


def build_kernels(arch: str | None = None, force: bool = False, with_tf: bool | None = None,
                  progress: Callable[[str], None] | None = None, cache_root: Path | None = None) -> BuildResult:
    """Compile (or reuse) libcarm_bench.so, and the TF op library when TensorFlow is importable.

    arch: one target ('sm_90a', 'sm_80', ...); None builds every arch in DEFAULT_ARCHS.
    with_tf: None = build the TF op when tensorflow is importable; True = require it; False = skip.
    Raises KernelBuildError with one line naming what is missing or the first compiler error and the log.
    """
    say = progress or (lambda _msg: None)
    src = kernels_dir()
    nvcc = find_nvcc()
    archs = (arch,) if arch else DEFAULT_ARCHS
    gencode = [flag for a in archs for flag in _gencode(a)]
    if with_tf is None:
        with_tf = _tf_available()
    tf_cflags, tf_lflags = _tf_flags() if with_tf else ([], [])
    nvcc_version = _nvcc_version(nvcc)
    key = cache_key(src, archs, nvcc_version, with_tf, tf_cflags + tf_lflags)
    cuda_key = cache_key(src, archs, nvcc_version, False)   # the CUDA library alone, whatever the TF op
    out_dir = (cache_root or default_cache_root()) / f"{'-'.join(archs)}-{key}"
    lib = out_dir / LIB_NAME
    tf_lib = out_dir / TF_LIB_NAME if with_tf else None
    log_path = out_dir / "build.log"
    if not force and lib.is_file() and (tf_lib is None or tf_lib.is_file()):
        say(f"kernels cached in {out_dir}")
        return BuildResult(lib, tf_lib, archs, out_dir, True, nvcc, log_path)
    if not force and not with_tf:
        # A build that also made the TF op (build-kernels on a TensorFlow machine) holds the very same
        # CUDA library: reuse it instead of compiling for a minute again.
        for other in sorted(out_dir.parent.glob(f"{'-'.join(archs)}-*")):
            if (other / LIB_NAME).is_file() and _read(other / CUDA_KEY_FILE) == cuda_key:
                say(f"kernels cached in {other}")
                return BuildResult(other / LIB_NAME, None, archs, other, True, nvcc, other / "build.log")

    out_dir.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    fail = _failing(log, log_path)

    def compile_one(name: str) -> tuple[str, int, str]:
        obj = out_dir / (Path(name).stem + ".o")
        cmd = [str(nvcc), *_NVCC_FLAGS, *gencode, "-c", str(src / name), "-o", str(obj)]
        rc, out = _run(cmd, log)
        return name, rc, out

    say(f"compiling {len(CUDA_SOURCES)} CUDA sources for {', '.join(archs)} with {nvcc}")
    with ThreadPoolExecutor(max_workers=max(1, min(len(CUDA_SOURCES), os.cpu_count() or 1))) as pool:
        results = list(pool.map(compile_one, CUDA_SOURCES))
    for name, rc, out in results:
        if rc:
            raise fail(f"compiling {name} failed", out)
    ptxas = "\n".join(out for _, _, out in results)
    tmp_lib = out_dir / (LIB_NAME + ".tmp")
    objs = [str(out_dir / (Path(n).stem + ".o")) for n in CUDA_SOURCES]
    rc, out = _run([str(nvcc), "-shared", *gencode, *objs, "-o", str(tmp_lib)], log)
    if rc:
        raise fail(f"linking {LIB_NAME} failed", out)
    tmp_lib.replace(lib)  # atomic: a concurrent loader never sees a half-written library
    (out_dir / CUDA_KEY_FILE).write_text(cuda_key)

    if with_tf:
        say("compiling the TensorFlow op library")
        _build_tf_op(src, out_dir, LIB_NAME, tf_cflags, tf_lflags, log, fail)

    log_path.write_text("\n".join(log))
    say(f"kernels built in {out_dir}")
    return BuildResult(lib, tf_lib, archs, out_dir, False, nvcc, log_path, ptxas)
