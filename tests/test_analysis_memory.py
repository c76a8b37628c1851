"""analyze() warns when a batch cannot fit in the profile's GPU memory (its memory LOWER BOUND exceeds
device.memory_bytes) and when the batch size lies outside the calibration's whole-model records. Every
expected figure is worked out in the comments."""

from __future__ import annotations

import keras

import carm_advisor as advisor
from carm_advisor.advise.analyze import calibration_range_warnings
from carm_advisor.calibration import Calibration, WholeSample
from carm_advisor.profiles.profile import SCHEMA, profile_from_dict


def small_gpu(memory_bytes=10_000_000):
    return profile_from_dict({
        "schema": SCHEMA,
        "device": {"name": "Small GPU", "l2_usable_bytes": 1000, "memory_bytes": memory_bytes},
        "provenance": {"source": "recorded"},
        "ceilings": {
            "fp32": {"kind": "compute", "value": 1e12, "provenance": {"source": "datasheet"}},
            "tc_tf32": {"kind": "compute", "value": 1e13, "provenance": {"source": "datasheet"}},
            "l2": {"kind": "memory", "value": 1e12, "provenance": {"source": "datasheet"}},
            "hbm": {"kind": "memory", "value": 1e11, "provenance": {"source": "datasheet"}},
        },
    })


def dense_model():
    inputs = keras.Input(shape=(1024,))
    outputs = keras.layers.Dense(1024, use_bias=False, name="fc")(inputs)
    return keras.Model(inputs, outputs, name="one_dense")


def memory_warnings(report):
    return [w for w in report.warnings if "cannot run on" in w]


def test_a_batch_one_byte_past_the_gpu_memory_is_warned_and_one_that_fits_is_not():
    """Weights 1024*1024 float32 = 4,194,304 bytes; the layer's input + output (1024 + 1024) * 4 = 8192 bytes a
    sample. On 10,000,000 bytes: batch 708 needs 4,194,304 + 5,799,936 = 9,994,240 (may fit); batch 709
    needs 4,194,304 + 5,808,128 = 10,002,432 (cannot)."""
    model = dense_model()
    ok = advisor.analyze(model, batch_size=708, profile=small_gpu(), measure=False, calibration=False)
    assert memory_warnings(ok) == []
    over = advisor.analyze(model, batch_size=709, profile=small_gpu(), measure=False, calibration=False)
    (w,) = memory_warnings(over)
    # 10,002,432 and 10,000,000 bytes both read "0.01" GB at three significant digits: printed with the decimals
    # that tell them apart (6: 0.010002 and 0.010000)
    assert w.startswith("batch size 709 cannot run on Small GPU: one call needs at least 0.010002 GB, "
                        "the GPU has 0.010000 GB")
    assert "layer 'fc' input + output 0.00581 GB at float32" in w   # 8192 * 709 = 5,808,128


def test_vgg16_at_a_hundred_million_samples_is_warned_on_the_h200():
    """The reported case: `analyze vgg16 --batch-size 100000000` said warnings: []. VGG16: 553,430,176 bytes of
    float32 weights + block1_conv2's 6,422,528 elements a sample in and out, float32: 25,690,112 bytes a sample.
    553,430,176 + 25,690,112 * 1e8 = 2,569,011,753,430,176 bytes = 2,569,011.8 GB; the H200 has
    150,109,880,320 = 150.1 GB."""
    model = keras.applications.VGG16(weights=None)
    report = advisor.analyze(model, batch_size=100_000_000, measure=False, calibration=False)
    (w,) = memory_warnings(report)
    assert "needs at least 2,569,011.8 GB, the GPU has 150.1 GB" in w
    assert memory_warnings(advisor.analyze(model, batch_size=32, measure=False, calibration=False)) == []


def test_figures_that_would_read_the_same_are_printed_apart():
    from carm_advisor.mapping.memory import gb_apart

    # 150.12 GB and 150.10 GB both read "150.1" at one decimal: two decimals tell them apart
    assert gb_apart(150_120_000_000, 150_100_000_000) == ("150.12", "150.10")
    # one byte apart: 1,000,000,001 and 1,000,000,000 bytes need all 9 decimals of a GB
    assert gb_apart(1_000_000_001, 1_000_000_000) == ("1.000000001", "1.000000000")
    # figures that already read apart keep gb()'s form: 0.00184 (three significant digits) and 0.001
    assert gb_apart(1_840_596, 1_000_000) == ("0.00184", "0.001")


def whole(backend, execution, batch_size):
    return WholeSample(backend, execution, 0.01, 0.008, 0.001, 10, "m", batch_size=batch_size)


def test_a_batch_outside_the_calibrations_whole_model_records_is_warned_once():
    """Records of torch eager at batch 32 and 128 (and one that noted no batch size, 0: left out): 32-128."""
    calib = Calibration([], [whole("torch", "eager", 32), whole("torch", "eager", 128), whole("torch", "eager", 0),
                             whole("jax", "jit", 4096)])
    (w,) = calibration_range_warnings(calib, "torch", 512)
    assert "batch size 512 is outside the batch sizes the calibration's torch eager whole-model records " \
           "were measured at (32-128)" in w
    assert calibration_range_warnings(calib, "torch", 32) == calibration_range_warnings(calib, "torch", 128) == []
    assert calibration_range_warnings(calib, "torch", 16) != []
    assert calibration_range_warnings(calib, "tensorflow", 512) == []   # no record of it: nothing to leave
    assert calibration_range_warnings(None, "torch", 512) == []


def test_analyze_reports_the_calibration_range_warning():
    backend = keras.backend.backend()
    # torch runs a model eagerly; jax jits it; Keras on TensorFlow runs model.predict under XLA on a GPU ("jit")
    execution = {"torch": "eager"}.get(backend, "jit")
    calib = Calibration([], [whole(backend, execution, 32), whole(backend, execution, 64)])
    report = advisor.analyze(dense_model(), batch_size=256, profile=small_gpu(10**12), measure=False, calibration=calib)
    assert [w for w in report.warnings if "outside the batch sizes" in w and "(32-64)" in w]
    report = advisor.analyze(dense_model(), batch_size=64, profile=small_gpu(10**12), measure=False, calibration=calib)
    assert not [w for w in report.warnings if "outside the batch sizes" in w]
