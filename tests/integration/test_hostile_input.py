"""Hostile input never crashes wanfw: values that must be refused are refused through the real CLI
with wanfw's own message and exit code 2 (configuration), never accepted or truncated."""

import pytest
from conftest import base_config, wanfw, write_config


def validate(tmp_path, **sections):
    return wanfw("validate", write_config(tmp_path / "exp.yaml", base_config(tmp_path / "runs", **sections)))


@pytest.mark.parametrize("section, key, value", [
    ("trainer", "grad_clip", ".nan"),
    ("scheduler", "min_lr_ratio", ".nan"),
    ("precision", "init_scale", ".inf"),
    ("optimizer", "lr", "-.inf"),
])
def test_a_number_that_is_not_finite_is_refused_naming_the_option(tmp_path, section, key, value):
    path = tmp_path / "exp.yaml"
    write_config(path, base_config(tmp_path / "runs"))
    result = wanfw("validate", path, "--set", f"{section}.{key}={value}")
    assert result.returncode == 2, result.stderr
    assert f"{section}.{key}: expected a finite number, got '{value}'" in result.stderr


@pytest.mark.parametrize("workers", [4294967297, 100000, -1])
def test_a_worker_count_out_of_range_is_refused_not_truncated(tmp_path, workers):
    result = validate(tmp_path, data={"workers": workers})
    assert result.returncode == 2, result.stderr
    assert f"data.workers: must lie in [0, 256], got {workers}" in result.stderr


def test_a_huge_value_is_shortened_in_the_error(tmp_path):
    result = validate(tmp_path, optimizer={"lr": "q" * 1_000_000})
    assert result.returncode == 2
    assert "optimizer.lr: expected a number, got 'qqqq" in result.stderr
    assert "... (1000000 characters)" in result.stderr
    assert len(result.stderr) < 2000


def test_an_override_index_too_long_to_convert_is_a_config_error(tmp_path):
    path = write_config(tmp_path / "exp.yaml", base_config(tmp_path / "runs"))
    result = wanfw("validate", path, "--set", "loggers.99999999999999999999.name=x")
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
