"""Training a VACE model's control branch on the tiny DiT (4 blocks, hints after blocks 0 and 2):
through adapters it learns the control that determines its target; trained whole it moves the
branch alone; and either way it ends at the same weights on every layout (ddp, gradient
accumulation, sequence parallelism, fsdp) and, with block swap streaming its blocks, bit for bit."""
import json
import re

import pytest
import torch
from safetensors.torch import load_file

from harness.equivalence import assert_same_training, tiny_wan_rounding
from harness.layouts import CPU, DDP, FSDP, GLOBAL_BATCH, LR, TOKENS, run_on
from harness.references import reference_folder
from harness.runs import SOURCE, base_config, checkpoints, read_csv, run_dir, wanfw, write_run_config
from harness.vace import control_dataset, official_name

BASE = dict(num_layers=4, vace_layers=[0, 2], vace_in_channels=72)  # the tiny-vace preset's shape
# Every main and VACE block, and the context's embedding and the projections as one more.
TOLERANCE = tiny_wan_rounding(GLOBAL_BATCH, TOKENS, layers=4 + 2 + 1)


@pytest.fixture
def base(tmp_path):
    return reference_folder(tmp_path / "base", seed=11, **BASE)


def vace(base, **model):
    return {"name": "wan22_flow_matching", "preset": "tiny-vace", "text_len": 4, "weights": str(base),
            "timestep_sampling": "logit_normal", **model}


LORA = {"lora": {"rank": 4, "targets": ["vace_blocks.*"]}}


def control_run(tmp_path, name, data, model, steps=200, lr=1e-2):
    """`steps` steps on a control data set; returns the run's config and the mean loss of its first
    and of its last 10 steps."""
    config = base_config(tmp_path / "runs", model={"name": "wan22_flow_matching", "preset": "tiny-vace", **model},
                         data={"name": "latent_shards", "path": str(data), "batch_size": 4, "workers": 0},
                         optimizer={"lr": lr, "weight_decay": 0.0}, scheduler={"decay": "constant"},
                         trainer={"max_steps": steps, "log_every": 1, "progress": "lines"},
                         checkpoint={"every": 0, "keep_last": 1})
    path = write_run_config(tmp_path, name, config)
    wanfw("run", path, check=0)
    losses = [float(row["loss"]) for row in read_csv(run_dir(tmp_path, name) / "metrics.csv") if row.get("loss")]
    return path, sum(losses[:10]) / 10, sum(losses[-10:]) / 10


def test_a_vace_lora_learns_the_control_that_determines_its_target(tmp_path, base):
    # Adapters on the VACE blocks of a VACE model (random weights, its projections not zero), on
    # data whose control is the target; with every sample's control another sample's, the same run
    # learns only what a control that tells nothing allows.
    model = {"weights": str(base), "lora": {"rank": 4, "targets": ["vace_blocks.*"]}}
    _, start, learned = control_run(tmp_path, "lora", control_dataset(tmp_path / "control", 32), model, steps=400)
    _, _, blind = control_run(tmp_path, "shuffled", control_dataset(tmp_path / "shuffled", 32, shuffled=True), model,
                              steps=400)
    assert learned < 0.85 * start and learned < 0.95 * blind, (start, learned, blind)


def test_the_branch_trained_whole_learns_and_exports_beside_the_unchanged_base(tmp_path, base):
    path, before, after = control_run(tmp_path, "branch", control_dataset(tmp_path / "control", 32),
                                      {"weights": str(base)})
    assert after < 0.7 * before, (before, after)
    last = checkpoints(run_dir(tmp_path, "branch"))[-1]
    checkpoint = load_file(last / "model.safetensors")
    assert checkpoint and all(name.startswith("vace_") for name in checkpoint)
    wanfw("export", path, "--checkpoint", last, "--out", tmp_path / "export", check=0)
    exported = load_file(tmp_path / "export" / "diffusion_pytorch_model.safetensors")
    assert '"model_type": "vace"' in (tmp_path / "export" / "config.json").read_text()
    original = {official_name(k): v for k, v in load_file(base / "diffusion_pytorch_model.safetensors").items()}
    assert exported.keys() == original.keys()
    for name, tensor in exported.items():
        assert torch.equal(tensor, checkpoint[name] if name.startswith("vace_") else original[name]), name
    assert not torch.equal(exported["vace_blocks.1.after_proj.weight"], original["vace_blocks.1.after_proj.weight"])


@pytest.mark.parametrize("trained", ["lora", "whole"])
def test_the_branch_ends_at_the_same_weights_on_every_layout(tmp_path, base, trained):
    model = vace(base, **(LORA if trained == "lora" else {}))
    reference = run_on(tmp_path, "single_1x4", CPU, 4, model)
    layouts = {"ddp_2x2": (DDP, 2, 2), "grad_accum_2x2": ({"name": "grad_accum", "steps": 2, "inner": CPU}, 2, 1),
               "sequence_parallel_2": ({**DDP, "sequence_parallel": 2}, 4, 2)}
    if trained == "whole":
        layouts["fsdp_2x2"] = (FSDP, 2, 2)
    assert all(name.startswith("vace_") for name in reference.weights)  # the branch alone trains...
    assert all(v.abs().max() > 0 for v in reference.exp_avg_sq.values())  # ...every tensor of it
    for name, (strategy, batch, ranks) in layouts.items():
        got = run_on(tmp_path, name, strategy, batch, model, ranks)
        assert got.weights.keys() == reference.weights.keys()
        assert_same_training(got, reference, lr=LR, tolerance=TOLERANCE)


def test_sequence_parallelism_pads_the_branchs_context_with_the_tokens_it_splits(tmp_path, base):
    # 27 tokens a sample (3 x 6 x 6 latents): one rank's share padded, the context's as the latents'.
    model, data = vace(base, **LORA), {"buckets": ["3x6x6"]}
    reference = run_on(tmp_path, "single", CPU, 4, model, data=data)
    split = run_on(tmp_path, "sp2", {**DDP, "sequence_parallel": 2}, 4, model, 2, data=data)
    assert_same_training(split, reference, lr=LR, tolerance=tiny_wan_rounding(GLOBAL_BATCH, 27, layers=4 + 2 + 1))


def test_block_swap_streams_the_vace_blocks_and_ends_bitwise_as_the_run_without_it(tmp_path, base):
    model = vace(base, gradient_checkpointing=True, **LORA)
    resident = run_on(tmp_path, "resident", CPU, 4, model)
    swapped = run_on(tmp_path, "swapped", CPU, 4, model, block_swap={"blocks": 5, "ring": 2})
    for part in ("weights", "exp_avg", "exp_avg_sq"):
        a, b = getattr(swapped, part), getattr(resident, part)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in b), part


@pytest.mark.parametrize("trained", ["lora", "whole"])
def test_checkpointing_recompute_in_chunks_and_offload_train_the_branch_as_plain_backward_does(tmp_path, base, trained):
    model = vace(base, **(LORA if trained == "lora" else {}))
    reference = run_on(tmp_path, "plain", CPU, 4, model)
    for name, memory in {"checkpointing": {"gradient_checkpointing": True},
                         "chunks_3": {"gradient_checkpointing": True, "recompute_chunks": 3},
                         "offload": {"gradient_checkpointing": True, "activation_offload": True}}.items():
        got = run_on(tmp_path, name, CPU, 4, {**model, **memory})
        assert_same_training(got, reference, lr=LR, tolerance=TOLERANCE)


def test_the_tiny_vace_example_trains_a_new_branch_on_the_quickstarts_model(tmp_path):
    # The commands examples/vace-tiny.yaml lists, from a folder where its relative paths resolve
    # (the quickstart's base shortened to 60 steps).
    (tmp_path / "examples").symlink_to(SOURCE / "examples")
    for command in (["run", "examples/quickstart.yaml", "--set", "run.name=vace-base", "--set", "trainer.max_steps=60"],
                    ["export", "examples/quickstart.yaml", "--checkpoint", "runs/vace-base/version_0", "--out",
                     "runs/vace-base-export"],
                    ["data", "synth", "runs/vace-data", "--vace", "72", "--buckets", "3x8x8", "--samples", "256"]):
        wanfw(*command, check=0, cwd=tmp_path)
    out = wanfw("run", "examples/vace-tiny.yaml", check=0, cwd=tmp_path).stdout
    first, last = map(float, re.search(r"loss ([\d.]+) \(mean of steps 1-20\) -> ([\d.]+) \(steps 181-200\)", out).groups())
    assert last < 0.5 * first, out


def test_data_synth_writes_the_control_context_in_the_channels_the_model_declares_and_refuses_too_few(tmp_path):
    info = wanfw("model-info", SOURCE / "examples" / "quickstart.yaml", "--set", "model.preset=tiny-vace", check=0).stdout
    channels = int(re.search(r"vace_context \[(\d+), frames, height, width\]", info).group(1))
    wanfw("data", "synth", tmp_path / "set", "--vace", str(channels), "--samples", "2", "--buckets", "2x8x8", check=0)
    manifest = json.loads((tmp_path / "set" / "manifest.json").read_text())
    sample = manifest["samples"][0]["fields"]
    context = load_file(tmp_path / "set" / sample["vace_context"]["shard"])[sample["vace_context"]["tensor"]].float()
    latents = load_file(tmp_path / "set" / sample["latents"]["shard"])[sample["latents"]["tensor"]].float()
    assert list(context.shape) == [channels, 2, 8, 8]
    assert torch.equal(context[:4], torch.zeros_like(latents)) and torch.equal(context[4:8], latents)
    assert torch.equal(context[8:], torch.ones(channels - 8, 2, 8, 8))  # the mask: every channel left
    refused = wanfw("data", "synth", tmp_path / "few", "--vace", "8", check=2)
    assert "--vace 8 leaves no mask channel beside 2 x 4 latent channels" in refused.stderr
