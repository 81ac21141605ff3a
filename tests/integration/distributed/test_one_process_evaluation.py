"""The commands that read a checkpoint run as one process, without the launcher, on the config a
multi-rank run trained with: `wanfw export`, `sample` and `predict` on checkpoints of ddp and fsdp
with the two experts on network groups, network groups under accumulation, sequence parallelism
and data_parallel replicas. Each reads its checkpoint whole (export writes exactly the checkpoint's
weights, and predict and sample on the checkpoint equal predict and sample on that export), and
each export ends at the single-device run's weights within the rounding the layouts may differ by.
The tiny two-expert Wan DiT, trained with real torchrun and Gloo on loopback."""

import dataclasses

import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.equivalence import assert_same_training, checkpoint, state
from harness.launch import torchrun
from harness.layouts import CPU, DDP, FSDP, LR, TINY_WAN, experiment, run_on
from harness.runs import wanfw

MODEL = {"name": "wan22_flow_matching", "preset": "tiny", "text_len": 4, "expert": "both", "boundary": 500,
         "timestep_sampling": "logit_normal", "sample_steps": 3, "sample_guidance": 3.0}
EXPERTS = ("high_noise_model", "low_noise_model")


def placed(strategy, *sizes):
    return {**strategy, "network_groups": list(sizes)}


LAYOUTS = {  # name: (strategy, batch per micro-batch, ranks); every one a global batch of 4
    "ddp_network_groups": (placed(DDP, 1, 1), 2, 2),
    "fsdp_network_groups": (placed(FSDP, 1, 1), 2, 2),
    "network_groups_accumulating_2": ({"name": "grad_accum", "steps": 2, "inner": placed(DDP, 1, 1)}, 1, 2),
    "sequence_parallel_2": ({**DDP, "sequence_parallel": 2, "find_unused_parameters": True}, 4, 2),
    "data_parallel_2_replicas": ({"name": "data_parallel", "devices": ["cpu", "cpu"]}, 4, 1),
}


def exported(folder):
    """An export's tensors under the checkpoint's names (<expert>_model.<official name>)."""
    return {f"{expert}.{name}": tensor for expert in EXPERTS
            for name, tensor in load_file(folder / expert / "diffusion_pytorch_model.safetensors").items()}


def inputs(tmp_path):
    """predict's inputs (one sample on each side of the boundary) and sample's conditioning."""
    g = torch.Generator().manual_seed(11)
    save_file({"x": torch.randn(2, 4, 3, 4, 4, generator=g), "t": torch.tensor([800.0, 300.0]),
               "context": torch.randn(2, 4, 32, generator=g)}, tmp_path / "predict.safetensors")
    save_file({"context": torch.randn(1, 4, 32, generator=g), "negative_context": torch.randn(1, 4, 32, generator=g),
               "noise": torch.randn(1, 4, 3, 4, 4, generator=g)}, tmp_path / "cond.safetensors")


def evaluate(tmp_path, config, tag, *weights):
    """export (with a checkpoint), predict and sample as one process: no torchrun. Returns what
    each wrote: (the export's tensors or None, predict's v, sample's latents)."""
    out = {}
    if weights:
        wanfw("export", config, *weights, "--out", tmp_path / f"export-{tag}", check=0)
        out["export"] = exported(tmp_path / f"export-{tag}")
    wanfw("predict", config, *weights, "--inputs", tmp_path / "predict.safetensors",
          "--out", tmp_path / f"v-{tag}.safetensors", "--device", "cpu", check=0)
    wanfw("sample", config, *weights, "--inputs", tmp_path / "cond.safetensors", "--seed", "3",
          "--out", tmp_path / f"s-{tag}.safetensors", "--device", "cpu", check=0)
    return (out.get("export"), load_file(tmp_path / f"v-{tag}.safetensors")["v"],
            load_file(tmp_path / f"s-{tag}.safetensors")["latents"])


@pytest.fixture(scope="module")
def single_device_export(tmp_path_factory):
    """The single-device run's state and its export."""
    root = tmp_path_factory.mktemp("single")
    one = run_on(root, "one", CPU, 4, MODEL)
    inputs(root)
    export, _, _ = evaluate(root, root / "one.json", "one", "--checkpoint", checkpoint(root, "one"))
    return one, export


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_export_sample_and_predict_read_a_multi_rank_checkpoint_as_one_process(tmp_path, single_device_export, layout):
    strategy, batch, ranks = LAYOUTS[layout]
    config = experiment(tmp_path, layout, strategy, batch, MODEL)
    if ranks > 1:
        result = torchrun("run", config, nproc=ranks)
        assert result.returncode == 0, result.stdout + result.stderr
    else:
        wanfw("run", config, check=0)
    inputs(tmp_path)
    trained = state(tmp_path, layout)
    export, v, latents = evaluate(tmp_path, config, layout, "--checkpoint", checkpoint(tmp_path, layout))
    # The checkpoint read whole, whatever wrote its pieces: the export is its weights, bit for bit.
    assert export.keys() == trained.weights.keys()
    for name, tensor in trained.weights.items():
        assert torch.equal(export[name], tensor), name
    # ... and what predict and sample computed on it is what they compute on that export.
    config_on_export = experiment(tmp_path, "on-export", CPU, 4, {**MODEL, "weights": str(tmp_path / f"export-{layout}")})
    _, v_export, latents_export = evaluate(tmp_path, config_on_export, "on-export")
    assert torch.equal(v, v_export) and torch.equal(latents, latents_export)
    # The layout's export ends at the single-device run's weights.
    one, one_export = single_device_export
    assert one_export.keys() == export.keys()
    assert_same_training(dataclasses.replace(trained, weights=export), one, lr=LR, tolerance=TINY_WAN)
    assert_same_training(dataclasses.replace(one, weights=one_export), one, lr=LR, tolerance=TINY_WAN)


def test_an_evaluating_command_started_on_several_ranks_refuses_rather_than_race_and_writes_nothing(tmp_path):
    config = experiment(tmp_path, "placed", placed(DDP, 1, 1), 2, MODEL)
    result = torchrun("export", config, "--out", tmp_path / "export", nproc=2)
    assert result.returncode != 0
    assert "this command runs as one process, but torchrun started 2 ranks" in result.stdout + result.stderr
    assert "run it without torchrun or srun" in result.stdout + result.stderr
    assert not (tmp_path / "export").exists()


def test_a_device_that_is_no_device_name_is_a_usage_error(tmp_path):
    config = experiment(tmp_path, "one", CPU, 4, MODEL)
    result = wanfw("sample", config, "--count", "1", "--out", tmp_path / "s.safetensors", "--device", "gpu0")
    assert result.returncode == 2
    assert "--device 'gpu0' is not a device: use auto, cpu, cuda or cuda:N" in result.stderr
    assert not (tmp_path / "s.safetensors").exists()
