"""The installed SDK as a plugin author meets it: `cmake --install` into a prefix, the prefix
moved, examples/plugins/ configured and built against it with find_package(wanfw) from a separate
build folder, and its `local_sgd` strategy and `jsonl` logger run by the installed binary under
torchrun. Plus the guarantees around that: a plugin for another ABI is refused before any of its
code runs, and a plugin project configured against another LibTorch fails at configure time."""

import csv
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from harness.launch import PRELOADED_TORCHRUN, TORCHRUN, free_port
from harness.runs import BAD_PLUGINS, BUILD, SOURCE, base_config, checkpoints, plugin_abi, wanfw, write_config

TORCH_CMAKE = Path(torch.utils.cmake_prefix_path)


def stamp() -> str:
    """Changes whenever the build or the example plugins change."""
    h = hashlib.sha256()
    for path in sorted([*(BUILD / "lib").glob("*.so"), *(BUILD / "lib" / "wanfw" / "plugins").glob("*.so"),
                        BUILD / "bin" / "wanfw", *(SOURCE / "examples" / "plugins").rglob("*"),
                        *(SOURCE / "core" / "include" / "wanfw").glob("*.hpp"), *(SOURCE / "cmake").glob("*")]):
        if path.is_file():
            h.update(str(path).encode())
            h.update(str(path.stat().st_mtime_ns).encode())
    return h.hexdigest()[:16]


def install_and_build() -> dict:
    """Installs wanfw into a prefix, moves the prefix, and builds examples/plugins against the moved
    prefix in a separate folder. Done once per build (kept under the temp folder, guarded by a lock:
    CTest runs these tests in parallel processes)."""
    root = Path(tempfile.gettempdir()) / f"wanfw-sdk-{stamp()}"
    root.mkdir(exist_ok=True)
    paths = {"root": root, "prefix": root / "moved-prefix", "plugins": root / "plugins-build" / "plugins"}
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "done").exists():
            for leftover in ("staging-prefix", "moved-prefix", "plugins-build"):
                shutil.rmtree(root / leftover, ignore_errors=True)
            run(["cmake", "--install", str(BUILD), "--prefix", str(root / "staging-prefix")])
            (root / "staging-prefix").rename(paths["prefix"])  # relocatable: the prefix moves
            env = {**os.environ, "CCACHE_BASEDIR": str(root), "CCACHE_NOHASHDIR": "1"}
            launcher = [f"-DCMAKE_CXX_COMPILER_LAUNCHER={shutil.which('ccache')}"] if shutil.which("ccache") else []
            run(["cmake", "-S", str(SOURCE / "examples" / "plugins"), "-B", str(root / "plugins-build"), "-G", "Ninja",
                 f"-DCMAKE_PREFIX_PATH={paths['prefix']}", *launcher], env=env)
            run(["cmake", "--build", str(root / "plugins-build")], env=env, timeout=900)
            (root / "done").write_text("ok\n")
    return paths


def run(command, env=None, timeout=300, check=True) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} exited {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture
def sdk():
    return install_and_build()


def tiny_wan_config(tmp_path, plugins_dir, name, strategy, steps=24, loggers=None):
    config = base_config(
        tmp_path / "runs",
        model={"name": "wan22_flow_matching", "preset": "tiny", "dim": 64, "num_heads": 4, "ffn_dim": 128,
               "num_layers": 2, "text_len": 8},
        strategy=strategy,
        data={"num_samples": 256, "batch_size": 4, "workers": 0, "buckets": ["3x8x8"]},
        optimizer={"lr": 3e-3, "weight_decay": 0.0},
        trainer={"max_steps": steps, "log_every": 4, "progress": "lines"},
        checkpoint={"every": 0, "keep_last": 0},
        loggers=loggers or [{"name": "csv"}])
    config["plugin_path"] = [str(plugins_dir)]
    config["run"]["name"] = name
    return write_config(tmp_path / f"{name}.yaml", config)


def installed_torchrun(prefix, *args, nproc=2):
    command = [str(TORCHRUN), "--no-python", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
               f"--master-port={free_port()}", str(prefix / "bin" / "wanfw"), *map(str, args)]
    return PRELOADED_TORCHRUN.run(command, 600, {**os.environ, "OMP_NUM_THREADS": "1"})


def csv_rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def losses(run_dir):
    return [float(row["loss"]) for row in csv_rows(run_dir / "metrics.csv") if row["loss"]]


def test_the_installed_prefix_refers_to_neither_the_source_nor_the_build_folder(sdk):
    prefix = sdk["prefix"]
    for layout in ["bin/wanfw", "lib/libwanfw_core.so", "lib/libwanfw_wan_dit.so",
                   "lib/wanfw/plugins/libwanfw_strategy_ddp.so", "include/wanfw/plugin.hpp",
                   "lib/cmake/wanfw/wanfwConfig.cmake", "lib/cmake/wanfw/wanfwConfigVersion.cmake",
                   "lib/cmake/wanfw/wanfwTargets.cmake"]:
        assert (prefix / layout).exists(), layout
    # The host's private API stays out of the SDK.
    for private in ["experiment.hpp", "plugin_host.hpp", "config.hpp", "console.hpp"]:
        assert not (prefix / "include" / "wanfw" / private).exists(), private
    for path in [prefix / "bin" / "wanfw", *(prefix / "lib").rglob("*.so"), *(prefix / "lib" / "cmake").rglob("*")]:
        if path.is_file():
            text = path.read_bytes()
            for folder in (str(SOURCE), str(BUILD)):
                assert folder.encode() not in text, f"{path} mentions {folder}"
    listing = run([str(prefix / "bin" / "wanfw"), "plugins"]).stdout
    assert str(prefix / "lib" / "wanfw" / "plugins" / "libwanfw_strategy_ddp.so") in listing


def test_local_sgd_ranks_hold_the_mean_of_their_parameters_right_after_every_averaging(sdk, tmp_path):
    traces = tmp_path / "traces"
    config = tiny_wan_config(tmp_path, sdk["plugins"], "local",
                             {"name": "local_sgd", "every": 4, "device": "cpu", "trace_dir": str(traces)}, steps=12)
    result = installed_torchrun(sdk["prefix"], "run", config)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "local_sgd: parameters averaged every 4 steps" in result.stdout
    for step in (4, 8, 12):
        before = [load_file(traces / f"rank{r}-step{step}-before.safetensors") for r in (0, 1)]
        after = [load_file(traces / f"rank{r}-step{step}-after.safetensors") for r in (0, 1)]
        drift = max((before[0][k] - before[1][k]).abs().max().item() for k in before[0])
        assert drift > 1e-4, "the ranks trained on different shards, so they must have drifted apart"
        for name in before[0]:
            # Gloo adds the two float32 copies (one rounding) and halves the sum (exact): each element
            # is the true mean to within float32's unit roundoff of itself.
            mean = (before[0][name].double() + before[1][name].double()) / 2
            assert torch.equal(after[0][name], after[1][name]), (step, name)
            assert ((after[0][name].double() - mean).abs() <= 2.0 ** -24 * mean.abs()).all(), (step, name)
    assert not (traces / "rank0-step3-before.safetensors").exists()  # only every 4 steps


def test_local_sgd_every_4_steps_lowers_the_loss_like_ddp(sdk, tmp_path):
    ddp = tiny_wan_config(tmp_path, sdk["plugins"], "ddp", {"name": "ddp", "device": "cpu"}, steps=80)
    local = tiny_wan_config(tmp_path, sdk["plugins"], "local", {"name": "local_sgd", "every": 4, "device": "cpu"},
                            steps=80)
    for config in (ddp, local):
        result = installed_torchrun(sdk["prefix"], "run", config)
        assert result.returncode == 0, result.stdout + result.stderr
    ddp_losses = losses(tmp_path / "runs" / "ddp" / "version_0")
    local_losses = losses(tmp_path / "runs" / "local" / "version_0")
    ddp_end, local_end = sum(ddp_losses[-3:]) / 3, sum(local_losses[-3:]) / 3
    print(f"loss: ddp {ddp_losses[0]:.4f} -> {ddp_end:.4f}, local_sgd {local_losses[0]:.4f} -> {local_end:.4f}")
    assert ddp_end < 0.9 * ddp_losses[0] and local_end < 0.9 * local_losses[0]  # measured: 2.01 -> 1.71, 2.00 -> 1.73
    assert abs(local_end - ddp_end) <= 0.1 * ddp_end


def test_jsonl_logger_records_the_values_the_csv_logger_records(sdk, tmp_path):
    config = tiny_wan_config(tmp_path, sdk["plugins"], "both", {"name": "single", "device": "cpu"}, steps=12,
                             loggers=[{"name": "csv"}, {"name": "jsonl"}])
    run([str(sdk["prefix"] / "bin" / "wanfw"), "run", str(config)])
    run_dir = tmp_path / "runs" / "both" / "version_0"
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    scalars = {line["step"]: line["scalars"] for line in lines if "scalars" in line}
    assert any("text" in line and line["text"]["tag"] == "config" for line in lines)
    assert any("hparams" in line for line in lines)
    rows = csv_rows(run_dir / "metrics.csv")
    assert sorted(scalars) == [int(row["step"]) for row in rows] == [4, 8, 12]
    for row in rows:
        logged = scalars[int(row["step"])]
        for column, value in row.items():
            if column not in ("step", "time") and value != "":
                assert logged[column] == float(value), (row["step"], column)


def test_a_plugin_for_another_abi_is_refused_before_any_of_its_code_runs(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    env = {**os.environ, "WANFW_TEST_TRACE_DIR": str(traces)}
    refused = wanfw("plugins", "--plugin-path", BAD_PLUGINS / "side-effects-other-abi", check=0, env=env)
    assert "built for wanfw plugin ABI version 999" in refused.stdout
    assert f"this wanfw uses plugin ABI version {plugin_abi()}" in refused.stdout
    assert sorted(p.name for p in traces.iterdir()) == []
    # The same code built for this ABI does leave its traces: the probe works.
    accepted = wanfw("plugins", "--plugin-path", BAD_PLUGINS / "side-effects-same-abi", check=0, env=env)
    assert "side_effects" in accepted.stdout
    assert sorted(p.name for p in traces.iterdir()) == ["describe-same_abi", "static-init-same_abi"]


def test_configuring_a_plugin_project_against_another_libtorch_fails_naming_both(tmp_path):
    prefix = tmp_path / "prefix"
    run(["cmake", "--install", str(BUILD), "--prefix", str(prefix)])
    # Another LibTorch as CMake sees one: the real package files, another version stamped on them.
    other = tmp_path / "other-torch"
    shutil.copytree(TORCH_CMAKE, other / "share" / "cmake")
    (other / "version.py").write_text("__version__ = '2.14.0+cu130'\ncuda = '13.0'\n")
    result = run(["cmake", "-S", str(SOURCE / "examples" / "plugins"), "-B", str(tmp_path / "build"),
                  f"-DCMAKE_PREFIX_PATH={prefix};{other / 'share' / 'cmake'}"], check=False)
    assert result.returncode != 0
    message = " ".join((result.stdout + result.stderr).split())
    assert "LibTorch 2.14.0+cu130 (CUDA 13.0)" in message
    assert f"LibTorch {torch.__version__} (CUDA {torch.version.cuda})" in message


def test_one_binary_trains_the_wan_model_then_the_linear_model_by_changing_only_model(tmp_path):
    wan = {"name": "wan22_flow_matching", "preset": "tiny", "dim": 32, "num_heads": 2, "ffn_dim": 64, "num_layers": 1,
           "text_len": 4}
    linear = {"name": "linear_regression", "in_features": 8, "out_features": 2}
    for name, model in (("wan", wan), ("linear", linear)):
        # Only `model` changes: the synthetic data set makes the fields each model declares.
        config = base_config(tmp_path / "runs", model=model, trainer={"max_steps": 4, "log_every": 2},
                             data={"buckets": ["2x4x4"]})
        config["run"]["name"] = name
        wanfw("run", write_config(tmp_path / f"{name}.yaml", config), check=0)
        weights = load_file(checkpoints(tmp_path / "runs" / name / "version_0")[-1] / "model.safetensors")
        expected = "blocks.0.self_attn.q.weight" if name == "wan" else "linear.weight"
        assert expected in weights, sorted(weights)[:5]
