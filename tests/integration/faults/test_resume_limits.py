"""Resuming where there is nothing left to train, or from a checkpoint whose state names another
step than its folder: the run says so and exits 0 in the first case, and refuses the checkpoint,
naming both steps, in the second."""

import json

from harness.runs import base_config, checkpoints, wanfw, write_config


def finished_run(tmp_path, out, steps=6):
    config = write_config(tmp_path / "exp.yaml", base_config(out, trainer={"max_steps": steps},
                                                             checkpoint={"every": 3, "keep_last": 0}))
    wanfw("run", config, check=0)
    return config, out / "exp" / "version_0"


def test_a_run_resumed_at_or_past_max_steps_says_so_trains_nothing_and_exits_0(tmp_path, out):
    config, run_dir = finished_run(tmp_path, out)
    written = {p.name: (p / "model.safetensors").read_bytes() for p in checkpoints(run_dir)}
    for max_steps, relation in ((6, "the last of"), (4, "past")):
        result = wanfw("run", config, "--set", f"trainer.max_steps={max_steps}", "--resume", "auto", check=0)
        assert (f"nothing to train: the checkpoint is at step 6, {relation} the run's {max_steps} steps "
                "(trainer.max_steps); raise trainer.max_steps to train on") in result.stdout
        assert "training " not in result.stdout and "steps in" not in result.stdout
        assert "done: no step trained; the run stays at step 6" in result.stdout
        # Nothing written: the same checkpoints, byte for byte, and no new one.
        assert {p.name: (p / "model.safetensors").read_bytes() for p in checkpoints(run_dir)} == written


def test_a_checkpoint_whose_state_names_another_step_than_its_folder_is_refused_naming_both(tmp_path, out):
    config, run_dir = finished_run(tmp_path, out)
    state_file = run_dir / "checkpoints" / "step-00000006" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    state_file.write_text(json.dumps({**state, "step": 999}))
    result = wanfw("run", config, "--set", "trainer.max_steps=1000", "--resume", "auto", check=1)
    output = result.stdout + result.stderr
    assert "trainer_state.json: the trainer state is at step 999, but its folder step-00000006 names step 6" in output
    assert "name the folder step-00000999" in output
    assert "training " not in output
