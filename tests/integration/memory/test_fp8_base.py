"""The fp8 frozen base (model.base_dtype: float8_e4m3fn) in real runs of the tiny Wan DiT: adapters
train on it as on the float base, the community's fp8 files load as stored (the same predictions as
their dequantized weights, on an fp8 base or a float one), and a base that would train is refused."""

import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.distill import config as distill_config
from harness.dmd import config as dmd_config, shared_name
from harness.lora import experiment, inputs, lora_model, predict
from harness.references import reference_model
from harness.runs import checkpoints, losses, read_csv, run_dir, wanfw

FP8 = {"base_dtype": "float8_e4m3fn"}


def block_linear(key):
    """A block Linear's weight under diffusers' names (the file reference_model writes)."""
    return key.startswith("blocks.") and key.endswith(".weight") and any(
        part in key for part in (".attn1.to_", ".attn2.to_", ".ffn.net."))


def comfy_scaled_fp8(source, folder):
    """`source`'s block Linear weights as ComfyUI's "scaled fp8" files hold them (e4m3 values, one
    float32 `scale_weight` each, the file-wide `scaled_fp8` marker); also the same model with those
    weights dequantized (values x scale, in float32), which is what the fp8 file means."""
    tensors = load_file(source / "diffusion_pytorch_model.safetensors")
    fp8, dequantized = {"scaled_fp8": torch.zeros(2, dtype=torch.float8_e4m3fn)}, {}
    for key, value in tensors.items():
        if not block_linear(key):
            fp8[key] = dequantized[key] = value
            continue
        scale = value.abs().max().float() / 448
        values = (value.float() / scale).to(torch.float8_e4m3fn)
        fp8[key], fp8[key[:-len("weight")] + "scale_weight"] = values, scale.reshape(1)
        dequantized[key] = values.float() * scale
    for name, content in (("fp8", fp8), ("dequantized", dequantized)):
        (folder / name).mkdir(parents=True)
        save_file(content, folder / name / "diffusion_pytorch_model.safetensors")
    return folder / "fp8", folder / "dequantized"


def test_adapters_on_the_fp8_base_learn_as_on_the_float_base_and_save_the_same_tensors(tmp_path):
    reference_model(tmp_path / "base", seed=5)
    float_run = experiment(tmp_path, "float", lora_model(tmp_path / "base"), steps=40, checkpoint_every=40)
    fp8_run = experiment(tmp_path, "fp8", {**lora_model(tmp_path / "base"), **FP8}, steps=40, checkpoint_every=40)
    wanfw("run", float_run, check=0)
    result = wanfw("run", fp8_run, check=0)
    assert "fp8 base: 20 block Linear weights" in result.stdout + result.stderr
    assert "0 read as stored in fp8, 20 quantized while loading" in result.stdout + result.stderr
    wide, narrow = losses(tmp_path, "float"), losses(tmp_path, "fp8")
    first, last = sum(narrow[:5]) / 5, sum(narrow[-5:]) / 5
    print(f"fp8 base: loss of steps 1-5 {first:.4g}, of steps 36-40 {last:.4g}; float base {sum(wide[-5:]) / 5:.4g}")
    assert last < 0.9 * first
    # The fp8 base moves each weight by at most 2^-4 of itself: the runs learn the same way.
    assert abs(last - sum(wide[-5:]) / 5) < 0.1 * (first - last)
    saved = {}
    for name in ("float", "fp8"):
        step = checkpoints(run_dir(tmp_path, name))[-1]
        saved[name] = {k: v.shape for k, v in load_file(step / "model.safetensors").items()}
    assert saved["fp8"] == saved["float"]
    assert all("lora_" in key for key in saved["fp8"])
    for name in ("float", "fp8"):
        wanfw("export", tmp_path / f"{name}.json", "--checkpoint", run_dir(tmp_path, name), "--out",
              tmp_path / f"{name}-adapter", check=0)
    files = {name: sorted(p.name for p in (tmp_path / f"{name}-adapter").iterdir()) for name in ("float", "fp8")}
    assert files["fp8"] == files["float"]
    for file in files["fp8"]:
        if file.endswith(".safetensors"):
            a, b = load_file(tmp_path / "fp8-adapter" / file), load_file(tmp_path / "float-adapter" / file)
            assert {k: (v.shape, v.dtype) for k, v in a.items()} == {k: (v.shape, v.dtype) for k, v in b.items()}


def test_a_comfyui_scaled_fp8_file_predicts_as_its_dequantized_weights_on_an_fp8_or_a_float_base(tmp_path):
    reference_model(tmp_path / "base", seed=5)
    fp8_file, dequantized = comfy_scaled_fp8(tmp_path / "base", tmp_path / "files")
    given = inputs()
    model = {"name": "wan22_flow_matching", "preset": "tiny"}
    runs = {
        "fp8 file, fp8 base": {**model, **FP8, "weights": str(fp8_file), "lora": {"rank": 4, "alpha": 4}},
        "fp8 file, float base": {**model, "weights": str(fp8_file)},
        "dequantized file, float base": {**model, "weights": str(dequantized)},
    }
    outputs = {}
    for i, (name, settings) in enumerate(runs.items()):
        outputs[name] = predict(tmp_path, experiment(tmp_path, f"predict{i}", settings), given)
    assert torch.equal(outputs["fp8 file, fp8 base"], outputs["dequantized file, float base"])
    assert torch.equal(outputs["fp8 file, float base"], outputs["dequantized file, float base"])
    log = wanfw("run", experiment(tmp_path, "stored", runs["fp8 file, fp8 base"], steps=1), check=0)
    assert "20 read as stored in fp8, 0 quantized while loading" in log.stdout + log.stderr


def test_an_fp8_base_without_adapters_is_refused_naming_the_option(tmp_path):
    reference_model(tmp_path / "base", seed=5)
    path = experiment(tmp_path, "full", {"name": "wan22_flow_matching", "preset": "tiny",
                                         "weights": str(tmp_path / "base"), **FP8})
    result = wanfw("run", path)
    assert result.returncode != 0
    text = result.stdout + result.stderr
    assert "model.base_dtype" in text and "an fp8 base is frozen" in text and "lora.rank" in text


def test_a_student_copied_from_an_fp8_teacher_starts_at_zero_loss_on_a_float_or_an_fp8_base(tmp_path):
    """The student copies the teacher's fp8 weights as stored (an fp8 base) or dequantized (a float
    one): either computes exactly the teacher's velocities."""
    reference_model(tmp_path / "teacher", seed=3)
    for name, student in (("float", {}), ("fp8", {**FP8, "lora": {"rank": 4}})):
        path = distill_config(tmp_path, tmp_path / "teacher", name=name, trainer={"max_steps": 1},
                              teacher_base_dtype="float8_e4m3fn", **student)
        result = wanfw("run", path, check=0)
        assert "fp8 base: 20 block Linear weights" in result.stdout + result.stderr
        assert losses(tmp_path, name) == [0.0], name


@pytest.mark.parametrize("generator", [{}, {"latent_size": "4x4x4", "causal": {"frames_per_chunk": 2}}],
                         ids=["bidirectional", "causal"])
def test_dmd_on_one_shared_fp8_base_trains_exactly_what_separate_fp8_copies_train(tmp_path, generator):
    # Causal: Self Forcing's rollout, each chunk's passes and its KV cache through the fp8 Linears.
    reference_model(tmp_path / "teacher", seed=3)
    fp8 = {**FP8, "teacher_base_dtype": "float8_e4m3fn", "lora": {"rank": 4}, "critic_lora": {"rank": 4}, **generator}
    wanfw("run", dmd_config(tmp_path, tmp_path / "teacher", name="separate", **fp8), check=0)
    wanfw("run", dmd_config(tmp_path, tmp_path / "teacher", name="shared", shared_base=True, **fp8), check=0)
    a, b = read_csv(run_dir(tmp_path, "separate") / "metrics.csv"), read_csv(run_dir(tmp_path, "shared") / "metrics.csv")
    assert [r["loss"] for r in a] == [r["loss"] for r in b]
    x = load_file(checkpoints(run_dir(tmp_path, "separate"))[-1] / "model.safetensors")
    y = load_file(checkpoints(run_dir(tmp_path, "shared"))[-1] / "model.safetensors")
    assert {shared_name(k) for k in x} == set(y) and all("lora_" in k for k in y)
    assert all(torch.equal(x[k], y[shared_name(k)]) for k in x)


def test_fsdp_refuses_an_fp8_base_naming_the_parameter_and_the_strategies_that_take_it(tmp_path):
    reference_model(tmp_path / "base", seed=5)
    path = experiment(tmp_path, "fsdp", {**lora_model(tmp_path / "base"), **FP8}, steps=1,
                      strategy={"name": "fsdp", "timeout_s": 60})
    result = wanfw("run", path)
    text = result.stdout + result.stderr
    assert result.returncode != 0
    assert "fsdp: parameter blocks.0.self_attn.q.weight is stored in Float8_e4m3fn" in text
    assert "ddp or single" in text
