"""Hostile input never crashes wanfw: values that must be refused are refused through the real CLI
with wanfw's own message and exit code 2 (configuration), never accepted or truncated."""

import json
import os
import struct

import pytest

from harness.runs import BUILD, TEST_PLUGINS, base_config, wanfw, write_config


def validate(tmp_path, **sections):
    return wanfw("validate", write_config(tmp_path / "exp.yaml", base_config(tmp_path / "runs", **sections)))


def with_overrides(command, tmp_path, *overrides):
    """`wanfw COMMAND` on the base config with each override given as --set."""
    path = write_config(tmp_path / "exp.yaml", base_config(tmp_path / "runs"))
    return wanfw(command, path, *[arg for override in overrides for arg in ("--set", override)])


@pytest.mark.parametrize("section, key, value", [
    ("trainer", "grad_clip", ".nan"),
    ("scheduler", "min_lr_ratio", ".nan"),
    ("precision", "init_scale", ".inf"),
    ("optimizer", "lr", "-.inf"),
])
def test_a_number_that_is_not_finite_is_refused_naming_the_option(tmp_path, section, key, value):
    result = with_overrides("validate", tmp_path, f"{section}.{key}={value}")
    assert result.returncode == 2, result.stderr
    assert f"{section}.{key}: expected a finite number, got '{value}'" in result.stderr


@pytest.mark.parametrize("workers", [4294967297, 100000, -1])
def test_a_worker_count_out_of_range_is_refused_not_truncated(tmp_path, workers):
    result = validate(tmp_path, data={"workers": workers})
    assert result.returncode == 2, result.stderr
    assert f"data.workers: must lie in [0, 256], got {workers}" in result.stderr


@pytest.mark.parametrize("section, key, value, bounds", [
    ("data", "num_samples", 2**62, "[1, 100000000]"),  # was: "cannot create std::vector larger than max_size()"
    ("trainer", "epochs", 2**63 - 1, "[1, 1000000]"),  # was: "training -8 steps"
    ("validation", "num_samples", 2**40, "[1, 100000000]"),
])
def test_a_size_that_would_exhaust_memory_or_overflow_the_step_count_is_refused(tmp_path, section, key, value,
                                                                                 bounds):
    result = with_overrides("run", tmp_path, f"{section}.{key}={value}", "trainer.max_steps=0")
    assert result.returncode == 2, result.stderr
    assert f"{section}.{key}: must lie in {bounds}, got {value}" in result.stderr


def test_a_huge_value_is_shortened_in_the_error(tmp_path):
    result = validate(tmp_path, optimizer={"lr": "q" * 1_000_000})
    assert result.returncode == 2
    assert "optimizer.lr: expected a number, got 'qqqq" in result.stderr
    assert "... (1000000 characters)" in result.stderr
    assert len(result.stderr) < 2000


def test_an_override_index_too_long_to_convert_is_a_config_error(tmp_path):
    result = with_overrides("validate", tmp_path, "loggers.99999999999999999999.name=x")
    assert result.returncode == 2, result.stderr
    assert "'99999999999999999999' is not one of its indices" in result.stderr


def short_run(tmp_path):
    path = write_config(tmp_path / "exp.yaml", base_config(tmp_path / "runs", trainer={"max_steps": 2},
                                                           checkpoint={"every": 1}))
    wanfw("run", path, check=0)
    return path, tmp_path / "runs" / "exp" / "version_0" / "checkpoints"


def test_a_checkpoint_folder_with_a_step_too_long_to_convert_is_skipped(tmp_path):
    path, folder = short_run(tmp_path)
    bogus = folder / ("step-" + "9" * 20)
    bogus.mkdir()
    (bogus / "trainer_state.json").write_text((folder / "step-00000002" / "trainer_state.json").read_text())
    result = wanfw("run", path, "--resume", "auto", check=0)
    assert "resumed from" in result.stdout and "step-00000002" in result.stdout


def test_a_negative_position_in_the_trainer_state_is_refused_naming_the_field(tmp_path):
    path, folder = short_run(tmp_path)
    state = folder / "step-00000002" / "trainer_state.json"
    state.write_text(state.read_text().replace('"batch_in_epoch": 2', '"batch_in_epoch": -1'))
    result = wanfw("run", path, "--resume", "auto", check=1)
    assert f"{state}: 'batch_in_epoch' is -1, below its least value 0" in result.stderr
    assert "resume from an earlier checkpoint" in result.stderr


@pytest.mark.parametrize("written, shown", [("1.0333e37", "1.0333e+37"), ("18446744073709551615", "18446744073709551615"),
                                           ('"2"', '"2"')], ids=["float", "past_int64", "string"])
def test_a_step_in_the_trainer_state_that_is_no_int64_is_refused_naming_the_field(tmp_path, written, shown):
    path, folder = short_run(tmp_path)
    state = folder / "step-00000002" / "trainer_state.json"
    state.write_text(state.read_text().replace('"step": 2', f'"step": {written}'))
    result = wanfw("run", path, "--resume", "auto", check=1)
    assert f"{state}: 'step' is" in result.stderr and "where a step count belongs (an integer)" in result.stderr, \
        result.stderr
    assert "resume from an earlier checkpoint" in result.stderr


def test_a_yaml_alias_that_contains_itself_is_refused_at_its_line(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(f"""run: {{name: exp, output_dir: {tmp_path / 'runs'}}}
model: {{name: linear_regression}}
strategy: &s {{name: grad_accum, inner: *s}}
""")
    result = wanfw("validate", path, timeout=30)
    assert result.returncode == 2, result.stderr
    assert f"{path}:3:33: this value contains itself: a YAML alias refers to an anchor around it" in result.stderr


def test_a_config_nested_deeper_than_the_limit_is_refused(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("model: {name: linear_regression, deep: " + "[" * 100 + "]" * 100 + "}\n")
    result = wanfw("validate", path, timeout=30)
    assert result.returncode == 2, result.stderr
    assert "the config nests mappings and lists more than 64 deep" in result.stderr


def test_a_mapping_key_that_is_a_list_is_a_config_error_at_its_line(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("model: {name: linear_regression}\n? [a, b]\n: 1\n")
    result = wanfw("validate", path, timeout=30)
    assert result.returncode == 2, result.stderr
    assert f"{path}:2:3: a mapping key must be a name, not a list or mapping" in result.stderr


def safetensors_bytes(header: str, data: bytes = b"") -> bytes:
    return struct.pack("<Q", len(header.encode())) + header.encode() + data


def predict_inputs(tmp_path, content: bytes):
    (tmp_path / "in.safetensors").write_bytes(content)
    path = write_config(tmp_path / "exp.yaml", base_config(tmp_path / "runs"))
    return wanfw("predict", path, "--inputs", tmp_path / "in.safetensors", "--out", tmp_path / "out.safetensors",
                 timeout=60)


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("field", ["shape", "data_offsets"])
def test_a_safetensors_header_nested_100000_deep_is_refused_by_predict(tmp_path, field):
    entry = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}
    header = json.dumps({"x": entry}).replace(json.dumps(entry[field]), DEEP, 1)
    result = predict_inputs(tmp_path, safetensors_bytes(header, b"\0" * 4))
    assert result.returncode == 1, result.stderr
    assert "in.safetensors: not a valid safetensors file: the header nests lists and objects more than 8 levels " \
           "deep" in result.stderr


def test_a_safetensors_header_nested_100000_deep_is_refused_on_resume(tmp_path):
    path, folder = short_run(tmp_path)
    weights = folder / "step-00000002" / "model.safetensors"
    weights.write_bytes(safetensors_bytes('{"x":{"dtype":"F32","shape":' + DEEP + ',"data_offsets":[0,0]}}'))
    result = wanfw("run", path, "--resume", "auto", timeout=60)
    assert result.returncode == 1, result.stderr
    assert f"{weights}: not a valid safetensors file: the header nests" in result.stderr


def test_a_tensor_shape_whose_strides_overflow_is_refused_naming_the_tensor(tmp_path):
    # No elements, so the element count fits in 64 bits; the strides LibTorch would lay out do not.
    header = json.dumps({"x": {"dtype": "F32", "shape": [0, 2**62, 8], "data_offsets": [0, 0]}})
    result = predict_inputs(tmp_path, safetensors_bytes(header))
    assert result.returncode == 1, result.stderr
    assert "in.safetensors (tensor 'x'): not a valid safetensors file: the shape overflows" in result.stderr
    assert "frame #" not in result.stderr  # no C++ backtrace


def tiny_wan_with_index(tmp_path, shard_name):
    folder = tmp_path / "transformer"
    folder.mkdir()
    index = folder / "diffusion_pytorch_model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": {"patch_embedding.weight": shard_name}}))
    config = base_config(tmp_path / "runs", model={"name": "wan22_flow_matching", "preset": "tiny",
                                                   "weights": str(index)})
    return index, wanfw("validate", write_config(tmp_path / "wan.yaml", config), timeout=60)


@pytest.mark.parametrize("shard, why", [
    ("../outside.safetensors", "a path that leaves the index's folder"),
    ("/etc/passwd", "an absolute path outside the index's folder"),
])
def test_an_index_entry_outside_the_index_folder_is_refused(tmp_path, shard, why):
    (tmp_path / "outside.safetensors").write_bytes(safetensors_bytes("{}"))
    index, result = tiny_wan_with_index(tmp_path, shard)
    assert result.returncode == 1, result.stderr
    assert f"{index}: weight_map entry 'patch_embedding.weight' names '{shard}', {why}" in result.stderr


def test_an_index_shard_name_longer_than_a_file_name_can_be_is_refused(tmp_path):
    index, result = tiny_wan_with_index(tmp_path, "s" * 300 + ".safetensors")
    assert result.returncode == 1, result.stderr
    assert "a file name of 312 bytes (the limit is 255)" in result.stderr
    assert "filesystem error" not in result.stderr


def real_plugin():
    return next((BUILD / "lib" / "wanfw" / "plugins").glob("libwanfw_strategy_single*.so"))


def test_a_truncated_plugin_is_refused_with_the_reason_and_the_rest_load(tmp_path):
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "libinterrupted_copy.so").write_bytes(real_plugin().read_bytes()[:1024])
    listed = wanfw("plugins", "--plugin-path", folder, "--plugin-path", TEST_PLUGINS, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "libinterrupted_copy.so" in listed.stdout and "is truncated" in listed.stdout
    assert "linear_regression" in listed.stdout
    config = base_config(tmp_path / "runs")
    config["plugin_path"].insert(0, str(folder))
    validated = wanfw("validate", write_config(tmp_path / "exp.yaml", config), timeout=60)
    assert validated.returncode == 0, validated.stderr


def test_a_symlink_loop_in_a_plugin_folder_is_listed_and_the_scan_goes_on(tmp_path):
    folder = tmp_path / "plugins"
    folder.mkdir()
    os.symlink(folder / "libloop.so", folder / "libloop.so")
    os.symlink(next(TEST_PLUGINS.glob("*linear_regression*.so")), folder / "liblinear.so")
    result = wanfw("plugins", "--plugin-path", folder, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"{folder / 'libloop.so'}\n    cannot be read: Too many levels of symbolic links" in result.stdout
    assert "linear_regression" in result.stdout


def test_a_symlink_loop_among_checkpoints_is_skipped_and_resume_goes_on(tmp_path):
    path, folder = short_run(tmp_path)
    os.symlink(folder / "step-00000099", folder / "step-00000099")
    result = wanfw("run", path, "--resume", "auto", timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"skipped {folder / 'step-00000099'}: Too many levels of symbolic links" in result.stderr
    assert f"resumed from {folder / 'step-00000002'}" in result.stdout


def test_a_string_with_a_nul_byte_is_refused_naming_the_option(tmp_path):
    result = with_overrides("validate", tmp_path, 'run.output_dir="runs\\x00/etc"')
    assert result.returncode == 2, result.stderr
    assert "run.output_dir: contains a NUL byte" in result.stderr


def test_a_run_name_longer_than_a_folder_name_can_be_is_refused(tmp_path):
    result = validate(tmp_path, run={"name": "n" * 300})
    assert result.returncode == 2, result.stderr
    assert "run.name: 'nnnn" in result.stderr and "is 300 bytes; a folder name is at most 255" in result.stderr


def special_file(tmp_path, kind):
    if kind == "pipe":
        os.mkfifo(tmp_path / "pipe")
        return tmp_path / "pipe"
    if kind == "folder":
        (tmp_path / "folder").mkdir()
        return tmp_path / "folder"
    return "/dev/zero"


@pytest.mark.parametrize("kind", ["pipe", "folder", "/dev/zero"])
def test_a_config_that_is_not_a_regular_file_is_refused_without_reading_it(tmp_path, kind):
    path = special_file(tmp_path, kind)
    result = wanfw("validate", path, timeout=30)  # a pipe or /dev/zero read to the end never returns
    assert result.returncode == 2, result.stderr
    assert f"{path}: not a regular file" in result.stderr


@pytest.mark.parametrize("kind", ["pipe", "folder", "/dev/zero"])
def test_safetensors_inputs_that_are_not_a_regular_file_are_refused_without_blocking(tmp_path, kind):
    path = special_file(tmp_path, kind)
    config = write_config(tmp_path / "exp.yaml", base_config(tmp_path / "runs"))
    result = wanfw("predict", config, "--inputs", path, "--out", tmp_path / "out.safetensors", timeout=30)
    assert result.returncode == 1, result.stderr
    assert f"{path}: not a regular file" in result.stderr


def test_a_config_file_of_50_mb_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("model: {name: linear_regression}\nnote: " + "x" * 50_000_000 + "\n")
    result = wanfw("validate", path, timeout=60)
    assert result.returncode == 2, result.stderr
    assert f"{path}: the config file has 50000040 bytes; the limit is 16777216" in result.stderr
    assert len(result.stderr) < 1000
