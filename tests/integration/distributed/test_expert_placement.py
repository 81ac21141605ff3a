"""The two A14B experts each on its own ranks (strategy.network_groups): every sample trains on the
ranks of its expert, each expert's gradients are reduced within its group, and the run ends at the
weights and losses of one device holding both experts. The tiny two-expert Wan DiT, random noise
and timesteps, real torchrun with Gloo on loopback."""

import pytest
import torch
from safetensors.torch import load_file

from harness.equivalence import assert_same_training, state
from harness.layouts import CPU, DDP, FSDP, LR, TINY_WAN, experiment, run_on
from harness.launch import torchrun
from harness.references import reference_folder
from harness.runs import SOURCE, metrics, run_dir, wanfw

TWO_EXPERTS = {"name": "wan22_flow_matching", "preset": "tiny", "text_len": 4, "expert": "both", "boundary": 500,
               "timestep_sampling": "logit_normal"}


@pytest.fixture
def adapters(request, tmp_path):
    """The model's settings for full fine-tuning ({}), or LoRA on saved experts (a random DiT's
    zero head would leave the adapters without a gradient)."""
    if request.param == "full":
        return {}
    base = tmp_path / "experts"
    reference_folder(base / "high_noise_model", seed=5)
    reference_folder(base / "low_noise_model", seed=6)
    return {"weights": str(base), "lora": {"rank": 4, "alpha": 8}}


def placed(*sizes, strategy=DDP):
    return {**strategy, "network_groups": list(sizes)}


def assert_same_losses(one, split):
    """Each step's loss, and each expert's share and loss, as on one device."""
    rows = list(zip(metrics(*one), metrics(*split), strict=True))
    for a, b in rows:
        assert float(b["share/high_noise"]) == float(a["share/high_noise"])
        assert float(b["loss"]) == pytest.approx(float(a["loss"]), rel=1e-5)
        for column in ("loss/high_noise", "loss/low_noise"):
            assert bool(a.get(column)) == bool(b.get(column)), column  # logged when the expert had samples
            if a.get(column):
                assert float(b[column]) == pytest.approx(float(a[column]), rel=1e-5)
    return rows


@pytest.mark.parametrize("adapters, global_batch", [("full", 4), ("full", 6), ("lora", 6)],
                         ids=["full-batch_4", "full-batch_6", "lora-batch_6"], indirect=["adapters"])
def test_each_expert_on_its_own_rank_ends_at_the_weights_of_one_device_holding_both(tmp_path, adapters, global_batch):
    model = {**TWO_EXPERTS, **adapters}
    one = run_on(tmp_path, "one", CPU, global_batch, model)
    split = run_on(tmp_path, "split", placed(1, 1), global_batch // 2, model, ranks=2)
    assert_same_training(split, one, lr=LR, tolerance=TINY_WAN)
    rows = assert_same_losses((tmp_path, "one"), (tmp_path, "split"))
    # The experts' samples split unevenly in some step (the ranks' loads differ), both trained.
    shares = [float(a["share/high_noise"]) for a, _ in rows]
    assert any(s != 0.5 for s in shares) and any(0 < s < 1 for s in shares), shares


def test_placed_experts_with_an_fp8_base_block_swap_and_activation_offload_end_as_one_device_with_them(tmp_path):
    # The low-memory settings of the 24 GB examples, at tiny scale: each rank streams its own
    # expert's blocks from host memory and offloads its checkpointed inputs.
    base = tmp_path / "experts"
    reference_folder(base / "high_noise_model", seed=5)
    reference_folder(base / "low_noise_model", seed=6)
    model = {**TWO_EXPERTS, "weights": str(base), "lora": {"rank": 4, "alpha": 8}, "base_dtype": "float8_e4m3fn",
             "gradient_checkpointing": True, "activation_offload": True}
    swap = {"block_swap": {"blocks": 1}}
    one = run_on(tmp_path, "one", CPU, 4, model, **swap)
    result = torchrun("run", experiment(tmp_path, "split", placed(1, 1), 2, model, **swap), nproc=2)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "network groups: high_noise on ranks 0-0" in result.stdout
    assert "block swap: 1 of 2 blocks" in result.stdout  # each rank streams its own expert's blocks
    assert_same_training(state(tmp_path, "split"), one, lr=LR, tolerance=TINY_WAN)
    assert_same_losses((tmp_path, "one"), (tmp_path, "split"))


GROUPS = {  # name: (strategy, batch per micro-batch, ranks); every one a global batch of 4
    "two_ranks_an_expert": (placed(2, 2), 1, 4),
    "two_ranks_an_expert_sharded": (placed(2, 2, strategy=FSDP), 1, 4),
    # Hybrid: each expert's pair of ranks as 2 replica groups of 1, the shard averaged across them.
    "two_ranks_an_expert_in_replica_groups": (placed(2, 2, strategy={**FSDP, "replicate": 2}), 1, 4),
    "a_rank_an_expert_accumulating_2": ({"name": "grad_accum", "steps": 2, "inner": placed(1, 1)}, 1, 2),
}


@pytest.mark.parametrize("layout, adapters", [(layout, adapters) for layout in GROUPS for adapters in ("full", "lora")
                                               if "accumulating" not in layout or adapters == "full"],
                         indirect=["adapters"])
def test_experts_on_groups_of_ranks_or_accumulating_end_at_the_weights_of_one_device(tmp_path, adapters, layout):
    strategy, batch, ranks = GROUPS[layout]
    model = {**TWO_EXPERTS, **adapters}
    one = run_on(tmp_path, "one", CPU, 4, model)
    result = torchrun("run", experiment(tmp_path, "split", strategy, batch, model), nproc=ranks)
    assert result.returncode == 0, result.stdout + result.stderr
    k = ranks // 2  # each rank built its group's expert alone
    assert f"network groups: high_noise on ranks 0-{k - 1}, low_noise on ranks {k}-{ranks - 1}" in result.stdout
    split = state(tmp_path, "split")
    assert_same_training(split, one, lr=LR, tolerance=TINY_WAN)
    assert_same_losses((tmp_path, "one"), (tmp_path, "split"))


def test_a_step_whose_samples_all_train_one_expert_leaves_the_other_untouched_as_on_one_device(tmp_path):
    # With the boundary at t = 950 most steps route no sample to the high-noise expert: its group
    # runs a stand-in sample at weight 0 and drops its gradients, and AdamW skips it (no decay, no
    # step counted), as on one device.
    model = {**TWO_EXPERTS, "boundary": 950}
    one = run_on(tmp_path, "one", CPU, 4, model)
    split = run_on(tmp_path, "split", placed(1, 1), 2, model, ranks=2)
    rows = assert_same_losses((tmp_path, "one"), (tmp_path, "split"))
    assert any(float(a["share/high_noise"]) == 0 for a, _ in rows)
    assert_same_training(split, one, lr=LR, tolerance=TINY_WAN)
    # AdamW's own step counts: the high-noise expert's fewer than the run's, equal on both layouts.
    high = [k for k in one.updates if k.startswith("high_noise")]
    assert all(split.updates[k] == one.updates[k] < one.step for k in high), [one.updates[k] for k in high]


@pytest.mark.parametrize("adapters", ["lora"], indirect=True)
def test_a_run_moved_between_expert_placement_one_device_and_ddp_resumes_to_the_uninterrupted_weights(tmp_path,
                                                                                                       adapters):
    model = {**TWO_EXPERTS, **adapters}
    # A constant learning rate: each leg's run ends where the next resumes (trainer.max_steps).
    constant = {"scheduler": {"decay": "constant"}, "checkpoint": {"every": 2}}
    run_on(tmp_path, "uninterrupted", CPU, 4, model, trainer={"max_steps": 8}, **constant)
    run_dir = tmp_path / "runs" / "moved" / "version_0"
    layouts = [(placed(1, 1), 2, 2, "placed on 2 ranks"), (CPU, 4, 1, "one device"),
               ({**DDP, "find_unused_parameters": True}, 2, 2, "ddp holding both"),
               (placed(2, 2, strategy=FSDP), 1, 4, "each expert sharded over 2 ranks")]
    for leg, (strategy, batch, ranks, name) in enumerate(layouts):
        path = experiment(tmp_path, "moved", strategy, batch, model, trainer={"max_steps": 2 * (leg + 1)}, **constant)
        resume = ["--resume", "auto"] if leg else []
        result = wanfw("run", path, *resume, check=0) if ranks == 1 else torchrun("run", path, *resume, nproc=ranks)
        assert result.returncode == 0, (name, result.stdout + result.stderr)
        if leg:
            assert f"resumed from" in result.stdout and f"step-{2 * leg:08d}" in result.stdout, (name, result.stdout)
        step = 2 * (leg + 1)
        assert_same_training(state(tmp_path, "moved", step=step), state(tmp_path, "uninterrupted", step=step), lr=LR,
                             tolerance=TINY_WAN), name


@pytest.mark.parametrize("share, high", [(0.3, 2)])
def test_a_fixed_high_noise_share_gives_each_group_its_count_every_step_as_on_one_device(tmp_path, share, high):
    # A step of 6 samples: round(share x 6) of them draw on the high-noise side, every step.
    model = {**TWO_EXPERTS, "high_noise": {"share": share}}
    one = run_on(tmp_path, "one", CPU, 6, model)
    result = torchrun("run", experiment(tmp_path, "split", placed(1, 1), 3, model), nproc=2)
    assert result.returncode == 0, result.stdout + result.stderr
    for row in metrics(tmp_path, "split"):
        assert (float(row["samples/high_noise"]), float(row["samples/low_noise"])) == (high, 6 - high)
    assert all(float(row["share/high_noise"]) == high / 6 for row in metrics(tmp_path, "one"))
    assert_same_training(state(tmp_path, "split"), one, lr=LR, tolerance=TINY_WAN)
    assert_same_losses((tmp_path, "one"), (tmp_path, "split"))


def test_network_groups_for_a_model_of_one_network_are_refused_naming_the_setting(tmp_path):
    path = experiment(tmp_path, "refused", placed(1, 1), 2, {**TWO_EXPERTS, "expert": "high_noise"})
    result = torchrun("run", path, nproc=2)
    said = result.stdout + result.stderr
    assert result.returncode != 0, said  # torchrun reports the ranks that stopped
    assert "model.expert: the strategy places 2 network group(s); this model has one network" in said, said
    assert "hint: set model.expert: both" in said, said


@pytest.mark.own_entry  # the example on 2 ranks to its end, about 17 s
def test_the_experts_tiny_example_trains_each_expert_on_its_rank_as_its_header_says(tmp_path):
    # As docs/multi-gpu.md shows it: torchrun, 2 ranks, the example as it is (its outputs moved here).
    result = torchrun("run", SOURCE / "examples" / "experts-tiny.yaml", "--set", f"run.output_dir={tmp_path / 'runs'}",
                      nproc=2)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "network groups: high_noise on ranks 0-0, low_noise on ranks 1-1" in result.stdout
    assert "world size 2 in 2 network groups | global batch 8 (2 x 4 per device x 1 accumulation)" in result.stdout
    rows = metrics(tmp_path, "experts-tiny")
    first, last = float(rows[0]["loss"]), float(rows[-1]["loss"])
    assert last < 0.8 * first, (first, last)  # the loss falls, as the quickstart's
    for row in rows:  # each step's 8 samples dealt to the experts' ranks, each group's wait logged
        high, low = float(row["samples/high_noise"]), float(row["samples/low_noise"])
        assert high + low == 8 and high == pytest.approx(8 * float(row["share/high_noise"]))
        idle = [float(row["idle_s/high_noise"]), float(row["idle_s/low_noise"])]
        assert min(idle) >= 0 and max(idle) > 0  # the slower group waited for nothing, the other did
    checkpoint = state(tmp_path, "experts-tiny")  # both experts in one checkpoint, written by two ranks
    assert {k.split(".")[0] for k in checkpoint.weights} == {"high_noise_model", "low_noise_model"}
    # The header's `wanfw export`, as one process with the config it trained with: both experts.
    wanfw("export", SOURCE / "examples" / "experts-tiny.yaml", "--checkpoint", run_dir(tmp_path, "experts-tiny"),
          "--out", tmp_path / "experts-export", check=0)
    for name, tensor in checkpoint.weights.items():
        expert, official = name.split(".", 1)
        file = tmp_path / "experts-export" / expert / "diffusion_pytorch_model.safetensors"
        assert torch.equal(load_file(file)[official], tensor), name
