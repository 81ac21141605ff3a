"""A causal (streaming) generator trained by DMD on its own rollout (Self Forcing): wan22_distill
with `objective: dmd` and `causal.frames_per_chunk`. Each optimizer step draws one exit step that
every rank and micro-batch shares; the generator trains the same on every layout, with gradient
checkpointing as without, resumes bitwise, and samples chunk by chunk as the exported student does
in wan22_flow_matching. The quality test (own entry) compares its samples with the teacher's."""

import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.distill import teacher  # noqa: F401 (a fixture)
from harness.dmd import (BOUNDARY, CYCLE, EXPERTS, assert_block_swap_and_activation_offload_change_no_bit,
                         assert_resumes_mid_cycle_to_the_same_bits, config, dmd, mmd2, one_caption_teacher,
                         two_experts)
from harness.equivalence import assert_same_training_history, tiny_wan_rounding, trained
from harness.layouts import CPU, DDP, FSDP, GLOBAL_BATCH, LR, run_on
from harness.runs import SOURCE, base_config, checkpoints, read_csv, run_dir, wanfw, write_config

# 4 latent frames in 2 chunks of 2; the generator's 3 levels at shift 5.
CAUSAL = {"latent_size": "4x4x4", "causal": {"frames_per_chunk": 2}}
LEVELS = (1.0, 0.9091, 0.7143)  # sampling_schedule(3, 5) without its 0
TOKENS = 16  # a 4x4x4 latent in 1x2x2 patches


def test_the_causal_generator_trains_on_its_rollout_each_step_leaving_at_one_of_its_levels(tmp_path, teacher):
    result = wanfw("run", config(tmp_path, teacher, steps=18, **CAUSAL), check=0)
    assert "dmd: causal generator (Self Forcing): chunks of 2 latent frames" in result.stdout + result.stderr
    rows = read_csv(run_dir(tmp_path, "dmd") / "metrics.csv")
    levels = [float(r["generator_level"]) for r in rows if (int(r["step"]) - 1) % CYCLE == 0]
    assert len(levels) == 6
    assert all(min(abs(s - level) for level in LEVELS) < 1e-4 for s in levels), levels
    assert len(set(levels)) >= 2, levels  # drawn anew each optimizer step
    saved = checkpoints(run_dir(tmp_path, "dmd"))
    first, last = (load_file(p / "model.safetensors") for p in (saved[0], saved[-1]))
    assert not torch.equal(first["generator.head.head.weight"], last["generator.head.head.weight"])


@pytest.mark.own_entry
@pytest.mark.every_vector_unit
def test_every_layout_trains_the_causal_generator_and_the_critic_of_one_rank_with_the_whole_batch(tmp_path, teacher):
    """The exit step is one draw an optimizer step, alike on every rank and micro-batch, and every
    other draw (each chunk's noise, each step's fresh noise, the score levels) comes from the
    sample's streams: ranks, micro-batches and replicas change only the order of sums. Under
    sequence parallelism each rank's KV cache holds its heads of every token; frame-wise chunks of
    3 frames of 9 tokens leave a rank's share of the 27 padded."""
    model = dmd(teacher, **CAUSAL)
    every_step = {"checkpoint": {"every": 1}, "data": {"buckets": ["4x4x4"]}}
    history = lambda name: [trained(p) for p in checkpoints(tmp_path / "runs" / name / "version_0")]
    run_on(tmp_path, "single_1x4", CPU, 4, model, **every_step)
    layouts = {"ddp_2x2": (DDP, 2, 2),
               "ddp_2x1_accum_2": ({"name": "grad_accum", "steps": 2, "inner": DDP}, 1, 2),
               "data_parallel_2_replicas_x4": ({"name": "data_parallel", "devices": ["cpu", "cpu"]}, 4, 1),
               "fsdp_2x2": (FSDP, 2, 2),
               "ddp_sp2_1x4": ({**DDP, "sequence_parallel": 2}, 4, 2)}
    # A value reaches a gradient through every chunk's passes (up to 3 steps and a context pass each:
    # a chunk reads the keys of those before it), a score's pass and the backward.
    tolerance = tiny_wan_rounding(GLOBAL_BATCH, TOKENS, layers=2 * 10)
    for name, (strategy, batch, ranks) in layouts.items():
        run_on(tmp_path, name, strategy, batch, model, ranks, **every_step)
        c = assert_same_training_history(history(name), history("single_1x4"), lr=LR, tolerance=tolerance)
        print(f"{name} vs single 1x4: {c}")
    padded = dmd(teacher, latent_size="3x6x6", causal={"frames_per_chunk": 1})
    run_on(tmp_path, "single_1x4_padded", CPU, 4, padded, **every_step)
    run_on(tmp_path, "ddp_sp2_1x4_padded", {**DDP, "sequence_parallel": 2}, 4, padded, 2, **every_step)
    c = assert_same_training_history(history("ddp_sp2_1x4_padded"), history("single_1x4_padded"), lr=LR,
                                     tolerance=tiny_wan_rounding(GLOBAL_BATCH, 27, layers=2 * 12))
    print(f"ddp_sp2_1x4_padded vs single 1x4: {c}")


def test_the_causal_generator_with_gradient_checkpointing_whole_or_chunked_trains_as_without_it(tmp_path, teacher):
    # Each chunk's exit forward recomputes over the frames it found in the cache, which the context
    # pass has replaced by then: the same operations on the same values. recompute_chunks 3 cuts a
    # chunk's 8 tokens (2 frames of 4) into runs of 2 and 3, across its frames.
    runs = {}
    for name, memory in (("plain", {}), ("checkpointed", {"gradient_checkpointing": True}),
                         ("chunked", {"gradient_checkpointing": True, "recompute_chunks": 3})):
        path = config(tmp_path, teacher, name=name, steps=6, **memory, **CAUSAL)
        wanfw("run", path, check=0)
        runs[name] = [trained(p) for p in checkpoints(run_dir(tmp_path, name))]
    tolerance = tiny_wan_rounding(GLOBAL_BATCH, TOKENS, layers=2 * 10)
    for name in ("checkpointed", "chunked"):
        c = assert_same_training_history(runs[name], runs["plain"], lr=1e-3, tolerance=tolerance)
        print(f"{name} vs plain: {c}")


def test_a_causal_run_with_block_swap_or_activation_offload_ends_bitwise_as_the_run_without(tmp_path, teacher):
    """The generator and critic as adapters on one shared base: 1 of its 2 blocks streams from host
    memory through every rollout pass, or each checkpointed block's input waits in host memory
    (its cache's frames stay where they are)."""
    adapters = {"lora": {"rank": 4}, "critic_lora": {"rank": 4}, "shared_base": True}
    assert_block_swap_and_activation_offload_change_no_bit(tmp_path, teacher, 1, 2, **adapters, **CAUSAL)


def test_a_causal_dmd_run_killed_mid_cycle_resumes_to_the_same_bits(tmp_path, teacher):
    # The exit step of each step after the resume is the one the uninterrupted run drew.
    assert_resumes_mid_cycle_to_the_same_bits(tmp_path, config(tmp_path, teacher, steps=7, **CAUSAL))


def test_the_exported_causal_generator_streams_in_wan22_flow_matching_as_the_checkpoint_does(tmp_path, teacher):
    path = config(tmp_path, teacher, steps=4, sample_size="4x4x4", **CAUSAL)
    wanfw("run", path, check=0)
    checkpoint = checkpoints(run_dir(tmp_path, "dmd"))[-1]
    wanfw("export", path, "--checkpoint", checkpoint, "--out", tmp_path / "student", check=0)
    conditioning = tmp_path / "conditioning.safetensors"  # three prompts' embeddings, the same for both
    save_file({"context": torch.randn(3, 5, 32, generator=torch.Generator().manual_seed(5))}, conditioning)
    trained_samples = tmp_path / "trained.safetensors"
    result = wanfw("sample", path, "--checkpoint", checkpoint, "--inputs", conditioning, "--seed", "9", "--out",
                   trained_samples, check=0)
    assert "causal generator: 2 chunks (chunks of 2 latent frames), 3 steps each" in result.stdout + result.stderr
    # The generator's levels 1, 0.9091, 0.7143 are the steps 1000, 666.7, 333.3 warped at shift 5.
    student = write_config(tmp_path / "student.json", base_config(tmp_path / "runs", model={
        "name": "wan22_flow_matching", "preset": "tiny", "weights": str(tmp_path / "student"),
        "causal": {"frames_per_chunk": 2, "steps": [1000, 2000 / 3, 1000 / 3]}, "sample_shift": 5.0,
        "sample_size": "4x4x4"}, data={"buckets": ["4x4x4"]}))
    exported_samples = tmp_path / "exported.safetensors"
    wanfw("sample", student, "--inputs", conditioning, "--seed", "9", "--out", exported_samples, check=0)
    a, b = load_file(trained_samples)["latents"], load_file(exported_samples)["latents"]
    assert a.shape == (3, 4, 4, 4, 4)
    # The same passes on the same weights; the levels differ by the rounding of 2000/3 in decimal.
    torch.testing.assert_close(b, a, rtol=0, atol=1e-5 * a.abs().max().item())


def test_a_first_frame_generator_trains_as_one_device_with_ddp_and_its_export_streams_from_an_image(tmp_path, teacher):
    """Latent frame 0 a chunk of its own, then chunks of 2 (5 frames): Self Forcing's i2v layout. The
    generator trains t2v on its rollout; its export, as a ti2v student, takes an image as frame 0."""
    causal = {"frames_per_chunk": 2, "independent_first_frame": True}
    model = dmd(teacher, latent_size="5x4x4", causal=causal)
    every_step = {"checkpoint": {"every": 1}, "data": {"buckets": ["5x4x4"]}}
    history = lambda name: [trained(p) for p in checkpoints(tmp_path / "runs" / name / "version_0")]
    run_on(tmp_path, "single_1x4", CPU, 4, model, **every_step)
    run_on(tmp_path, "ddp_2x2", DDP, 2, model, 2, **every_step)
    c = assert_same_training_history(history("ddp_2x2"), history("single_1x4"), lr=LR,
                                     tolerance=tiny_wan_rounding(GLOBAL_BATCH, TOKENS, layers=2 * 12))
    print(f"ddp_2x2 vs single 1x4: {c}")
    wanfw("export", tmp_path / "single_1x4.json", "--checkpoint", checkpoints(run_dir(tmp_path, "single_1x4"))[-1],
          "--out", tmp_path / "student", check=0)
    student = write_config(tmp_path / "student.json", base_config(tmp_path / "runs", model={
        "name": "wan22_flow_matching", "preset": "tiny", "task": "ti2v", "weights": str(tmp_path / "student"),
        "causal": {**causal, "steps": [1000, 2000 / 3, 1000 / 3]}, "sample_shift": 5.0}, data={"buckets": ["5x4x4"]}))
    image = torch.randn(2, 4, 4, 4, generator=torch.Generator().manual_seed(4))
    inputs, out = tmp_path / "image.safetensors", tmp_path / "streamed.safetensors"
    save_file({"context": torch.randn(2, 5, 32), "image": image, "noise": torch.zeros(2, 4, 5, 4, 4)}, inputs)
    wanfw("sample", student, "--inputs", inputs, "--out", out, check=0)
    made = load_file(out)["latents"]
    assert made.shape == (2, 4, 5, 4, 4) and torch.equal(made[:, :, 0], image)


def test_an_expert_pair_generator_trains_as_one_device_on_ddp_and_sp_and_its_export_streams_as_the_checkpoint(
        tmp_path):
    """Both experts of a two-expert teacher (A14B at toy width), generator and critic as adapters on
    their shared base: each chunk's steps run on the expert of their level, its context pass into
    both experts' caches; the step's exit level trains one expert's adapters."""
    base, _ = two_experts(tmp_path / "experts")
    model = dmd(base, **EXPERTS, **CAUSAL, sample_size="4x4x4")
    every_step = {"checkpoint": {"every": 1}, "data": {"buckets": ["4x4x4"]}, "trainer": {"max_steps": 9}}
    history = lambda name: [trained(p) for p in checkpoints(tmp_path / "runs" / name / "version_0")]
    run_on(tmp_path, "single_1x4", CPU, 4, model, **every_step)
    # ddp, and the examples' layout: sequence parallel, each rank's caches holding its heads.
    ddp = {**DDP, "find_unused_parameters": True}
    for name, strategy, batch in (("ddp_2x2", ddp, 2), ("ddp_sp2_1x4", {**ddp, "sequence_parallel": 2}, 4)):
        run_on(tmp_path, name, strategy, batch, model, 2, **every_step)
        c = assert_same_training_history(history(name), history("single_1x4"), lr=LR,
                                         tolerance=tiny_wan_rounding(GLOBAL_BATCH, TOKENS, layers=2 * 12))
        print(f"{name} vs single 1x4: {c}")
    rows = read_csv(run_dir(tmp_path, "single_1x4") / "metrics.csv")
    shares = {float(r["generator_high_noise_share"]) for r in rows if r.get("generator_high_noise_share")}
    assert shares and shares <= {0.0, 1.0}, shares  # one exit level a step: one expert's adapters train
    said = wanfw("model-info", tmp_path / "single_1x4.json", check=0).stdout
    assert "the rollout's KV cache: 2 experts x 2 blocks x 4 frames of 4 tokens" in said, said
    assert "each expert keeps a KV cache of its own" in said
    checkpoint = checkpoints(run_dir(tmp_path, "single_1x4"))[-1]
    wanfw("export", tmp_path / "single_1x4.json", "--checkpoint", checkpoint, "--out", tmp_path / "student", check=0)
    conditioning = tmp_path / "conditioning.safetensors"
    save_file({"context": torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(5))}, conditioning)
    trained_samples, exported_samples = tmp_path / "trained.safetensors", tmp_path / "exported.safetensors"
    wanfw("sample", tmp_path / "single_1x4.json", "--checkpoint", checkpoint, "--inputs", conditioning, "--seed", "9",
          "--out", trained_samples, check=0)
    load = [{"file": str(tmp_path / "student" / f"{e}_model" / "wan_lora.safetensors"), "train": True, "expert": e}
            for e in ("high_noise", "low_noise")]
    # The generator's levels 1, 0.9375, 0.8333, 0.625 are the steps 1000, 750, 500, 250 warped at shift 5.
    student = write_config(tmp_path / "student.json", base_config(tmp_path / "runs", model={
        "name": "wan22_flow_matching", "preset": "tiny", "weights": str(base), "expert": "both", "boundary": BOUNDARY,
        "lora": {"rank": 4, "load": load}, "causal": {"frames_per_chunk": 2, "steps": [1000, 750, 500, 250]},
        "sample_shift": 5.0, "sample_size": "4x4x4"}, data={"buckets": ["4x4x4"]}))
    wanfw("sample", student, "--inputs", conditioning, "--seed", "9", "--out", exported_samples, check=0)
    a, b = load_file(trained_samples)["latents"], load_file(exported_samples)["latents"]
    assert a.shape == (2, 4, 4, 4, 4)
    torch.testing.assert_close(b, a, rtol=0, atol=1e-5 * a.abs().max().item())


def test_model_info_counts_the_rollouts_kv_cache_and_fits_the_wan21_example_on_one_80gb_gpu():
    # 30 blocks x 21 frames x 1,560 tokens x 1,536 wide, keys and values in bf16: Self Forcing's 5.6 GiB.
    said = wanfw("model-info", SOURCE / "examples" / "self-forcing-wan21-1.3b.yaml", check=0).stdout
    assert "the rollout's KV cache: 30 blocks x 21 frames of 1560 tokens, keys and values, batch 1 5.62 GiB" in said
    assert "dmd: causal generator (Self Forcing): chunks of 3 latent frames" in said
    assert "fits an 80 GB GPU" in said and "does not fit a 48 GB GPU" in said, said


def test_model_info_fits_the_a14b_example_on_80gb_gpus_with_each_ranks_share_of_both_experts_caches():
    # 2 experts x 40 blocks x 21 frames x 1,560 tokens x 5,120 wide, K and V in bf16: 50 GiB, a quarter a rank.
    example = SOURCE / "examples" / "self-forcing-wan22-a14b.yaml"
    said = wanfw("model-info", example, "--gpus", "4", check=0).stdout
    assert ("the rollout's KV cache: 2 experts x 40 blocks x 21 frames of 1560 tokens, keys and values of 1/4 of the "
            "heads, batch 1 12.50 GiB") in said
    assert "fits an 80 GB GPU" in said, said
    alone = wanfw("model-info", example, "--set", "strategy.sequence_parallel=1", check=0).stdout
    assert "batch 1 49.99 GiB" in alone and "does not fit an 80 GB GPU" in alone, alone


def test_without_gradient_checkpointing_the_plan_counts_the_keys_each_exit_pass_keeps(tmp_path, teacher):
    # 2 chunks of 2 frames: chunk 1's exit pass attends over 4 frames, chunk 0's over 2: 6 for 4.
    said = wanfw("model-info", config(tmp_path, teacher, **CAUSAL), check=0).stdout
    assert "the exit passes' keys and values kept for backward beyond one forward's (6 frames attended for 4)" in said
    checkpointed = wanfw("model-info", config(tmp_path, teacher, gradient_checkpointing=True, **CAUSAL), check=0)
    assert "kept for backward beyond" not in checkpointed.stdout
    assert "the rollout's KV cache: 2 blocks x 4 frames of 4 tokens" in checkpointed.stdout


@pytest.mark.parametrize("model, message", [
    ({"objective": "velocity", "inputs": "teacher_trajectory"},
     "model.causal.frames_per_chunk: a causal generator trains by objective dmd on its own rollout"),
    ({"inputs": "data"}, "model.inputs: a causal generator trains on its own rollout, not on inputs: data"),
    ({"regression_weight": 0.5}, "model.regression_weight: a causal generator's rollout has no one input point"),
    ({"latent_size": "3x4x4"}, "model.latent_size: its 3 latent frames do not cut into chunks of 2 latent frames"),
    ({"task": "ti2v", "inputs": "data"}, "a causal generator makes text to video; ti2v is not supported yet"),
])
def test_a_causal_generator_config_that_cannot_work_is_refused_naming_the_option(tmp_path, teacher, model, message):
    result = wanfw("validate", config(tmp_path, teacher, **{**CAUSAL, **model}), check=2)
    assert message in result.stderr


@pytest.mark.own_entry
def test_both_stages_stream_4_step_samples_closer_to_the_teachers_40_steps_with_seams_no_worse(tmp_path):
    """examples/self-forcing-tiny-ode.yaml and self-forcing-tiny.yaml as their headers say: the
    quickstart's model trained with one caption at 4 latent frames is the teacher; its ODE pairs
    (256 prompts, 48 steps); stage 1, the causal regression on them; stage 2, DMD on the student's
    own rollout from stage 1. Distance to the teacher's 40-step samples (MMD^2 over 256 latents,
    harness/dmd.py): the whole video, and each pair of neighbouring frames together, the pair
    across the chunk boundary (frames 1, 2) against those inside a chunk. Pairs differing by less
    than twice the estimator's spread (the floor's largest pair) count as equal."""
    examples = SOURCE / "examples"
    one_caption = one_caption_teacher(tmp_path, "4x8x8", "teacher-4-frames")
    wanfw("sample", examples / "quickstart.yaml", "--checkpoint", "runs/teacher-4-frames/version_0", *one_caption,
          "--set", "model.sample_guidance=1.0", "--set", "model.sample_steps=48", "--set",
          "model.sample_trajectory_steps=[1000, 750, 500, 250]", "--dataset", "--out", "data/ode-pairs-tiny",
          "--count", "256", "--batch", "32", cwd=tmp_path, check=0)
    wanfw("run", examples / "self-forcing-tiny-ode.yaml", cwd=tmp_path, check=0)
    wanfw("export", examples / "self-forcing-tiny-ode.yaml", "--checkpoint", "runs/self-forcing-tiny-ode/version_0",
          "--out", "runs/self-forcing-tiny-ode-export", cwd=tmp_path, check=0)
    wanfw("run", examples / "self-forcing-tiny.yaml", cwd=tmp_path, check=0)

    def draw(config_file, seed, *extra):
        out = tmp_path / f"samples-{len(list(tmp_path.glob('samples-*')))}.safetensors"
        wanfw("sample", config_file, "--count", "256", "--seed", str(seed), "--out", out, *extra, cwd=tmp_path,
              check=0)
        return load_file(out)["latents"]

    teacher = [examples / "quickstart.yaml", "--checkpoint", "runs/teacher-4-frames/version_0", *one_caption,
               "--set", "model.sample_guidance=1.0", "--set", "model.sample_shift=3.0"]
    reference = draw(teacher[0], 1001, *teacher[1:], "--set", "model.sample_steps=40")
    # Every set is conditioned on the one caption's embedding (stage 1: its pairs' prompts).
    videos = {"teacher 40 steps, other seeds (floor)": draw(teacher[0], 2002, *teacher[1:], "--set",
                                                            "model.sample_steps=40"),
              "teacher 4 steps": draw(teacher[0], 2002, *teacher[1:], "--set", "model.sample_steps=4"),
              "stage 1 (ODE regression)": draw(examples / "self-forcing-tiny-ode.yaml", 2002, "--checkpoint",
                                               "runs/self-forcing-tiny-ode/version_0"),
              "stage 2 (DMD on the rollout)": draw(examples / "self-forcing-tiny.yaml", 2002, "--checkpoint",
                                                   "runs/self-forcing-tiny/version_0")}
    whole = {name: mmd2(x.flatten(1), reference.flatten(1)) for name, x in videos.items()}
    pairs = {name: [mmd2(x[:, :, i:i + 2].flatten(1), reference[:, :, i:i + 2].flatten(1)) for i in range(3)]
             for name, x in videos.items()}
    for name in videos:
        print(f"{name}: MMD^2 {whole[name]:.4f}; frames 0-1 {pairs[name][0]:.4f}, 1-2 (boundary) "
              f"{pairs[name][1]:.4f}, 2-3 {pairs[name][2]:.4f}")
    spread = 2 * max(abs(p) for p in pairs["teacher 40 steps, other seeds (floor)"])
    for stage in ("stage 1 (ODE regression)", "stage 2 (DMD on the rollout)"):
        assert whole[stage] < 0.25 * whole["teacher 4 steps"], stage
        inside, boundary = max(pairs[stage][0], pairs[stage][2]), pairs[stage][1]
        assert boundary <= inside + spread, (stage, pairs[stage], spread)
