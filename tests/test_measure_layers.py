"""Per-layer and whole-model measurement on the CPU (tensorflow backend) with a FakeGPU on real time.

The FakeGPU draws a constant power P on the real clock, so every window's energy is P x its duration
(less the microseconds between the clock and counter reads, and < 1 mJ counter truncation): a layer's
energy per call must be P x its time per call, and its power P.
"""

from __future__ import annotations

import time

import keras
import numpy as np
import pytest

from carm_advisor.errors import MeasurementError
from carm_advisor.mapping.walker import iter_layer_calls
from carm_advisor.measure import backends
from carm_advisor.measure.layers import layer_runner, measure_layers
from carm_advisor.measure.model import measure_model, measure_model_graph
from carm_advisor.measure.records import RunMeasurement
from carm_advisor.measure.run import measure_run
from carm_advisor.measure.windows import PRESETS
from carm_advisor.power.fake import FakeGPU

FAKE_POWER_W = 250.0
FAKE_SM_CLOCK_MHZ = 1755.0
FAST = dict(min_window_s=0.02, repeats=2, warmup=1, progress=False)


def tiny_model() -> keras.Model:
    """Conv2D + 1x1 skip + Add + Flatten + Dense, and a Dense shared by two calls (walker names head#1)."""
    inp = keras.Input((8, 8, 3))
    conv = keras.layers.Conv2D(4, 3, padding="same", name="conv")(inp)
    skip = keras.layers.Conv2D(4, 1, name="skip")(inp)
    added = keras.layers.Add(name="add")([conv, skip])
    hidden = keras.layers.Dense(6, name="dense")(keras.layers.Flatten(name="flat")(added))
    head = keras.layers.Dense(6, name="head")
    return keras.Model(inp, head(head(hidden)), name="tiny")


@pytest.fixture(scope="module")
def model():
    return tiny_model()


@pytest.fixture(scope="module")
def run(model):
    gpu = FakeGPU(power_w=FAKE_POWER_W, sm_clock_mhz=FAKE_SM_CLOCK_MHZ, clock=time.perf_counter)
    return measure_run(model, batch_size=2, gpu=gpu, model_min_window_s=0.05, model_repeats=2, command="test", **FAST)


def test_layer_names_are_the_walker_paths_in_order(model, run):
    expected = [c.path for c in iter_layer_calls(model, 2)]
    assert expected == ["conv", "skip", "add", "flat", "dense", "head", "head#1"]
    assert [m.name for m in run.layers] == expected
    assert [m.type for m in run.layers] == ["Conv2D", "Conv2D", "Add", "Flatten", "Dense", "Dense", "Dense"]


def test_every_layer_is_measured_with_positive_time_and_the_asked_repeats(run):
    for m in run.layers:
        assert m.time_s > 0 and m.repeats == 2 and m.execution == "eager"


def test_layer_energy_is_fake_power_times_time(run):
    for m in run.layers:
        assert m.energy_j == pytest.approx(FAKE_POWER_W * m.time_s, rel=0.03), m.name
        assert m.power_w == pytest.approx(FAKE_POWER_W, rel=0.02), m.name
        assert m.sm_clock_mhz == FAKE_SM_CLOCK_MHZ


def test_whole_model_inference_and_training_step_have_energy_from_fake_power(run):
    for m in (run.inference, run.training_step):
        assert m is not None and m.time_s > 0
        assert m.energy_j == pytest.approx(FAKE_POWER_W * m.time_s, rel=0.03)
        assert m.power_w == pytest.approx(FAKE_POWER_W, rel=0.02)


def test_run_record_describes_backend_device_and_precision(run):
    assert run.backend == keras.backend.backend()
    assert run.device["name"] == "NVIDIA H200 (fake)" and run.device["backend_device"] == "cpu"
    assert run.batch_size == 2 and run.precision == "float32" and run.layout == "channels_last"
    assert run.math_mode["conv"] in ("tf32", "fp32")
    assert run.command == "test" and run.model_name == "tiny" and run.wall_s > 0
    assert run.intensity_source == "analytic"


def test_record_round_trips_through_json(run, tmp_path):
    path = run.to_json(tmp_path / "run.json")
    assert RunMeasurement.from_json(path) == run


def test_malformed_record_file_raises_one_line_error(run, tmp_path):
    data = run.to_dict()
    del data["layers"][0]["time_s"]
    path = tmp_path / "bad.json"
    import json

    path.write_text(json.dumps(data))
    with pytest.raises(MeasurementError) as err:
        RunMeasurement.from_json(path)
    assert "time_s" in str(err.value) and "\n" not in str(err.value)


def test_without_gpu_energy_power_and_clock_are_none(model):
    result = measure_layers(model, batch_size=2, gpu=None, only=["conv", "add"], **FAST)
    assert [m.name for m in result.layers] == ["conv", "add"]
    for m in result.layers:
        assert m.time_s > 0 and m.energy_j is None and m.power_w is None and m.sm_clock_mhz is None
    assert result.inference is None and result.device["name"] == "cpu"


def test_unknown_layer_name_in_only_raises(model):
    with pytest.raises(MeasurementError, match="nope"):
        measure_layers(model, batch_size=2, only=["nope"], **FAST)


def test_unknown_preset_raises(model):
    with pytest.raises(MeasurementError, match="preset"):
        measure_layers(model, batch_size=2, preset="turbo", progress=False)


def test_runner_calls_each_layer_as_the_graph_does_and_gets_the_walker_output_shape(model):
    """Add gets a list, a shared layer its second call's input; outputs match the symbolic shapes."""
    for call in iter_layer_calls(model, 3):
        out = layer_runner(call).fn()
        assert tuple(out.shape) == call.output_shapes[0], call.path


def test_embedding_gets_indices_inside_its_vocabulary():
    inp = keras.Input((5,), dtype="int32")
    emb = keras.layers.Embedding(7, 4, name="emb")(inp)
    model = keras.Model(inp, keras.layers.Dense(2, name="out")(keras.layers.Flatten()(emb)))
    call = next(c for c in iter_layer_calls(model, 64) if c.path == "emb")
    runner = layer_runner(call)
    indices = np.asarray(runner.tensors[0])
    assert indices.dtype == np.int32 and indices.min() >= 0 and indices.max() < 7
    # tensorflow on CPU raises on an out-of-range index, so measuring proves the indices valid too
    assert measure_layers(model, batch_size=4, **FAST).layers[0].name == "emb"


def test_training_step_leaves_weights_and_user_compile_config_unchanged():
    model = tiny_model()
    model.compile(optimizer="adam", loss="mae")
    before = [w.copy() for w in model.get_weights()]
    inference, step = measure_model(model, batch_size=2, min_window_s=0.02, repeats=1, warmup=1)
    assert inference.time_s > 0 and step is not None and step.time_s > 0
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert model.get_compile_config()["loss"] == "mae"


def test_model_without_training_step_returns_none_for_it(model):
    inference, step = measure_model(model, batch_size=2, training_step=False, min_window_s=0.02, repeats=1)
    assert inference.energy_j is None and step is None


def test_presets_trade_window_length_for_time():
    assert PRESETS["fast"].layer_window_s < PRESETS["standard"].layer_window_s < PRESETS["accurate"].layer_window_s
    # VGG16 has 22 layer calls: the standard preset's windows alone must leave room in a 30 s budget.
    standard = PRESETS["standard"]
    assert 22 * standard.layer_window_s * standard.layer_repeats + 2 * standard.model_window_s * standard.model_repeats <= 20


# ---- backend seam ------------------------------------------------------------------------------


def test_math_mode_reads_tensorflow_tf32_flag():
    import tensorflow as tf

    was = tf.config.experimental.tensor_float_32_execution_enabled()
    try:
        tf.config.experimental.enable_tensor_float_32_execution(True)
        on = backends.get("tensorflow").math_mode()
        tf.config.experimental.enable_tensor_float_32_execution(False)
        off = backends.get("tensorflow").math_mode()
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(was)
    assert (on["conv"], on["matmul"]) == ("tf32", "tf32")
    assert (off["conv"], off["matmul"]) == ("fp32", "fp32")
    assert off["flags"] == {"tf.config.experimental.tensor_float_32_execution_enabled()": False}
    assert on["gpu"] is False  # this machine has no GPU


def test_backend_queries_on_a_cpu_machine():
    assert backends.active_backend() == keras.backend.backend() == backends.get().name
    assert backends.get().has_gpu() is False and backends.get().device_name() == "cpu"
    assert backends.get("numpy").math_mode()["conv"] == "fp32"
    with pytest.raises(MeasurementError, match="backend"):
        backends.get("mxnet")


def test_synchronizer_keeps_the_last_outputs_for_the_sync():
    syncer = backends.Synchronizer(backends.get("tensorflow"))
    tracked = syncer.track(lambda: keras.ops.ones((2,)))
    out = tracked()
    assert syncer.last_outputs is out
    syncer()  # pulls the outputs to the host on a CPU: must not raise


def test_counters_without_ncu_leave_intensity_analytic(model, monkeypatch):
    from carm_advisor.measure import counters

    monkeypatch.setattr(counters, "ncu_path", lambda: None)
    result = measure_run(model, batch_size=2, counters=True, training_step=False, only=["conv"],
                         model_min_window_s=0.02, model_repeats=1, **FAST)
    assert result.intensity_source == "analytic" and result.layers[0].counters is None


def test_counters_from_ncu_are_attached_to_their_layer_by_name(model, monkeypatch):
    from carm_advisor.measure import counters
    from carm_advisor.measure import run as run_module

    measured = {"conv": counters.LayerCounters(name="conv", kernels=1, flops_by_path={"tensor_tf32": 800.0},
                                               sm_bytes_by_space={"global": 100.0})}
    monkeypatch.setattr(run_module, "measure_counters", lambda m, batch_size, only=None: measured)   # measure_run's
    result = measure_run(model, batch_size=2, counters=True, training_step=False, only=["conv", "add"],
                         model_min_window_s=0.02, model_repeats=1, **FAST)
    assert result.intensity_source == "counters"
    assert result.layer("conv").counters["flops"] == 800.0 and result.layer("conv").counters["ai"] == 8.0
    assert result.layer("add").counters is None


# ---- CUDA graphs (torch on a GPU), with a fake torch seam -----------------------------------------


class FakeCapture:
    """Stands in for Backend.capture_cuda_graph: records what it captured; its replay runs fn and counts."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.captured: list[tuple[object, int]] = []
        self.replays = 0

    def __call__(self, fn, *, warmup):
        self.captured.append((fn, warmup))
        fn()  # the real capture runs fn too; a failing one raises like an op a capture forbids
        if self.fail:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

        def replay():
            self.replays += 1
            fn()

        return replay


@pytest.fixture
def fake_torch_gpu(monkeypatch):
    """The active backend reads as torch on a CUDA GPU; device sync, no_grad and versions are no-ops."""
    import contextlib

    torch_backend = backends.get("torch")
    monkeypatch.setattr(backends, "active_backend", lambda: "torch")
    monkeypatch.setattr(torch_backend, "has_gpu", lambda: True)
    monkeypatch.setattr(torch_backend, "sync", lambda outputs=None: None)
    monkeypatch.setattr(torch_backend, "inference_context", lambda: contextlib.nullcontext())
    monkeypatch.setattr(torch_backend, "version", lambda: "2.11.0")
    monkeypatch.setattr(torch_backend, "device_name", lambda: "NVIDIA H200")
    monkeypatch.setattr(torch_backend, "math_mode", lambda: {"conv": "tf32", "matmul": "fp32", "gpu": True})
    capture = FakeCapture()
    monkeypatch.setattr(torch_backend, "capture_cuda_graph", capture)
    return capture


@pytest.mark.parametrize(
    "backend_name, gpu, graphs, training, expected",
    [
        ("torch", True, True, False, True),
        ("torch", False, True, False, False),    # torch on a CPU: no CUDA graphs
        ("torch", True, False, False, False),    # turned off
        ("torch", True, True, True, False),      # training calls stay eager
        ("jax", True, True, False, False),
        ("tensorflow", True, True, False, False),
    ],
)
def test_cuda_graphs_only_for_torch_inference_on_a_cuda_gpu(monkeypatch, backend_name, gpu, graphs, training, expected):
    from carm_advisor.measure.execution import uses_cuda_graphs

    for name in ("torch", "jax", "tensorflow"):
        monkeypatch.setattr(backends.get(name), "has_gpu", lambda: gpu)
    assert uses_cuda_graphs(backend_name, graphs=graphs, training=training) is expected


def test_torch_gpu_runner_replays_the_captured_layer_call(model, monkeypatch):
    monkeypatch.setattr(backends.get("torch"), "has_gpu", lambda: True)
    capture = FakeCapture()
    call = next(c for c in iter_layer_calls(model, 2) if c.path == "conv")
    runner = layer_runner(call, backend="torch", capture=capture, warmup=5)
    assert runner.execution == "cuda_graph"
    (captured_fn, warmup), = capture.captured
    assert warmup == 5 and tuple(captured_fn().shape) == (2, 8, 8, 4)  # the eager layer call was captured
    runner.fn()
    runner.fn()
    assert capture.replays == 2


def test_failed_capture_falls_back_to_eager_with_a_warning_naming_the_layer(model, monkeypatch):
    monkeypatch.setattr(backends.get("torch"), "has_gpu", lambda: True)
    call = next(c for c in iter_layer_calls(model, 2) if c.path == "conv")
    with pytest.warns(RuntimeWarning, match="'conv'.*CUDA graph.*eagerly"):
        runner = layer_runner(call, backend="torch", capture=FakeCapture(fail=True))
    assert runner.execution == "eager"
    assert tuple(runner.fn().shape) == (2, 8, 8, 4)


def test_graphs_false_or_no_gpu_never_captures(model, monkeypatch):
    capture = FakeCapture()
    call = next(c for c in iter_layer_calls(model, 2) if c.path == "conv")
    monkeypatch.setattr(backends.get("torch"), "has_gpu", lambda: True)
    assert layer_runner(call, backend="torch", graphs=False, capture=capture).execution == "eager"
    monkeypatch.setattr(backends.get("torch"), "has_gpu", lambda: False)
    assert layer_runner(call, backend="torch", capture=capture).execution == "eager"
    assert layer_runner(call, backend="tensorflow", capture=capture).execution == "eager"
    assert capture.captured == []


def test_torch_gpu_run_times_layer_and_model_graph_replays_and_keeps_inference_eager(model, fake_torch_gpu):
    run = measure_run(model, batch_size=2, gpu=None, model_min_window_s=0.02, model_repeats=1,
                      training_step=False, only=["conv", "add"], command="test", **FAST)
    assert [m.execution for m in run.layers] == ["cuda_graph", "cuda_graph"]
    assert run.inference.execution == "eager"
    assert run.inference_graph is not None and run.inference_graph.execution == "cuda_graph"
    assert run.inference_graph.time_s > 0 and run.inference_graph.repeats == FAST["repeats"]
    assert len(fake_torch_gpu.captured) == 3  # two layers and the model
    assert fake_torch_gpu.replays > 0 and run.settings["graphs"] is True


def test_torch_gpu_run_with_graphs_off_is_eager_and_has_no_graph_inference(model, fake_torch_gpu):
    run = measure_run(model, batch_size=2, model_min_window_s=0.02, model_repeats=1, training_step=False,
                      only=["conv"], graphs=False, **FAST)
    assert run.layers[0].execution == "eager" and run.inference_graph is None
    assert fake_torch_gpu.captured == [] and run.settings["graphs"] is False


def test_one_layer_failing_capture_is_eager_the_others_stay_graphs(model, fake_torch_gpu, monkeypatch):
    calls = {"n": 0}  # the second capture (layer 'skip') fails
    real = fake_torch_gpu

    def second_fails(fn, *, warmup):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        return real(fn, warmup=warmup)

    monkeypatch.setattr(backends.get("torch"), "capture_cuda_graph", second_fails)
    with pytest.warns(RuntimeWarning, match="'skip'"):
        result = measure_layers(model, batch_size=2, only=["conv", "skip", "add"], **FAST)
    assert [m.execution for m in result.layers] == ["cuda_graph", "eager", "cuda_graph"]


def test_model_graph_is_none_off_torch_and_none_with_warning_when_capture_fails(model, fake_torch_gpu, monkeypatch):
    with pytest.warns(RuntimeWarning, match="model 'tiny'"):
        assert measure_model_graph(model, batch_size=2, capture=FakeCapture(fail=True),
                                   min_window_s=0.02, repeats=1) is None
    monkeypatch.setattr(backends, "active_backend", lambda: "tensorflow")
    assert measure_model_graph(model, batch_size=2, min_window_s=0.02, repeats=1) is None


def test_records_with_and_without_inference_graph_round_trip(run, model, fake_torch_gpu, tmp_path):
    assert run.inference_graph is None
    assert RunMeasurement.from_json(run.to_json(tmp_path / "eager.json")) == run
    graphed = measure_run(model, batch_size=2, model_min_window_s=0.02, model_repeats=1, training_step=False,
                          only=["conv"], command="test", **FAST)
    back = RunMeasurement.from_json(graphed.to_json(tmp_path / "graph.json"))
    assert back == graphed and back.inference_graph.execution == "cuda_graph"
    assert back.layers[0].execution == "cuda_graph"


@pytest.mark.parametrize("name", ["h200-record-vgg16-float32-b64.json", "h200-record-vgg16-mixed_bfloat16-b64.json",
                                  "h200-record-vgg16-mixed_bfloat16-jax-b64.json"])
def test_recorded_h200_runs_without_inference_graph_still_load(name):
    from pathlib import Path

    run = RunMeasurement.from_json(Path(__file__).parent / "data" / name)
    assert run.inference_graph is None and len(run.layers) == 22
    assert run.inference is not None and run.inference.time_s > 0


def test_record_with_unknown_model_execution_raises(run):
    data = run.to_dict()
    data["inference_graph"] = dict(data["inference"], execution="graph")
    with pytest.raises(MeasurementError, match="inference_graph.execution"):
        RunMeasurement.from_dict(data)


@pytest.mark.gpu
def test_real_cuda_graph_replay_recomputes_the_captured_torch_work():
    torch = pytest.importorskip("torch")
    a = torch.randn(64, 64, device="cuda")
    replay = backends.get("torch").capture_cuda_graph(lambda: a * 2.0, warmup=2)
    a.fill_(3.0)  # the graph reads a's memory at replay time, not at capture time
    replay()
    torch.cuda.synchronize()
    assert torch.equal(replay.outputs, torch.full((64, 64), 6.0, device="cuda"))


def test_whole_model_inputs_take_the_batch_asked_for_also_where_the_model_fixes_one():
    """The mapping costs a fixed-batch model at the batch asked for; its measured whole-model time must be of
    that batch too, or samples/s and samples/J would divide a batch-3 time by another batch."""
    import keras

    from carm_advisor.measure.inputs import model_inputs

    inputs = keras.Input((16,), batch_size=3)
    model = keras.Model(inputs, keras.layers.Dense(4)(inputs))
    assert tuple(model_inputs(model, 8).single(model, "x").shape) == (8, 16)
    free = keras.Input((16,))
    assert tuple(model_inputs(keras.Model(free, keras.layers.Dense(4)(free)), 8).args[0].shape) == (8, 16)


class SeenModel(keras.Model):
    """A subclassed model that remembers the shapes and dtypes its eager call() ran on."""

    def seen_now(self, **tensors):
        if not isinstance(next(iter(tensors.values())), keras.KerasTensor):   # the eager calls, not a trace
            self.seen = {k: (tuple(v.shape), keras.backend.standardize_dtype(v.dtype)) for k, v in tensors.items()}


class OneInputModel(SeenModel):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(4, name="dense")

    def call(self, x):
        self.seen_now(x=x)
        return self.dense(x)


class TwoInputsModel(SeenModel):
    """call(tokens, extra): integer ids through an Embedding, and a float tensor; Keras records tokens' shape."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.embed = keras.layers.Embedding(50, 6, name="embed")
        self.proj = keras.layers.Dense(6, name="proj")

    def call(self, tokens, extra):
        self.seen_now(tokens=tokens, extra=extra)
        return keras.ops.mean(self.embed(tokens), axis=1) + self.proj(extra)


def test_a_subclassed_model_is_measured_whole_on_the_shapes_keras_recorded_at_the_batch_asked_for():
    """A subclassed model has no model.inputs: it is measured on what the mapping traces (its build shapes)."""
    model = OneInputModel()
    model(np.zeros((3, 5), "float32"))
    gpu = FakeGPU(power_w=FAKE_POWER_W, sm_clock_mhz=FAKE_SM_CLOCK_MHZ, clock=time.perf_counter)
    inference, training = measure_model(model, batch_size=7, gpu=gpu, min_window_s=0.02, repeats=2, warmup=1)
    assert model.seen == {"x": ((7, 5), "float32")}
    assert inference.time_s > 0 and inference.energy_j == pytest.approx(FAKE_POWER_W * inference.time_s, rel=0.03)
    assert training is not None and training.time_s > 0   # one input: train_on_batch can take it


def test_a_call_of_several_tensors_is_measured_whole_on_the_input_shapes_given_with_their_dtypes():
    from carm_advisor.mapping.given_shapes import call_shapes

    model = TwoInputsModel()
    model(np.zeros((2, 9), "int32"), np.zeros((2, 3), "float32"))
    gpu = FakeGPU(power_w=FAKE_POWER_W, sm_clock_mhz=FAKE_SM_CLOCK_MHZ, clock=time.perf_counter)
    shapes = {"tokens": keras.Input((9,), dtype="int32"), "extra": (None, 3)}
    with call_shapes(model, shapes):
        inference, _ = measure_model(model, batch_size=4, gpu=gpu, training_step=False, min_window_s=0.02,
                                     repeats=2, warmup=1)
        assert inference.time_s > 0
        assert model.seen == {"tokens": ((4, 9), "int32"), "extra": ((4, 3), "float32")}
        with pytest.raises(MeasurementError, match=r"^Expected model '.*' to take one input for a training step.*2 tensor"):
            measure_model(model, batch_size=4, gpu=gpu, min_window_s=0.02, repeats=1, warmup=1)
    # Without the shapes Keras recorded tokens' shape only: a one-line MeasurementError saying what to pass
    with pytest.raises(MeasurementError, match=r"^Expected the inputs of subclassed model '.*'; Keras recorded the "
                                               r"shape of the first argument only: pass input_shapes for \(tokens, "
                                               r"extra\) \(carm-advise: an --input-shape for each\) "
                                               r"\(whole-model measurement calls it on them\)$"):
        measure_model(model, batch_size=4, gpu=gpu, training_step=False, min_window_s=0.02, repeats=1, warmup=1)


def test_the_ids_of_a_subclassed_model_stay_inside_its_embedding():
    from carm_advisor.mapping.given_shapes import call_shapes
    from carm_advisor.measure.inputs import model_inputs

    model = TwoInputsModel()
    model(np.zeros((2, 9), "int32"), np.zeros((2, 3), "float32"))
    with call_shapes(model, [keras.Input((400,), dtype="int32"), (None, 3)]):
        x = model_inputs(model, 16)
    ids = keras.ops.convert_to_numpy(x.args[0])
    assert ids.shape == (16, 400) and ids.min() >= 0 and ids.max() < 50 and len(np.unique(ids)) > 2   # drawn over the vocabulary


def test_a_subclassed_model_never_called_is_refused_in_one_line():
    with pytest.raises(MeasurementError, match=r"^Expected model '.*' to have known inputs.*called once"):
        measure_model(OneInputModel(), batch_size=2, training_step=False, min_window_s=0.02, repeats=1, warmup=1)


def test_analyze_measures_a_subclassed_model_of_several_tensors_whole_and_per_layer_on_its_input_shapes(monkeypatch):
    """On a GPU (faked: NVML sees one, the FakeGPU gives power) analyze() used to stop at the whole-model
    measurement of any subclassed model: it had no known inputs. It measures it on the shapes it maps it on."""
    import carm_advisor.advise.analyze as analysis
    from carm_advisor import analyze

    monkeypatch.setattr(analysis, "gpu_count", lambda: 1)   # where analyze looks it up
    monkeypatch.setattr(backends.get(), "has_gpu", lambda: True)
    monkeypatch.setattr(backends.get(), "device_name", lambda: "NVIDIA H200")
    model = TwoInputsModel()
    model(np.zeros((2, 9), "int32"), np.zeros((2, 3), "float32"))
    gpu = FakeGPU(name="NVIDIA H200", power_w=FAKE_POWER_W, sm_clock_mhz=FAKE_SM_CLOCK_MHZ, clock=time.perf_counter)
    options = dict(gpu=gpu, training_step=False, min_window_s=0.02, repeats=1, warmup=1, model_min_window_s=0.02,
                   model_repeats=1)
    report = analyze(model, batch_size=5, measure=True, measure_options=options, progress=False,
                     input_shapes=[keras.Input((9,), dtype="int32"), (None, 3)])
    assert model.seen == {"tokens": ((5, 9), "int32"), "extra": ((5, 3), "float32")}
    assert report.measurement.inference["time_s"] > 0
    assert report.measurement.inference["power_w"] == pytest.approx(FAKE_POWER_W, rel=0.02)
    # the two layers; the keras.ops between them too where each call is timed alone (not torch's one profiled
    # pass, whose ranges wrap layer calls: a subclassed call() makes new ops each time, and the report says so)
    measured = {row.name for row in report.layers if row.measured and row.time_s > 0}
    assert measured == ({"embed", "proj"} if backends.active_backend() == "torch" else {"embed", "mean", "proj", "add"})


class OptionalArgument(SeenModel):
    """call(x, scale=None): Keras records x's shape; the optional argument stays at its default."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(3, name="dense")

    def call(self, x, scale=None):
        self.seen_now(x=x)
        return self.dense(x) if scale is None else self.dense(x) * scale


class TokensAsFloats(keras.Model):
    """Token ids into an Embedding of 1000 words; Keras records no dtype for the ids the model was built on."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.embed = keras.layers.Embedding(1000, 4, name="embed")

    def call(self, ids):
        return self.embed(ids)


def test_an_optional_call_argument_left_at_its_default_is_no_reason_to_refuse_the_whole_model():
    model = OptionalArgument()
    model(np.zeros((2, 5), "float32"))
    inference, _ = measure_model(model, batch_size=3, training_step=False, min_window_s=0.02, repeats=1, warmup=1)
    assert inference.time_s > 0 and model.seen == {"x": ((3, 5), "float32")}


def test_ids_of_a_subclassed_model_built_on_floats_are_whole_numbers_its_embedding_can_take():
    """Standard-normal floats cast to negative ids (a CUDA index error on torch); whole numbers in [0, 256) are
    valid ids for a 1000-word vocabulary and exact in float16 and bfloat16."""
    from carm_advisor.measure.inputs import model_inputs

    model = TokensAsFloats()
    model(np.zeros((2, 50), "float32"))
    ids = keras.ops.convert_to_numpy(model_inputs(model, 40).single(model, "x"))
    assert ids.shape == (40, 50) and ids.min() >= 0 and ids.max() < 256 and np.array_equal(ids, np.round(ids))
    assert len(np.unique(ids)) > 100
