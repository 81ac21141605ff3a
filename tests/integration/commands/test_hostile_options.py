"""The options that expert placement, chunked recompute, the ema section, DMD of both experts, the
VACE branch and adapters loaded per expert added, set to values that make no sense: `wanfw
validate` and `wanfw run` refuse each when the config is read, with exit 2, the config file's
line and column and the key, and nothing written (no run folder). A value a clamp serves is
accepted with a warning that names the key."""

import json

import pytest
import torch
from safetensors.torch import save_file

from harness.distill import teacher  # noqa: F401 (a fixture)
from harness.dmd import config as dmd_config
from harness.runs import base_config, wanfw, write_config

TINY = {"name": "wan22_flow_matching", "preset": "tiny", "text_len": 4}
EXPERTS = {**TINY, "expert": "both", "boundary": 500}
DDP = {"name": "ddp", "timeout_s": 60}

# id: (sections the case changes, the key refused, words of the refusal)
CASES = {
    # chunked recompute, activation offload, an fp8 base
    "recompute_chunks_negative": ({"model": {**TINY, "gradient_checkpointing": True, "recompute_chunks": -3}},
                                  "model.recompute_chunks", "-3 chunks of tokens"),
    "recompute_chunks_without_checkpointing": ({"model": {**TINY, "recompute_chunks": 4}}, "model.recompute_chunks",
                                               "gradient_checkpointing is off"),
    "activation_offload_without_checkpointing": ({"model": {**TINY, "activation_offload": True}},
                                                 "model.activation_offload", "gradient_checkpointing is off"),
    "fp8_base_trained_whole": ({"model": {**TINY, "base_dtype": "float8_e4m3fn"}}, "model.base_dtype",
                               "an fp8 base is frozen"),
    # the VACE branch
    "vace_branch_new_without_vace": ({"model": {**TINY, "vace_branch": "new", "weights": "w"}}, "model.vace_branch",
                                     "a new VACE branch needs a VACE model"),
    "vace_branch_new_without_weights": ({"model": {**TINY, "preset": "tiny-vace", "vace_branch": "new"}},
                                        "model.vace_branch", "model.weights, which is empty"),
    "vace_in_dim_without_a_branch": ({"model": {**TINY, "vace_in_dim": 72}}, "model.vace_in_dim",
                                     "this model has no VACE branch"),
    "vace_in_dim_negative": ({"model": {**TINY, "preset": "tiny-vace", "vace_in_dim": -8}}, "model.vace_in_dim",
                             "must be positive"),
    "vace_layers_not_from_block_0": ({"model": {**TINY, "vace_layers": [1]}}, "model.vace_layers",
                                     "does not start at block 0"),
    "vace_layers_past_the_last_block": ({"model": {**TINY, "vace_layers": [0, 7]}}, "model.vace_layers",
                                        "names block 7, but the model has 2 blocks"),
    "sample_vace_scale_without_a_branch": ({"model": {**TINY, "sample_vace_scale": [0.5]}},
                                           "model.sample_vace_scale", "this model has no VACE branch"),
    "sample_vace_scale_count": ({"model": {**TINY, "preset": "tiny-vace", "sample_vace_scale": [1, 1, 1]}},
                                "model.sample_vace_scale", "3 scales for the model's"),
    # the experts: boundary, shares, per-expert ranges and scales, adapters loaded per expert
    "boundary_past_1000": ({"model": {**EXPERTS, "boundary": 1200}}, "model.boundary",
                           "1200 lies outside the timesteps (0, 1000)"),
    "boundary_without_experts": ({"model": {**TINY, "boundary": 500}}, "model.boundary",
                                 "the run trains one network (expert: none)"),
    "share_above_1": ({"model": {**EXPERTS, "high_noise": {"share": 1.5}}}, "model.high_noise.share",
                      "must be between 0 and 1"),
    "expert_range_across_the_boundary": ({"model": {**EXPERTS, "high_noise": {"min_timestep": 100}}},
                                         "model.high_noise.min_timestep", "its side of the boundary"),
    "expert_lr_scale_negative": ({"model": {**EXPERTS, "low_noise": {"lr_scale": -1}}}, "model.low_noise.lr_scale",
                                 "at least 0"),
    "per_expert_setting_for_one_network": ({"model": {**TINY, "high_noise": {"share": 0.5}}},
                                           "model.high_noise.share", "need both experts"),
    "adapter_of_an_unknown_expert": ({"model": {**EXPERTS, "lora": {"rank": 4, "load": [
        {"file": "a.safetensors", "expert": "middle"}]}}}, "expert", "'middle' is not high_noise or low_noise"),
    # network groups
    "network_group_of_0_ranks": ({"model": EXPERTS, "strategy": {**DDP, "network_groups": [0, 2]}},
                                 "strategy.network_groups", "a network's group of 0 ranks"),
    "network_groups_under_sequence_parallel": ({"model": EXPERTS, "strategy": {
        **DDP, "network_groups": [1, 1], "sequence_parallel": 2}}, "strategy.network_groups",
        "do not combine with sequence_parallel"),
    "sequence_parallel_of_0": ({"model": TINY, "strategy": {**DDP, "sequence_parallel": 0}},
                               "strategy.sequence_parallel", "a sequence-parallel group of 0 ranks"),
    "master_port_past_65535": ({"model": TINY, "strategy": {**DDP, "master_port": 70000}}, "strategy.master_port",
                               "70000 is not a TCP port"),
    # the ema section
    "ema_decay_of_1": ({"model": TINY, "ema": {"decay": 1.0}}, "ema.decay", "must lie in [0, 1)"),
    "ema_start_step_without_decay": ({"model": TINY, "ema": {"start_step": 10}}, "ema.start_step",
                                     "ema.decay is 0: no average is kept"),
    "ema_groups_without_decay": ({"model": TINY, "ema": {"groups": ["high_noise"]}}, "ema.groups",
                                 "ema.decay is 0: no average is kept"),
}


def written(tmp_path, sections):
    config = base_config(tmp_path / "runs", data={"num_samples": 8, "batch_size": 2, "workers": 0,
                                                  "buckets": ["3x4x4"]}, trainer={"max_steps": 2})
    config.update(sections)
    return write_config(tmp_path / "hostile.json", config)


def assert_refused_at(result, config, key, words):
    """Exit 2, the refusal at the key's line and column in `config`, and its words."""
    assert result.returncode == 2, result.stdout + result.stderr
    line = next(line for line in result.stderr.splitlines() if "[error]" in line)
    assert f"{config}:" in line and f"{key}:" in line and words in line, result.stderr


@pytest.mark.parametrize("case", list(CASES))
def test_a_senseless_option_is_refused_at_its_key_when_the_config_is_read_and_nothing_is_written(tmp_path, case):
    sections, key, words = CASES[case]
    config = written(tmp_path, sections)
    assert_refused_at(wanfw("validate", config), config, key, words)
    assert_refused_at(wanfw("run", config), config, key, words)
    assert not (tmp_path / "runs").exists()


def test_network_groups_for_a_model_of_one_network_are_refused_by_validate_and_model_info_without_a_launcher(
        tmp_path):
    # `run` refuses it too once torchrun starts the ranks (test_expert_placement.py).
    config = written(tmp_path, {"model": TINY, "strategy": {**DDP, "network_groups": [1, 1]}})
    for command in ("validate", "model-info"):
        assert_refused_at(wanfw(command, config), config, "model.expert",
                          "the strategy places 2 network group(s); this model has one network")
    assert not (tmp_path / "runs").exists()


def test_ema_groups_naming_no_group_of_the_model_are_refused_at_the_key_before_a_step(tmp_path):
    # The model's groups are known once it is built: `run` refuses, at the key, before step 1.
    config = written(tmp_path, {"model": EXPERTS, "ema": {"decay": 0.9, "groups": ["high_noise", "student"]}})
    result = wanfw("run", config)
    assert_refused_at(result, config, "ema.groups", "'student' is not a parameter group of the model (its groups: "
                                                    "high_noise, low_noise)")
    assert "step 1/" not in result.stdout


@pytest.mark.parametrize("model, key, words", [
    ({"generator_steps": 100000}, "model.generator_steps", "must lie in [1, 1000] (the schedule's timesteps)"),
    ({"teacher_boundary": 500}, "model.teacher_boundary", "the teacher is one network (teacher_expert: none)"),
    ({"teacher_expert": "both", "teacher_boundary": -5, "shared_base": True, "lora": {"rank": 4},
      "critic_lora": {"rank": 4}}, "model.teacher_boundary", "-5 lies outside the timesteps (0, 1000)"),
    ({"teacher_expert": "both", "teacher_boundary": 875, "shared_base": True, "lora": {"rank": 4},
      "critic_lora": {"rank": 4}, "real_guidance_low_noise": -2}, "model.real_guidance_low_noise", "must be positive"),
], ids=["generator_steps_past_the_schedule", "boundary_without_experts", "boundary_negative",
        "low_noise_guidance_negative"])
def test_a_senseless_dmd_option_is_refused_at_its_key(tmp_path, teacher, model, key, words):
    config = dmd_config(tmp_path, teacher, **model)
    for command in ("validate", "run"):
        assert_refused_at(wanfw(command, config), config, key, words)
    assert not (tmp_path / "runs").exists()


def test_recompute_chunks_beyond_the_tokens_are_clamped_with_a_warning_naming_the_key(tmp_path):
    # 3x4x4 latents in 1x2x2 patches: 12 tokens, so 40 chunks are 12 of one token each.
    config = written(tmp_path, {"model": {**TINY, "gradient_checkpointing": True, "recompute_chunks": 40}})
    result = wanfw("validate", config, check=0)
    assert f"{config}:" in result.stderr + result.stdout
    assert "model.recompute_chunks: 40 chunks, more than a rank holds tokens of the largest bucket (12): each block " \
           "recomputes in 12 chunks of one token" in result.stderr
    assert json.loads(config.read_text())["model"]["recompute_chunks"] == 40


@pytest.mark.parametrize("references, shown", [(torch.tensor([3]), "1 value(s), 3"), (torch.tensor([-1]), "1 value(s), -1"),
                                               (torch.tensor([1.5]), "1 value(s), 1.5"),
                                               (torch.tensor([1, 1]), "2 value(s)")],
                         ids=["all_3_frames", "negative", "a_fraction", "two_values"])
def test_sample_refuses_reference_frames_that_leave_no_video_frame_and_writes_nothing(tmp_path, references, shown):
    config = written(tmp_path, {"model": {**TINY, "preset": "tiny-vace", "sample_steps": 2}})
    g = torch.Generator().manual_seed(2)
    save_file({"context": torch.randn(1, 4, 32, generator=g), "vace_context": torch.randn(1, 72, 3, 4, 4, generator=g),
               "reference_frames": references}, tmp_path / "cond.safetensors")
    result = wanfw("sample", config, "--inputs", tmp_path / "cond.safetensors", "--out", tmp_path / "out.safetensors")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"sample: reference_frames holds {shown}; it is one integer R in [0, 2]: the first R of the video's 3 " \
           "latent frames are reference images" in result.stderr, result.stderr
    assert not (tmp_path / "out.safetensors").exists()
