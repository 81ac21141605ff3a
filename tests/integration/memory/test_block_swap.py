"""Block swap (the block_swap section) in real runs: a LoRA of the tiny Wan DiT (six blocks,
checkpointed) whose frozen block weights stream from host memory ends with the weights and losses of
the same run without it, bit for bit, for any count of streamed blocks and ring size, on an fp8 base,
with both A14B-style experts, under ddp and with sequence parallelism; what cannot work is refused
with the reason. Distillation's networks: test_block_swap_distill.py."""

import pytest
import torch

from harness.block_swap import LAYERS, assert_same, base, lora, trained  # noqa: F401 (a fixture)
from harness.layouts import DDP, run_on
from harness.lora import experiment, inputs, predict
from harness.references import reference_model
from harness.runs import wanfw


@pytest.mark.parametrize("blocks", [1, LAYERS // 2, LAYERS - 1])
def test_a_lora_run_with_block_swap_ends_bitwise_as_the_run_without_it(tmp_path, base, blocks):
    reference = trained(tmp_path, "resident", lora(base))
    for ring in (1, 2):
        swapped = trained(tmp_path, f"swap{blocks}_{ring}", lora(base), {"blocks": blocks, "ring": ring})
        assert f"block swap: {blocks} of {LAYERS} blocks stream from" in swapped[0]
        assert_same(swapped, reference)


def test_block_swap_on_an_fp8_base_ends_bitwise_as_the_fp8_run_without_it(tmp_path, base):
    fp8 = lora(base, base_dtype="float8_e4m3fn")
    assert_same(trained(tmp_path, "swap", fp8, {"blocks": 4}), trained(tmp_path, "resident", fp8))


def test_block_swap_streams_both_experts_blocks_as_their_samples_route(tmp_path):
    for folder, seed in (("transformer", 10), ("transformer_2", 11)):  # diffusers' A14B layout
        reference_model(tmp_path / "pipeline" / folder, seed=seed, num_layers=LAYERS)
    both = lora(tmp_path / "pipeline", expert="both", boundary=500)
    swapped = trained(tmp_path, "swap", both, {"blocks": 7, "ring": 2})
    assert "block swap: 7 of 12 blocks stream from" in swapped[0]
    assert_same(swapped, trained(tmp_path, "resident", both))


def test_two_ddp_ranks_each_streaming_their_own_copy_train_as_two_ranks_without_block_swap(tmp_path, base):
    model = lora(base)
    swapped = run_on(tmp_path, "ddp_swap", DDP, 2, model, ranks=2, block_swap={"blocks": 3},
                     data={"num_samples": 32, "buckets": ["2x4x4"]})
    resident = run_on(tmp_path, "ddp", DDP, 2, model, ranks=2, data={"num_samples": 32, "buckets": ["2x4x4"]})
    assert "block_swap: {blocks: 3," in (tmp_path / "runs" / "ddp_swap" / "version_0" / "config.yaml").read_text()
    assert swapped.step == resident.step
    for part in ("weights", "exp_avg", "exp_avg_sq"):
        a, b = getattr(swapped, part), getattr(resident, part)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in b), part


def test_ddp_ranks_sharing_each_sample_by_sequence_parallelism_train_with_block_swap_as_without_it(tmp_path, base):
    # Two ranks split each sample's 8 tokens (Ulysses all-to-alls inside every streamed block).
    model, data = lora(base), {"num_samples": 32, "buckets": ["2x4x4"]}
    sp = {**DDP, "sequence_parallel": 2}
    swapped = run_on(tmp_path, "sp_swap", sp, 2, model, ranks=2, block_swap={"blocks": 4, "ring": 1}, data=data)
    resident = run_on(tmp_path, "sp", sp, 2, model, ranks=2, data=data)
    for part in ("weights", "exp_avg", "exp_avg_sq"):
        a, b = getattr(swapped, part), getattr(resident, part)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in b), part


def test_block_swap_without_checkpointing_is_refused_with_the_config_naming_the_option(tmp_path, base):
    path = experiment(tmp_path, "plain", lora(base, gradient_checkpointing=False), steps=1,
                      block_swap={"blocks": 2})
    for command in ("validate", "run"):
        result = wanfw(command, path)
        assert result.returncode == 2, result.stderr
        assert "model.gradient_checkpointing" in result.stderr and "gradient_checkpointing is off" in result.stderr
        assert "a block would keep its streamed weights for backward" in result.stderr
        assert "step 1" not in result.stdout


@pytest.mark.parametrize("case, swap, extra, message", [
    ("all blocks", {"blocks": LAYERS}, {},
     f"{LAYERS} blocks to stream, but the model declares {LAYERS} units (blocks): at most {LAYERS - 1} can stream"),
    ("full fine-tuning", {"blocks": 2}, {"lora": {"rank": 0}}, "every weight of the 2 streamed blocks trains"),
    ("fsdp", {"blocks": 2}, {"strategy": {"name": "fsdp", "timeout_s": 60}},
     "block swap does not combine with a strategy that shards the weights"),
])
def test_block_swap_that_cannot_work_is_refused(tmp_path, base, case, swap, extra, message):
    model = lora(base, **({"lora": extra["lora"]} if "lora" in extra else {}))
    sections = {k: v for k, v in extra.items() if k != "lora"}
    path = experiment(tmp_path, "refused", model, steps=1, block_swap=swap, **sections)
    result = wanfw("run", path)
    assert result.returncode != 0, case
    assert message in result.stdout + result.stderr, case


def test_predict_with_block_swap_gives_the_outputs_without_it(tmp_path, base):
    path = experiment(tmp_path, "plain", lora(base), steps=1)
    swapped = experiment(tmp_path, "swapped", lora(base), steps=1, block_swap={"blocks": 3, "ring": 1})
    assert torch.equal(predict(tmp_path, swapped, inputs()), predict(tmp_path, path, inputs()))
