"""optimizer.state host: the fp32 master weights, AdamW's moments and the ema averages live in host
memory, and the device keeps only the weights it computes with. On a CPU the host is the device, so
a run with the state on the host must end with the very checkpoint of the same run without it, bit
for bit: the gradients copied exactly, the same clipping over the same values, the same fused AdamW
kernel, the same averages, whether each gradient moves as soon as backward has accumulated it
(single) or after backward (ddp, data_parallel). The tiny Wan DiT with its random noise and
timesteps; every layout that keeps whole weights on each rank, sequence parallelism among them;
DMD's two phases, whose networks run several times a step; a LoRA whose frozen blocks stream from
host memory; a DiT trained whole whose blocks stream, trained weights and all; a resume that moves
the state either way (one device, fsdp) or streams blocks; the NaN guard; fsdp, each rank's shards
on the host (ZeRO-Offload with sharding)."""

import shutil

import pytest
import torch

from harness.block_swap import base, lora, trained  # noqa: F401 (a fixture)
from harness.distill import teacher  # noqa: F401 (a fixture)
from harness.dmd import config as dmd_config
from harness.equivalence import checkpoint, checkpoint_file
from harness.launch import torchrun
from harness.layouts import CPU, DDP, FSDP, LAYOUTS, experiment, run_on, tiny_wan
from harness.runs import base_config, checkpoints, losses, wanfw, write_config

HOST = {"state": "host"}
CLIPPED = {"grad_clip": 0.05}  # below the tiny Wan's gradient norms (0.3 to 3): every step clips


def assert_same_checkpoint(tmp_path, a, b, step=None):
    """Runs `a` and `b` wrote the same weights, AdamW state and averages, bit for bit."""
    for kind in ("model", "optimizer"):
        x = checkpoint_file(checkpoint(tmp_path, a, step), kind)
        y = checkpoint_file(checkpoint(tmp_path, b, step), kind)
        assert x.keys() == y.keys(), kind
        different = [k for k in x if not torch.equal(x[k], y[k])]
        assert not different, f"{kind}: {len(different)} tensors differ, {different[:4]}"


@pytest.mark.every_vector_unit
@pytest.mark.parametrize("precision", ["fp32", "bf16_weights"])
def test_the_host_state_trains_the_tiny_wan_to_the_checkpoint_of_the_device_state_bit_for_bit(tmp_path, precision):
    sections = {"trainer": CLIPPED, "ema": {"decay": 0.9}, "precision": {"mode": precision}}
    wanfw("run", experiment(tmp_path, "device", CPU, 4, tiny_wan("t2v"), **sections), check=0)
    host = wanfw("run", experiment(tmp_path, "host", CPU, 4, tiny_wan("t2v"), optimizer=HOST, **sections), check=0)
    compute = "bf16" if precision == "bf16_weights" else "fp32"
    assert f"in {compute} for compute, their fp32 masters and gradients in " in host.stdout
    assert "each gradient moves there as soon as it is whole" in host.stdout
    assert "AdamW: ATen's fused multi-tensor kernel (cpu)" in host.stdout
    assert min(losses(tmp_path, "host", "grad_norm")) > CLIPPED["grad_clip"]  # every step clipped
    assert_same_checkpoint(tmp_path, "device", "host")
    saved = checkpoint_file(checkpoint(tmp_path, "host"), "optimizer")
    assert any(name.endswith(".ema") for name in saved) and any(name.endswith(".exp_avg_sq") for name in saved)


SEQUENCE_PARALLEL = ({**DDP, "sequence_parallel": 2}, 4, 2)  # each sample's tokens split over 2 ranks


@pytest.mark.parametrize("layout", ["grad_accum_2x2", "ddp_2x1_accum_2", "data_parallel_2_replicas_x4",
                                    "sequence_parallel_2", "sequence_parallel_2_padded"])
def test_the_host_state_ends_a_layout_at_the_checkpoint_of_its_device_state(tmp_path, layout):
    # The device state's layouts end at one device's weights (test_ddp_equivalence and the others);
    # the host state must not move them by a bit: ranks and replicas each step their own host copy.
    # Accumulation on one process moves the last micro-batch's gradients one by one during its
    # backward; ddp and data_parallel, which reduce after backward, move them when it is over.
    strategy, batch, ranks = SEQUENCE_PARALLEL if layout.startswith("sequence_parallel") else LAYOUTS[layout]
    # 3x6x6 latents: 27 tokens a sample, which 2 ranks split only with padding.
    data = {"data": {"buckets": ["3x6x6"]}} if layout.endswith("padded") else {}
    run_on(tmp_path, "device", strategy, batch, tiny_wan("t2v"), ranks, trainer=CLIPPED, **data)
    run_on(tmp_path, "host", strategy, batch, tiny_wan("t2v"), ranks, trainer=CLIPPED, optimizer=HOST, **data)
    assert_same_checkpoint(tmp_path, "device", "host")


def test_dmd_phases_train_the_generator_and_critic_alike_with_the_host_state(tmp_path, teacher):
    wanfw("run", dmd_config(tmp_path, teacher, name="device", steps=4), check=0)
    host = wanfw("run", dmd_config(tmp_path, teacher, name="host", steps=4), "--set", "optimizer.state=host", check=0)
    assert "their fp32 masters and gradients in " in host.stdout
    for step in (1, 2, 4):  # the generator's step, a critic's, and the generator's again
        assert_same_checkpoint(tmp_path, "device", "host", step)


def test_a_lora_with_streamed_blocks_trains_alike_with_the_host_state(tmp_path, base):
    resident = trained(tmp_path, "resident", lora(base))
    swapped = trained(tmp_path, "swapped", lora(base), {"blocks": 3, "ring": 2}, optimizer=HOST)
    assert "their fp32 masters and gradients in " in swapped[0]
    assert swapped[1] == resident[1]  # every step's loss, as printed
    assert swapped[2].keys() == resident[2].keys()
    assert all(torch.equal(swapped[2][k], resident[2][k]) for k in resident[2])


def whole(base):
    """The tiny Wan DiT trained whole from a saved base (its head is not zero), blocks checkpointed."""
    return {"name": "wan22_flow_matching", "preset": "tiny", "num_layers": 6, "weights": str(base),
            "gradient_checkpointing": True}


@pytest.mark.parametrize("variant", ["fp32", "bf16_weights", "grad_accum_2"])
def test_block_swap_streams_the_trained_weights_of_a_dit_trained_whole_with_the_host_state(tmp_path, base, variant):
    # Each streamed block's trained weights live in block swap's host copy and stream into the
    # device's slots; their masters (host) are written into that copy after each step, once every
    # slot has let go of the old one. The run must end where the resident run ends, bit for bit.
    strategy, batch = (({"name": "grad_accum", "steps": 2, "inner": CPU}, 2) if variant == "grad_accum_2"
                       else (CPU, 4))
    sections = {"optimizer": HOST, "trainer": CLIPPED, "ema": {"decay": 0.9},
                "precision": {"mode": "bf16_weights" if variant == "bf16_weights" else "fp32"}}
    wanfw("run", experiment(tmp_path, "resident", strategy, batch, whole(base), **sections), check=0)
    swapped = wanfw("run", experiment(tmp_path, "swapped", strategy, batch, whole(base),
                                      block_swap={"blocks": 3, "ring": 2}, **sections), check=0)
    assert "block swap: 3 of 6 blocks stream from " in swapped.stdout
    assert losses(tmp_path, "swapped") == losses(tmp_path, "resident")
    assert_same_checkpoint(tmp_path, "resident", "swapped")


def test_block_swap_keeps_trained_weights_resident_where_a_strategy_reduces_them_after_backward(tmp_path, base):
    # ddp's reducer holds the parameters it reduces: block swap streams no trained weight under it,
    # and a DiT trained whole has nothing else to stream in its blocks: refused, naming the ways out.
    path = experiment(tmp_path, "ddp", DDP, 2, whole(base), optimizer=HOST, block_swap={"blocks": 3, "ring": 2})
    result = torchrun("run", path, nproc=2)
    said = result.stdout + result.stderr
    assert result.returncode != 0
    assert "block swap streams frozen weights, but every weight of the 3 streamed blocks trains" in said
    assert "or with optimizer.state host under single or grad_accum, where block swap streams trained weights" in said


RESUMED = {  # name: (strategy, batch, ranks, the state before the stop, after it, streamed blocks)
    "single_device_then_host": (CPU, 4, 1, "device", "host", 0),
    "single_host_then_device": (CPU, 4, 1, "host", "device", 0),
    "fsdp_2_ranks_host_then_device": (FSDP, 2, 2, "host", "device", 0),
    "streamed_trained_blocks": (CPU, 4, 1, "host", "host", 3),
}


@pytest.mark.parametrize("case", list(RESUMED))
def test_a_run_resumes_bitwise_with_its_state_moved_between_the_device_and_the_host(tmp_path, request, case):
    # Killed after its step-3 checkpoint, the run resumes (the state moved, or not) and ends at the
    # uninterrupted run's step 6: checkpoints keep one format wherever the state lived.
    strategy, batch, ranks, first, then, streamed = RESUMED[case]
    model, swap = ((whole(request.getfixturevalue("base")), {"block_swap": {"blocks": streamed, "ring": 2}})
                   if streamed else (tiny_wan("t2v"), {}))
    path = experiment(tmp_path, "moved", strategy, batch, model, optimizer={"state": first},
                      trainer={"max_steps": 6, **CLIPPED}, checkpoint={"every": 3}, **swap)

    def run(*args):
        if ranks == 1:
            return wanfw("run", path, *args, check=0)
        result = torchrun("run", path, *args, nproc=ranks)
        assert result.returncode == 0, result.stdout + result.stderr
        return result

    run()
    uninterrupted = {kind: checkpoint_file(checkpoint(tmp_path, "moved", 6), kind) for kind in ("model", "optimizer")}
    shutil.rmtree(checkpoint(tmp_path, "moved", 6))
    result = run("--resume", "auto", "--set", f"optimizer.state={then}")
    said = result.stdout + result.stderr
    assert "resumed from" in said and "step-00000003" in said
    for kind, tensors in uninterrupted.items():
        resumed = checkpoint_file(checkpoint(tmp_path, "moved", 6), kind)
        assert resumed.keys() == tensors.keys() and all(torch.equal(resumed[k], tensors[k]) for k in tensors), kind


def test_a_nan_loss_stops_the_host_state_run_before_its_step_and_keeps_the_last_checkpoint(tmp_path):
    config = base_config(tmp_path / "runs", optimizer=HOST, trainer={"max_steps": 40}, checkpoint={"every": 10})
    config["model"]["nan_at_call"] = 17
    result = wanfw("run", write_config(tmp_path / "nan.yaml", config), check=1)
    assert "step 17: metric 'loss' is nan" in result.stderr
    assert [p.name for p in checkpoints(tmp_path / "runs" / "exp" / "version_0")] == ["step-00000010"]


FSDP_LAYOUTS = {  # name: (strategy, batch per micro-batch, ranks, precision)
    "fsdp_2_ranks": (FSDP, 2, 2, "fp32"),
    "fsdp_3_ranks_bf16_gathers": (FSDP, 1, 3, "bf16"),  # shards padded: no count divides by 3
    "fsdp_2x1_accum_2": ({"name": "grad_accum", "steps": 2, "inner": FSDP}, 1, 2, "fp32"),
    "fsdp_sequence_parallel_2": ({**FSDP, "sequence_parallel": 2}, 4, 2, "fp32"),
}


@pytest.mark.parametrize("layout", list(FSDP_LAYOUTS))
def test_fsdp_keeps_each_ranks_shard_on_the_host_and_ends_at_the_checkpoint_of_its_device_state(tmp_path, layout):
    # ZeRO-Offload with sharding: each rank's shards of the trained weights, their gradients and
    # AdamW's moments on the host; the device keeps a copy in the gathers' dtype. The device state
    # ends at one device's weights (test_fully_sharded); the host state must not move them by a bit,
    # with accumulation (gradients summed on the device, moved in the last micro-batch), bf16
    # gathers, shards that need padding, and each sample's tokens over 2 ranks.
    strategy, batch, ranks, precision = FSDP_LAYOUTS[layout]
    sections = {"trainer": CLIPPED, "ema": {"decay": 0.9}, "precision": {"mode": precision}}
    run_on(tmp_path, "device", strategy, batch, tiny_wan("t2v"), ranks, **sections)
    path = experiment(tmp_path, "host", strategy, batch, tiny_wan("t2v"), optimizer=HOST, **sections)
    result = torchrun("run", path, nproc=ranks)
    said = result.stdout + result.stderr
    assert result.returncode == 0, said
    assert "fsdp: optimizer.state host: each rank's shards of the trained weights and their gradients in " in said
    assert "AdamW: ATen's fused multi-tensor kernel (cpu)" in said
    assert " bytes of gradients and 0 bytes of optimizer state on its device, and " in said  # moments on the host
    assert_same_checkpoint(tmp_path, "device", "host")


TWO_EXPERTS = {"name": "wan22_flow_matching", "preset": "tiny", "text_len": 4, "expert": "both", "boundary": 500,
               "timestep_sampling": "logit_normal"}


@pytest.mark.parametrize("strategy", [DDP, FSDP], ids=["ddp", "fsdp"])
def test_each_expert_on_its_own_rank_keeps_its_state_on_the_host_and_ends_as_its_device_state(tmp_path, strategy):
    # network_groups: each rank holds one expert, so each keeps that expert's state on the host (under
    # fsdp: its shards over its group). The ranks' masters differ by design.
    placed = {**strategy, "network_groups": [1, 1]}
    run_on(tmp_path, "device", placed, 3, TWO_EXPERTS, 2, trainer=CLIPPED)
    run_on(tmp_path, "host", placed, 3, TWO_EXPERTS, 2, trainer=CLIPPED, optimizer=HOST)
    assert_same_checkpoint(tmp_path, "device", "host")


def test_a_strategy_that_shards_the_state_without_declaring_the_host_state_is_refused(tmp_path):
    # fsdp declares StrategyCapabilities::host_state; a sharding strategy that does not is refused
    # before training, by what it declares (tests/plugins/declared_strategy), naming what to use.
    path = experiment(tmp_path, "sharded", {"name": "test_sharding_strategy"}, 2, tiny_wan("t2v"), optimizer=HOST)
    checked = wanfw("validate", path, check=2)
    assert ("optimizer.state host: the strategy test_sharding_strategy shards the state and does not declare that "
            "it can keep its shards in host memory (StrategyCapabilities::host_state)") in checked.stderr
    assert "use optimizer.state device with this strategy, or fsdp, ddp or single" in checked.stderr
    wanfw("validate", experiment(tmp_path, "fsdp", FSDP, 2, tiny_wan("t2v"), optimizer=HOST), check=0)
