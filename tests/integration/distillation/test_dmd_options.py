"""DMD's options as a user meets them before training: refusals that name the option, the velocity
objective's options refused and DMD's named as ignored, the generator's own schedule, and
model-info's memory of every network a step holds."""

import pytest

from harness.distill import teacher  # noqa: F401 (a fixture)
from harness.dmd import config
from harness.runs import SOURCE, wanfw


@pytest.mark.parametrize("model, message", [
    ({"inputs": "teacher_trajectory"}, "objective dmd makes its own inputs"),
    ({"shared_base": True}, "a shared base needs adapters on both the generator and the critic"),
    ({"shared_base": True, "lora": {"rank": 4}, "critic_lora": {"rank": 4}, "student_num_layers": 1},
     "a shared base needs the student to be the teacher's architecture"),
    ({"critic_updates_per_generator_update": 0}, "critic_updates_per_generator_update"),
    ({"score_level_min": 0.5, "score_level_max": 0.4}, "0 < min < max < 1"),
    ({"guidance_scale": 3.0}, "model.guidance_scale: objective dmd does not read it: the real score's guidance is "
                              "real_guidance"),
    ({"sample_shift": 3.0}, "model.sample_shift: objective dmd does not read it: the generator's levels take "
                            "generator_shift"),
    ({"trajectory_steps": 8}, "model.trajectory_steps: objective dmd does not read it"),
])
def test_a_dmd_config_that_cannot_work_is_refused_naming_the_option(tmp_path, teacher, model, message):
    result = wanfw("validate", config(tmp_path, teacher, **model), check=2)
    assert message in result.stderr


def test_model_info_shows_the_memory_of_separate_networks_and_of_one_shared_base(tmp_path, teacher):
    result = wanfw("model-info", config(tmp_path, teacher, **{"lora": {"rank": 4}, "critic_lora": {"rank": 4}}), check=0)
    assert "dmd memory before activations: separate networks: teacher" in result.stdout
    assert "one shared base" in result.stdout and "(shared_base: true)" in result.stdout


def test_the_generator_takes_its_levels_from_generator_shift(tmp_path, teacher):
    flat = wanfw("model-info", config(tmp_path, teacher, name="flat", generator_shift=1.0), check=0)
    assert "dmd: generator 3 steps at levels 1.0000, 0.6667, 0.3333, critic" in flat.stdout
    shifted = wanfw("model-info", config(tmp_path, teacher, name="shifted", generator_shift=3.0), check=0)
    assert "dmd: generator 3 steps at levels 1.0000, 0.8571, 0.6000, critic" in shifted.stdout  # 3s / (1 + 2s)


def test_dmd_options_under_objective_velocity_are_named_in_a_warning_as_ignored(tmp_path, teacher):
    result = wanfw("validate", config(tmp_path, teacher, objective="velocity", inputs="teacher_trajectory"), check=0)
    assert "model: objective velocity ignores generator_steps, real_guidance, critic_updates_per_generator_update, " \
           "critic_lr_scale (options of objective dmd)" in result.stdout + result.stderr


def test_model_info_judges_the_gpu_by_every_network_a_dmd_step_holds_not_the_generator_alone():
    example = SOURCE / "examples" / "dmd-wan22-ti2v-5b-shared-base.yaml"
    for args in ((), ("--gpus", 4, "--set", "strategy.name=fsdp")):
        info = wanfw("model-info", example, *args, check=0).stdout
        assert "student per GPU" not in info and "left for activations" not in info, args  # the generator alone
    # Sharded, the same plan: a quarter of the shared base (0.04 + 2.29 GiB) and of both adapter
    # sets (1.20 GiB) a GPU, the parameters gathered at a time, and the activations.
    assert "memory plan per GPU, fsdp on 4 GPUs (checkpointing):" in info
    for part in ("weights outside the blocks in bfloat16 (1/4 a GPU) 0.04 GiB",
                 "30 resident block(s) in bfloat16 (1/4 a GPU) 2.29 GiB",
                 "adapters with gradients and AdamW moments (float32) (1/4 a GPU) 1.20 GiB",
                 "gathered parameters (two blocks and the rest) 0.78 GiB",
                 "30 checkpointed block inputs 4.68 GiB", "one block recomputed 5.20 GiB"):
        assert f"device: {part}\n" in info, part
    assert "total: device 15.39 GiB, host 0.00 GiB; with 0.5 GiB for the CUDA context: does not fit a 12 GB GPU; " \
           "does not fit a 16 GB GPU; fits a 24 GB GPU" in info


def test_model_info_counts_both_a14b_experts_and_fits_the_4_step_example_on_one_80gb_gpu_or_with_fit_48gb():
    example = SOURCE / "examples" / "dmd-wan22-a14b-4step.yaml"
    info = wanfw("model-info", example, check=0).stdout
    # Both experts' 40 blocks in fp8, four rank-64 adapter sets (generator and critic of each
    # expert, 306,708,480 parameters a set), one expert's activations at a time.
    for part in ("80 resident block(s) in fp8 with scales 27.83 GiB",
                 "adapters with gradients and AdamW moments (float32) 18.28 GiB",
                 "40 checkpointed block inputs 12.50 GiB"):
        assert f"device: {part}\n" in info, part
    assert "does not fit a 48 GB GPU; fits an 80 GB GPU" in info
    fit = wanfw("model-info", example, "--fit", "48GB", check=0).stdout
    assert "--fit 44.70 GiB of device memory: fits with fp8 base, checkpointing, activation offload, 5 blocks swapped " \
           "(ring 2), the optimizer's state on the host" in fit


def test_the_4_step_student_of_both_a14b_experts_fits_a_24gb_gpu_with_the_adapters_state_on_the_host():
    example = SOURCE / "examples" / "dmd-wan22-a14b-4step-24gb.yaml"
    info = wanfw("model-info", example, check=0).stdout
    # Four rank-64 adapter sets, 1,226,833,920 parameters: a float32 weight each on the device beside
    # the gradients being moved, 16 bytes on the host.
    assert "device: adapters (float32): weights (4 bytes a parameter) and two blocks' gradients 4.76 GiB\n" in info
    assert "host: adapters (float32): fp32 masters, gradients and AdamW moments (16 bytes a parameter; masters and " \
           "gradients pinned) 18.28 GiB\n" in info
    assert "does not fit a 16 GB GPU; fits a 24 GB GPU (2.3 GiB left)" in info
    # With the state on the device, every option at its most does not fit: what the host state buys.
    most = ["--set", "optimizer.state=device", "--set", "model.recompute_chunks=16", "--set", "block_swap.blocks=79"]
    assert "does not fit a 24 GB GPU" in wanfw("model-info", example, *most, check=0).stdout
    wanfw("validate", example, check=0)
