"""A causal (streaming) student (model.causal.frames_per_chunk) on the tiny Wan DiT: the
teacher-forcing objective trains it (its loss falls), each chunk at its own level drawn from the
sample's stream, so that ddp and accumulation end at one device's weights; `wanfw sample` makes the
video chunk by chunk; the memory plan counts the teacher-forcing step's doubled sequence; settings
a causal student cannot take are refused naming the option."""

import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.equivalence import assert_same_training
from harness.layouts import CPU, DDP, LAYOUTS, LR, TINY_WAN, experiment, run_on, tiny_wan
from harness.runs import losses, read_csv, run_dir, wanfw

CAUSAL = {**tiny_wan("t2v"), "causal": {"frames_per_chunk": 2}}
FOUR_FRAMES = {"data": {"buckets": ["4x4x4"]}}  # two chunks of two latent frames


def test_the_teacher_forcing_objective_trains_a_causal_student_whose_loss_falls(tmp_path):
    # The quick start's moving patterns, which a model can learn (random latents cannot be).
    patterns = {"content": "patterns", "num_samples": 512, "buckets": ["4x16x16"]}
    path = experiment(tmp_path, "causal", CPU, 4, CAUSAL, trainer={"max_steps": 60, "log_every": 1},
                      optimizer={"lr": 2e-3}, data=patterns)
    wanfw("run", path, check=0)
    loss = losses(tmp_path, "causal")
    assert len(loss) == 60 and sum(loss[-10:]) / 10 < 0.8 * sum(loss[:10]) / 10, loss


SEQUENCE_PARALLEL = {"ddp_sp2_1x4": ({**DDP, "sequence_parallel": 2}, 4, 2)}


@pytest.mark.parametrize("layout", ["ddp_2x2", "ddp_2x1_accum_2", "ddp_sp2_1x4"])
def test_a_causal_student_ends_at_one_devices_weights_on_any_layout(tmp_path, layout):
    # Each chunk's level and each sample's noise come from the sample's own streams. Sequence
    # parallel: the [clean | noisy] sequence's 32 tokens over 2 ranks, the causal attention over
    # every token of each rank's head.
    strategy, batch, ranks = {**LAYOUTS, **SEQUENCE_PARALLEL}[layout]
    one = run_on(tmp_path, "one", CPU, 4, CAUSAL, **FOUR_FRAMES)
    split = run_on(tmp_path, layout, strategy, batch, CAUSAL, ranks, **FOUR_FRAMES)
    assert_same_training(split, one, lr=LR, tolerance=TINY_WAN)


def test_teacher_forcing_with_blocks_recomputed_in_chunks_of_tokens_trains_as_without_checkpointing(tmp_path):
    # [clean | noisy] copies of 4 frames of 4 tokens, recomputed in 3 runs of 10 or 11 tokens that
    # cut frames (and the copies' seam) apart: the attention still over each run's frames' keys.
    one = run_on(tmp_path, "plain", CPU, 4, CAUSAL, **FOUR_FRAMES)
    chunked = run_on(tmp_path, "chunked", CPU, 4, {**CAUSAL, "gradient_checkpointing": True, "recompute_chunks": 3},
                     **FOUR_FRAMES)
    assert_same_training(chunked, one, lr=LR, tolerance=TINY_WAN)


def test_wanfw_sample_makes_a_causal_students_video_chunk_by_chunk(tmp_path):
    path = experiment(tmp_path, "causal", CPU, 4, {**CAUSAL, "sample_size": "6x4x4"}, trainer={"max_steps": 2},
                      **FOUR_FRAMES)
    wanfw("run", path, check=0)
    out = tmp_path / "sample.safetensors"
    result = wanfw("sample", path, "--checkpoint", run_dir(tmp_path, "causal"), "--out", out, "--count", 2,
                   "--device", "cpu", check=0)
    assert "causal student: 2 chunks (chunks of 2 latent frames), 4 steps each" in result.stdout
    latents = load_file(out)["latents"]
    assert latents.shape == (2, 4, 4, 4, 4) and latents.isfinite().all()
    # Sampled with more frames, the first chunks are the same, whatever follows them (the given
    # noise sets the shape; each chunk draws its own from the seed).
    context = torch.randn(1, 4, 32, generator=torch.Generator().manual_seed(0))
    made = {}
    for frames in (4, 6):
        inputs = tmp_path / f"inputs-{frames}.safetensors"
        save_file({"context": context, "noise": torch.zeros(1, 4, frames, 4, 4)}, inputs)
        wanfw("sample", path, "--checkpoint", run_dir(tmp_path, "causal"), "--inputs", inputs, "--out", out,
              "--device", "cpu", check=0)
        made[frames] = load_file(out)["latents"]
    assert torch.equal(made[6][:, :, :4], made[4])


# i2v from a first frame (task ti2v): latent frame 0 is the image, a chunk of its own; 1 + 2 x 2 frames.
FIRST_FRAME = {**tiny_wan("ti2v"), "causal": {"frames_per_chunk": 2, "independent_first_frame": True}}
FIVE_FRAMES = {"data": {"buckets": ["5x4x4"]}}


def test_a_first_frame_causal_student_ends_at_one_devices_weights_with_ddp(tmp_path):
    # Teacher forcing with the image clean in both copies and left out of the loss, each later
    # chunk at its own level from the sample's stream.
    one = run_on(tmp_path, "one", CPU, 4, FIRST_FRAME, **FIVE_FRAMES)
    split = run_on(tmp_path, "ddp", DDP, 2, FIRST_FRAME, 2, **FIVE_FRAMES)
    assert_same_training(split, one, lr=LR, tolerance=TINY_WAN)


def test_wanfw_sample_streams_a_first_frame_students_video_from_the_given_image(tmp_path):
    path = experiment(tmp_path, "first", CPU, 4, FIRST_FRAME, trainer={"max_steps": 2}, **FIVE_FRAMES)
    wanfw("run", path, check=0)
    context = torch.randn(1, 4, 32, generator=torch.Generator().manual_seed(0))
    made = {}
    for name, seed in (("image", 1), ("other", 2)):
        image = torch.randn(1, 4, 4, 4, generator=torch.Generator().manual_seed(seed))
        inputs, out = tmp_path / f"{name}.safetensors", tmp_path / f"{name}-out.safetensors"
        save_file({"context": context, "image": image, "noise": torch.zeros(1, 4, 5, 4, 4)}, inputs)
        result = wanfw("sample", path, "--checkpoint", run_dir(tmp_path, "first"), "--inputs", inputs, "--out", out,
                       "--device", "cpu", check=0)
        assert ("causal student: 3 chunks (frame 0, then chunks of 2 latent frames; the image is the first)"
                in result.stdout), result.stdout
        made[name] = load_file(out)["latents"]
        assert made[name].shape == (1, 4, 5, 4, 4)
        assert torch.equal(made[name][:, :, 0], image)  # the image as given, not remade
    # The chunks after it follow from the image (through the cache): another image, another video.
    assert (made["image"][:, :, 1:] - made["other"][:, :, 1:]).abs().max() > 1e-3


# Both A14B experts as one causal student: each sample's chunks drawn on one expert's side (its clean
# copy through that expert too, as a rollout's context pass fills each expert's cache).
PAIR = {**CAUSAL, "expert": "both", "boundary": 500, "sample_shift": 1.0}


def test_an_expert_pair_causal_student_ends_at_one_devices_weights_with_ddp_and_streams_through_both(tmp_path):
    one = run_on(tmp_path, "one", CPU, 4, PAIR, **FOUR_FRAMES)
    split = run_on(tmp_path, "ddp", {**DDP, "find_unused_parameters": True}, 2, PAIR, 2, **FOUR_FRAMES)
    assert_same_training(split, one, lr=LR, tolerance=TINY_WAN)
    rows = read_csv(run_dir(tmp_path, "one") / "metrics.csv")
    shares = [float(r["share/high_noise"]) for r in rows if r.get("share/high_noise")]
    assert shares and 0 < sum(shares) / len(shares) < 1, shares  # both experts train
    out = tmp_path / "sample.safetensors"
    result = wanfw("sample", tmp_path / "one.json", "--checkpoint", run_dir(tmp_path, "one"), "--out", out,
                   "--count", 2, "--device", "cpu", check=0)
    # Steps 1000, 750 and 500 by the high-noise expert, 250 by the low-noise one.
    assert "each by the expert of its level (boundary t = 500), every chunk into both experts' caches" in result.stdout
    assert load_file(out)["latents"].shape == (2, 4, 4, 4, 4)


@pytest.mark.parametrize("sets, message", [
    (["model.causal.frames_per_chunk=3"], "the largest bucket's 4 latent frames do not cut into chunks of 3"),
    (["model.task=ti2v"], "a ti2v causal student's first frame is the image, a chunk of its own"),
    (["model.task=i2v", "model.in_dim=12"], "i2v's concatenated image channels"),
    (["model.causal.independent_first_frame=true"], "4 latent frames do not cut into frame 0, then chunks of 2"),
    (["model.causal.window_frames=3", "model.causal.sink_frames=2"], "causal.window_frames"),
    (["model.causal.steps=[1000, 1000]"], "causal.steps"),
])
def test_settings_a_causal_student_cannot_take_are_refused_naming_the_option(tmp_path, sets, message):
    path = experiment(tmp_path, "causal", CPU, 4, CAUSAL, trainer={"max_steps": 1}, **FOUR_FRAMES)
    args = [a for s in sets for a in ("--set", s)]
    for command in ("validate", "run"):  # before the first step
        result = wanfw(command, path, *args)
        assert result.returncode != 0 and message in result.stdout + result.stderr, result.stderr


def test_the_memory_plan_counts_the_teacher_forcing_steps_clean_and_noisy_copies(tmp_path):
    path = experiment(tmp_path, "causal", CPU, 4, CAUSAL, **FOUR_FRAMES)
    causal = wanfw("model-info", path, check=0).stdout
    plain = wanfw("model-info", path, "--set", "model.causal.frames_per_chunk=0", check=0).stdout
    assert "activations for latents 4x4x4: 16 tokens x batch 4" in plain, plain
    assert "activations for latents 8x4x4: 32 tokens x batch 4" in causal, causal
