"""One way to give a model's input shapes, for every kind of model, wherever the model runs or is costed:
`--input-shape [NAME=]DIMS[:DTYPE]` / `input_shapes=`. keras_hub's BERT and Gemma backbones (Functional models
whose token inputs have no fixed length) are analysed, tuned (predicted and measured) and verified on the shapes
given; without them, or with shapes that do not agree with the model, one line says what to pass. A keras_hub
preset name without a network is one line naming a builder instead. FLOPs are hand counts: 1 multiply-add = 2
FLOPs, a bias 1 per output."""

from __future__ import annotations

import json
import re
import socket
import sys
import time
from pathlib import Path

import keras
import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub", reason="keras_hub is not installed: the backbones come from it")

from carm_advisor.errors import MappingError  # noqa: E402
from carm_advisor.mapping.input_shapes import shaped_model, shapes_json  # noqa: E402
from carm_advisor.measure import backends  # noqa: E402
from carm_advisor.trials.space import SearchSpace, TrialConfig  # noqa: E402

SUPPORT = Path(__file__).parent / "tune_support"
sys.path.insert(0, str(SUPPORT))
import hub_models  # noqa: E402
from _cli import run_cli

REPO_ROOT = Path(__file__).resolve().parents[1]
BERT = "hub_models:bert_tiny"
GEMMA = "hub_models:gemma_tiny"
BERT_BY_NAME = ["token_ids=16:int32", "segment_ids=16:int32", "padding_mask=16:int32"]
BERT_BY_NAME_SHAPES = {"token_ids": keras.Input((16,), dtype="int32"), "segment_ids": (None, 16),
                       "padding_mask": (None, 16)}




def assert_one_line_error(code, err, fragment):
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("carm-advise: error:"), err
    # Keras numbers a model name built again in one process (bert_backbone_1): the name the user meets is the first
    assert fragment in re.sub(r"(_backbone)_\d+'", r"\1'", lines[0]), lines[0]


def flags(*shapes):
    return [a for s in shapes for a in ("--input-shape", s)]


@pytest.fixture
def support_on_path(monkeypatch):
    """The builders' module importable here and in the child processes a run starts."""
    monkeypatch.setenv("PYTHONPATH", str(SUPPORT))


# ---- the flag's grammar ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, read", [
    ("160,160,3", (None, (160, 160, 3), None)),
    ("token_ids=128:int32", ("token_ids", (128,), "int32")),
    ("128", (None, (128,), None)),
    ("t=", ("t", (), None)),                       # one value per sample
])
def test_the_flag_reads_an_optional_name_the_dimensions_and_an_optional_dtype(text, read):
    from carm_advisor.cli.common import input_shape

    assert input_shape(text) == read


def test_call_shape_stays_a_hidden_alias_of_input_shape(capsys):
    from carm_advisor.cli import build_parser

    args = build_parser().parse_args(["analyze", BERT, "--call-shape", "16", "--input-shape", "x=3:int32"])
    assert args.input_shape == [(None, (16,), None), ("x", (3,), "int32")]
    code, out, _ = run_cli(capsys, "analyze", "--help")
    assert code == 0 and "--input-shape" in out and "--call-shape" not in out


# ---- analyze: the one-line errors and the backbones analysed with one flag set ---------------------------------


def test_a_backbone_of_unknown_sequence_length_without_shapes_is_one_line_naming_its_inputs(capsys, support_on_path):
    code, _, err = run_cli(capsys, "analyze", BERT, "--no-measure")
    assert_one_line_error(code, err, "Expected input shapes for model 'bert_backbone', whose inputs of unknown size "
                                     "besides the batch are padding_mask (None, None) int32, segment_ids (None, None) "
                                     "int32, token_ids (None, None) int32; give them with --input-shape "
                                     "[NAME=]DIMS[:DTYPE] (input_shapes= in Python), e.g. --input-shape "
                                     "padding_mask=128:int32 --input-shape segment_ids=128:int32 --input-shape "
                                     "token_ids=128:int32 (or one unnamed --input-shape 128 for all of them)")


@pytest.mark.parametrize("shapes, fragment", [
    (["16,2"], "--input-shape 16,2 does not agree with input padding_mask of model 'bert_backbone', of shape "
               "(None, None) (batch first, None: any size): give its 1 dimension(s)"),
    (["token_ids=16:int32"], "none given for padding_mask (None, None) int32, segment_ids (None, None) int32"),
    (["token_ids=16:float32", "segment_ids=16", "padding_mask=16"],
     "--input-shape token_ids=16:float32 does not agree with input token_ids of model 'bert_backbone', of dtype int32"),
    (["colour=16"], "Expected input names of model 'bert_backbone' (padding_mask, segment_ids, token_ids), received: "
                    "colour"),
    (["16", "16"], "Expected 3 input shape(s), one per input of model 'bert_backbone' in order (padding_mask, "
                   "segment_ids, token_ids), or by name (NAME=DIMS), received: 2"),
    (["token_ids=16", "16"], "--input-shape: name every input (NAME=DIMS) or none of them, not some"),
    (["token_ids=16", "token_ids=16"], "an input given twice"),
    (["0"], "expected positive dimensions"),
])
def test_shapes_that_do_not_fit_the_backbone_are_one_line_errors(capsys, support_on_path, shapes, fragment):
    code, _, err = run_cli(capsys, "analyze", BERT, "--no-measure", *flags(*shapes))
    assert_one_line_error(code, err, fragment)


@pytest.mark.parametrize("model, shapes", [
    ("mobilenetv3small", ["image=96,96,3"]),
    ("mobilenetv3small", ["96,96,3:int32"]),
    ("mobilenetv3small", ["96,96,3", "96,96,3"]),
])
def test_an_application_takes_one_unnamed_image_size(capsys, model, shapes):
    code, _, err = run_cli(capsys, "analyze", model, "--no-measure", *flags(*shapes))
    assert_one_line_error(code, err, "--input-shape of the keras.applications model mobilenetv3small is one unnamed "
                                     "image size without a dtype, e.g. --input-shape 160,160,3")


def _rows(tmp_path) -> dict:
    report = json.loads((tmp_path / "r.json").read_text())
    assert not [w for w in report["warnings"] if "lower bound" in w or "no cost model" in w], report["warnings"]
    return {r["name"]: r for r in report["layers"]}


@pytest.mark.parametrize("shapes", [BERT_BY_NAME, ["16"], ["16", "16", "16"]], ids=["by-name", "one-for-all",
                                                                                     "in-order"])
def test_bert_analyses_with_one_flag_set(capsys, tmp_path, support_on_path, shapes):
    code, _, err = run_cli(capsys, "analyze", BERT, "--batch-size", "2", "--no-measure", "--json",
                           str(tmp_path / "r.json"), *flags(*shapes))
    assert code == 0, err
    rows = _rows(tmp_path)
    # 2 x 16 tokens through the feed-forward output Dense(64 -> 32): 2 x 32 x 64 x 32 + a bias per output
    assert rows["transformer_layer_0/feedforward_output_dense"]["flops"] == 2 * 32 * 64 * 32 + 32 * 32
    # the pooler: the first token of each sample through Dense(32 -> 32), a bias and a tanh (4 FLOPs) per output
    assert rows["pooled_dense"]["flops"] == 2 * 2 * 32 * 32 + 2 * 32 + 4 * 2 * 32


def test_gemma_analyses_with_one_flag_set(capsys, tmp_path, support_on_path):
    code, _, err = run_cli(capsys, "analyze", GEMMA, "--batch-size", "2", "--no-measure", "--json",
                           str(tmp_path / "r.json"), *flags("token_ids=16:int32", "padding_mask=16:int32"))
    assert code == 0, err
    rows = _rows(tmp_path)
    # the gated feed-forward's output projection, 32 -> 32 without a bias, on 2 x 16 tokens
    assert rows["decoder_block_0/ffw_linear"]["flops"] == 2 * 32 * 32 * 32
    # the query projection: 32 -> 2 heads x 16
    assert rows["decoder_block_1/attention/query"]["flops"] == 2 * 32 * 32 * 2 * 16


def test_the_shapes_leave_the_users_model_as_it_was():
    model = hub_models.bert_tiny()
    before = {layer.name: len(layer._inbound_nodes) for layer in model._flatten_layers()}
    with shaped_model(model, [(None, 16)]) as view:
        assert [tuple(t.shape) for t in view.inputs] == [(None, 16)] * 3
        assert {id(w) for w in view.weights} == {id(w) for w in model.weights}   # its own weights, nothing copied
    assert {layer.name: len(layer._inbound_nodes) for layer in model._flatten_layers()} == before
    assert [tuple(t.shape) for t in model.inputs] == [(None, None)] * 3


def test_a_model_whose_inputs_are_known_takes_shapes_that_agree_and_refuses_others():
    from carm_advisor.mapping import map_model

    x = keras.Input((4,))
    model = keras.Model(x, keras.layers.Dense(2, name="d")(x))
    assert map_model(model, 3, input_shapes=[(None, 4)])[0].flops == 3 * (2 * 4 * 2 + 2)
    with pytest.raises(MappingError, match=r"^--input-shape 5 does not agree with input input_layer.* of shape "
                                           r"\(None, 4\)"):
        map_model(model, 3, input_shapes=[(None, 5)])


def test_the_backbone_is_measured_whole_on_inputs_of_the_shapes_given():
    """Whole-model measurement (a FakeGPU drawing 250 W on the real clock) feeds the model inputs built from the
    shapes: 16 token ids per sample, below the 100-word vocabulary."""
    from carm_advisor.measure.inputs import model_inputs
    from carm_advisor.measure.model import measure_model
    from carm_advisor.power.fake import FakeGPU

    model = hub_models.bert_tiny()
    gpu = FakeGPU(power_w=250.0, sm_clock_mhz=1980.0, clock=time.perf_counter)
    with shaped_model(model, BERT_BY_NAME_SHAPES) as view:
        x = model_inputs(view, 3).args[0]
        inference, _ = measure_model(view, batch_size=3, gpu=gpu, training_step=False, min_window_s=0.02,
                                     repeats=2, warmup=1)
    ids = keras.ops.convert_to_numpy(x["token_ids"])
    assert set(x) == {"token_ids", "segment_ids", "padding_mask"} and ids.shape == (3, 16) and ids.max() < 100
    assert inference.time_s > 0 and inference.energy_j == pytest.approx(250.0 * inference.time_s, rel=0.03)


def test_analyze_measures_the_backbone_on_the_shapes_given(monkeypatch):
    """analyze() on a (faked) GPU: torch's one profiled pass and the whole model, on the shapes given. (Elsewhere
    each layer is timed alone, and keras_hub's attention, given its mask first, fails there with or without
    shapes: measure/layers.py.)"""
    if backends.active_backend() != "torch":
        pytest.skip("each layer timed alone: keras_hub's MultiHeadAttention does not run alone on its node's inputs")
    import carm_advisor.advise.analyze as analysis
    from carm_advisor import analyze
    from carm_advisor.power.fake import FakeGPU

    monkeypatch.setattr(analysis, "gpu_count", lambda: 1)
    monkeypatch.setattr(backends.get(), "has_gpu", lambda: True)
    monkeypatch.setattr(backends.get(), "device_name", lambda: "NVIDIA H200")
    gpu = FakeGPU(name="NVIDIA H200", power_w=250.0, sm_clock_mhz=1980.0, clock=time.perf_counter)
    options = dict(gpu=gpu, training_step=False, min_window_s=0.02, repeats=1, warmup=1, model_min_window_s=0.02,
                   model_repeats=1)
    report = analyze(hub_models.bert_tiny(), batch_size=3, measure=True, measure_options=options, progress=False,
                     input_shapes=BERT_BY_NAME_SHAPES)
    assert report.measurement.inference["time_s"] > 0
    assert report.measurement.inference["power_w"] == pytest.approx(250.0, rel=0.02)
    measured = {row.name for row in report.layers if row.measured and row.time_s > 0}
    assert "transformer_layer_0/feedforward_output_dense" in measured


# ---- --verify: the child's configuration carries the shapes ----------------------------------------------------


def test_verify_gives_each_child_and_tuner_worker_the_shapes_and_the_child_runs_the_model_on_them(monkeypatch):
    """--verify's runners: the child of a model(x) change (run here, in this process, on its configuration) and
    the tuner's worker of a compiler change (its WorkerRunner recorded) both get the shapes the model was
    analysed on."""
    from carm_advisor import analyze
    from carm_advisor.advise import verify
    from carm_advisor.trials import child
    from carm_advisor.trials.runner import Measurement

    seen_inputs, configs, workers = [], [], []

    def measured_here(model, batch_size, **_):   # what the child measures: the model it built, not a timing
        seen_inputs.append([tuple(t.shape) for t in model.inputs])
        return type("M", (), {"time_s": 1e-3, "energy_j": None, "power_w": None, "execution": "test"})(), None

    def child_config(cfg, timeout_s=None):
        configs.append(cfg)
        return child.run_here(child.normalized(cfg))   # the child's own work, in this process

    class TunerWorker:
        def __init__(self, spec, predictor, settings=None, trial_timeout_s=None, input_shapes=None):
            workers.append(input_shapes)

        def run(self, trial):
            return Measurement(time_s=1e-3, energy_j=None, flops=0.0, batch_size=trial.batch_size, source="test")

        def close(self):
            pass

    monkeypatch.setattr(child, "measure_model", measured_here)
    monkeypatch.setattr(verify, "measure_config", child_config)
    monkeypatch.setattr(verify, "WorkerRunner", TunerWorker)
    report = analyze(hub_models.bert_tiny(), batch_size=2, measure=False, progress=False, verify=True,
                     verify_runner=verify.TrialRunners(), input_shapes=[(None, 16)])
    assert configs and all(c["input_shapes"] == shapes_json([(None, 16)]) for c in configs)
    assert seen_inputs and all(shapes == [(None, 16)] * 3 for shapes in seen_inputs)
    verified = [rec.verified for rec in report.recommendations if rec.verified]
    assert verified and all(v["error"] is None for v in verified)
    # a compiler change (torch.compile on torch): the tuner's worker started with the shapes
    compiled = any(verify.tuner_compiler(v["config"]) for v in verified)
    assert workers == ([shapes_json([(None, 16)])] if compiled else [])


def test_the_child_builds_an_application_at_the_image_size_given(monkeypatch):
    """--verify of `analyze mobilenetv3small --input-shape 96,96,3` used to measure the child's 224x224 build."""
    from carm_advisor.trials import child

    seen = []

    def measured_here(model, batch_size, **_):
        seen.append(tuple(model.inputs[0].shape))
        return type("M", (), {"time_s": 1e-3, "energy_j": None, "power_w": None, "execution": "test"})(), None

    monkeypatch.setattr(child, "measure_model", measured_here)
    result = child.run_here(child.normalized({"model": "mobilenetv3small",
                                              "input_shapes": shapes_json([(None, 96, 96, 3)])}))
    assert result["ok"] and seen == [(None, 96, 96, 3)]


# ---- tune: the trial worker, the run attributes, the fingerprint ----------------------------------------------


WORKER_SETTINGS = {"window_s": 0.02, "min_windows": 1, "max_windows": 1, "warmup_calls": 1, "idle_gap_s": 0,
                   "accuracy_samples": 3}


def _trial(worker, batch):
    compiler = "eager" if worker.backend == "torch" else {"tensorflow": "graph", "jax": "xla"}[worker.backend]
    return TrialConfig(worker.backend, "float32", batch, "channels_last", compiler).to_dict()


def test_the_trial_worker_feeds_the_backbone_the_shapes_of_its_init_message():
    from carm_advisor.trials.worker import Worker

    worker = Worker({"model": BERT, "settings": WORKER_SETTINGS, "input_shapes": shapes_json([(None, 16)])})
    host = worker.host_inputs("channels_last", 5)
    assert set(host) == {"token_ids", "segment_ids", "padding_mask"}
    assert all(a.shape == (5, 16) and a.dtype == np.int32 for a in host.values())
    assert 0 <= host["token_ids"].min() and host["token_ids"].max() < 100   # inside the vocabulary
    m = worker.measure(_trial(worker, 5))
    assert m["time_s"] > 0 and m["output_error"] < 1e-5   # float32 on the CPU: the reference's own arithmetic

    without = Worker({"model": BERT, "settings": WORKER_SETTINGS})
    with pytest.raises(Exception, match=r"^Expected input shapes for model 'bert_backbone(_\d+)?'.*--input-shape 128 "
                                        r"for all of them\)$"):
        without.measure(_trial(without, 5))


def test_the_output_compared_is_the_same_whatever_the_order_of_a_dict_of_outputs():
    """keras_hub's BERT returns {sequence_output, pooled_output}: on jax predict_on_batch and a direct call give
    them in different orders, and the accuracy check compared a (3, 32) output with a (3, 16, 32) one."""
    from carm_advisor.trials.worker import _first

    sequence, pooled = np.zeros((3, 16, 32)), np.zeros((3, 32))
    assert _first({"sequence_output": sequence, "pooled_output": pooled}) is pooled
    assert _first({"pooled_output": pooled, "sequence_output": sequence}) is pooled
    assert _first([(sequence, pooled)]) is sequence


def test_the_trial_worker_runs_a_call_of_two_tensors_on_the_shapes_given():
    """predict_on_batch passes one x: a call(image, tokens) runs inside a one-input model fed both."""
    from carm_advisor.trials.worker import Worker

    shapes = [(None, 3), keras.Input((7,), dtype="int32")]
    worker = Worker({"model": "hub_models:two_arguments", "settings": WORKER_SETTINGS,
                     "input_shapes": shapes_json(shapes)})
    host = worker.host_inputs("channels_last", 9)
    image, tokens = host["args"]
    assert host["kwargs"] == {} and image.shape == (9, 3) and tokens.shape == (9, 7) and tokens.dtype == np.int32
    m = worker.measure(_trial(worker, 9))
    assert m["time_s"] > 0 and m["output_error"] < 1e-5


def test_a_worker_process_started_for_a_study_gets_the_shapes(tmp_path, support_on_path):
    pytest.importorskip("torch")
    from stubs import TablePredictor

    from carm_advisor.trials.runner import WorkerRunner, WorkerSettings

    runner = WorkerRunner(BERT, TablePredictor({"float32": (1, 1)}, 100.0), WorkerSettings(**WORKER_SETTINGS),
                          trial_timeout_s=300, log_dir=str(tmp_path), input_shapes=shapes_json(BERT_BY_NAME_SHAPES))
    try:
        m = runner.run(TrialConfig("torch", "float32", 4, "channels_last", "eager"))
    finally:
        runner.close()
    assert m.source.startswith("measured") and m.time_s > 0 and m.output_error < 1e-5


SPACE = dict(backends=("torch",), precisions=("float32",), batch_sizes=(4,), layouts=("channels_last",),
             compilers={"torch": ("eager",)})


def _tune(tmp_path, **kwargs):
    from carm_advisor.tune.study import tune

    return tune(BERT, n_trials=1, storage=str(tmp_path / "s.db"), space=SearchSpace(**SPACE), progress=False,
                baseline=TrialConfig("torch", "float32", 4, "channels_last", "eager"), calibration=False, **kwargs)


def test_a_measured_study_stores_the_shapes_for_its_workers_and_a_joining_worker_reads_them(tmp_path,
                                                                                         support_on_path):
    """A study run by a (fake) measuring runner: the run attributes carry the shapes, and the runner a joining
    worker builds from them (tune/parallel.runner_from_run) starts its worker processes with them."""
    import optuna

    from carm_advisor.models.builder import model_spec
    from carm_advisor.trials.predicted import ConfigPredictor
    from carm_advisor.trials.runner import FakeRunner, WorkerRunner
    from carm_advisor.tune.parallel import runner_from_run

    shapes = [(None, 16)]
    runner = FakeRunner(ConfigPredictor(model_spec(BERT), input_shapes=shapes))
    result = _tune(tmp_path, runner=runner, input_shapes=shapes)
    assert result.baseline.measurement["flops"] > 0
    study = optuna.load_study(study_name=result.study_name, storage=f"sqlite:///{tmp_path / 's.db'}")
    run = study.user_attrs["run"]
    assert run["input_shapes"] == shapes_json(shapes)
    assert study.user_attrs["fingerprint"]["input_shapes"] == json.dumps(
        {"inputs": {n: [[16], "int32"] for n in ("padding_mask", "segment_ids", "token_ids")}}, sort_keys=True)
    predictor, joined = runner_from_run(dict(run, source="measured"))
    assert isinstance(joined, WorkerRunner) and joined.input_shapes == shapes_json(shapes)
    assert predictor.input_shapes == [(None, 16)] and predictor.predict(TrialConfig("torch")).flops == \
        ConfigPredictor(model_spec(BERT), input_shapes=shapes).predict(TrialConfig("torch")).flops


def test_a_study_resumes_only_on_the_same_shapes_however_they_are_written(tmp_path, support_on_path):
    from carm_advisor.tune.fingerprint import StudyMismatchError

    _tune(tmp_path, predict=True, input_shapes=[(None, 16)])
    _tune(tmp_path, predict=True, input_shapes=BERT_BY_NAME_SHAPES)   # the same shapes, by name
    with pytest.raises(StudyMismatchError, match=r"made with a different input_shapes .*\[16\].*\[32\]"):
        _tune(tmp_path, predict=True, input_shapes=[(None, 32)])


def test_a_study_without_the_shapes_it_needs_is_refused_before_its_storage(tmp_path, support_on_path):
    with pytest.raises(MappingError, match="^Expected input shapes for model 'bert_backbone"):
        _tune(tmp_path, predict=True)
    assert not (tmp_path / "s.db").exists()


# ---- keras_hub presets and the example builders ---------------------------------------------------------------


@pytest.fixture
def no_network(monkeypatch, tmp_path):
    """No name resolves and no socket connects; keras_hub's download cache is empty."""
    def refused(*args, **kwargs):
        raise OSError("network unavailable (test)")

    monkeypatch.setattr(socket, "getaddrinfo", refused)
    monkeypatch.setattr(socket.socket, "connect", refused)
    monkeypatch.setenv("KAGGLEHUB_CACHE", str(tmp_path / "kagglehub"))
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("argv", [["analyze", "bert_base_en", "--no-measure"],
                                  ["tune", "bert_base_en", "--predict", "--trials", "1"]])
def test_a_preset_whose_config_cannot_be_fetched_is_one_line_naming_a_builder(capsys, no_network, tmp_path, argv):
    code, _, err = run_cli(capsys, *argv)
    assert_one_line_error(code, err, "could not fetch the config of keras_hub preset bert_base_en (")
    assert "pass a builder that makes the backbone from its config instead" in err
    assert "examples.transformers:bert_base" in err
    assert not list(tmp_path.glob("*.db"))   # nothing stored for a study that could not start


def test_a_preset_name_is_a_model_of_its_own_kind():
    from carm_advisor.models.builder import model_spec

    assert model_spec("bert_base_en").kind == "preset"
    assert model_spec("kaggle://keras/bert/keras/bert_base_en/3").kind == "preset"
    assert model_spec("resnet50").kind == "application"


def test_the_example_builders_are_the_models_they_name(monkeypatch):
    """Parameter counts against keras_hub's own preset records (bert_base_en_uncased, vit_base_patch16_224) and,
    for the Gemma-like decoder, a hand count."""
    monkeypatch.syspath_prepend(str(REPO_ROOT))
    from examples import transformers

    presets = keras_hub.models.Backbone.presets
    bert = transformers.bert_base()
    assert bert.count_params() == presets["bert_base_en_uncased"]["metadata"]["params"]
    assert [tuple(t.shape) for t in bert.inputs] == [(None, 128)] * 3
    assert [tuple(t.shape) for t in transformers.bert_base(seq_len=None).inputs] == [(None, None)] * 3
    assert transformers.vit_b16().count_params() == presets["vit_base_patch16_224_imagenet"]["metadata"]["params"]
    # embeddings 32000 x 1024; per block: 2 norms of 1024, query and output 1024 x 8 x 128, key and value
    # 1024 x 128, three feed-forward matrices 1024 x 4096; a final norm of 1024
    block = 2 * 1024 + 2 * 1024 * 8 * 128 + 2 * 1024 * 128 + 3 * 1024 * 4096
    gemma = transformers.gemma_like_decoder(seq_len=64)
    assert gemma.count_params() == 32000 * 1024 + 8 * block + 1024
    assert [tuple(t.shape) for t in gemma.inputs] == [(None, 64)] * 2
