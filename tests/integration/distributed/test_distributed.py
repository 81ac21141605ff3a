"""Multi-process training on the CPU: the ddp strategy over Gloo on loopback, started by the real
torchrun from the venv (or with the environment srun sets), grad_accum around any strategy, and
the mixed-precision modes. Parity tests use the deterministic linear_regression model: the
updates of N ranks x B (or N micro-batches x B) must equal one batch of N x B."""

import json
import os
import subprocess
import time

import pytest
import torch
from safetensors.torch import load_file

from harness.equivalence import assert_same_training, state, tiny_wan_rounding
from harness.launch import PRELOADED_TORCHRUN, TORCHRUN, free_port, torchrun
from harness.layouts import DDP, LR, STEPS, TOKENS, assert_same_weights, experiment, linear_experiment, run_on
from harness.runs import TEST_PLUGINS, WANFW, checkpoints, metrics, wanfw, write_config


WAN_DATA = {"buckets": ["2x4x4"]}  # the tiny Wan model's synthetic latents


def final_weights(tmp_path, name):
    return state(tmp_path, name).weights


def reference_run(tmp_path, batch):
    wanfw("run", linear_experiment(tmp_path, "reference", {"name": "single", "device": "cpu"}, batch), check=0)
    return state(tmp_path, "reference")


def test_two_ranks_of_batch_b_update_like_one_rank_of_batch_2b(tmp_path):
    result = torchrun("run", linear_experiment(tmp_path, "ddp", {"name": "ddp", "timeout_s": 60}, 8))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "world size 2 | batch 8 per device x 1 accumulation = global batch 16" in result.stdout
    assert_same_weights(state(tmp_path, "ddp"), reference_run(tmp_path, 16))


def test_four_accumulated_micro_batches_update_like_one_batch_four_times_larger(tmp_path):
    strategy = {"name": "grad_accum", "steps": 4, "inner": {"name": "single", "device": "cpu"}}
    wanfw("run", linear_experiment(tmp_path, "accumulated", strategy, 4), check=0)
    assert_same_weights(state(tmp_path, "accumulated"), reference_run(tmp_path, 16))


def test_ddp_with_accumulation_updates_like_one_batch_of_world_times_steps(tmp_path):
    strategy = {"name": "grad_accum", "steps": 2, "inner": {"name": "ddp", "timeout_s": 60}}
    result = torchrun("run", linear_experiment(tmp_path, "both", strategy, 4))
    assert result.returncode == 0, result.stdout + result.stderr
    assert_same_weights(state(tmp_path, "both"), reference_run(tmp_path, 16))


def test_two_nodes_on_loopback_train_together(tmp_path):
    path = linear_experiment(tmp_path, "nodes", {"name": "ddp", "timeout_s": 60}, 8)
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    nodes = [PRELOADED_TORCHRUN.start([TORCHRUN, "--no-python", "--nnodes=2", f"--node-rank={node}", "--nproc-per-node=1",
                                       "--master-addr=127.0.0.1", f"--master-port={port}", WANFW, "run", path],
                                      env, tmp_path / f"node{node}.log")
             for node in (0, 1)]
    codes = [node.wait(timeout=240) for node in nodes]
    outputs = [(tmp_path / f"node{node}.log").read_text() for node in (0, 1)]
    assert codes == [0, 0], outputs
    assert "ddp: rank 0 of 2" in outputs[0]
    assert_same_weights(state(tmp_path, "nodes"), reference_run(tmp_path, 16))


def launch_by_environment(path, world, port, extra_env=lambda rank: {}):
    """Starts `world` wanfw processes the way srun does: the environment says who is who."""
    processes = []
    for rank in range(world):
        env = {**os.environ, "OMP_NUM_THREADS": "1", **extra_env(rank)}
        processes.append(subprocess.Popen([str(WANFW), "run", str(path)], stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, env=env))
    return processes


def test_the_slurm_environment_places_the_ranks(tmp_path):
    path = linear_experiment(tmp_path, "slurm", {"name": "ddp", "timeout_s": 60}, 8)
    port = free_port()
    processes = launch_by_environment(path, 2, port, lambda rank: {
        "SLURM_PROCID": str(rank), "SLURM_NTASKS": "2", "SLURM_LOCALID": str(rank), "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_JOB_NODELIST": "localhost", "MASTER_PORT": str(port)})
    results = [p.communicate(timeout=240) for p in processes]
    assert [p.returncode for p in processes] == [0, 0], results
    assert "launched by slurm" in results[0][0]
    assert_same_weights(state(tmp_path, "slurm"), reference_run(tmp_path, 16))


def test_a_killed_rank_makes_the_others_fail_naming_it_without_hanging(tmp_path):
    path = linear_experiment(tmp_path, "killed", {"name": "ddp", "timeout_s": 30}, 8,
                  model={"name": "linear_regression", "in_features": 8, "out_features": 2, "step_delay_ms": 20,
                         "kill_rank": 1, "kill_at_call": 3})
    port = free_port()
    started = time.monotonic()
    processes = launch_by_environment(path, 2, port, lambda rank: {
        "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port)})
    out, err = processes[0].communicate(timeout=120)
    processes[1].wait(timeout=30)
    assert processes[1].returncode == -9
    assert processes[0].returncode == 1, out + err
    assert "Lost: rank 1 stopped responding" in err, err
    assert time.monotonic() - started < 60


def test_torchrun_restarts_a_job_that_lost_a_rank_and_it_resumes_to_the_end(tmp_path):
    model = {"name": "linear_regression", "in_features": 8, "out_features": 2, "kill_rank": 1, "kill_at_call": 4}
    c = json.loads(linear_experiment(tmp_path, "restarted", {"name": "ddp", "timeout_s": 30}, 8, model=model).read_text())
    c["checkpoint"] = {"every": 2, "keep_last": 0}
    c["trainer"]["max_steps"] = 6
    path = write_config(tmp_path / "restarted.json", c)
    result = torchrun("run", path, "--resume", "auto", extra=("--max-restarts=1",))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "resumed from" in result.stdout and "step-00000002" in result.stdout
    steps = [int(p.name.split("-")[1]) for p in checkpoints(tmp_path / "runs" / "restarted" / "version_0")]
    assert steps[-1] == 6
    # The same run without the kill, for comparison.
    c["run"]["name"] = "uninterrupted"
    c["model"]["kill_rank"] = -1
    result = torchrun("run", write_config(tmp_path / "uninterrupted.json", c))
    assert result.returncode == 0, result.stdout + result.stderr
    # The same layout before and after the restart: bitwise, not only to rounding.
    restarted, uninterrupted = final_weights(tmp_path, "restarted"), final_weights(tmp_path, "uninterrupted")
    assert all(torch.equal(restarted[k], uninterrupted[k]) for k in uninterrupted)


def test_the_fp16_scaler_skips_a_step_with_an_inf_gradient_and_checkpoints_its_scale(tmp_path):
    model = {"name": "linear_regression", "in_features": 8, "out_features": 2, "inf_grad_at_call": 3}
    path = linear_experiment(tmp_path, "fp16", {"name": "single", "device": "cpu"}, 8, model=model,
                  precision={"mode": "fp16", "init_scale": 1024})
    c = json.loads(path.read_text())
    c["checkpoint"] = {"every": 1, "keep_last": 0}
    write_config(path, c)
    result = wanfw("run", path, check=0)
    assert "step 3: fp16 gradients overflowed at loss scale 1024; step skipped, scale now 512" in result.stdout
    rows = metrics(tmp_path, "fp16")
    assert [float(r["loss_scale"]) for r in rows] == [1024, 1024, 1024, 512, 512]
    assert [float(r["skipped_steps"]) for r in rows] == [0, 0, 1, 1, 1]
    saved = checkpoints(tmp_path / "runs" / "fp16" / "version_0")
    before, skipped = (load_file(saved[i] / "model.safetensors") for i in (1, 2))
    assert all(torch.equal(before[k], skipped[k]) for k in before)  # the skipped step changed nothing
    assert json.loads((saved[2] / "trainer_state.json").read_text())["loss_scaler"]["scale"] == 512
    # Resuming from step 3 continues with its scale.
    resumed = wanfw("run", path, "--resume", str(saved[2]), check=0)
    assert "resumed from" in resumed.stdout
    assert float(metrics(tmp_path, "fp16")[-1]["loss_scale"]) == 512


@pytest.mark.own_entry
@pytest.mark.parametrize("mode", ["bf16", "fp16"])
def test_mixed_precision_trains_the_tiny_wan_model_on_the_cpu(tmp_path, mode):
    model = {"name": "wan22_flow_matching", "preset": "tiny", "text_len": 4}
    path = linear_experiment(tmp_path, mode, {"name": "single", "device": "cpu"}, 4, model=model, data=WAN_DATA,
                  precision={"mode": mode},
                  optimizer={"lr": 2e-3, "weight_decay": 0.0})
    c = json.loads(path.read_text())
    c["trainer"]["max_steps"] = 120
    write_config(path, c)
    wanfw("run", path, check=0)
    losses = [float(r["loss"]) for r in metrics(tmp_path, mode)]
    assert all(l == l and l < 1e3 for l in losses)
    # It learns: each step's loss is noisy (sampled timesteps), so compare the first and last 30.
    assert sum(losses[-30:]) < 0.97 * sum(losses[:30])


def test_the_tiny_wan_model_trains_under_ddp(tmp_path):
    model = {"name": "wan22_flow_matching", "preset": "tiny", "text_len": 4}
    result = torchrun("run", linear_experiment(tmp_path, "wan", {"name": "ddp", "timeout_s": 60}, 2, model=model, data=WAN_DATA))
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(metrics(tmp_path, "wan")) == STEPS


def test_parameters_one_rank_leaves_without_a_gradient_stop_ddp_naming_the_option_and_train_with_it(tmp_path):
    # One sample a rank and two experts: every step leaves one expert without a gradient on each rank.
    model = {"name": "wan22_flow_matching", "preset": "tiny", "expert": "both", "boundary": 500, "text_len": 4}
    result = torchrun("run", experiment(tmp_path, "unused", DDP, 1, model))
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "rank 0: some trainable parameters got no gradient in this step" in output
    assert "hint: set strategy.find_unused_parameters: true" in output
    assert "terminate called" not in output  # stopped before the transport met mismatched collectives
    two = run_on(tmp_path, "found", {**DDP, "find_unused_parameters": True}, 1, model, ranks=2)
    one = run_on(tmp_path, "one", {"name": "single", "device": "cpu"}, 2, model)
    assert_same_training(two, one, lr=LR, tolerance=tiny_wan_rounding(2, TOKENS))


def test_linear_lr_scaling_multiplies_the_peak_lr_by_the_global_batch_ratio(tmp_path):
    strategy = {"name": "grad_accum", "steps": 4, "inner": {"name": "single", "device": "cpu"}}
    path = linear_experiment(tmp_path, "scaled", strategy, 4, optimizer={"lr": 0.01, "lr_scaling": "linear"},
                  scheduler={"decay": "constant"})
    result = wanfw("run", path, check=0)
    assert "lr scaled linear with the global batch: 0.01 x 4 = 0.04" in result.stdout
    assert {float(r["lr"]) for r in metrics(tmp_path, "scaled")} == {0.04}


def test_ddp_without_a_launcher_runs_one_process_and_says_so(tmp_path):
    result = wanfw("run", linear_experiment(tmp_path, "alone", {"name": "ddp"}, 8), check=0)
    assert "no launcher in the environment" in result.stdout
    assert_same_weights(state(tmp_path, "alone"), reference_run(tmp_path, 8), batch=8)


def test_grad_accum_without_an_inner_strategy_is_a_config_error(tmp_path):
    result = wanfw("validate", linear_experiment(tmp_path, "bad", {"name": "grad_accum", "steps": 2}, 8), check=2)
    assert "'strategy.inner' is missing" in result.stderr


def test_data_parallel_replicas_update_like_one_device_with_the_whole_batch(tmp_path):
    # Two replicas on the CPU exercise replicate, split, parallel backward and the gradient sum.
    result = wanfw("run", linear_experiment(tmp_path, "dp", {"name": "data_parallel", "devices": ["cpu", "cpu"]}, 16), check=0)
    assert "data_parallel over 2 devices (cpu, cpu)" in result.stdout
    assert_same_weights(state(tmp_path, "dp"), reference_run(tmp_path, 16))


def test_data_parallel_with_accumulation_and_an_odd_batch_updates_like_one_device(tmp_path):
    strategy = {"name": "grad_accum", "steps": 2, "inner": {"name": "data_parallel", "devices": ["cpu", "cpu", "cpu"]}}
    wanfw("run", linear_experiment(tmp_path, "dp3", strategy, 5), check=0)  # slices of 2, 2 and 1
    assert_same_weights(state(tmp_path, "dp3"), reference_run(tmp_path, 10), batch=10)


def test_data_parallel_without_gpus_runs_as_single_and_says_so(tmp_path):
    result = wanfw("run", linear_experiment(tmp_path, "dp1", {"name": "data_parallel"}, 8), check=0)
    assert result.stdout.count("running as single") == 1
    assert_same_weights(state(tmp_path, "dp1"), reference_run(tmp_path, 8), batch=8)


def test_data_parallel_replicates_the_wan_model(tmp_path):
    model = {"name": "wan22_flow_matching", "preset": "tiny", "text_len": 4, "gradient_checkpointing": True}
    wanfw("run", linear_experiment(tmp_path, "wan_dp", {"name": "data_parallel", "devices": ["cpu", "cpu"]}, 4, model=model,
                        data=WAN_DATA), check=0)
    losses = [float(r["loss"]) for r in metrics(tmp_path, "wan_dp")]
    assert len(losses) == STEPS and all(l == l for l in losses)


def test_a_rejected_process_group_option_points_at_its_line_in_the_config(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(f"""run: {{name: exp, output_dir: {tmp_path / 'runs'}}}
plugin_path: [{TEST_PLUGINS}]
model: {{name: linear_regression}}
strategy:
  name: ddp
  device: cpu
  backend: nccl
""")
    result = wanfw("validate", path, check=2)
    assert f"{path}:7:12: strategy.backend: backend nccl needs CUDA devices, but the device is the CPU" in result.stderr
