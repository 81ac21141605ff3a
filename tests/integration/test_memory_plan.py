"""`wanfw model-info`'s memory plan for LoRA runs: the low-memory examples fit their GPUs and name
their host memory; --fit picks the cheapest options and the fewest swapped blocks that fit (one
fewer does not); a host too small for any plan is said."""

import re

from conftest import SOURCE, wanfw

A14B = SOURCE / "examples" / "lora-wan22-a14b-24gb.yaml"
TI2V = SOURCE / "examples" / "lora-ti2v-5b-12gb.yaml"
TOTAL = re.compile(r"total: device ([\d.]+) GiB, host ([\d.]+) GiB; with ([\d.]+) GiB for the CUDA context: (.*)")


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
    assert "fits a 24 GB GPU" in plan(A14B, "--set", f"block_swap.blocks={blocks}")[3]
    assert "does not fit a 24 GB GPU" in plan(A14B, "--set", f"block_swap.blocks={blocks - 1}")[3]


def test_fit_says_so_when_no_setting_fits_the_host_memory_given():
    out = wanfw("model-info", A14B, "--fit", "24GB", "--host-ram", "8GB", check=0).stdout
    assert "does not fit even with every option" in out
    assert wanfw("model-info", A14B, "--host-ram", "8GB", check=2).returncode == 2  # --host-ram needs --fit
    assert "--fit needs a size such as 24GB" in wanfw("model-info", A14B, "--fit", "lots", check=2).stderr
