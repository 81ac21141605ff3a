"""model.attention picks ATen's attention kernel: every kernel this CPU has gives diffusers' outputs,
the kernel that ran is logged, and a kernel that cannot run the call stops the run naming it."""

import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.references import TOLERANCE, reference_model, wan_config
from harness.runs import wanfw


def predict_with(tmp_path, attention, inputs):
    config = wan_config(tmp_path, tmp_path / "transformer", attention=attention)
    save_file(inputs, tmp_path / "in.safetensors")
    out = tmp_path / f"out_{attention}.safetensors"
    result = wanfw("predict", config, "--inputs", tmp_path / "in.safetensors", "--out", out, check=None)
    return result, (load_file(out)["v"] if result.returncode == 0 else None)


def inputs():
    g = torch.Generator().manual_seed(3)
    return {"x": torch.randn(2, 4, 3, 8, 6, generator=g), "t": torch.tensor([120.0, 640.0]),
            "context": torch.randn(2, 7, 32, generator=g)}


@pytest.mark.every_vector_unit
def test_each_attention_kernel_of_the_cpu_matches_diffusers_and_is_logged(tmp_path):
    reference = reference_model(tmp_path / "transformer")
    given = inputs()
    with torch.no_grad():
        expected = reference(given["x"], given["t"], given["context"]).sample
    for attention, kernel in (("auto", "flash"), ("flash", "flash"), ("math", "math")):
        result, got = predict_with(tmp_path, attention, given)
        assert result.returncode == 0, result.stdout + result.stderr
        chosen = "" if attention == "auto" else ", as model.attention asks"
        # The tiny preset: 2 heads of 24; self-attention and cross-attention are one kind each way.
        assert f"attention: SDPA runs {kernel} (cpu, Float, head dim 24){chosen}" in result.stdout, result.stdout
        assert torch.allclose(got, expected, atol=TOLERANCE, rtol=0), (attention, (got - expected).abs().max())


def test_a_kernel_that_cannot_run_the_call_stops_the_run_naming_it(tmp_path):
    reference_model(tmp_path / "transformer")
    result, _ = predict_with(tmp_path, "efficient", inputs())  # a CUDA kernel: nothing on a CPU
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "attention: the efficient kernel (model.attention) cannot run this attention (cpu, Float, head dim 24)" \
        in output
    assert "set model.attention to auto" in output
