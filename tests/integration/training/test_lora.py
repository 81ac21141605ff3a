"""LoRA fine-tuning of the tiny Wan DiT (model.lora): only the adapters train, checkpoint and
synchronise; the base stays bitwise what it was; the exported adapter loads in diffusers with its own
LoRA loader and gives wanfw's predictions. Adapter files written elsewhere: test_lora_files.py."""

import json

import pytest
import torch
from safetensors.torch import load_file

from harness.equivalence import assert_same_training, assert_same_training_history, compare, history
from harness.layouts import CPU, DDP, LR, TINY_WAN, run_on
from harness.lora import LAYERS, base, diffusers_name, experiment, inputs, lora_model, predict  # noqa: F401 (a fixture)
from harness.references import TOLERANCE, expert_pipeline, padded, reference_model
from harness.runs import SOURCE, base_config, checkpoints, losses, run_dir, wanfw, write_config


def trained(tmp_path, base, name="lora", **lora):
    path = experiment(tmp_path, name, lora_model(base, **lora), checkpoint_every=20)
    wanfw("run", path, check=0)
    return path


def test_a_lora_run_learns_and_trains_checkpoints_and_optimises_the_adapters_alone(tmp_path, base):
    path = experiment(tmp_path, "lora", lora_model(base), steps=40, checkpoint_every=40)
    result = wanfw("run", path, check=0)
    assert "adapters of rank 4 (alpha 8) on 20 layers of the DiT: 8,448 trainable parameters" in result.stdout
    loss = losses(tmp_path, "lora")
    first, last = sum(loss[:5]) / 5, sum(loss[-5:]) / 5
    print(f"tiny LoRA: mean loss of steps 1-5 {first:.4g}, of steps 36-40 {last:.4g}")
    assert last < 0.9 * first
    step = checkpoints(run_dir(tmp_path, "lora"))[-1]
    adapters = {f"{layer}.lora_{m}.weight" for layer in LAYERS for m in "AB"}
    assert set(load_file(step / "model.safetensors")) == adapters
    assert {k.rsplit(".", 1)[0] for k in load_file(step / "optimizer.safetensors")} == adapters


def test_the_base_weights_stay_bitwise_unchanged_and_the_merged_export_adds_exactly_the_adapters(tmp_path, base):
    path = trained(tmp_path, base)
    wanfw("export", path, "--checkpoint", run_dir(tmp_path, "lora"), "--merge", "--out", tmp_path / "merged", check=0)
    merged = load_file(tmp_path / "merged" / "diffusion_pytorch_model.safetensors")
    wanfw("export", path, "--set", "model.lora.rank=0", "--out", tmp_path / "official", check=0)
    original = load_file(tmp_path / "official" / "diffusion_pytorch_model.safetensors")
    adapters = load_file(checkpoints(run_dir(tmp_path, "lora"))[-1] / "model.safetensors")
    assert merged.keys() == original.keys()
    for name, tensor in original.items():
        layer = name.rsplit(".", 1)[0]
        if layer in LAYERS and name.endswith(".weight"):
            delta = 2.0 * adapters[f"{layer}.lora_B.weight"] @ adapters[f"{layer}.lora_A.weight"]
            assert delta.abs().max() > 0  # the adapter trained
            assert torch.allclose(merged[name] - tensor, delta, atol=1e-6, rtol=0), name
        else:  # every tensor without an adapter: bitwise the base's
            assert torch.equal(merged[name], tensor), name


def test_adapters_on_a_dit_without_weights_are_warned_of_and_indeed_get_no_gradient(tmp_path, base):
    # The official initialisation zeroes the output head: nothing before it gets a gradient.
    unweighted = {k: v for k, v in lora_model(base).items() if k != "weights"}
    result = wanfw("run", experiment(tmp_path, "scratch", unweighted, steps=3, checkpoint_every=3), check=0)
    assert "output head is all zeros" in result.stderr and "set model.weights" in result.stderr
    assert "train the model whole (lora.rank: 0), export it, and use the export as model.weights" in result.stderr
    adapters = load_file(checkpoints(run_dir(tmp_path, "scratch"))[-1] / "model.safetensors")
    assert all(not t.any() for name, t in adapters.items() if "lora_B" in name)
    # validate says it before any run; export, which trains nothing, does not.
    config = tmp_path / "scratch.json"
    assert "output head is all zeros" in wanfw("validate", config, check=0).stderr
    exported = wanfw("export", config, "--checkpoint", run_dir(tmp_path, "scratch"), "--out", tmp_path / "out", check=0)
    assert "output head is all zeros" not in exported.stdout + exported.stderr
    with_base = wanfw("run", experiment(tmp_path, "based", lora_model(base), steps=1), check=0)
    assert "output head is all zeros" not in with_base.stdout + with_base.stderr


def tensor_bytes(path):
    """The bytes of a safetensors file's tensor data (its size less the header)."""
    with open(path, "rb") as f:
        return path.stat().st_size - 8 - int.from_bytes(f.read(8), "little")


def test_the_checkpoint_size_scales_with_the_rank(tmp_path, base):
    sizes = {}
    for rank in (2, 8, 0):
        path = experiment(tmp_path, f"rank{rank}", lora_model(base, rank=rank), steps=1, checkpoint_every=1)
        wanfw("run", path, check=0)
        sizes[rank] = tensor_bytes(checkpoints(run_dir(tmp_path, f"rank{rank}"))[-1] / "model.safetensors")
    print(f"model.safetensors tensor bytes by rank (0: every weight): {sizes}")
    per_rank = 4 * sum(48 + (96 if "ffn" in layer else 48) for layer in LAYERS)  # float32 (in + out) a layer
    assert sizes[2] == 2 * per_rank and sizes[8] == 8 * per_rank
    assert sizes[0] == 4 * 91_936  # every weight of the tiny DiT


def test_a_killed_lora_run_resumes_bitwise_with_dropout_and_gradient_checkpointing(tmp_path, base):
    model = {**lora_model(base, dropout=0.2), "gradient_checkpointing": True}
    path = experiment(tmp_path, "resume", model, steps=6, checkpoint_every=3)
    wanfw("run", path, check=0)
    uninterrupted = load_file(checkpoints(run_dir(tmp_path, "resume"))[-1] / "model.safetensors")
    late = checkpoints(run_dir(tmp_path, "resume"))[-1]
    for f in late.iterdir():
        f.unlink()
    late.rmdir()
    resumed = wanfw("run", path, "--resume", "auto", check=0)
    assert "step-00000003" in resumed.stdout
    again = load_file(checkpoints(run_dir(tmp_path, "resume"))[-1] / "model.safetensors")
    assert all(torch.equal(again[k], uninterrupted[k]) for k in uninterrupted)
    early = load_file(checkpoints(run_dir(tmp_path, "resume"))[0] / "model.safetensors")
    assert not all(torch.equal(early[k], again[k]) for k in again)  # steps 4-6 trained


@pytest.mark.every_vector_unit
def test_dropout_masks_follow_the_sample_so_two_ranks_of_b_equal_one_rank_of_2b(tmp_path, base):
    model = {**lora_model(base, dropout=0.3), "timestep_sampling": "logit_normal"}
    # B starts at zero: each step is bounded with its own moments (equivalence.py's history).
    every_step = {"checkpoint": {"every": 1}}
    one = run_on(tmp_path, "one_x4", CPU, 4, model, **every_step)
    assert set(one.weights) == {f"{layer}.lora_{m}.weight" for layer in LAYERS for m in "AB"}
    layouts = {"ddp 2x2": (DDP, 2, 2), "accumulated 2x2": ({"name": "grad_accum", "steps": 2, "inner": CPU}, 2, 1),
               # replicas re-freeze their base and draw their own masks
               "data_parallel 2 replicas": ({"name": "data_parallel", "devices": ["cpu", "cpu"]}, 4, 1)}
    for name, (strategy, batch, ranks) in layouts.items():
        run_on(tmp_path, name.replace(" ", "_"), strategy, batch, model, ranks, **every_step)
        c = assert_same_training_history(history(tmp_path, name.replace(" ", "_")), history(tmp_path, "one_x4"),
                                         lr=LR, tolerance=TINY_WAN)
        print(f"adapters, {name} vs 1x4: {c}")
    # The masks change the update by far more than any layout's rounding.
    without = run_on(tmp_path, "no_dropout", CPU, 4, {**model, "lora": {**model["lora"], "dropout": 0.0}})
    assert compare(without, one, lr=LR, tolerance=TINY_WAN).weights > 100


EXPERTS = ("high_noise_model", "low_noise_model")


def test_both_a14b_experts_train_adapters_of_their_own_on_their_samples_and_export_one_each(tmp_path):
    folder, _, _ = expert_pipeline(tmp_path)
    model = {"name": "wan22_flow_matching", "preset": "tiny", "weights": str(folder), "expert": "both",
             "boundary": 500, "timestep_sampling": "logit_normal", "gradient_checkpointing": True,
             "lora": {"rank": 4, "alpha": 8, "dropout": 0.3}}
    # Dropout masks drawn for the samples an expert holds: ddp 2 x 2 equals one rank of 4.
    one = run_on(tmp_path, "one_x4", CPU, 4, model)
    two = run_on(tmp_path, "two_x2", {**DDP, "find_unused_parameters": True}, 2, model, ranks=2)
    assert set(one.weights) == {f"{e}.{layer}.lora_{m}.weight" for e in EXPERTS for layer in LAYERS for m in "AB"}
    for expert in EXPERTS:  # each expert's adapters trained (logit-normal t falls on both sides of 500)
        assert any(one.weights[f"{expert}.{layer}.lora_B.weight"].any() for layer in LAYERS), expert
    # AdamW divides by each gradient's own size: where cross-attention's gradient on random text
    # cancels to almost nothing, rounding moves a weight by a good part of a step (equivalence.py).
    print(f"two experts' adapters, ddp 2x2 vs 1x4: {assert_same_training(two, one, lr=LR, tolerance=TINY_WAN)}")
    # Exported as one adapter per expert folder; merged, each expert answers its side of the boundary
    # as the run does with its adapters.
    path, run = tmp_path / "one_x4.json", tmp_path / "runs" / "one_x4" / "version_0"
    wanfw("export", path, "--checkpoint", run, "--out", tmp_path / "adapter", check=0)
    for expert in EXPERTS:
        keys = set(load_file(tmp_path / "adapter" / expert / "wan_lora.safetensors"))
        assert "diffusion_model.blocks.0.self_attn.q.lora_A.weight" in keys
        assert (tmp_path / "adapter" / expert / "pytorch_lora_weights.safetensors").exists()
    wanfw("export", path, "--checkpoint", run, "--merge", "--out", tmp_path / "merged", check=0)
    g = torch.Generator().manual_seed(4)
    given = {"x": torch.randn(2, 4, 3, 4, 4, generator=g), "t": torch.tensor([900.0, 100.0]),
             "context": torch.randn(2, 4, 32, generator=g)}
    at_run_time = predict(tmp_path, path, given, "--checkpoint", run)
    merged_model = {k: v for k, v in model.items() if k != "lora"}
    merged = write_config(tmp_path / "merged.json", base_config(tmp_path / "runs", model={
        **merged_model, "weights": str(tmp_path / "merged")}))
    assert torch.allclose(predict(tmp_path, merged, given), at_run_time, atol=1e-5, rtol=0)


@pytest.mark.every_vector_unit
def test_the_diffusers_export_loaded_by_diffusers_gives_wanfws_predictions_and_the_merge_equals_run_time(
        tmp_path, base):
    path = trained(tmp_path, base)
    given = inputs()
    ours = predict(tmp_path, path, given, "--checkpoint", run_dir(tmp_path, "lora"))
    wanfw("export", path, "--checkpoint", run_dir(tmp_path, "lora"), "--out", tmp_path / "adapter", check=0)
    reference = reference_model(tmp_path / "unused", seed=5)
    reference.model.load_lora_adapter(str(tmp_path / "adapter" / "pytorch_lora_weights.safetensors"),
                                      prefix="transformer", adapter_name="wanfw")
    with torch.no_grad():
        expected = reference(given["x"], given["t"], given["context"]).sample
    without = predict(tmp_path, write_config(tmp_path / "plain.json", {
        **base_config(tmp_path / "runs", model={**lora_model(base), "lora": {"rank": 0}})}), given)
    print(f"diffusers with the adapter vs wanfw: {(ours - expected).abs().max():.3g} "
          f"(the adapter moves outputs by {(ours - without).abs().max():.3g})")
    assert (ours - without).abs().max() > 100 * TOLERANCE
    assert torch.allclose(ours, expected, atol=TOLERANCE, rtol=0)
    # docs/lora.md's way back: the base wanfw exported, read by from_single_file with a local
    # config written from wanfw's, and the adapter loaded into it: the same predictions.
    plain = tmp_path / "plain.json"
    wanfw("export", plain, "--out", tmp_path / "base-export", check=0)
    from diffusers import WanTransformer3DModel
    c = json.loads((tmp_path / "base-export" / "config.json").read_text())
    WanTransformer3DModel(patch_size=c["patch_size"], num_attention_heads=c["num_heads"],
                          attention_head_dim=c["dim"] // c["num_heads"], in_channels=c["in_dim"],
                          out_channels=c["out_dim"], text_dim=c["text_dim"], freq_dim=c["freq_dim"],
                          ffn_dim=c["ffn_dim"], num_layers=c["num_layers"], cross_attn_norm=True,
                          qk_norm="rms_norm_across_heads", eps=c["eps"]).save_config(tmp_path / "base-config" / "transformer")
    transformer = WanTransformer3DModel.from_single_file(
        str(tmp_path / "base-export" / "diffusion_pytorch_model.safetensors"), config=str(tmp_path / "base-config"),
        subfolder="transformer")
    transformer.load_lora_adapter(str(tmp_path / "adapter" / "pytorch_lora_weights.safetensors"), adapter_name="mine")
    with torch.no_grad():
        single_file = transformer(given["x"], given["t"], padded(given["context"])).sample  # as the pipelines pad
    assert torch.allclose(ours, single_file, atol=TOLERANCE, rtol=0), (ours - single_file).abs().max()
    # The Wan / ComfyUI file holds the same matrices under the official names, with alpha.
    wan_file = load_file(tmp_path / "adapter" / "wan_lora.safetensors")
    peft = load_file(tmp_path / "adapter" / "pytorch_lora_weights.safetensors")
    for layer in LAYERS:
        assert torch.equal(wan_file[f"diffusion_model.{layer}.lora_A.weight"],
                           peft[f"transformer.{diffusers_name(layer)}.lora_A.weight"])
        assert wan_file[f"diffusion_model.{layer}.alpha"].item() == 8.0
    # Merged into full weights: the same outputs as the adapter applied at run time.
    wanfw("export", path, "--checkpoint", run_dir(tmp_path, "lora"), "--merge", "--out", tmp_path / "merged", check=0)
    merged_config = write_config(tmp_path / "merged.json", base_config(
        tmp_path / "runs", model={"name": "wan22_flow_matching", "preset": "tiny", "weights": str(tmp_path / "merged")}))
    merged = predict(tmp_path, merged_config, given)
    assert torch.allclose(merged, ours, atol=1e-5, rtol=0), (merged - ours).abs().max()


def test_the_lora_examples_validate_and_fit_the_gpus_they_name():
    for example, gpu in (("lora-ti2v-5b.yaml", 24), ("lora-t2v-a14b-low-noise.yaml", 80)):
        path = SOURCE / "examples" / example
        wanfw("validate", path, check=0)
        info = wanfw("model-info", path, check=0).stdout
        print(info)
        # The memory plan's verdict, activations of the example's bucket included.
        total = next(l for l in info.splitlines() if l.strip().startswith("total: device"))
        fits = f"fits {'a' if gpu == 24 else 'an'} {gpu} GB GPU"
        assert fits in total, info
        assert "resident block(s) in bfloat16" in info
        assert fits in path.read_text()
