"""Our safetensors files open in Python's `safetensors`, and files it writes open in ours."""

import subprocess

import torch
from safetensors.torch import load_file, save_file

from harness.launch import TEST_TOOLS

TOOL = [TEST_TOOLS, "safetensors"]
DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64]


def test_python_reads_the_files_wanfw_writes(tmp_path):
    subprocess.run([*TOOL, "write", tmp_path / "ours.safetensors"], check=True)
    tensors = load_file(tmp_path / "ours.safetensors")
    base = torch.arange(24, dtype=torch.float64).reshape(2, 3, 4) * 1.5
    for dtype in DTYPES:
        name = str(dtype).removeprefix("torch.")
        matching = [k for k in tensors if k.lower() == {"uint8": "byte", "int8": "char", "int16": "short",
                                                          "int32": "int", "int64": "long", "float16": "half",
                                                          "float32": "float", "float64": "double",
                                                          "bfloat16": "bfloat16", "bool": "bool"}[name]]
        assert matching, f"no tensor for {dtype} in {sorted(tensors)}"
        assert tensors[matching[0]].dtype == dtype
        assert torch.equal(tensors[matching[0]], base.to(dtype))
    assert tensors["scalar"].shape == () and tensors["scalar"].item() == 2.5


def test_wanfw_reads_the_files_python_writes(tmp_path):
    generator = torch.Generator().manual_seed(0)
    original = {f"t.{i}": (torch.randn(3, 5, generator=generator) * 10).to(dtype) for i, dtype in enumerate(DTYPES)}
    original["empty"] = torch.zeros(0, 7)
    original["scalar"] = torch.tensor(3.25)
    save_file(original, tmp_path / "theirs.safetensors", metadata={"source": "python"})
    subprocess.run([*TOOL, "copy", tmp_path / "theirs.safetensors", tmp_path / "copy.safetensors"], check=True)
    copied = load_file(tmp_path / "copy.safetensors")
    assert set(copied) == set(original)
    for name, tensor in original.items():
        assert copied[name].dtype == tensor.dtype and torch.equal(copied[name], tensor), name
