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
    result = validate(tmp_path, optimizer={"lr": "x" * 1_000_000})
    assert result.returncode == 2
    assert "optimizer.lr: expected a number, got 'xxxx" in result.stderr
    assert "... (1000000 characters)" in result.stderr
    assert len(result.stderr) < 2000
