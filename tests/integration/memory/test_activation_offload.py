"""Activation offload (model.activation_offload): checkpointed blocks' saved inputs wait in host
memory until backward. A LoRA run of the tiny Wan DiT with it ends bitwise as without it, alone and
together with block swap; without gradient checkpointing it is refused."""

from harness.block_swap import assert_same, base, lora, trained  # noqa: F401 (a fixture)
from harness.lora import experiment
from harness.runs import wanfw


def test_a_lora_run_with_activation_offload_ends_bitwise_as_the_run_without_it(tmp_path, base):
    reference = trained(tmp_path, "resident", lora(base))
    assert_same(trained(tmp_path, "offload", lora(base, activation_offload=True)), reference)
    assert_same(trained(tmp_path, "offload_swap", lora(base, activation_offload=True), {"blocks": 3}), reference)


def test_activation_offload_without_gradient_checkpointing_is_refused(tmp_path, base):
    path = experiment(tmp_path, "refused", lora(base, gradient_checkpointing=False, activation_offload=True), steps=1)
    result = wanfw("run", path)
    assert result.returncode != 0
    text = result.stdout + result.stderr
    assert "model.activation_offload" in text and "gradient_checkpointing is off" in text
