"""The typed report parts serialise to the JSON keys scripts rely on (DESIGN.md, "Report JSON")."""

from carm_advisor.results import DeviceInfo, MeasurementInfo, ModelInfo


def test_device_info_lists_its_fields_then_the_runs_extras_without_overriding_them():
    device = DeviceInfo(name="NVIDIA H200", source="measured", profile="NVIDIA H200", profile_source="recorded",
                        profile_provenance={"run": 10}, extra={"uuid": "GPU-1", "name": "from the run", "driver": "580"})
    assert list(device.to_dict().items()) == [
        ("name", "NVIDIA H200"), ("source", "measured"), ("profile", "NVIDIA H200"), ("profile_source", "recorded"),
        ("profile_provenance", {"run": 10}), ("uuid", "GPU-1"), ("driver", "580"),
    ]


def test_model_and_measurement_info_serialise_under_the_report_keys():
    model = ModelInfo(name="vgg16", batch_size=64, precision="float32", layout="channels_last", backend="torch",
                      math_mode={"conv": "tf32", "matmul": "fp32"}, params=138357544)
    assert list(model.to_dict()) == ["name", "batch_size", "precision", "layout", "backend", "math_mode", "params"]
    measurement = MeasurementInfo(inference={"time_s": 0.05}, training_step=None, inference_graph=None,
                                  date="2026-01-01T00:00:00Z", command="carm-advise analyze vgg16")
    assert measurement.to_dict() == {"inference": {"time_s": 0.05}, "training_step": None, "inference_graph": None,
                                     "date": "2026-01-01T00:00:00Z", "command": "carm-advise analyze vgg16"}
