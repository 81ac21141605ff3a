"""wan22_distill: a tiny Wan teacher (diffusers' WanTransformer3DModel with random weights, saved
with save_pretrained) distilled into students. Velocity matching starts at exactly zero for a copy of
the teacher; a half-depth student learns; guidance distillation brings the one-pass student toward
the guided teacher; two ranks equal one; the exported student is a plain Wan model."""

import hashlib

import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.distill import config, distill, inputs, teacher  # noqa: F401 (a fixture)
from harness.equivalence import assert_same_training, tiny_wan_rounding
from harness.layouts import CPU, DDP, FSDP, GLOBAL_BATCH, LR, TOKENS, run_on
from harness.references import predict
from harness.runs import SOURCE, base_config, checkpoints, losses, stop_after, wanfw, write_config

TEACHER_LAYERS = 2  # the tiny preset's


def test_a_student_initialised_as_a_copy_of_its_teacher_starts_at_zero_loss(tmp_path, teacher):
    path = config(tmp_path, teacher, trainer={"max_steps": 1})
    result = wanfw("run", path, check=0)
    assert "2 tensors copied" not in result.stdout  # every tensor, not a few
    assert "blocks (student<-teacher): 0<-0 1<-1" in result.stdout + result.stderr
    assert losses(tmp_path, "distill") == [0.0]


def test_a_half_depth_student_learns_and_only_the_student_is_trained_or_saved(tmp_path, teacher):
    digest = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in teacher.iterdir()}
    path = config(tmp_path, teacher, student_num_layers=1, trainer={"max_steps": 40})
    result = wanfw("run", path, "--set", "checkpoint.every=40", "--set", "validation.every=20", "--set",
                   "validation.num_samples=8", "--set", "validation.preview=false", check=0)
    assert "blocks (student<-teacher): 0<-0" in result.stdout + result.stderr
    loss = losses(tmp_path, "distill")
    first, last = sum(loss[:5]) / 5, sum(loss[-5:]) / 5
    print(f"half-depth student: mean loss of steps 1-5 {first:.4g}, of steps 36-40 {last:.4g}")
    assert last < 0.7 * first
    # Validation measures the student-teacher gap at its fixed timesteps, on the same noise each time.
    gaps = {t: losses(tmp_path, "distill", f"val/gap_t{t}") for t in (100, 300, 500, 700, 900)}
    mean_gap = losses(tmp_path, "distill", "val/loss")
    print(f"validation gaps at steps 20 and 40: {gaps}; mean {mean_gap}")
    assert all(len(g) == 2 for g in gaps.values()) and mean_gap[1] < mean_gap[0]
    # The teacher's files are untouched; the checkpoint and the optimizer hold the student alone.
    assert digest == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in teacher.iterdir()}
    saved = checkpoints(tmp_path / "runs" / "distill" / "version_0")[-1]
    weights, optimizer = load_file(saved / "model.safetensors"), load_file(saved / "optimizer.safetensors")
    assert any(k.startswith("blocks.0.") for k in weights) and not any(k.startswith("blocks.1.") for k in weights)
    assert {k[:-len(".exp_avg")] for k in optimizer if k.endswith(".exp_avg")} == set(weights)


def test_guidance_distillation_brings_the_one_pass_student_toward_the_guided_teacher(tmp_path, teacher):
    # A 4-step guidance-free student: trained where the guided teacher's own trajectory goes, at the
    # levels a 4-step sampler visits (1000, 750, 500, 250 shifted by 5).
    guided = dict(guidance_scale=3.0, inputs="teacher_trajectory", latent_size="2x4x4", trajectory_steps=2,
                  timestep_sampling="fixed", timesteps=[1000, 750, 500, 250])
    path = config(tmp_path, teacher, data={"num_samples": 32, "batch_size": 4, "workers": 0},
                  trainer={"max_steps": 100}, **guided)
    given = {**inputs(), "t": torch.tensor([937.5, 833.33])}
    before = predict(tmp_path, path, given)
    gap_before = (before["v"] - before["teacher_v"]).pow(2).mean().item()
    wanfw("run", path, "--set", "checkpoint.every=100", check=0)
    run = tmp_path / "runs" / "distill" / "version_0"
    after = predict(tmp_path, path, given, "--checkpoint", run)
    gap_after = (after["v"] - after["teacher_v"]).pow(2).mean().item()
    print(f"one-pass student vs the teacher guided at 3: mean squared gap {gap_before:.4g} before, {gap_after:.4g} after")
    assert torch.equal(before["teacher_v"], after["teacher_v"])  # the same frozen teacher
    assert gap_after < 0.8 * gap_before

    # Samples from the same noise: the teacher guided (two passes a step) vs the student unguided.
    g = torch.Generator().manual_seed(11)
    cond = {"noise": torch.randn(2, 4, 2, 4, 4, generator=g), "context": torch.randn(2, 16, 32, generator=g)}
    save_file(cond, tmp_path / "cond.safetensors")
    fm = base_config(tmp_path / "runs", model={"name": "wan22_flow_matching", "preset": "tiny", "weights": str(teacher),
                                               "sample_steps": 4, "sample_guidance": 3.0})
    teacher_config = write_config(tmp_path / "teacher.json", fm)

    def sample(path, *extra):
        wanfw("sample", path, "--inputs", tmp_path / "cond.safetensors", "--out", tmp_path / "s.safetensors", *extra,
              check=0)
        return load_file(tmp_path / "s.safetensors")["latents"]
    target = sample(teacher_config)
    student_before = sample(path, "--set", "model.sample_steps=4")
    student_after = sample(path, "--set", "model.sample_steps=4", "--checkpoint", run)
    distance_before = (student_before - target).pow(2).mean().item()
    distance_after = (student_after - target).pow(2).mean().item()
    print(f"unguided student sample vs guided teacher sample: {distance_before:.4g} before, {distance_after:.4g} after")
    assert distance_after < distance_before


@pytest.mark.every_vector_unit
def test_every_layout_distils_the_same_student_as_one_rank_with_the_whole_batch(tmp_path, teacher):
    model = distill(teacher, student_num_layers=1, timestep_sampling="logit_normal", guidance_scale=2.0)
    reference = run_on(tmp_path, "single_1x4", CPU, 4, model)
    layouts = {"ddp_2x2": (DDP, 2, 2), "grad_accum_2x2": ({"name": "grad_accum", "steps": 2, "inner": CPU}, 2, 1),
               "data_parallel_2_replicas_x4": ({"name": "data_parallel", "devices": ["cpu", "cpu"]}, 4, 1),
               "fsdp_2x2": (FSDP, 2, 2)}  # the student sharded, block by block; the teacher whole on each rank
    tolerance = tiny_wan_rounding(GLOBAL_BATCH, TOKENS, layers=1)  # the student's depth: gradients stop there
    for name, (strategy, batch, ranks) in layouts.items():
        c = assert_same_training(run_on(tmp_path, name, strategy, batch, model, ranks), reference, lr=LR,
                                 tolerance=tolerance)
        print(f"{name} vs single 1x4: {c}")


@pytest.mark.every_vector_unit
def test_a_bf16_teacher_answers_within_bf16_rounding_of_the_fp32_one_offloaded_or_not(tmp_path, teacher):
    given = inputs()
    fp32 = predict(tmp_path, config(tmp_path, teacher, name="fp32"), given)["teacher_v"]
    bf16 = predict(tmp_path, config(tmp_path, teacher, name="bf16", teacher_dtype="bfloat16"), given)["teacher_v"]
    offloaded = predict(tmp_path, config(tmp_path, teacher, name="off", teacher_dtype="bfloat16",
                                         teacher_offload=True), given)["teacher_v"]
    relative = ((bf16 - fp32).abs().max() / fp32.abs().max()).item()
    print(f"bf16 teacher vs fp32: largest difference {relative:.3g} of the largest velocity")
    assert 0 < relative < 5e-2
    assert torch.equal(offloaded, bf16)


@pytest.mark.every_vector_unit
def test_the_exported_student_loads_in_wan22_flow_matching_and_predicts_what_the_checkpoint_predicts(tmp_path,
                                                                                                     teacher):
    path = config(tmp_path, teacher, student_num_layers=1, trainer={"max_steps": 5})
    wanfw("run", path, "--set", "checkpoint.every=5", check=0)
    run = tmp_path / "runs" / "distill" / "version_0"
    wanfw("export", path, "--checkpoint", run, "--out", tmp_path / "student", check=0)
    given = inputs()
    distilled = predict(tmp_path, path, given, "--checkpoint", run)["v"]
    plain = write_config(tmp_path / "plain.json", base_config(
        tmp_path / "runs", model={"name": "wan22_flow_matching", "preset": "tiny", "num_layers": 1,
                                  "weights": str(tmp_path / "student")}))
    assert torch.equal(predict(tmp_path, plain, given)["v"], distilled)


def test_a_lora_student_learns_over_its_frozen_teacher_copy_and_exports_an_adapter_and_a_merged_student(
        tmp_path, teacher):
    path = config(tmp_path, teacher, student_num_layers=1, lora={"rank": 4, "alpha": 8}, trainer={"max_steps": 40})
    result = wanfw("run", path, "--set", "checkpoint.every=40", check=0)
    assert "adapters of rank 4 (alpha 8) on 10 layers of the DiT" in result.stdout
    loss = losses(tmp_path, "distill")
    first, last = sum(loss[:5]) / 5, sum(loss[-5:]) / 5
    print(f"half-depth LoRA student: mean loss of steps 1-5 {first:.4g}, of steps 36-40 {last:.4g}")
    assert last < 0.8 * first
    run = tmp_path / "runs" / "distill" / "version_0"
    parts = [f"{a}.{p}" for a in ("self_attn", "cross_attn") for p in "qkvo"] + ["ffn.0", "ffn.2"]
    adapters = {f"blocks.0.{part}.lora_{m}.weight" for part in parts for m in "AB"}
    saved = checkpoints(run)[-1]
    assert set(load_file(saved / "model.safetensors")) == adapters  # the adapters alone, not the copied base
    assert {k[:-len(".exp_avg")] for k in load_file(saved / "optimizer.safetensors") if k.endswith(".exp_avg")} \
        == adapters
    wanfw("export", path, "--checkpoint", run, "--out", tmp_path / "adapter", check=0)
    assert "diffusion_model.blocks.0.ffn.0.lora_B.weight" in load_file(tmp_path / "adapter" / "wan_lora.safetensors")
    wanfw("export", path, "--checkpoint", run, "--merge", "--out", tmp_path / "merged", check=0)
    given = inputs()
    distilled = predict(tmp_path, path, given, "--checkpoint", run)["v"]
    merged = write_config(tmp_path / "merged.json", base_config(
        tmp_path / "runs", model={"name": "wan22_flow_matching", "preset": "tiny", "num_layers": 1,
                                  "weights": str(tmp_path / "merged")}))
    assert torch.allclose(predict(tmp_path, merged, given)["v"], distilled, atol=1e-5, rtol=0)


def test_data_free_distillation_learns_from_the_teachers_own_trajectory(tmp_path, teacher):
    path = config(tmp_path, teacher, data={"num_samples": 32, "batch_size": 4, "workers": 0},
                  student_num_layers=1, inputs="teacher_trajectory", latent_size="2x4x4", trajectory_steps=2,
                  timestep_sampling="fixed", timesteps=[1000, 750, 500, 250], trainer={"max_steps": 40})
    wanfw("run", path, check=0)
    loss = losses(tmp_path, "distill")
    first, last = sum(loss[:5]) / 5, sum(loss[-5:]) / 5
    print(f"data-free: mean loss of steps 1-5 {first:.4g}, of steps 36-40 {last:.4g}")
    assert last < 0.7 * first


@pytest.mark.parametrize("model, message", [
    ({"student_out_dim": 8}, "the student must share the teacher's latent space"),
    ({"inputs": "teacher_trajectory", "flow_matching_weight": 0.5}, "has no data latents for a flow-matching term"),
    ({"inputs": "teacher_trajectory"}, "data-free t2v distillation needs the latents' size"),
    ({"teacher_preset": "wan2.2-t2v-a14b"}, "is two experts split at t = 875: say which one teaches"),
    ({"timestep_sampling": "fixed", "timesteps": [1200]}, "lies outside the trained range"),
])
def test_a_distillation_config_that_cannot_work_is_refused_naming_the_option(tmp_path, teacher, model, message):
    result = wanfw("validate", config(tmp_path, teacher, **model), check=2)
    assert message in result.stderr


@pytest.mark.own_entry
def test_the_tiny_example_distils_the_exported_quickstart_model(tmp_path):
    """examples/distill-tiny.yaml as its header says: the quickstart's model exported as the teacher."""
    examples = SOURCE / "examples"
    wanfw("run", examples / "quickstart.yaml", "--set", "trainer.max_steps=20", cwd=tmp_path, check=0)
    wanfw("export", examples / "quickstart.yaml", "--checkpoint", "runs/quickstart/version_0", "--out",
          "runs/quickstart-teacher", cwd=tmp_path, check=0)
    result = wanfw("run", examples / "distill-tiny.yaml", "--set", "trainer.max_steps=20", cwd=tmp_path, check=0)
    log = result.stdout + result.stderr
    assert "blocks (student<-teacher): 0<-0 1<-3" in log and "done: 20 steps" in log
    wanfw("export", examples / "distill-tiny.yaml", "--checkpoint", "runs/distill-tiny/version_0", "--out",
          "runs/student", cwd=tmp_path, check=0)
    exported = load_file(tmp_path / "runs" / "student" / "diffusion_pytorch_model.safetensors")
    assert "blocks.1.ffn.0.weight" in exported and "blocks.2.ffn.0.weight" not in exported


def test_a_data_free_distillation_resumed_mid_run_ends_bitwise_equal_to_the_uninterrupted_run(tmp_path, teacher):
    model = dict(student_num_layers=1, inputs="teacher_trajectory", latent_size="2x4x4", guidance_scale=2.0)
    path = config(tmp_path, teacher, data={"num_samples": 16, "batch_size": 4, "workers": 0},
                  trainer={"max_steps": 6}, **model)
    wanfw("run", path, "--set", "checkpoint.every=3", check=0)
    run = tmp_path / "runs" / "distill" / "version_0"
    uninterrupted = load_file(checkpoints(run)[-1] / "model.safetensors")
    stop_after(run, 3)
    resumed = wanfw("run", path, "--set", "checkpoint.every=3", "--resume", "auto", check=0)
    assert "resumed from" in resumed.stdout and "step-00000003" in resumed.stdout
    again = load_file(checkpoints(run)[-1] / "model.safetensors")
    assert checkpoints(run)[-1].name == "step-00000006"
    assert all(torch.equal(again[k], uninterrupted[k]) for k in uninterrupted)
    assert not torch.equal(load_file(checkpoints(run)[0] / "model.safetensors")["head.head.weight"],
                           again["head.head.weight"])  # steps 4 to 6 trained
