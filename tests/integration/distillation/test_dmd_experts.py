"""DMD of a two-expert teacher (the A14B layout at toy width, `teacher_expert: both`): the generator
and the critic are one adapter set each per expert on the experts' shared frozen base, and every
pass (G's steps, the critic's and the real score) runs each sample on the expert that owns its
level. Checked against diffusers' experts sample by sample; the same weights on every layout; a
resume mid-cycle bitwise; the exported per-expert adapters sample in wan22_flow_matching as the
checkpoint does; and the tiny example's 4-step student against its teacher's 40 steps."""

import json

import pytest
import torch
from safetensors.torch import load_file

from harness.dmd import (BOUNDARY, CYCLE, EXPERTS, assert_block_swap_and_activation_offload_change_no_bit,
                         assert_resumes_mid_cycle_to_the_same_bits, config, dmd, distances_to_the_teachers_40_steps,
                         expert_adapters_student, sampled, two_experts)
from harness.equivalence import assert_same_training_history, tiny_wan_rounding, trained
from harness.layouts import CPU, DDP, GLOBAL_BATCH, LR, TOKENS, run_on
from harness.references import predict
from harness.runs import SOURCE, checkpoints, read_csv, run_dir, wanfw, write_config


@pytest.fixture
def experts(tmp_path):
    return two_experts(tmp_path / "experts")


@pytest.mark.every_vector_unit
def test_every_pass_runs_each_sample_on_the_expert_that_owns_its_level(tmp_path, experts):
    """`wanfw predict` before training (the adapters' B start at zero: generator and critic are the
    base) at levels on both sides of the boundary, one just above and one just below it: G's and
    the critic's velocity, the real score (each expert with its guidance: 2 high, 3 low) and the DMD
    gradient, each sample against the diffusers expert that owns its level, and far from the other
    expert's answer."""
    base, reference = experts
    g = torch.Generator().manual_seed(6)
    x, noise = torch.randn(4, 4, 2, 4, 4, generator=g), torch.randn(4, 4, 2, 4, 4, generator=g)
    t, context = torch.tensor([990.0, 876.0, 874.0, 300.0]), torch.randn(4, 5, 32, generator=g)
    guidance = {"high": 2.0, "low": 3.0}
    out = predict(tmp_path, config(tmp_path, base, real_guidance_low_noise=guidance["low"], **EXPERTS),
                  {"x": x, "t": t, "context": context, "noise": noise})
    s = (t / 1000).view(-1, 1, 1, 1, 1)
    xt = (1 - s) * x + s * noise

    def expected(owner):
        """What each sample's answers are when `owner(i)` ("high" or "low") runs sample i."""
        parts = {name: [] for name in ("v", "teacher_v", "dmd_gradient")}
        for i in range(4):
            model, scale = reference[owner(i)], guidance[owner(i)]
            with torch.no_grad():
                conditional = model(x[i:i + 1], t[i:i + 1], context[i:i + 1]).sample
                at_xt = model(xt[i:i + 1], t[i:i + 1], context[i:i + 1]).sample
                unconditional = model(xt[i:i + 1], t[i:i + 1], torch.zeros_like(context[i:i + 1])).sample
                unconditional_at_x = model(x[i:i + 1], t[i:i + 1], torch.zeros_like(context[i:i + 1])).sample
            real = unconditional + scale * (at_xt - unconditional)
            x0_real, x0_fake = xt[i:i + 1] - s[i] * real, xt[i:i + 1] - s[i] * at_xt
            parts["v"].append(conditional)
            parts["teacher_v"].append(unconditional_at_x + scale * (conditional - unconditional_at_x))
            parts["dmd_gradient"].append((x0_fake - x0_real) / (x[i:i + 1] - x0_real).abs().mean())
        return {name: torch.cat(p) for name, p in parts.items()}

    owners = expected(lambda i: "high" if t[i] >= BOUNDARY else "low")
    swapped = expected(lambda i: "low" if t[i] >= BOUNDARY else "high")
    tolerance = tiny_wan_rounding(1, TOKENS, layers=2) * 4  # two forwards, a difference over a normaliser
    for name in ("v", "teacher_v", "dmd_gradient"):
        torch.testing.assert_close(out[name], owners[name], rtol=0, atol=tolerance, msg=name)
        for i in range(4):  # the other expert's answer is far: the check sees which one ran
            assert (out[name][i] - swapped[name][i]).abs().max() > 100 * tolerance, (name, i)
    torch.testing.assert_close(out["critic_v"], owners["v"], rtol=0, atol=tolerance)


def test_each_phase_logs_the_share_of_its_samples_the_high_noise_expert_ran(tmp_path, experts):
    base, _ = experts
    result = wanfw("run", config(tmp_path, base, **EXPERTS), check=0)
    assert "dmd: both experts, each with its generator's and its critic's adapters" in result.stdout + result.stderr
    rows = read_csv(run_dir(tmp_path, "dmd") / "metrics.csv")
    for row in rows:
        generator_step = (int(row["step"]) - 1) % CYCLE == 0
        shares = ("generator_high_noise_share", "score_high_noise_share") if generator_step else (
            "critic_high_noise_share",)
        for share in shares:  # a share of a batch of 4
            assert float(row[share]) * 4 == pytest.approx(round(float(row[share]) * 4)), (row["step"], share)
    saved = load_file(checkpoints(run_dir(tmp_path, "dmd"))[-1] / "model.safetensors")
    for expert in ("high_noise_model", "low_noise_model"):  # each expert's generator and critic trained
        for adapter in (".lora_B.", ".critic_lora_B."):  # B starts at zero
            trained_b = [v for k, v in saved.items() if k.startswith(f"generator.{expert}.") and adapter in k]
            assert trained_b and any(v.abs().max() > 0 for v in trained_b), (expert, adapter)


@pytest.mark.parametrize("model, message", [
    ({**EXPERTS, "shared_base": False}, "dmd of both experts keeps generator and critic as adapters"),
    ({**EXPERTS, "teacher_expert": "high_noise"}, "dmd with one expert of a two-expert teacher is not supported"),
    ({**EXPERTS, "objective": "velocity", "generator_steps": None},
     "teacher_expert: both belongs to objective dmd"),
])
def test_a_two_expert_dmd_config_that_cannot_work_is_refused_naming_the_option(tmp_path, experts, model, message):
    model = {k: v for k, v in model.items() if v is not None}
    result = wanfw("validate", config(tmp_path, experts[0], **model), check=2)
    assert message in result.stderr


def test_every_layout_trains_both_experts_generator_and_critic_as_one_rank_with_the_whole_batch(tmp_path, experts):
    """ddp (an expert no sample of a rank reaches gets no gradient there: find_unused_parameters),
    sequence parallelism (each sample's tokens over 2 ranks: G's steps, the scores and the backward
    simulation; 12 tokens, and 27 that leave one rank's share padded) and accumulation against one
    device; each step's update bounded as in test_dmd.py (the bound's terms: batch x tokens)."""
    every_step = {"checkpoint": {"every": 1}}
    history = lambda name: [trained(p) for p in checkpoints(tmp_path / "runs" / name / "version_0")]
    layouts = {"ddp_2x2": ({**DDP, "find_unused_parameters": True}, 2, 2, "3x4x4"),
               "ddp_sp2_1x4": ({**DDP, "sequence_parallel": 2}, 4, 2, "3x4x4"),
               "grad_accum_2x2": ({"name": "grad_accum", "steps": 2, "inner": CPU}, 2, 1, "3x4x4"),
               "ddp_sp2_1x4_padded": ({**DDP, "sequence_parallel": 2}, 4, 2, "3x6x6")}
    for latent, tokens in (("3x4x4", TOKENS), ("3x6x6", 27)):
        run_on(tmp_path, f"single_1x4_{latent}", CPU, 4, dmd(experts[0], **EXPERTS, latent_size=latent), **every_step)
    for name, (strategy, batch, ranks, latent) in layouts.items():
        run_on(tmp_path, name, strategy, batch, dmd(experts[0], **EXPERTS, latent_size=latent), ranks, **every_step)
        tolerance = tiny_wan_rounding(GLOBAL_BATCH, TOKENS if latent == "3x4x4" else 27, layers=2 * 5)
        c = assert_same_training_history(history(name), history(f"single_1x4_{latent}"), lr=LR, tolerance=tolerance)
        print(f"{name} vs single 1x4: {c}")


def test_a_two_expert_dmd_run_with_block_swap_or_activation_offload_ends_bitwise_as_the_run_without(tmp_path,
                                                                                                   experts):
    """Both experts' blocks are units: 3 of the 4 stream from host memory, each leaving its slot for
    the next; or each checkpointed block's input waits in host memory."""
    assert_block_swap_and_activation_offload_change_no_bit(tmp_path, experts[0], 3, 4, **EXPERTS)


def test_a_two_expert_dmd_run_killed_mid_cycle_resumes_to_the_same_bits_its_generator_average_too(tmp_path,
                                                                                                    experts):
    path = config(tmp_path, experts[0], steps=7, **EXPERTS)
    write_config(path, {**json.loads(path.read_text()), "ema": {"decay": 0.9, "groups": ["generator"]}})
    uninterrupted = assert_resumes_mid_cycle_to_the_same_bits(tmp_path, path)
    averaged = {k for k in uninterrupted["optimizer"] if k.endswith(".ema")}  # each expert's generator adapters
    assert averaged == {f"{k}.ema" for k in uninterrupted["model"] if ".lora_" in k and ".critic_lora_" not in k}


def test_the_exported_expert_adapters_sample_in_wan22_flow_matching_bit_for_bit_as_the_checkpoint(tmp_path, experts):
    """Each expert's generator adapters in high_noise_model/ and low_noise_model/ (or merged into
    its weights), loaded to train further (train: true keeps them unmerged, as the generator runs
    them) on the same experts."""
    base, _ = experts
    path = config(tmp_path, base, steps=4, sample_size="3x4x4", **EXPERTS)
    wanfw("run", path, check=0)
    wanfw("export", path, "--checkpoint", run_dir(tmp_path, "dmd"), "--out", tmp_path / "student", check=0)
    for expert in ("high_noise", "low_noise"):
        for layout in ("wan_lora", "pytorch_lora_weights"):
            adapter = load_file(tmp_path / "student" / f"{expert}_model" / f"{layout}.safetensors")
            assert adapter and not any("critic" in k for k in adapter), (expert, layout)
    wanfw("export", path, "--checkpoint", run_dir(tmp_path, "dmd"), "--merge", "--out", tmp_path / "merged", check=0)
    for expert in ("high_noise", "low_noise"):  # or each expert's adapters merged into its weights
        merged = load_file(tmp_path / "merged" / f"{expert}_model" / "diffusion_pytorch_model.safetensors")
        assert "blocks.0.self_attn.q.weight" in merged and not any("lora" in k for k in merged), expert
    trained_latents = sampled(tmp_path, "trained", path, "--checkpoint", run_dir(tmp_path, "dmd"))
    exported = sampled(tmp_path, "exported", expert_adapters_student(tmp_path, base, tmp_path / "student"))
    assert trained_latents.shape == (4, 4, 3, 4, 4)
    assert torch.equal(exported, trained_latents)


@pytest.mark.own_entry
def test_the_two_expert_4_step_dmd_student_samples_closer_to_the_teachers_40_steps_than_its_4_steps(tmp_path):
    """examples/dmd-tiny-experts.yaml as its header says: the quickstart's model trained as two
    experts with one caption for its 8 patterns, distilled for 300 steps into a 4-step generator,
    2 steps per expert. Distance to the teacher's 40-step samples (seed 1001): MMD^2 over 200
    latents each (test_dmd.py's measure), from held-out seeds."""
    examples = SOURCE / "examples"
    teacher = ["--set", "data.captions=1", "--set", 'data.buckets=["3x8x8"]', "--set", "model.expert=both", "--set",
               f"model.boundary={BOUNDARY}"]
    wanfw("run", examples / "quickstart.yaml", *teacher, "--set", "run.name=teacher-experts", cwd=tmp_path, check=0)
    wanfw("export", examples / "quickstart.yaml", *teacher, "--checkpoint", "runs/teacher-experts/version_0", "--out",
          "runs/teacher-experts-export", cwd=tmp_path, check=0)
    wanfw("run", examples / "dmd-tiny-experts.yaml", cwd=tmp_path, check=0)
    rows = read_csv(tmp_path / "runs" / "dmd-tiny-experts" / "version_0" / "metrics.csv")
    shares = [float(r["generator_high_noise_share"]) for r in rows if r["generator_high_noise_share"]]
    assert 0.35 < sum(shares) / len(shares) < 0.65  # 2 of G's 4 steps run on the high-noise expert

    teacher_samples = [examples / "quickstart.yaml", "--checkpoint", "runs/teacher-experts/version_0", *teacher,
                       "--set", "model.sample_guidance=1.0", "--set", "model.sample_shift=3.0"]
    distances = distances_to_the_teachers_40_steps(tmp_path, teacher_samples, {
        "dmd student, 4 steps": [examples / "dmd-tiny-experts.yaml", "--checkpoint",
                                 "runs/dmd-tiny-experts/version_0"]})
    print("MMD^2 to the two-expert teacher's 40-step samples: " + "; ".join(f"{k} {v:.4f}"
                                                                            for k, v in distances.items()))
    assert distances["dmd student, 4 steps"] < 0.5 * distances["teacher 4 steps"]
