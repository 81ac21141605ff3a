"""Training end to end: outputs of a run, interruption and resume, and the NaN guard."""

import csv
import json
import signal
import subprocess

import pytest
from safetensors.torch import load_file

from harness.runs import SOURCE, WANFW, base_config, checkpoints, read_csv, start_wanfw, wait_for, wanfw, write_config


def test_a_run_writes_the_resolved_config_checkpoints_and_metrics(tmp_path, out):
    config = write_config(tmp_path / "exp.yaml", base_config(out))
    result = wanfw("run", config, check=0)
    run_dir = out / "exp" / "version_0"
    assert f"outputs: {run_dir}" in result.stdout
    resolved = (run_dir / "config.yaml").read_text()
    assert "max_steps: 40" in resolved and "warmup_steps: 0" in resolved
    assert [p.name for p in checkpoints(run_dir)] == [f"step-{s:08d}" for s in (10, 20, 30, 40)]
    for name in ("model.safetensors", "optimizer.safetensors", "rng.safetensors", "trainer_state.json"):
        assert (checkpoints(run_dir)[-1] / name).is_file()
    rows = read_csv(run_dir / "metrics.csv")
    assert [int(r["step"]) for r in rows] == list(range(5, 41, 5))
    assert {"loss", "lr", "grad_norm", "weight_error", "samples_per_sec"} <= set(rows[0])


def test_a_run_that_max_steps_ends_says_its_epochs_and_its_saved_config_holds_no_epochs_count(tmp_path, out):
    # 256 samples in batches of 16: 16 steps an epoch. 40 steps run 2.5 epochs whatever epochs says.
    config = write_config(tmp_path / "exp.yaml", base_config(out, trainer={"max_steps": 40, "epochs": 3}))
    result = wanfw("run", config, check=0)
    assert "training 40 steps from step 0: 2.50 epoch(s) of 16 step(s) (trainer.max_steps decides)" in result.stdout
    assert "trainer.epochs (3) is not used: trainer.max_steps (40) decides how long the run trains" in result.stderr
    resolved = (out / "exp" / "version_0" / "config.yaml").read_text()
    assert "max_steps: 40" in resolved and "epochs:" not in resolved
    # Whole epochs: epochs decides, and the saved config says how many.
    config = write_config(tmp_path / "epochs.yaml", base_config(tmp_path / "b", trainer={"max_steps": 0, "epochs": 2}))
    result = wanfw("run", config, check=0)
    assert "training 32 steps from step 0: 2 epoch(s) of 16 step(s)\n" in result.stdout
    assert "is not used" not in result.stderr
    assert "epochs: 2" in (tmp_path / "b" / "exp" / "version_0" / "config.yaml").read_text()


def test_resume_and_checkpoint_take_a_run_by_its_name_folder_and_find_its_newest_version_with_a_checkpoint(
        tmp_path, out):
    config = write_config(tmp_path / "exp.yaml", base_config(out, trainer={"max_steps": 20}))
    wanfw("run", config, check=0)
    (out / "exp" / "version_1" / "checkpoints").mkdir(parents=True)  # a run killed before its first checkpoint
    result = wanfw("run", config, "--resume", out / "exp", "--set", "trainer.max_steps=30", check=0)
    newest = out / "exp" / "version_0" / "checkpoints" / "step-00000020"
    assert f"--resume {out / 'exp'}: the newest complete checkpoint of its versions, {newest}" in result.stdout
    assert [p.name for p in checkpoints(out / "exp" / "version_0")][-1] == "step-00000030"
    empty = wanfw("run", config, "--resume", out / "exp" / "version_1")
    assert empty.returncode != 0
    assert "neither a checkpoint nor a run folder with a complete checkpoint" in empty.stderr
    assert "or the run (<output_dir>/<run.name>: its newest version with a checkpoint)" in empty.stderr


def test_training_learns_the_hidden_linear_map(tmp_path, out):
    config = write_config(tmp_path / "exp.yaml", base_config(out, trainer={"max_steps": 300, "log_every": 50}))
    wanfw("run", config, check=0)
    rows = read_csv(out / "exp" / "version_0" / "metrics.csv")
    assert float(rows[-1]["weight_error"]) < 0.05 * float(rows[0]["weight_error"])
    assert float(rows[-1]["loss"]) < 1e-3


def test_checkpoint_weights_use_the_model_parameter_names(tmp_path, out):
    config = write_config(tmp_path / "exp.yaml", base_config(out, trainer={"max_steps": 10}))
    wanfw("run", config, check=0)
    weights = load_file(checkpoints(out / "exp" / "version_0")[-1] / "model.safetensors")
    assert set(weights) == {"linear.weight", "linear.bias"}
    assert tuple(weights["linear.weight"].shape) == (2, 8)


def test_a_second_run_gets_a_new_version_folder(tmp_path, out):
    config = write_config(tmp_path / "exp.yaml", base_config(out, trainer={"max_steps": 2}))
    wanfw("run", config, check=0)
    wanfw("run", config, check=0)
    assert sorted(p.name for p in (out / "exp").iterdir()) == ["version_0", "version_1"]


def test_sigkill_then_resume_auto_ends_bitwise_equal_to_an_uninterrupted_run(tmp_path):
    sections = dict(trainer={"max_steps": 60, "log_every": 5}, checkpoint={"every": 5, "keep_last": 2})
    straight = write_config(tmp_path / "a.yaml", base_config(tmp_path / "a", **sections))
    wanfw("run", straight, check=0)

    slow = base_config(tmp_path / "b", **sections)
    slow["model"]["step_delay_ms"] = 50
    interrupted = write_config(tmp_path / "b.yaml", slow)
    run_dir = tmp_path / "b" / "exp" / "version_0"
    process = start_wanfw("run", interrupted)
    wait_for(lambda: len(checkpoints(run_dir)) >= 2 or process.poll() is not None, what="two checkpoints")
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL
    killed_at = int(checkpoints(run_dir)[-1].name.split("-")[1])
    assert killed_at < 60

    slow["model"]["step_delay_ms"] = 0
    write_config(interrupted, slow)
    result = wanfw("run", interrupted, "--resume", "auto", check=0)
    assert f"resumed from {checkpoints(run_dir)[0].parent}/step-{killed_at:08d}" in result.stdout

    a = load_file(checkpoints(tmp_path / "a" / "exp" / "version_0")[-1] / "model.safetensors")
    b = load_file(checkpoints(run_dir)[-1] / "model.safetensors")
    for name in a:
        assert a[name].numpy().tobytes() == b[name].numpy().tobytes(), name
    steps = [int(r["step"]) for r in read_csv(run_dir / "metrics.csv")]
    assert steps == sorted(set(steps)) == list(range(5, 61, 5))  # resumed CSV: no duplicated steps


def test_sigterm_writes_a_final_checkpoint_and_resume_finishes_the_run(tmp_path, out):
    config = base_config(out, trainer={"max_steps": 400}, checkpoint={"every": 1000})
    config["model"]["step_delay_ms"] = 20
    path = write_config(tmp_path / "exp.yaml", config)
    run_dir = out / "exp" / "version_0"
    process = start_wanfw("run", path)
    wait_for(lambda: (run_dir / "metrics.csv").exists() and len(read_csv(run_dir / "metrics.csv")) >= 2,
             what="two logged rows")
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 1
    assert "stopped by signal 15" in output
    saved = checkpoints(run_dir)
    assert len(saved) == 1 and int(saved[0].name.split("-")[1]) < 400
    config["model"]["step_delay_ms"] = 0
    write_config(path, config)
    wanfw("run", path, "--resume", "auto", check=0)
    assert checkpoints(run_dir)[-1].name == "step-00000400"


def test_resume_auto_without_a_checkpoint_starts_a_new_run(tmp_path, out):
    config = write_config(tmp_path / "exp.yaml", base_config(out, trainer={"max_steps": 3}))
    result = wanfw("run", config, "--resume", "auto", check=0)
    assert "starting a new run" in result.stdout
    assert checkpoints(out / "exp" / "version_0")[-1].name == "step-00000003"


def test_resume_from_an_explicit_checkpoint_folder(tmp_path, out):
    config = write_config(tmp_path / "exp.yaml", base_config(out, trainer={"max_steps": 20}))
    wanfw("run", config, check=0)
    run_dir = out / "exp" / "version_0"
    step10 = run_dir / "checkpoints" / "step-00000010"
    result = wanfw("run", config, "--set", "trainer.max_steps=30", "--resume", step10, check=0)
    assert "(step 10, epoch 0)" in result.stdout
    assert checkpoints(run_dir)[-1].name == "step-00000030"


def test_a_resumed_run_reads_each_file_of_its_checkpoint_once(tmp_path, out):
    """The run folder's choice, the weights and the trainer's restore share one opened checkpoint."""
    config = write_config(tmp_path / "exp.yaml", base_config(out, trainer={"max_steps": 10}))
    wanfw("run", config, check=0)
    step10 = out / "exp" / "version_0" / "checkpoints" / "step-00000010"
    trace = tmp_path / "openat.log"
    result = subprocess.run(["strace", "-f", "-qq", "-e", "trace=open,openat", "-o", str(trace), str(WANFW), "run",
                             str(config), "--set", "trainer.max_steps=12", "--resume", "auto"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "(step 10, epoch 0)" in result.stdout
    opened = [line for line in trace.read_text().splitlines() if str(step10) + "/" in line]
    files = sorted(line.split(str(step10) + "/")[1].split('"')[0] for line in opened)
    assert files == ["model.safetensors", "optimizer.safetensors", "rng.safetensors", "trainer_state.json"]


def test_nan_loss_stops_naming_step_and_metric_and_keeps_the_last_checkpoint(tmp_path, out):
    config = base_config(out, trainer={"max_steps": 40}, checkpoint={"every": 10})
    config["model"]["nan_at_call"] = 17
    result = wanfw("run", write_config(tmp_path / "exp.yaml", config), check=1)
    assert "step 17: metric 'loss' is nan" in result.stderr
    run_dir = out / "exp" / "version_0"
    assert "step-00000010" in result.stderr and "is intact" in result.stderr
    assert [p.name for p in checkpoints(run_dir)] == ["step-00000010"]
    load_file(checkpoints(run_dir)[-1] / "model.safetensors")  # still readable


def test_diverging_training_trips_the_nan_guard(tmp_path, out):
    config = base_config(out, optimizer={"lr": 1e30}, trainer={"max_steps": 50, "grad_clip": 0.0})
    result = wanfw("run", write_config(tmp_path / "exp.yaml", config), check=1)
    assert "NaN guard" in result.stderr


def test_a_truncated_checkpoint_fails_the_resume_naming_file_and_tensor(tmp_path, out):
    config = write_config(tmp_path / "exp.yaml", base_config(out, trainer={"max_steps": 10}))
    wanfw("run", config, check=0)
    weights = checkpoints(out / "exp" / "version_0")[-1] / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:-3])
    result = wanfw("run", config, "--set", "trainer.max_steps=20", "--resume", "auto", check=1)
    assert str(weights) in result.stderr
    assert "tensor 'linear.bias'" in result.stderr or "tensor 'linear.weight'" in result.stderr


def test_a_doctored_checkpoint_header_fails_the_resume_naming_the_tensor(tmp_path, out):
    config = write_config(tmp_path / "exp.yaml", base_config(out, trainer={"max_steps": 10}))
    wanfw("run", config, check=0)
    weights = checkpoints(out / "exp" / "version_0")[-1] / "model.safetensors"
    data = bytearray(weights.read_bytes())
    at = data.index(b'"F32"')
    data[at:at + 5] = b'"F31"'
    weights.write_bytes(bytes(data))
    result = wanfw("run", config, "--set", "trainer.max_steps=20", "--resume", "auto", check=1)
    assert "unknown dtype 'F31'" in result.stderr and str(weights) in result.stderr


@pytest.mark.own_entry
def test_the_quickstart_visibly_learns_and_says_how_its_loss_moved(tmp_path):
    # As the README runs it (only the output folder moved): every logged loss is a window mean.
    result = wanfw("run", SOURCE / "examples" / "quickstart.yaml", "--set", f"run.output_dir={tmp_path}", check=0)
    run_dir = tmp_path / "quickstart" / "version_0"
    assert f"outputs: {run_dir}" in result.stdout
    assert (run_dir / "config.yaml").is_file() and checkpoints(run_dir)
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    assert [int(r["step"]) for r in rows] == list(range(25, 301, 25))
    first, last = float(rows[0]["loss"]), float(rows[-1]["loss"])
    print(f"quickstart: loss of steps 1-25 {first:.4g}, of steps 276-300 {last:.4g} ({last / first:.2f}x)")
    assert last <= 0.8 * first
    assert f"loss {first:.4g} (mean of steps 1-25) -> {last:.4g} (steps 276-300), {last / first:.2f}x" in result.stdout
    assert list(run_dir.glob("events.out.tfevents.*"))  # TensorBoard reads the run too


def test_a_logged_loss_is_the_mean_of_the_steps_since_the_last_log(tmp_path, out):
    # The same run logged every step and every 4 steps: each window's loss is the mean of its steps.
    every_step = base_config(out, trainer={"max_steps": 12, "log_every": 1})
    every_step["run"]["name"] = "every"
    windows = base_config(out, trainer={"max_steps": 12, "log_every": 4})
    for config in (every_step, windows):
        wanfw("run", write_config(tmp_path / f"{config['run']['name']}.yaml", config), check=0)
    per_step = list(csv.DictReader(open(out / "every" / "version_0" / "metrics.csv")))
    logged = list(csv.DictReader(open(out / "exp" / "version_0" / "metrics.csv")))
    assert [int(r["step"]) for r in logged] == [4, 8, 12]
    for row in logged:
        steps = per_step[int(row["step"]) - 4:int(row["step"])]
        for metric in ("loss", "grad_norm", "weight_error"):  # the trainer's, and the model's own metric
            assert float(row[metric]) == pytest.approx(sum(float(r[metric]) for r in steps) / 4, rel=1e-12)
        assert float(row["loss_step"]) == float(steps[-1]["loss"])  # the logging step's own batch
        assert float(row["lr"]) == float(steps[-1]["lr"])  # values of the moment: the logging step's
    assert float(logged[0]["loss"]) != float(logged[0]["loss_step"])


def test_a_failed_checkpoint_write_is_reported_and_earlier_checkpoints_survive(tmp_path, out):
    # A file-size limit makes writes fail the way a full disk does (EFBIG instead of ENOSPC).
    config = base_config(out, model={"in_features": 1024, "out_features": 128}, trainer={"max_steps": 20},
                         checkpoint={"every": 10, "keep_last": 0})
    path = write_config(tmp_path / "exp.yaml", config)
    result = subprocess.run(["bash", "-c", f'ulimit -f 200 && exec "$0" run "$1"', WANFW, path],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr
    assert "model.safetensors" in result.stderr and "cannot write" in result.stderr
    run_dir = out / "exp" / "version_0"
    assert checkpoints(run_dir) == []
    assert not any(p.name.endswith(".partial") for p in (run_dir / "checkpoints").iterdir())


def test_epochs_mode_runs_whole_epochs_and_counts_them_in_the_checkpoint(tmp_path, out):
    # 256 samples / batch 16 = 16 steps per epoch; 3 epochs = 48 steps.
    config = write_config(tmp_path / "exp.yaml", base_config(out, trainer={"max_steps": 0, "epochs": 3}))
    wanfw("run", config, check=0)
    last = checkpoints(out / "exp" / "version_0")[-1]
    assert last.name == "step-00000048"
    state = json.loads((last / "trainer_state.json").read_text())
    assert (state["epoch"], state["batch_in_epoch"]) == (2, 16)


def test_a_parameter_group_trains_at_its_own_learning_rate_multiplier(tmp_path, out):
    config = base_config(out, model={"bias_lr_scale": 0.0}, trainer={"max_steps": 20, "log_every": 5})
    wanfw("run", write_config(tmp_path / "exp.yaml", config), check=0)
    run_dir = out / "exp" / "version_0"
    first = load_file(checkpoints(run_dir)[0] / "model.safetensors")
    last = load_file(checkpoints(run_dir)[-1] / "model.safetensors")
    assert not (first["linear.weight"] == last["linear.weight"]).all()  # the weight group trains
    assert (first["linear.bias"] == last["linear.bias"]).all()  # the bias group's lr is lr x 0
    rows = read_csv(run_dir / "metrics.csv")
    assert all(float(r["lr/bias"]) == 0.0 and float(r["lr/weight"]) == float(r["lr"]) for r in rows)


def test_a_run_with_parameter_groups_resumes_bitwise(tmp_path):
    sections = dict(model={"bias_lr_scale": 3.0}, trainer={"max_steps": 20, "log_every": 5},
                    checkpoint={"every": 10, "keep_last": 0})
    wanfw("run", write_config(tmp_path / "a.yaml", base_config(tmp_path / "a", **sections)), check=0)
    path = write_config(tmp_path / "b.yaml", base_config(tmp_path / "b", **sections))
    wanfw("run", path, check=0)
    run_dir = tmp_path / "b" / "exp" / "version_0"
    wanfw("run", path, "--resume", checkpoints(run_dir)[0], check=0)  # step 10 -> 20 again
    a = load_file(checkpoints(tmp_path / "a" / "exp" / "version_0")[-1] / "model.safetensors")
    b = load_file(checkpoints(run_dir)[-1] / "model.safetensors")
    for name in a:
        assert a[name].numpy().tobytes() == b[name].numpy().tobytes(), name
