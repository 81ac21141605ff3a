"""The command line: help, versions, plugin listing, and config errors a user can act on."""

import os
import re
import shutil

import pytest
import torch

from harness.runs import BAD_PLUGINS, SOURCE, TEST_PLUGINS, base_config, plugin_abi, wanfw, write_config


def test_version_names_wanfw_and_libtorch():
    result = wanfw("--version", check=0)
    assert re.match(r"wanfw \d+\.\d+\.\d+ \(plugin ABI \d+, LibTorch 2\.\d+\.\d+", result.stdout)


@pytest.mark.every_vector_unit
def test_the_cpu_vector_unit_in_use_is_the_one_the_environment_holds_libtorch_to():
    # The suite's runs on other vector units rest on this: the binary, like torch here, obeys
    # ATEN_CPU_CAPABILITY (and prints which unit its kernels use).
    unit = re.search(r"CPU vector unit (\w+)\)", wanfw("--version", check=0).stdout).group(1)
    assert unit == torch.backends.cpu.get_cpu_capability()
    if "ATEN_CPU_CAPABILITY" in os.environ:
        assert unit == os.environ["ATEN_CPU_CAPABILITY"].upper()


def test_every_subcommand_has_help():
    for command in (["--help"], ["run", "--help"], ["validate", "--help"], ["plugins", "--help"]):
        result = wanfw(*command, check=0)
        assert "usage: wanfw" in result.stdout


def test_unknown_command_is_a_usage_error():
    result = wanfw("trian", check=2)
    assert "unknown command 'trian'" in result.stderr


def test_run_without_config_is_a_usage_error():
    result = wanfw("run", check=2)
    assert "missing CONFIG" in result.stdout + result.stderr


def test_plugins_lists_every_plugin_with_kind_version_and_path():
    result = wanfw("plugins", "--plugin-path", TEST_PLUGINS, check=0)
    rows = {line.split()[1]: line.split() for line in result.stdout.splitlines()[1:] if line.count("/") and len(line.split()) == 4}
    assert rows["single"][0] == "strategy" and rows["single"][3].endswith("libwanfw_strategy_single.so")
    assert rows["csv"][0] == "logger"
    assert rows["linear_regression"][0] == "model" and rows["linear_regression"][2] == "1.0.0"


def test_plugins_lists_refused_libraries_with_the_reason():
    result = wanfw("plugins", "--plugin-path", BAD_PLUGINS / "abi", check=0)
    assert "refused:" in result.stdout
    assert "libwanfw_test_abi_mismatch.so" in result.stdout
    assert "plugin ABI version 999" in result.stdout


def test_plugins_show_prints_options_with_defaults_and_docs():
    result = wanfw("plugins", "show", "single", check=0)
    assert "device: string, default auto" in result.stdout
    assert "cuda:N" in result.stdout


def test_validate_names_file_line_column_and_suggestion_for_a_misspelt_key(tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text(
        "plugin_path: [%s]\n"
        "model:\n  name: linear_regression\n"
        "strategy:\n  name: single\n"
        "trainer:\n  max_step: 10\n" % TEST_PLUGINS
    )
    result = wanfw("validate", config, check=2)
    assert f"{config}:7:3: unknown key 'max_step' in 'trainer'" in result.stderr
    assert "did you mean 'max_steps'?" in result.stderr


def test_validate_names_the_position_of_a_misspelt_plugin_option(tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text(
        "plugin_path: [%s]\nmodel:\n  name: linear_regression\n  out_feature: 3\nstrategy:\n  name: single\n"
        % TEST_PLUGINS
    )
    result = wanfw("validate", config, check=2)
    assert f"{config}:4:3" in result.stderr and "did you mean 'out_features'?" in result.stderr


def test_validate_rejects_a_bad_set_override(tmp_path):
    config = write_config(tmp_path / "exp.yaml", base_config(tmp_path / "runs"))
    result = wanfw("validate", config, "--set", "trainer.log_every=often", check=2)
    assert "--set trainer.log_every=often" in result.stderr and "expected an integer" in result.stderr


def test_validate_accepts_a_good_config_and_prints_the_resolved_one(tmp_path):
    config = write_config(tmp_path / "exp.yaml", base_config(tmp_path / "runs"))
    result = wanfw("validate", config, "--set", "optimizer.lr=0.001", check=0)
    assert "valid" in result.stdout
    assert "lr: 0.001" in result.stdout
    assert "warmup_steps: 0" in result.stdout  # defaults are shown


def test_the_quickstart_example_validates():
    wanfw("validate", SOURCE / "examples" / "quickstart.yaml", check=0)


def test_an_unknown_plugin_name_is_a_config_error_with_suggestions(tmp_path):
    config = write_config(tmp_path / "exp.yaml", base_config(tmp_path / "runs", strategy={"name": "singel"}))
    result = wanfw("validate", config, check=2)
    assert "no strategy plugin named 'singel'" in result.stderr
    assert "did you mean 'single'?" in result.stderr


def test_a_plugin_built_for_another_abi_is_refused_naming_both_versions(tmp_path):
    config = write_config(tmp_path / "exp.yaml", base_config(tmp_path / "runs", plugin_path=[str(BAD_PLUGINS / "abi")]))
    result = wanfw("run", config, check=2)
    assert "built for wanfw plugin ABI version 999 (wanfw 0.1.0), but this wanfw uses plugin ABI version " \
           f"{plugin_abi()}" in result.stderr


def test_a_missing_cuda_device_is_an_error_not_a_cpu_fallback(tmp_path):
    config = write_config(tmp_path / "exp.yaml", base_config(tmp_path / "runs", strategy={"device": "cuda:3"}))
    result = wanfw("run", config, check=2)
    assert f"{config}:" in result.stderr and "strategy.device: 'cuda:3'" in result.stderr
    assert not (tmp_path / "runs" / "exp" / "version_0" / "checkpoints").exists()


def test_a_malformed_device_is_rejected_at_validation(tmp_path):
    config = write_config(tmp_path / "exp.yaml", base_config(tmp_path / "runs", strategy={"device": "gpu0"}))
    result = wanfw("validate", config, check=2)
    assert "'gpu0' is not a device" in result.stderr


def test_the_configuration_reference_in_docs_is_current():
    marker = "<!-- generated by `wanfw config-reference`; edit the schemas, not this file -->\n"
    doc = (SOURCE / "docs" / "configuration.md").read_text()
    assert marker in doc
    generated = wanfw("config-reference", check=0).stdout
    assert doc.split(marker, 1)[1] == generated, "regenerate with scripts/update-docs.sh"


def test_plugins_takes_a_config_and_searches_its_plugin_path(tmp_path):
    config = write_config(tmp_path / "exp.yaml", base_config(tmp_path / "runs"))  # plugin_path: test plugins
    result = wanfw("plugins", config, check=0)
    assert "linear_regression" in result.stdout
    assert str(TEST_PLUGINS) in result.stdout.split("searched:")[1]
    shown = wanfw("plugins", "show", "linear_regression", config, check=0)
    assert "bias_lr_scale: number, default 1.0" in shown.stdout


def test_plugins_show_with_an_unknown_name_suggests_the_closest(tmp_path):
    result = wanfw("plugins", "show", "grad_acum", check=2)
    assert "no plugin named 'grad_acum'" in result.stderr
    assert "did you mean 'grad_accum'?" in result.stderr


def test_setting_another_strategy_name_drops_the_old_plugins_options_with_a_note(tmp_path):
    config = base_config(tmp_path / "runs", strategy={"name": "grad_accum", "steps": 2,
                                                      "inner": {"name": "single", "device": "cpu"}})
    path = write_config(tmp_path / "exp.yaml", config)
    result = wanfw("validate", path, "--set", "strategy.name=single", "--set", "strategy.device=cpu", check=0)
    assert "strategy: single device cpu" in result.stdout
    assert "--set strategy.name=single replaces the 'strategy' section" in result.stderr
    assert "(steps, inner) belonged to 'grad_accum' and were dropped" in result.stderr


def test_the_saved_config_runs_again_from_its_run_folder_with_its_plugins_and_name(tmp_path):
    (tmp_path / "my-plugins").mkdir()
    shutil.copy(TEST_PLUGINS / "libwanfw_model_linear_regression.so", tmp_path / "my-plugins")
    config = base_config(tmp_path / "runs", trainer={"max_steps": 4, "log_every": 2})
    del config["run"]["name"]  # the default: the config file's name
    config["plugin_path"] = ["my-plugins"]  # relative to the config file
    path = write_config(tmp_path / "relative.yaml", config)
    wanfw("run", path, check=0)
    run_dir = tmp_path / "runs" / "relative" / "version_0"
    text = (run_dir / "config.yaml").read_text()
    assert str(tmp_path / "my-plugins") in text and "name: relative" in text
    wanfw("run", "config.yaml", cwd=run_dir, check=0)  # from the run folder, by its saved config
    assert (tmp_path / "runs" / "relative" / "version_1" / "config.yaml").exists()
