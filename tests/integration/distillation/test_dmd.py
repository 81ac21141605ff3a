"""wan22_distill with `objective: dmd`: distribution matching distillation (DMD2) of a few-step
generator against a tiny Wan teacher (diffusers' WanTransformer3DModel with random weights) and a
critic trained on the generator's samples, in two training phases. The generator and critic train
the same on every layout, resume bitwise, and a shared frozen base trains exactly what three
separate copies train."""

import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.distill import teacher  # noqa: F401 (a fixture)
from harness.dmd import (CYCLE, assert_resumes_mid_cycle_to_the_same_bits, config, distances_to_the_teachers_40_steps,
                         dmd, one_caption_teacher, shared_name)
from harness.equivalence import assert_same_training_history, tiny_wan_rounding, trained
from harness.layouts import CPU, DDP, FSDP, GLOBAL_BATCH, LR, TOKENS, run_on
from harness.references import predict, reference_model
from harness.runs import SOURCE, base_config, checkpoints, read_csv, run_dir, wanfw, write_config


def test_the_generator_and_the_critic_train_in_turns_each_with_its_own_loss(tmp_path, teacher):
    result = wanfw("run", config(tmp_path, teacher), check=0)
    log = result.stdout + result.stderr
    assert "training phases: generator 1 step, then critic 2 steps (a cycle of 3 steps)" in log
    assert "the generator samples in 3 steps at levels 1.0000, " in log
    rows = read_csv(run_dir(tmp_path, "dmd") / "metrics.csv")
    for row in rows:
        generator_step = (int(row["step"]) - 1) % CYCLE == 0
        assert (row["generator/loss"] != "") == generator_step and (row["critic/loss"] != "") == (not generator_step)
        if generator_step:  # the DMD gradient is normalised by G's distance to the teacher's x0: of order 1
            assert 0.05 < float(row["dmd_gradient"]) < 20, row
        else:
            assert float(row["critic_loss"]) > 0
        assert float(row["lr/critic"]) == pytest.approx(2 * float(row["lr/generator"]))
    saved = checkpoints(run_dir(tmp_path, "dmd"))
    for step, (before, after) in enumerate(zip(saved, saved[1:]), start=2):
        a, b = load_file(before / "model.safetensors"), load_file(after / "model.safetensors")
        moved = {part: any(not torch.equal(a[k], b[k]) for k in a if k.startswith(part + "."))
                 for part in ("generator", "critic")}
        trains = "generator" if (step - 1) % CYCLE == 0 else "critic"
        assert moved == {"generator": trains == "generator", "critic": trains == "critic"}, step
    optimizer = load_file(saved[-1] / "optimizer.safetensors")
    assert int(optimizer["generator.head.head.weight.step"].item()) == 2  # steps 1 and 4
    assert int(optimizer["critic.head.head.weight.step"].item()) == 4


@pytest.mark.every_vector_unit
def test_the_dmd_gradient_is_the_python_reference_on_the_diffusers_teacher(tmp_path):
    """The generator step's gradient at given (x, t, noise), by `wanfw predict`, against the DMD
    formula written here on diffusers' transformer: the critic starts as the teacher, so
    g = (x0_critic - x0_real) / mean |x - x0_real| with x0 = x_t - s v, v_real = v_u + 2 (v_c - v_u)."""
    reference = reference_model(tmp_path / "teacher", seed=3)
    g = torch.Generator().manual_seed(6)
    x, noise = torch.randn(2, 4, 2, 4, 4, generator=g), torch.randn(2, 4, 2, 4, 4, generator=g)
    t, context = torch.tensor([300.0, 800.0]), torch.randn(2, 5, 32, generator=g)
    out = predict(tmp_path, config(tmp_path, tmp_path / "teacher"), {"x": x, "t": t, "context": context,
                                                                       "noise": noise})
    s = (t / 1000).view(-1, 1, 1, 1, 1)
    xt = (1 - s) * x + s * noise
    with torch.no_grad():
        conditional = reference(xt, t, context).sample
        unconditional = reference(xt, t, torch.zeros_like(context)).sample
    x0_real = xt - s * (unconditional + 2.0 * (conditional - unconditional))
    x0_fake = xt - s * conditional
    normalizer = (x - x0_real).abs().mean(dim=(1, 2, 3, 4))
    expected = (x0_fake - x0_real) / normalizer.view(-1, 1, 1, 1, 1)
    # Two forwards of the 2-block DiT (tiny_wan_rounding's depth) on inputs of order 1, then a
    # difference of two x0 of order 1 divided by the normaliser (~0.5 here): relative to 1/normaliser.
    tolerance = tiny_wan_rounding(1, TOKENS, layers=2) * 2 / normalizer.min().item()
    print(f"largest difference {(out['dmd_gradient'] - expected).abs().max():.3g}, tolerance {tolerance:.3g}")
    torch.testing.assert_close(out["dmd_normalizer"], normalizer, rtol=0, atol=tolerance)
    torch.testing.assert_close(out["dmd_gradient"], expected, rtol=0, atol=tolerance)
    assert expected.abs().mean() > 100 * tolerance  # a gradient the check can see


@pytest.mark.own_entry
@pytest.mark.every_vector_unit
def test_every_layout_trains_the_generator_and_the_critic_of_one_rank_with_the_whole_batch(tmp_path, teacher):
    """Every draw (G's step, its rollout noise, the score levels and noise) comes from the sample's
    streams, and the DMD normaliser is per sample, so ranks, micro-batches and replicas change only
    the order of sums. Each step's update is bounded with that step's moments (equivalence.py)."""
    model = dmd(teacher, latent_size="3x4x4")
    every_step = {"checkpoint": {"every": 1}}
    history = lambda name: [trained(p) for p in checkpoints(tmp_path / "runs" / name / "version_0")]
    run_on(tmp_path, "single_1x4", CPU, 4, model, **every_step)
    layouts = {"ddp_2x2": (DDP, 2, 2), "grad_accum_2x2": ({"name": "grad_accum", "steps": 2, "inner": CPU}, 2, 1),
               "data_parallel_2_replicas_x4": ({"name": "data_parallel", "devices": ["cpu", "cpu"]}, 4, 1),
               "fsdp_2x2": (FSDP, 2, 2)}
    # A value reaches a gradient through up to 2 of G's no-grad steps, G's own pass, a score's and
    # the backward: five passes of the 2-block DiT instead of the one of flow matching.
    tolerance = tiny_wan_rounding(GLOBAL_BATCH, TOKENS, layers=2 * 5)
    for name, (strategy, batch, ranks) in layouts.items():
        run_on(tmp_path, name, strategy, batch, model, ranks, **every_step)
        c = assert_same_training_history(history(name), history("single_1x4"), lr=LR, tolerance=tolerance)
        print(f"{name} vs single 1x4: {c}")


def test_a_dmd_run_killed_mid_cycle_resumes_to_the_same_bits(tmp_path, teacher):
    assert_resumes_mid_cycle_to_the_same_bits(
        tmp_path, config(tmp_path, teacher, steps=7, **{"lora": {"rank": 4}, "critic_lora": {"rank": 4}}))


def test_one_shared_frozen_base_trains_exactly_what_three_separate_copies_train(tmp_path, teacher):
    adapters = {"lora": {"rank": 4}, "critic_lora": {"rank": 4}}
    separate = wanfw("run", config(tmp_path, teacher, name="separate", **adapters), check=0)
    shared = wanfw("run", config(tmp_path, teacher, name="shared", shared_base=True, **adapters), check=0)
    assert "one frozen base shared by the real score" in shared.stdout + shared.stderr
    a = read_csv(run_dir(tmp_path, "separate") / "metrics.csv")
    b = read_csv(run_dir(tmp_path, "shared") / "metrics.csv")
    assert [r["loss"] for r in a] == [r["loss"] for r in b]  # the same losses, printed in full
    assert [r["dmd_gradient"] for r in a] == [r["dmd_gradient"] for r in b]
    for kind in ("model", "optimizer"):
        x = load_file(checkpoints(run_dir(tmp_path, "separate"))[-1] / f"{kind}.safetensors")
        y = load_file(checkpoints(run_dir(tmp_path, "shared"))[-1] / f"{kind}.safetensors")
        assert {shared_name(k) for k in x} == set(y)
        assert all(torch.equal(x[k], y[shared_name(k)]) for k in x), kind  # the same updates, bit for bit


def test_the_exported_generator_samples_like_the_trained_one_and_leaves_the_critic_behind(tmp_path, teacher):
    path = config(tmp_path, teacher, steps=4, **{"lora": {"rank": 4}, "critic_lora": {"rank": 4}, "shared_base": True,
                                                 "sample_size": "3x4x4"})
    wanfw("run", path, check=0)
    wanfw("export", path, "--checkpoint", run_dir(tmp_path, "dmd"), "--out", tmp_path / "adapter", check=0)
    wanfw("export", path, "--checkpoint", run_dir(tmp_path, "dmd"), "--out", tmp_path / "merged", "--merge", check=0)
    for layout in ("wan_lora", "pytorch_lora_weights"):  # Wan / ComfyUI keys, diffusers PEFT keys
        adapter = load_file(tmp_path / "adapter" / f"{layout}.safetensors")
        assert adapter and not any("critic" in k for k in adapter), layout
    merged = load_file(tmp_path / "merged" / "diffusion_pytorch_model.safetensors")
    assert not any("lora" in k for k in merged)
    # The merged generator as a plain Wan model, sampled with the generator's solver and levels.
    student = base_config(tmp_path / "runs", model={
        "name": "wan22_flow_matching", "preset": "tiny", "weights": str(tmp_path / "merged"), "sample_steps": 3,
        "sample_solver": "renoise", "sample_guidance": 1.0, "sample_size": "3x4x4"},
        data={"num_samples": 24, "batch_size": 4, "workers": 0})
    plain = write_config(tmp_path / "plain.json", student)
    g = torch.Generator().manual_seed(5)
    save_file({"context": torch.randn(4, 5, 32, generator=g), "noise": torch.randn(4, 4, 3, 4, 4, generator=g)},
              tmp_path / "cond.safetensors")
    for name, where in (("trained", [path, "--checkpoint", run_dir(tmp_path, "dmd")]), ("exported", [plain])):
        wanfw("sample", *where, "--inputs", tmp_path / "cond.safetensors", "--seed", "9", "--out",
              tmp_path / f"{name}.safetensors", check=0)
    trained, exported = (load_file(tmp_path / f"{n}.safetensors")["latents"] for n in ("trained", "exported"))
    assert trained.shape == (4, 4, 3, 4, 4)
    torch.testing.assert_close(exported, trained, rtol=1e-4, atol=1e-5)  # merging rounds W + BA once


@pytest.mark.parametrize("task, model", [
    ("ti2v", {"inputs": "data", "regression_weight": 0.5}),
    ("i2v", {"in_dim": 12, "teacher_in_dim": 12}),
    ("t2v", {"inputs": "data"}),
], ids=["ti2v_data_regression", "i2v_data_free", "t2v_noised_data"])
def test_every_task_and_input_trains_a_generator_whose_steps_move_it(tmp_path, task, model):
    """ti2v keeps the data's first frame clean (and out of the losses), i2v conditions every
    network on the image, inputs: data starts G from noised data latents; the optional regression
    term is logged beside the DMD loss."""
    teacher_folder = tmp_path / "teacher"
    extra = {"in_channels": 12} if task == "i2v" else {}
    reference_model(teacher_folder, seed=3, **extra)
    fields = {k: v for k, v in model.items() if k not in ("in_dim", "teacher_in_dim")}
    dims = {"teacher_in_dim": model["teacher_in_dim"]} if "teacher_in_dim" in model else {}
    path = config(tmp_path, teacher_folder, steps=3, task=task, **fields, **dims)
    c = __import__("json").loads(path.read_text())
    c["data"]["buckets"] = ["3x4x4"]
    path.write_text(__import__("json").dumps(c))
    wanfw("run", path, check=0)
    rows = read_csv(run_dir(tmp_path, "dmd") / "metrics.csv")
    generator = rows[0]
    assert 0.05 < float(generator["dmd_gradient"]) < 20
    if "regression_weight" in model:
        assert float(generator["regression_loss"]) > 0
    saved = checkpoints(run_dir(tmp_path, "dmd"))
    first, last = (load_file(p / "model.safetensors") for p in (saved[0], saved[-1]))
    initial = load_file(teacher_folder / "diffusion_pytorch_model.safetensors")
    assert not torch.equal(first["generator.head.head.weight"], initial["proj_out.weight"])  # step 1 trained G
    assert not torch.equal(first["critic.head.head.weight"], last["critic.head.head.weight"])  # steps 2-3 the critic


@pytest.mark.own_entry
def test_the_4_step_dmd_student_samples_closer_to_the_teachers_40_steps_than_4_step_teacher_or_regression(tmp_path):
    """examples/dmd-tiny.yaml as its header says: the quickstart's model trained with one caption
    for its 8 patterns (a multimodal distribution per caption), distilled for 300 steps into a
    half-depth 4-step generator by DMD, and by velocity matching for as many steps. Distance to the
    teacher's 40-step samples (seed 1001): MMD^2 over 200 latents each, drawn from held-out seeds
    (training used run.seed 42)."""
    examples = SOURCE / "examples"
    one_caption = one_caption_teacher(tmp_path, "3x8x8", "teacher-one-caption")
    wanfw("run", examples / "dmd-tiny.yaml", cwd=tmp_path, check=0)
    regression = ["--set", "run.name=velocity-tiny", "--set", "model.objective=velocity", "--set",
                  "model.inputs=teacher_trajectory", "--set", "model.sample_steps=4", "--set",
                  "model.sample_guidance=1.0", "--set", "model.sample_shift=3.0"]
    wanfw("run", examples / "dmd-tiny.yaml", *regression, cwd=tmp_path, check=0)

    teacher = [examples / "quickstart.yaml", "--checkpoint", "runs/teacher-one-caption/version_0", *one_caption,
               "--set", "model.sample_guidance=1.0", "--set", "model.sample_shift=3.0"]
    distances = distances_to_the_teachers_40_steps(tmp_path, teacher, {
        "velocity-matching student, 4 steps": [examples / "dmd-tiny.yaml", "--checkpoint",
                                               "runs/velocity-tiny/version_0", *regression],
        "dmd student, 4 steps": [examples / "dmd-tiny.yaml", "--checkpoint", "runs/dmd-tiny/version_0"]})
    print("MMD^2 to the teacher's 40-step samples: " + "; ".join(f"{k} {v:.4f}" for k, v in distances.items()))
    dmd_distance = distances["dmd student, 4 steps"]
    assert dmd_distance < 0.5 * distances["teacher 4 steps"]
    assert dmd_distance < 0.5 * distances["velocity-matching student, 4 steps"]


@pytest.mark.every_vector_unit
def test_a_shared_base_with_gradient_checkpointing_trains_as_without_it(tmp_path, teacher):
    # The critic's blocks recompute with the critic's adapters, whatever the shared DiT selects by
    # the time backward runs (the generator's adapters got the critic's gradients before), whole
    # or in chunks of tokens (each chunk's passes under the forward's selection).
    # Chunks of 4 of the 12 tokens run the few-row kernels, whose rounding differs: each step's
    # update is bounded as in the layout test above.
    adapters = {"lora": {"rank": 4}, "critic_lora": {"rank": 4}, "shared_base": True}
    history = lambda name: [trained(p) for p in checkpoints(run_dir(tmp_path, name))]
    wanfw("run", config(tmp_path, teacher, name="plain", **adapters), check=0)
    tolerance = tiny_wan_rounding(GLOBAL_BATCH, TOKENS, layers=2 * 5)
    for name, chunks in (("checkpointed", 1), ("in_chunks", 3)):
        wanfw("run", config(tmp_path, teacher, name=name, gradient_checkpointing=True, recompute_chunks=chunks,
                            **adapters), check=0)
        c = assert_same_training_history(history(name), history("plain"), lr=1e-3, tolerance=tolerance)
        print(f"{name} vs plain: {c}")
