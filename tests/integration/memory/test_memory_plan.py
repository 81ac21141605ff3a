"""`wanfw model-info`'s memory plan for LoRA runs: the low-memory examples fit their GPUs and name
their host memory, the two experts on two GPUs one expert a GPU; --fit picks the cheapest options
and the fewest swapped blocks that fit (one fewer does not): for an A14B expert on 16 GB the
adapters' optimizer state on the host, on 12 GB the recomputed block in chunks of tokens too; a host
too small for any plan is said; a distillation's plan counts every network its steps hold."""

import re

import pytest

from harness.runs import SOURCE, wanfw

A14B = SOURCE / "examples" / "lora-wan22-a14b-24gb.yaml"
A14B_16GB = SOURCE / "examples" / "lora-wan22-a14b-16gb.yaml"
TI2V = SOURCE / "examples" / "lora-ti2v-5b-12gb.yaml"
TOTAL = re.compile(r"total: device ([\d.]+) GiB, host ([\d.]+) GiB(?: \([\d.]+ GiB while building\))?; with ([\d.]+) GiB for the CUDA context: (.*)")


def plan(config, *args):
    out = wanfw("model-info", config, *args, check=0).stdout
    device, host, context, verdict = TOTAL.search(out).groups()
    return out, float(device) + float(context), float(host), verdict


def test_the_a14b_example_fits_a_24gb_gpu_and_names_its_host_memory():
    out, device, host, verdict = plan(A14B)
    assert "fits a 24 GB GPU" in verdict and "does not fit a 16 GB GPU" in verdict
    assert device <= 24e9 / 2**30
    assert re.search(r"host: streamed blocks' weights \(pinned\) [\d.]+ GiB", out) and host > 20
    assert "21 blocks swapped (ring 2)" in out


def test_the_two_expert_example_plans_one_expert_a_rank_and_each_rank_fits_a_24gb_gpu():
    out, device, host, verdict = plan(SOURCE / "examples" / "lora-wan22-a14b-experts-2x24gb.yaml", "--gpus", "2")
    assert "network group 0 (ranks 0-0 of 2) holds the high_noise expert alone" in out
    assert "network group 1 (ranks 1-1) holds the low_noise expert alone: the same plan as group 0" in out
    assert "fits a 24 GB GPU" in verdict and device <= 24e9 / 2**30
    # One expert's blocks a rank: the single-expert example's plan, not both experts' (38 GiB).
    assert device == plan(A14B)[1]


def test_fit_16gb_keeps_the_adapters_state_on_the_host_and_the_16gb_example_takes_its_settings():
    out = wanfw("model-info", A14B, "--fit", "16GB", check=0).stdout
    chosen = re.search(r"--fit .*: fits with fp8 base, checkpointing, activation offload, (\d+) blocks swapped "
                       r"\(ring 2\), the optimizer's state on the host \(", out)
    assert chosen, out
    blocks = int(chosen.group(1))
    assert "  optimizer:\n    state: host\n" in out and f"block_swap:\n    blocks: {blocks}\n" in out
    assert "recompute_chunks" not in out.split("--fit")[-1]  # whole blocks: the state moved instead
    example, device, host, verdict = plan(A14B_16GB)
    assert f"{blocks} blocks swapped (ring 2), the optimizer's state on the host" in example
    assert "fits a 16 GB GPU" in verdict and device <= 16e9 / 2**30
    # The adapters' float32 weights stay, with the gradients being moved; 16 bytes a parameter go to
    # the host (153,354,240 parameters: 2.29 GiB).
    assert "device: adapters (float32): weights (4 bytes a parameter) and two blocks' gradients 0.61 GiB\n" in example
    assert "host: adapters (float32): fp32 masters, gradients and AdamW moments (16 bytes a parameter; masters and " \
           "gradients pinned) 2.29 GiB\n" in example
    # The state on the device, or one block fewer swapped, does not fit.
    assert "does not fit a 16 GB GPU" in plan(A14B_16GB, "--set", "optimizer.state=device")[3]
    assert "does not fit a 16 GB GPU" in plan(A14B_16GB, "--set", f"block_swap.blocks={blocks - 1}")[3]


def test_fit_12gb_recomputes_the_a14b_block_in_chunks_beside_the_host_state():
    # No number of swapped blocks alone fits, even with the state on the host: the recomputed block
    # (9.5 GiB whole at 32,760 tokens) is the largest part left.
    out = wanfw("model-info", A14B, "--fit", "12GB", check=0).stdout
    chosen = re.search(r"--fit .*: fits with fp8 base, checkpointing, activation offload, recompute in (\d+) chunks, "
                       r"(\d+) blocks swapped \(ring 2\), the optimizer's state on the host \(", out)
    assert chosen, out
    chunks, blocks = map(int, chosen.groups())
    assert f"    recompute_chunks: {chunks}\n" in out and f"block_swap:\n    blocks: {blocks}\n" in out
    chosen = ["--set", "optimizer.state=host", "--set", f"model.recompute_chunks={chunks}",
              "--set", f"block_swap.blocks={blocks}"]
    example, device, host, verdict = plan(A14B, *chosen)
    assert "fits a 12 GB GPU" in verdict and device <= 12e9 / 2**30
    # Fewer chunks, or one block fewer swapped, do not fit.
    assert "does not fit a 12 GB GPU" in plan(A14B, *chosen, "--set", f"model.recompute_chunks={chunks // 2}")[3]
    assert "does not fit a 12 GB GPU" in plan(A14B, *chosen, "--set", f"block_swap.blocks={blocks - 1}")[3]
    # The recomputed block's share: max(11 C, 8 C + (24 C + 2 F) / K) values a token in bf16.
    recomputed = float(re.search(r"the block recomputed in \d+ chunks of tokens ([\d.]+) GiB", example).group(1))
    tokens, c, f = 32760, 5120, 13824
    share = max(11 * c, 8 * c + (24 * c + 2 * f) / chunks)
    assert recomputed == pytest.approx((tokens * c + tokens * share) * 2 / 2**30, abs=0.01)


def test_the_ti2v_example_fits_a_12gb_gpu():
    _, device, host, verdict = plan(TI2V)
    assert verdict.startswith("fits a 12 GB GPU")
    assert device <= 12e9 / 2**30 and host > 0


def test_fit_chooses_the_fewest_swapped_blocks_that_fit_and_one_fewer_does_not():
    bf16 = ["--set", "model.base_dtype=dtype", "--set", "model.activation_offload=false", "--set", "block_swap.blocks=0"]
    out = wanfw("model-info", A14B, *bf16, "--fit", "24GB", check=0).stdout
    chosen = re.search(r"--fit .*: fits with fp8 base, checkpointing, activation offload, (\d+) blocks swapped", out)
    assert chosen, out
    blocks = int(chosen.group(1))
    assert f"block_swap:\n    blocks: {blocks}\n    ring: 2" in out
    host = ["--set", "optimizer.state=host"] if "state: host" in out else []
    assert "fits a 24 GB GPU" in plan(A14B, *host, "--set", f"block_swap.blocks={blocks}")[3]
    assert "does not fit a 24 GB GPU" in plan(A14B, *host, "--set", f"block_swap.blocks={blocks - 1}")[3]


def test_fit_says_so_when_no_setting_fits_the_host_memory_given():
    out = wanfw("model-info", A14B, "--fit", "24GB", "--host-ram", "8GB", check=0).stdout
    assert "does not fit even with every option" in out
    assert wanfw("model-info", A14B, "--host-ram", "8GB", check=2).returncode == 2  # --host-ram needs --fit
    assert "--fit needs a size such as 24GB" in wanfw("model-info", A14B, "--fit", "lots", check=2).stderr


DMD_SHARED = SOURCE / "examples" / "dmd-wan22-ti2v-5b-shared-base.yaml"
GIB = re.compile(r"device: (.*) ([\d.]+) GiB")


def device_parts(out):
    return {what: float(gib) for what, gib in GIB.findall(out)}


def test_a_dmd_plan_holds_one_shared_base_and_both_adapter_sets_and_fit_picks_for_all_of_them():
    out, device, _, verdict = plan(DMD_SHARED)
    parts = device_parts(out)
    # The shared base once (the real score is its blocks without adapters), the generator's and the
    # critic's adapters (rank 64 each on 300 layers of the 5B DiT: 2 x 161,218,560 x 16 bytes).
    assert parts["30 resident block(s) in bfloat16"] + parts["weights outside the blocks in bfloat16"] == \
        pytest.approx(9.31, abs=0.02)
    assert parts["adapters with gradients and AdamW moments (float32)"] == pytest.approx(2 * 161218560 * 16 / 2**30,
                                                                                       abs=0.01)
    assert not any("teacher" in what for what in parts)
    assert "left for activations" not in out and "dmd per GPU" not in out  # the plan is the one verdict
    assert "does not fit a 24 GB GPU" in verdict
    fit = wanfw("model-info", DMD_SHARED, "--fit", "24GB", check=0).stdout
    assert "--fit 22.35 GiB of device memory: fits with fp8 base, checkpointing" in fit
    assert "fits a 24 GB GPU" in plan(DMD_SHARED, "--set", "model.base_dtype=float8_e4m3fn")[3]


def test_a_dmd_plan_with_a_critic_of_its_own_streams_both_networks_and_holds_the_teacher_beside_them():
    separate = ["--set", "model.shared_base=false", "--set", "block_swap.blocks=45"]
    out, *_ = plan(DMD_SHARED, *separate)
    parts = device_parts(out)
    # Generator and critic: 60 units, 45 streamed; the frozen teacher stays whole on the device.
    assert "15 resident block(s) in bfloat16" in parts and "2 slot(s) of streamed blocks" in parts
    assert parts["the frozen teacher in bfloat16"] == pytest.approx(9.31, abs=0.01)
    assert re.search(r"host: streamed blocks' weights \(pinned\) 13\.7\d GiB", out), out  # 45 x 9.15 / 30


def test_a_velocity_distillation_plan_holds_its_teacher_in_fp8_when_asked():
    velocity = SOURCE / "examples" / "distill-wan22-a14b-low-noise.yaml"
    lora = ["--set", "model.lora.rank=32", "--set", 'model.teacher_device=""']  # the teacher beside the student
    bf16 = device_parts(plan(velocity, *lora)[0])
    fp8 = device_parts(plan(velocity, *lora, "--set", "model.teacher_base_dtype=float8_e4m3fn")[0])
    teacher_bf16 = next(v for k, v in bf16.items() if k.startswith("the frozen teacher"))
    teacher_fp8 = next(v for k, v in fp8.items() if k.startswith("the frozen teacher"))
    assert 0.5 < teacher_fp8 / teacher_bf16 < 0.56  # e4m3 Linear weights and their scales; the rest in bf16
    # Data-free: the activations of latent_size (21x60x104: 32,760 tokens), the student's 20 blocks.
    assert "20 checkpointed block inputs" in bf16


def test_the_vace_a14b_example_fits_a_24gb_gpu_counting_its_vace_blocks_and_context():
    out, device, host, verdict = plan(SOURCE / "examples" / "vace-wan22-a14b-24gb.yaml")
    assert "fits a 24 GB GPU" in verdict and "does not fit a 16 GB GPU" in verdict
    assert device <= 24e9 / 2**30
    assert "VACE: hints after blocks 0, 5, 10, 15, 20, 25, 30, 35 (8 VACE blocks" in out
    assert "19 resident block(s) in fp8" in out and "29 blocks swapped" in out  # 48 units: 40 main, 8 VACE
    assert "48 checkpointed block inputs" in out and "the VACE branch's embedded context and a hint" in out
    assert "vace_context [96, frames, height, width]" in out


def test_one_a14b_expert_trains_whole_on_one_80gb_gpu_with_its_optimizer_state_on_a_256gb_host():
    example = SOURCE / "examples" / "wan22-t2v-a14b-expert-finetune-80gb.yaml"
    out, device, host, verdict = plan(example)
    assert "fits an 80 GB GPU" in verdict and device <= 80e9 / 2**30 and host <= 256e9 / 2**30
    # 14,288,491,584 parameters: a bf16 weight on the GPU beside the gradients being moved, 16 bytes on
    # the host.
    assert "device: the DiT trained whole: weights (2 bytes a parameter) and two blocks' gradients 28.36 GiB\n" in out
    assert "host: the DiT trained whole: fp32 masters, gradients and AdamW moments (16 bytes a parameter; masters " \
           "and gradients pinned) 212.92 GiB\n" in out
    # Its settings are what --fit picks for that GPU and host from the config without them (activation
    # offload taken on the way, and left out when the rest fits without it).
    fit = wanfw("model-info", example, "--set", "optimizer.state=device", "--set", "model.activation_offload=false",
                "--fit", "80GB", "--host-ram", "256GB", check=0).stdout
    assert "fits with checkpointing, the optimizer's state on the host (device 51.24 GiB, host 212.92 GiB;" in fit


def test_ti2v_5b_trains_whole_on_one_24gb_gpu_with_its_optimizer_state_on_the_host():
    example = SOURCE / "examples" / "wan22-ti2v-5b-finetune-24gb.yaml"
    out, device, host, verdict = plan(example)
    assert "does not fit a 16 GB GPU; fits a 24 GB GPU" in verdict and device <= 24e9 / 2**30
    assert "host: the DiT trained whole: fp32 masters, gradients and AdamW moments (16 bytes a parameter; masters " \
           "and gradients pinned) 74.50 GiB\n" in out
    # Each gradient leaves as soon as it is whole: every gradient kept on the GPU does not fit.
    accumulated = plan(example, "--set", "strategy.name=grad_accum", "--set", "strategy.steps=2", "--set",
                       "strategy.inner.name=single")
    assert "the DiT trained whole: weights and gradients (4 bytes a parameter) 18.63 GiB" in accumulated[0]
    assert "does not fit a 24 GB GPU" in accumulated[3]
    fit = wanfw("model-info", SOURCE / "examples" / "wan22-ti2v-5b-finetune.yaml", "--gpus", "1", "--set",
                "strategy.name=single", "--set", "precision.mode=bf16_weights", "--fit", "24GB", "--host-ram", "128GB",
                check=0).stdout
    assert "fits with checkpointing, activation offload, the optimizer's state on the host (device 17.74 GiB, host " \
           "82.00 GiB;" in fit


def test_ti2v_5b_trains_whole_on_one_16gb_gpu_with_its_trained_blocks_streamed():
    # With the state on the host, block swap streams a DiT trained whole: its blocks' bf16 weights
    # go to pinned host memory, two slots stay on the device. --fit finds the fewest blocks, and one
    # fewer does not fit.
    out, device, host, verdict = plan(SOURCE / "examples" / "wan22-ti2v-5b-finetune-16gb.yaml")
    assert "does not fit a 12 GB GPU; fits a 16 GB GPU" in verdict and device <= 16e9 / 2**30
    assert "device: 2 slot(s) of streamed blocks" in out and "host: streamed blocks' weights (pinned)" in out
    assert "the DiT trained whole: the resident blocks' weights (2 bytes a parameter) and two blocks' gradients" in out
    args = ["--gpus", "1", "--set", "strategy.name=single", "--set", "precision.mode=bf16_weights", "--host-ram", "128GB"]
    fit = wanfw("model-info", SOURCE / "examples" / "wan22-ti2v-5b-finetune.yaml", *args, "--fit", "16GB",
                check=0).stdout
    picked = re.search(r"fits with checkpointing, activation offload, (\d+) blocks swapped \(ring 2\), the "
                       r"optimizer's state on the host", fit)
    assert picked, fit
    fewer = plan(SOURCE / "examples" / "wan22-ti2v-5b-finetune-16gb.yaml", "--set",
                 f"block_swap.blocks={int(picked.group(1)) - 1}")
    assert "does not fit a 16 GB GPU" in fewer[3]
    # Under ddp, which reduces gradients after backward, block swap keeps trained weights resident:
    # --fit does not stream a DiT trained whole there.
    ddp = wanfw("model-info", SOURCE / "examples" / "wan22-ti2v-5b-finetune.yaml", "--gpus", "2", "--set",
                "strategy.name=ddp", "--set", "precision.mode=bf16_weights", "--fit", "16GB", "--host-ram", "128GB",
                check=0).stdout
    assert "blocks swapped" not in ddp.split("--fit")[1]
