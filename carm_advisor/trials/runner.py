"""Trial runners: how one configuration becomes a Measurement.

- `WorkerRunner` (a GPU): one persistent child process per Keras backend (the backend is fixed per
  process), fed configurations as JSON lines on its stdin, answering on its stdout
  (carm_advisor/trials/worker.py). A trial that crashes the child or outlives its timeout is a failed
  trial (`TrialFailed`, with the error and the end of the child's log); the child is started again for
  the next one. Out of memory is `TrialOutOfMemory` (the study prunes that trial and goes on).
- `PredictedRunner` (no GPU): the calibrated whole-model prediction of the configuration where the
  calibration has one, else its CARM bound; labelled predicted, with `extra["value_source"]`
  ("calibrated" or "CARM bound") and how it was made (`extra["value_detail"]`). A configuration whose
  memory LOWER BOUND (mapping/memory.py) exceeds the profile's memory_bytes is `TrialOutOfMemory`
  ("predicted: needs at least X GB, the GPU has Y GB").
- `FakeRunner`: deterministic made-up figures (the bound slowed by fixed per-backend factors), with an
  optional delay per trial: for tests and `benchmarks/vgg16_tuning.py --fake`. Never presented as a
  measurement: its source is "fake".
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from carm_advisor.errors import CarmError
from carm_advisor.trials.predicted import ConfigPredictor, value_prediction
from carm_advisor.trials.space import TrialConfig


class TrialFailed(CarmError):
    """A trial could not be measured (its worker crashed, timed out, or raised)."""


class TrialOutOfMemory(CarmError):
    """The configuration does not fit in GPU memory."""


@dataclass
class Measurement:
    """Per-batch figures of one configuration. Units: s, J, FLOP, W, MHz.

    time_s / energy_j are medians over the energy windows of one call on one batch; *_spread are
    (max - min) / median over the windows. output_error: max |y - y_ref| / max |y_ref| against the
    reference (float32 with TF32 off, same weights and inputs); top1_agreement: fraction of samples
    whose arg-max class matches the reference (classifiers only).
    """

    time_s: float
    energy_j: float | None
    flops: float
    batch_size: int
    source: str
    time_spread: float | None = None
    energy_spread: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    compile_s: float | None = None
    windows: int | None = None
    output_error: float | None = None
    top1_agreement: float | None = None
    reference: str | None = None
    device: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


class Runner(Protocol):
    source: str

    def run(self, config: TrialConfig) -> Measurement: ...

    def close(self) -> None: ...


class PredictedRunner:
    """No GPU here: a trial 'measures' the calibrated prediction, else the CARM bound (labelled predicted)."""

    source = "predicted"

    def __init__(self, predictor: ConfigPredictor, mode: str = "inference") -> None:
        self.predictor = predictor
        self.mode = mode

    def does_not_fit(self, config: TrialConfig) -> str | None:
        """Why `config` cannot fit in the profile's GPU memory (its memory lower bound is larger), else None
        (a predictor without a memory bound, a test stub, never says so)."""
        check = getattr(self.predictor, "does_not_fit", None)
        return check(config, self.mode) if check is not None else None

    def run(self, config: TrialConfig) -> Measurement:
        why = self.does_not_fit(config)
        if why:
            raise TrialOutOfMemory(why)
        p = value_prediction(self.predictor, config)
        bound = self.predictor.predict(config)
        return Measurement(time_s=p.time_s, energy_j=p.energy_j, flops=p.flops, batch_size=p.batch_size,
                           source=p.source, power_w=p.power_w, device=getattr(self.predictor.profile, "name", None),
                           extra={"value_source": p.value_source, "value_detail": p.detail,
                                  "bound_time_s": bound.time_s, "bound_energy_j": bound.energy_j})

    def close(self) -> None:
        pass


# Made-up efficiencies for FakeRunner (fraction of the CARM bound reached): not a measurement of anything.
FAKE_EFFICIENCY = {("torch", "eager"): 0.3, ("torch", "torch.compile"): 0.55, ("jax", "xla"): 0.7,
                   ("tensorflow", "graph"): 0.45, ("tensorflow", "xla"): 0.6}


class FakeRunner:
    """Deterministic stand-in for the GPU (tests, --fake): bound time / efficiency, bound power.

    `oom_batch_size`: batches at least this large raise TrialOutOfMemory; `fail_keys`: configuration
    keys that raise TrialFailed; `delay_s`: sleep per trial (to stand for measuring time).
    """

    source = "fake"

    def __init__(self, predictor: ConfigPredictor, delay_s: float = 0.0, oom_batch_size: int | None = None,
                 fail_keys: tuple[str, ...] = (), output_error: dict[str, float] | None = None) -> None:
        self.predictor = predictor
        self.delay_s = delay_s
        self.oom_batch_size = oom_batch_size
        self.fail_keys = set(fail_keys)
        self.output_error = output_error or {"float32": 0.0, "float32_no_tf32": 0.0, "float32_tf32": 1e-3,
                                             "mixed_float16": 4e-3, "mixed_bfloat16": 3e-2}
        self.calls: list[str] = []

    def run(self, config: TrialConfig) -> Measurement:
        self.calls.append(config.key)
        if self.delay_s:
            time.sleep(self.delay_s)
        if config.key in self.fail_keys:
            raise TrialFailed(f"fake failure of {config.key}")
        if self.oom_batch_size is not None and config.batch_size >= self.oom_batch_size:
            raise TrialOutOfMemory(f"fake out of memory at batch {config.batch_size}")
        p = self.predictor.predict(config)
        eff = FAKE_EFFICIENCY.get((config.backend, config.compiler), 0.5)
        time_s = p.time_s / eff
        power_w = p.power_w or 300.0
        return Measurement(time_s=time_s, energy_j=power_w * time_s, flops=p.flops, batch_size=p.batch_size,
                           source="fake", time_spread=0.01, energy_spread=0.01, power_w=power_w,
                           output_error=self.output_error.get(config.precision, 0.0), windows=3,
                           device="fake GPU")

    def close(self) -> None:
        pass


@dataclass
class WorkerSettings:
    """How a worker measures. Windows on NVML's energy counter are >= window_s each; windows are added
    (up to max_windows) until the relative spread of energy per call is under spread_target."""

    window_s: float = 2.0
    min_windows: int = 3
    max_windows: int = 6
    spread_target: float = 0.03
    warmup_calls: int = 3
    idle_gap_s: float = 1.0
    accuracy_samples: int = 8
    seed: int = 0
    mode: str = "inference"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Worker:
    """One child process speaking JSON lines; a reader thread queues its stdout lines."""

    def __init__(self, backend: str, command: list[str], env: dict[str, str], log_path: str, startup_timeout_s: float,
                 hello: dict[str, Any]) -> None:
        self.backend = backend
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     env=env, text=True, bufsize=1)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True, name=f"carm-tune-{backend}-reader").start()
        self.info = self.request(hello, startup_timeout_s)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def request(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise TrialFailed(f"the {self.backend} worker is gone (exit code {self.proc.poll()}){self.tail()}") from None
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise TrialFailed(f"timed out after {timeout_s:g} s in the {self.backend} worker{self.tail()}")
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                code = self.proc.wait()
                raise TrialFailed(f"the {self.backend} worker died (exit code {code}){self.tail()}")
            line = line.strip()
            if not line.startswith("{"):
                continue  # not ours (a library printing to stdout before the worker redirected it)
            return json.loads(line)

    def tail(self, lines: int = 3) -> str:
        try:
            with open(self.log_path, "rb") as f:
                text = f.read()[-4000:].decode(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return (": " + " | ".join(text[-lines:])) if text else ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        self._log.close()


class WorkerRunner:
    """Measures trials in persistent child processes, one per Keras backend."""

    source = "measured"

    def __init__(self, spec: str, predictor: ConfigPredictor, settings: WorkerSettings | None = None,
                 trial_timeout_s: float = 600.0, startup_timeout_s: float = 600.0, command: list[str] | None = None,
                 log_dir: str | None = None, input_shapes: str | None = None) -> None:
        """input_shapes: the model's input shapes as mapping.input_shapes.shapes_json text (None: none given), sent
        to every worker it starts."""
        self.spec = spec
        self.input_shapes = input_shapes
        self.predictor = predictor
        self.settings = settings or WorkerSettings()
        self.trial_timeout_s = trial_timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.command = command or [sys.executable, "-m", "carm_advisor.trials.worker"]
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="carm-tune-")
        self.workers: dict[str, _Worker] = {}
        self.restarts = 0
        self.device: dict[str, Any] = {}

    def _worker(self, backend: str) -> _Worker:
        w = self.workers.get(backend)
        if w is not None and w.alive():
            return w
        if w is not None:
            self.restarts += 1
            w.close()
        env = dict(os.environ, KERAS_BACKEND=backend)
        # The worker imports the same carm_advisor as this process, whatever its working directory.
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        # Two frameworks share one GPU: jax must not grab 75% of its memory at start.
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        hello = {"op": "init", "model": self.spec, "settings": self.settings.to_dict(),
                 "input_shapes": self.input_shapes}
        log_path = os.path.join(self.log_dir, f"worker-{backend}.log")
        w = _Worker(backend, self.command, env, log_path, self.startup_timeout_s, hello)
        if not w.info.get("ok", False):
            w.close()
            raise TrialFailed(f"the {backend} worker could not start: {w.info.get('error')}")
        self.device = w.info.get("device") or self.device
        self.workers[backend] = w
        return w

    def run(self, config: TrialConfig) -> Measurement:
        worker = self._worker(config.backend)
        reply = worker.request({"op": "measure", "config": config.to_dict()}, self.trial_timeout_s)
        if reply.get("ok"):
            m = Measurement.from_dict(reply["measurement"])
            m.flops = self.predictor.flops(config)
            return m
        if reply.get("kind") == "oom":
            raise TrialOutOfMemory(reply.get("error", "out of memory"))
        raise TrialFailed(reply.get("error", "unknown error"))

    def close(self) -> None:
        for w in self.workers.values():
            w.close()
        self.workers.clear()
