"""Fully sharded training (strategy fsdp) computes what one device computes: the tiny Wan DiT, with
its random noise and timesteps keyed by sample, ends with the weights of one device with the whole
batch — on 2 and on 4 ranks, with accumulated micro-batches, gradient checkpointing and LoRA
adapters on a sharded frozen base; each rank holds a world's share of the parameters and optimizer
state; its checkpoints, written in pieces, resume on other world sizes and export to the official
layout. Real torchrun, Gloo on loopback, CPU."""

import re

import pytest
import torch
from safetensors.torch import load_file

from harness.equivalence import (assert_same_training, assert_same_training_history, checkpoint_file, history,
                                 largest_relative_difference, state, trained, weights)
from harness.launch import torchrun
from harness.layouts import (CPU, DDP, FSDP, LR, SIX_STEPS, STEPS, TINY_WAN, experiment, remove_checkpoint,
                             resume_resized_from_step_3, run_on, tiny_wan)
from harness.lora import lora_model
from harness.references import reference_model
from harness.runs import SOURCE, checkpoints, metrics, wanfw

LAYOUTS = {  # name: (strategy, batch per micro-batch, ranks, model options); every one a global batch of 4
    "fsdp_2x2": (FSDP, 2, 2, {}),
    "fsdp_4x1": (FSDP, 1, 4, {}),
    "fsdp_2x1_accum_2": ({"name": "grad_accum", "steps": 2, "inner": FSDP}, 1, 2, {}),
    "fsdp_2x2_checkpointed": (FSDP, 2, 2, {"gradient_checkpointing": True}),
}


@pytest.mark.every_vector_unit
def test_fsdp_ends_with_the_weights_of_one_device_and_of_ddp_on_every_layout(tmp_path):
    model = tiny_wan("t2v")
    reference = run_on(tmp_path, "single_1x4", CPU, 4, model, checkpoint={"every": 1})
    ddp = run_on(tmp_path, "ddp_2x2", DDP, 2, model, ranks=2)
    comparisons = {}
    for name, (strategy, batch, ranks, options) in LAYOUTS.items():
        sharded = run_on(tmp_path, name, strategy, batch, {**model, **options}, ranks)
        comparisons[name] = assert_same_training(sharded, reference, lr=LR, tolerance=TINY_WAN)
        assert_same_training(sharded, ddp, lr=LR, tolerance=TINY_WAN)
    print("; ".join(f"{name}: {c}" for name, c in comparisons.items()))
    # The layouts differ by rounding; steps 2 to 5 moved the weights by orders of magnitude more.
    trained_since_step_1 = largest_relative_difference(reference.weights, weights(tmp_path, "single_1x4", step=1))
    assert trained_since_step_1 > 100 * max(c.relative for c in comparisons.values())


@pytest.mark.every_vector_unit
def test_fsdp_trains_lora_adapters_on_a_sharded_frozen_base_as_one_device_does(tmp_path):
    reference_model(tmp_path / "base", seed=5)
    model = {**lora_model(tmp_path / "base", dropout=0.3), "timestep_sampling": "logit_normal",
             "gradient_checkpointing": True}
    # The B adapters start at zero, so their first gradients are tiny beside their later ones:
    # each step is bounded with its own moments (equivalence.py's history), not the last step's.
    every_step = {"checkpoint": {"every": 1}}
    one = run_on(tmp_path, "one_x4", CPU, 4, model, **every_step)
    sharded = run_on(tmp_path, "fsdp_2x2", FSDP, 2, model, ranks=2, **every_step)
    assert set(sharded.weights) == set(one.weights) and all(".lora_" in k for k in one.weights)
    c = assert_same_training_history(history(tmp_path, "fsdp_2x2"), history(tmp_path, "one_x4"), lr=LR,
                                     tolerance=TINY_WAN)
    print(f"adapters, fsdp 2x2 vs 1x4: {c}")


def grad_norms(tmp_path, name):
    return [float(r["grad_norm"]) for r in metrics(tmp_path, name)]


@pytest.mark.every_vector_unit
def test_fsdp_clips_by_the_norm_of_the_whole_gradient_as_one_device_does(tmp_path):
    # A clip far below the tiny DiT's gradient norms binds at every step: each rank scales its
    # shards by the norm of every rank's pieces together, not of its own.
    model, clip = tiny_wan("t2v"), {"trainer": {"grad_clip": 0.01}}
    one = run_on(tmp_path, "one_x4", CPU, 4, model, **clip)
    sharded = run_on(tmp_path, "fsdp_2x2", FSDP, 2, model, ranks=2, **clip)
    norms, expected = grad_norms(tmp_path, "fsdp_2x2"), grad_norms(tmp_path, "one_x4")
    assert len(norms) == STEPS and min(expected) > 10 * 0.01, expected
    # The same gradients summed over two ranks in pieces: fp32 rounding of the sum, no more.
    assert norms == pytest.approx(expected, rel=1e-5), (norms, expected)
    c = assert_same_training(sharded, one, lr=LR, tolerance=TINY_WAN)
    print(f"clipped to 0.01, fsdp 2x2 vs 1x4: {c}; norms {norms}")


@pytest.mark.every_vector_unit
def test_fsdp_gathering_in_bfloat16_gives_the_gradient_of_a_float32_gather_within_bf16_rounding(tmp_path):
    # Under bf16 autocast the matrix products round their float32 weights to bfloat16 anyway;
    # param_dtype bfloat16 rounds them once, at the gather, and the norms, modulation and biases
    # then compute with bfloat16 values too. bf16 keeps 8 significant bits: the first step's
    # gradient (AdamW's first moment over 1 - beta1) moves by a few 2^-8 relative through the
    # blocks, while the shards, their AdamW state and the checkpoints stay float32.
    model, every_step = tiny_wan("t2v"), {"precision": {"mode": "bf16"}, "checkpoint": {"every": 1}}
    run_on(tmp_path, "gather_fp32", {**FSDP, "param_dtype": "float32"}, 2, model, ranks=2, **every_step)
    halved = run_on(tmp_path, "gather_bf16", {**FSDP, "param_dtype": "bfloat16"}, 2, model, ranks=2, **every_step)
    assert all(t.dtype == torch.float32 for t in halved.weights.values())
    assert all(t.dtype == torch.float32 for t in halved.exp_avg.values())
    a, b = state(tmp_path, "gather_bf16", step=1).exp_avg, state(tmp_path, "gather_fp32", step=1).exp_avg
    difference = torch.cat([(a[k] - b[k]).flatten() for k in b]).norm()
    whole = torch.cat([b[k].flatten() for k in b]).norm()
    print(f"first gradients of the bf16 and fp32 gathers: {difference / whole:.3g} of their norm apart")
    assert 0 < difference <= 0.05 * whole


HOLDS = re.compile(r"fsdp: rank (\d) holds (\d+) bytes of parameters \(the model has (\d+)\), (\d+) bytes of gradients "
                   r"and (\d+) bytes of optimizer state")


def test_each_rank_holds_a_worlds_share_of_the_parameters_gradients_and_optimizer_state(tmp_path):
    path = experiment(tmp_path, "shares", FSDP, 1, tiny_wan("t2v"), trainer={"max_steps": 1})
    result = torchrun("run", path, nproc=4, env={"WANFW_LOG_ALL_RANKS": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    held = {int(m[0]): tuple(map(int, m[1:])) for m in HOLDS.findall(result.stdout + result.stderr)}
    assert sorted(held) == [0, 1, 2, 3], result.stdout + result.stderr
    # What a rank must hold: ceil(rows / 4) rows of every tensor (the last ranks' padded with zeros).
    shapes = [t.shape for t in checkpoint_file(checkpoints(tmp_path / "runs" / "shares" / "version_0")[-1],
                                               "model").values()]
    whole = sum(s.numel() for s in shapes) * 4
    share = sum(-(-(s[0] if len(s) else 1) // 4) * (s.numel() // (s[0] if len(s) else 1) if s.numel() else 0)
                for s in shapes) * 4
    for rank, (parameters, model_bytes, gradients, optimizer) in held.items():
        assert model_bytes == whole
        assert parameters == gradients == share and optimizer == 2 * share  # the module's own tensors are empty
    assert whole / 4 <= share < whole / 4 * 1.05  # the padding slack, for this model's small tensors


@pytest.mark.every_vector_unit
def test_a_run_stopped_on_four_ranks_resumes_on_two_and_on_one_as_the_uninterrupted_run(tmp_path):
    model = tiny_wan("t2v")
    result = torchrun("run", experiment(tmp_path, "resized", FSDP, 1, model, **SIX_STEPS), nproc=4)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = tmp_path / "runs" / "resized" / "version_0"
    uninterrupted = trained(checkpoints(run_dir)[-1])
    stopped = checkpoints(run_dir)[0]
    assert stopped.name == "step-00000003" and (stopped / "model.pieces.json").exists()
    for strategy, batch, ranks in ((FSDP, 2, 2), (CPU, 4, 1)):
        output, resumed = resume_resized_from_step_3(tmp_path, model, strategy, batch, ranks)
        assert "written by 4 processes" in output, output
        c = assert_same_training(resumed, uninterrupted, lr=LR, tolerance=TINY_WAN)
        print(f"resumed on {ranks} rank(s) vs 4: {c}")


@pytest.mark.every_vector_unit
def test_a_ddp_checkpoint_resumes_under_fsdp_and_a_sharded_one_exports_the_official_layout(tmp_path):
    model = tiny_wan("t2v")
    six = {"trainer": {"max_steps": 6}, "checkpoint": {"every": 3}}
    uninterrupted = run_on(tmp_path, "switched", DDP, 2, model, ranks=2, **six)
    run_dir = tmp_path / "runs" / "switched" / "version_0"
    remove_checkpoint(checkpoints(run_dir)[-1])  # stopped after step 3 under ddp, continued under fsdp
    result = torchrun("run", experiment(tmp_path, "switched", FSDP, 2, model, **six), "--resume", "auto")
    assert result.returncode == 0 and "resumed from" in result.stdout, result.stdout + result.stderr
    assert (checkpoints(run_dir)[-1] / "model.pieces.json").exists()
    assert_same_training(state(tmp_path, "switched"), uninterrupted, lr=LR, tolerance=TINY_WAN)

    path = experiment(tmp_path, "switched", FSDP, 2, model, **six)
    wanfw("export", path, "--checkpoint", run_dir, "--out", tmp_path / "export", check=0)
    exported_file = tmp_path / "export" / "diffusion_pytorch_model.safetensors"
    exported = load_file(exported_file)
    saved = checkpoint_file(checkpoints(run_dir)[-1], "model")
    assert exported.keys() == saved.keys() and all(torch.equal(exported[k], saved[k]) for k in saved)
    # diffusers reads the official layout as it reads the released checkpoints (its own config: the tiny preset's).
    reference_model(tmp_path / "diffusers_config")
    import diffusers  # here alone: importing it costs a process seconds
    loaded = diffusers.WanTransformer3DModel.from_single_file(str(exported_file), config=str(tmp_path / "diffusers_config"))
    assert sum(p.numel() for p in loaded.parameters()) == sum(t.numel() for t in saved.values())
    assert torch.equal(loaded.blocks[1].attn1.to_q.weight, saved["blocks.1.self_attn.q.weight"])
    assert torch.equal(loaded.proj_out.weight, saved["head.head.weight"])


PER_GPU = re.compile(r"memory plan per GPU, (\w+) on (\d+) GPUs?(?:, sequence parallel \d+)? \(.*\):\n(?:  .*\n)*?"
                     r"  device: training state \(.*; 1/(\d+) of ([\d.]+) GiB\) ([\d.]+) GiB\n(?:  .*\n)*?"
                     r"  total: device ([\d.]+) GiB, .*; (fits|does not fit) an 80 GB GPU")


def test_the_full_fine_tuning_examples_shard_over_the_gpus_they_name_and_fit_them():
    for example in ("wan22-ti2v-5b-finetune.yaml", "wan22-t2v-a14b-low-noise-finetune.yaml"):
        path = SOURCE / "examples" / example
        assert "name: fsdp" in path.read_text() and "GPUs: 8 x 80 GB" in path.read_text()
        fits = {}
        for gpus in (1, 8):
            info = wanfw("model-info", path, "--gpus", gpus, check=0).stdout
            strategy, on, share, whole, per_gpu, total, verdict = PER_GPU.search(info).groups()
            assert (strategy, int(on), int(share)) == ("fsdp", gpus, gpus), info
            assert abs(float(per_gpu) * gpus - float(whole)) < 0.01 * gpus, info  # the state, 1/N a GPU
            fits[gpus] = verdict
        assert fits == {1: "does not fit", 8: "fits"}, example
    # The A14B expert at 720p fits only with each sample's tokens split over two GPUs.
    a14b = SOURCE / "examples" / "wan22-t2v-a14b-low-noise-finetune.yaml"
    assert "sequence_parallel: 2" in a14b.read_text() and "720x1280" in a14b.read_text()
    whole = wanfw("model-info", a14b, "--gpus", 8, "--set", "strategy.sequence_parallel=1", check=0).stdout
    assert PER_GPU.search(whole).group(7) == "does not fit", whole
