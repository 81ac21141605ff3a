"""The tensorboard logger, read back with the `tensorboard` package's own reader: every scalar at
the steps and with the values the CSV logger wrote, histograms, the preview image, the config as
text and the hparams entry; a killed run's file loads, and after --resume auto there is one curve
without duplicated steps; a flipped byte fails the record's CRC."""

import csv
import json
import signal

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow
from tensorboard.plugins.hparams import plugin_data_pb2

from harness.runs import base_config, checkpoints, start_wanfw, wait_for, wanfw, write_config

LOGGERS = [{"name": "csv"}, {"name": "tensorboard", "flush_every": 1}]


def read(run_dir):
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "histograms": 0, "images": 0,
                                                                "tensors": 0})
    accumulator.Reload()
    return accumulator


def event_files(run_dir):
    return sorted(p for p in run_dir.iterdir() if "tfevents" in p.name)


@pytest.fixture(scope="module")
def wan_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tb")
    config = base_config(tmp / "runs", model={"name": "wan22_flow_matching", "preset": "tiny", "text_len": 4,
                                              "preview_steps": 2},
                         data={"num_samples": 32, "batch_size": 4, "workers": 0, "buckets": ["2x4x4"]},
                         optimizer={"lr": 1e-3, "weight_decay": 0.0},
                         trainer={"max_steps": 6, "log_every": 2, "progress": "lines", "histogram_every": 3},
                         validation={"every": 3, "num_samples": 4},
                         checkpoint={"every": 0, "keep_last": 0}, loggers=LOGGERS)
    wanfw("run", write_config(tmp / "wan.json", config), check=0)
    run_dir = tmp / "runs" / "exp" / "version_0"
    return run_dir, read(run_dir)


def test_every_scalar_appears_at_the_steps_and_with_the_values_of_the_csv(wan_run):
    run_dir, tb = wan_run
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    columns = [c for c in rows[0] if c != "step"]
    assert set(columns) <= set(tb.Tags()["scalars"]) and "val/loss" in columns and "peak_memory_mb" in columns
    for column in columns:
        expected = [(int(r["step"]), float(r[column])) for r in rows if r[column] != ""]
        got = [(e.step, e.value) for e in tb.Scalars(column)]
        assert [s for s, _ in got] == [s for s, _ in expected], column
        for (_, g), (_, e) in zip(got, expected):
            assert g == pytest.approx(e, rel=1e-6, abs=1e-30), column  # float32 in the event file


def test_histograms_of_weights_and_gradients_are_logged(wan_run):
    _, tb = wan_run
    tags = tb.Tags()["histograms"]
    assert "weights/blocks.0.self_attn.q.weight" in tags and "grads/blocks.0.self_attn.q.weight" in tags
    histograms = tb.Histograms("weights/head.modulation")
    assert [h.step for h in histograms] == [3, 6]
    value = histograms[0].histogram_value
    assert value.num == 2 * 48 and value.min <= value.max and sum(value.bucket) == value.num


def test_the_preview_image_is_a_png_strip_of_the_latent_frames(wan_run):
    _, tb = wan_run
    images = tb.Images("preview/latents")
    assert [i.step for i in images] == [3, 6]
    assert images[0].encoded_image_string[:8] == b"\x89PNG\r\n\x1a\n"
    assert images[0].width == 2 * images[0].height  # two latent frames of 4 x 4 side by side


def test_the_resolved_config_is_logged_as_text(wan_run):
    _, tb = wan_run
    text = tb.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "wan22_flow_matching" in text and "histogram_every: 3" in text


def test_the_hparams_tab_lists_the_run_with_its_config(wan_run):
    _, tb = wan_run
    content = tb.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    hparams = start.session_start_info.hparams
    assert hparams["optimizer.lr"].number_value == pytest.approx(1e-3)
    assert hparams["model.preset"].string_value == "tiny"
    assert hparams["trainer.nan_guard"].bool_value is True
    end = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_end_info"])
    assert end.session_end_info.status == 1  # SUCCESS


def test_a_killed_run_loads_and_its_resume_continues_one_curve_without_duplicates(tmp_path):
    config = base_config(tmp_path / "runs", model={"name": "linear_regression", "in_features": 8, "out_features": 2,
                                                   "step_delay_ms": 40},
                         trainer={"max_steps": 40, "log_every": 1, "progress": "lines"},
                         checkpoint={"every": 5, "keep_last": 0}, loggers=LOGGERS)
    path = write_config(tmp_path / "exp.json", config)
    run_dir = tmp_path / "runs" / "exp" / "version_0"
    process = start_wanfw("run", path)
    wait_for(lambda: len(checkpoints(run_dir)) >= 2, what="two checkpoints")
    wait_for(lambda: max((e.step for e in read(run_dir).Scalars("loss")), default=0) >= 13, what="steps past them")
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed = read(run_dir)
    steps_before = [e.step for e in killed.Scalars("loss")]
    assert steps_before[:3] == [1, 2, 3]
    resumed_from = json.loads((checkpoints(run_dir)[-1] / "trainer_state.json").read_text())["step"]
    assert max(steps_before) > resumed_from  # the crash left points beyond the checkpoint

    wanfw("run", path, "--resume", "auto", check=0)
    assert len(event_files(run_dir)) == 2  # a new file for the new process
    steps = [e.step for e in read(run_dir).Scalars("loss")]
    assert steps == list(range(1, 41))


def test_a_flipped_byte_fails_the_records_crc(tmp_path):
    config = base_config(tmp_path / "runs", trainer={"max_steps": 5, "log_every": 1, "progress": "lines"},
                         loggers=[{"name": "tensorboard"}])
    wanfw("run", write_config(tmp_path / "exp.json", config), check=0)
    [path] = event_files(tmp_path / "runs" / "exp" / "version_0")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    reader = pywrap_tensorflow.PyRecordReader_New(str(path))
    with pytest.raises(errors.DataLossError, match="crc32"):
        while True:
            reader.GetNext()
