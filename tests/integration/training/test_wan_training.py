"""The Wan model plugin in training: the two A14B experts, bf16 weights, gradient checkpointing and
validation, on a tiny model on the CPU. The experts are checked against diffusers'
WanTransformer3DModel: a diffusers pipeline folder holds the high-noise expert in transformer/ and
the low-noise one in transformer_2/."""

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from harness.references import TOLERANCE, expert_pipeline, predict, reference_model
from harness.runs import base_config, checkpoints, wanfw, write_config


def tiny_wan(tmp_path, **model):
    config = base_config(tmp_path / "runs", model={"name": "wan22_flow_matching", "preset": "tiny", **model},
                         data={"num_samples": 32, "batch_size": 4, "workers": 0, "buckets": ["2x4x4"]},
                         optimizer={"lr": 1e-3, "weight_decay": 0.0},
                         trainer={"max_steps": 6, "log_every": 2, "progress": "lines"},
                         checkpoint={"every": 0, "keep_last": 0})
    return config


def run(tmp_path, name, config):
    path = write_config(tmp_path / f"{name}.yaml", {**config, "run": {**config["run"], "name": name}})
    wanfw("run", path, check=0)
    return checkpoints(tmp_path / "runs" / name / "version_0")[-1]


@pytest.mark.every_vector_unit
def test_both_experts_route_each_sample_by_its_timestep(tmp_path):
    folder, high, low = expert_pipeline(tmp_path)
    config = write_config(tmp_path / "wan.yaml", tiny_wan(tmp_path, weights=str(folder), expert="both", boundary=875))
    g = torch.Generator().manual_seed(5)
    x, context = torch.randn(3, 4, 2, 4, 4, generator=g), torch.randn(3, 5, 32, generator=g)
    t = torch.tensor([900.0, 100.0, 875.0])  # high, low, high (t >= boundary)
    got = predict(tmp_path, config, {"x": x, "t": t, "context": context})["v"]
    with torch.no_grad():
        from_high, from_low = high(x, t, context).sample, low(x, t, context).sample
    for i, expected in enumerate([from_high[0], from_low[1], from_high[2]]):
        assert torch.allclose(got[i], expected, atol=TOLERANCE, rtol=0), (i, (got[i] - expected).abs().max())


@pytest.mark.every_vector_unit
def test_one_expert_loads_its_own_folder_of_the_official_layout(tmp_path):
    low = reference_model(tmp_path / "Wan2.2" / "low_noise_model", seed=11)
    reference_model(tmp_path / "Wan2.2" / "high_noise_model", seed=10)
    config = write_config(tmp_path / "wan.yaml",
                          tiny_wan(tmp_path, weights=str(tmp_path / "Wan2.2"), expert="low_noise", boundary=875))
    g = torch.Generator().manual_seed(6)
    x, context, t = torch.randn(1, 4, 2, 4, 4, generator=g), torch.randn(1, 5, 32, generator=g), torch.tensor([300.0])
    with torch.no_grad():
        expected = low(x, t, context).sample
    got = predict(tmp_path, config, {"x": x, "t": t, "context": context})["v"]
    assert torch.allclose(got, expected, atol=TOLERANCE, rtol=0)


def test_an_a14b_preset_without_an_expert_is_refused(tmp_path):
    config = write_config(tmp_path / "wan.yaml", tiny_wan(tmp_path, preset="wan2.2-t2v-a14b"))
    result = wanfw("validate", config, check=2)
    assert "model.expert" in result.stderr and "875" in result.stderr


def test_both_experts_refuse_a_folder_holding_one_model(tmp_path):
    reference_model(tmp_path / "transformer")
    config = write_config(tmp_path / "wan.yaml",
                          tiny_wan(tmp_path, weights=str(tmp_path / "transformer"), expert="both", boundary=875))
    result = wanfw("validate", config, check=1)
    assert "holds one model" in result.stderr and "high_noise_model/" in result.stderr


def test_a_single_expert_trains_only_on_its_side_of_the_boundary(tmp_path):
    config = tiny_wan(tmp_path, expert="high_noise", boundary=875, timestep_sampling="uniform")
    run(tmp_path, "high", config)
    import csv
    rows = list(csv.DictReader(open(tmp_path / "runs" / "high" / "version_0" / "metrics.csv")))
    assert rows and all(float(r["sigma_mean"]) >= 0.875 for r in rows)


def test_training_both_experts_checkpoints_them_under_their_folder_names(tmp_path):
    checkpoint = run(tmp_path, "both", tiny_wan(tmp_path, expert="both", boundary=500))
    with safe_open(checkpoint / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert "high_noise_model.blocks.0.self_attn.q.weight" in keys
    assert "low_noise_model.head.head.weight" in keys
    assert not any(k.startswith("blocks.") for k in keys)


@pytest.mark.every_vector_unit
def test_gradient_checkpointing_trains_to_the_same_weights(tmp_path):
    plain = load_file(run(tmp_path, "plain", tiny_wan(tmp_path)) / "model.safetensors")
    recomputed = load_file(run(tmp_path, "recomputed", tiny_wan(tmp_path, gradient_checkpointing=True))
                           / "model.safetensors")
    assert plain.keys() == recomputed.keys()
    for name in plain:
        assert torch.allclose(plain[name], recomputed[name], rtol=1e-4, atol=1e-6), name


def test_the_cpu_memory_cache_leaves_the_trained_weights_bitwise_unchanged(tmp_path):
    cached = tiny_wan(tmp_path)
    assert "cpu_memory_cache_mb" not in cached["trainer"]  # on by default
    uncached = tiny_wan(tmp_path)
    uncached["trainer"] = {**uncached["trainer"], "cpu_memory_cache_mb": 0}
    with_cache = load_file(run(tmp_path, "cached", cached) / "model.safetensors")
    without = load_file(run(tmp_path, "uncached", uncached) / "model.safetensors")
    assert with_cache.keys() == without.keys()
    for name in without:
        assert torch.equal(with_cache[name], without[name]), name


def test_bfloat16_weights_train_and_are_checkpointed_in_bfloat16(tmp_path):
    checkpoint = run(tmp_path, "bf16", tiny_wan(tmp_path, dtype="bfloat16"))
    weights = load_file(checkpoint / "model.safetensors")
    assert all(t.dtype == torch.bfloat16 for t in weights.values())
    import csv
    losses = [float(r["loss"]) for r in csv.DictReader(open(tmp_path / "runs" / "bf16" / "version_0" / "metrics.csv"))]
    assert losses and all(l == l and abs(l) < 1e3 for l in losses)  # finite


def test_validation_logs_fixed_timestep_losses_and_leaves_training_unchanged(tmp_path):
    import csv
    without = load_file(run(tmp_path, "without", tiny_wan(tmp_path)) / "model.safetensors")
    config = tiny_wan(tmp_path, validation_timesteps=[200, 800])
    config["validation"] = {"every": 3, "num_samples": 8, "batch_size": 4}
    with_validation = load_file(run(tmp_path, "with", config) / "model.safetensors")
    for name in without:  # validation draws from seeded generators and puts their states back
        assert torch.equal(without[name], with_validation[name]), name
    rows = list(csv.DictReader(open(tmp_path / "runs" / "with" / "version_0" / "metrics.csv")))
    validated = {int(r["step"]): r for r in rows if r.get("val/loss")}
    assert sorted(validated) == [3, 6]
    for r in validated.values():
        per_t = [float(r["val/loss_t200"]), float(r["val/loss_t800"])]
        assert abs(float(r["val/loss"]) - sum(per_t) / 2) < 1e-9
    assert [int(r["step"]) for r in rows] == [2, 3, 4, 6]  # validation at 3 got a row of its own


def test_validation_at_start_scores_the_starting_weights_at_step_0_once_and_leaves_training_unchanged(tmp_path):
    import csv

    def scores(name):
        rows = csv.DictReader(open(tmp_path / "runs" / name / "version_0" / "metrics.csv"))
        return [(int(r["step"]), float(r["val/loss"])) for r in rows if r.get("val/loss")]

    without = load_file(run(tmp_path, "without", tiny_wan(tmp_path)) / "model.safetensors")
    config = tiny_wan(tmp_path)
    config["validation"] = {"every": 3, "num_samples": 8, "batch_size": 4, "at_start": True}
    at_start = load_file(run(tmp_path, "start", config) / "model.safetensors")
    assert all(torch.equal(without[name], at_start[name]) for name in without)
    # Step 0 scores the weights before any update: a run at another learning rate scores the same
    # there, and not after its first validated step.
    faster = {**config, "optimizer": {**config["optimizer"], "lr": 1e-2}}
    run(tmp_path, "faster", faster)
    (first, *later), (first_faster, *later_faster) = scores("start"), scores("faster")
    assert first == first_faster and first[0] == 0
    assert [s for s, _ in later] == [3, 6] and later[0][1] != later_faster[0][1]
    # A resumed run does not score its start again.
    config["checkpoint"] = {"every": 3, "keep_last": 0}
    path = write_config(tmp_path / "resumed.yaml", {**config, "run": {**config["run"], "name": "resumed"},
                                                    "trainer": {**config["trainer"], "max_steps": 3}})
    wanfw("run", path, check=0)
    resumed = wanfw("run", path, "--resume", "auto", "--set", "trainer.max_steps=6", check=0)
    assert "validation at step 0" not in resumed.stdout
    assert [s for s, _ in scores("resumed")] == [0, 3, 6]
    # Nothing to validate with validation.every 0: refused at the key.
    config["validation"] = {"every": 0, "at_start": True}
    refused = wanfw("validate", write_config(tmp_path / "refused.yaml", config))
    assert refused.returncode == 2
    assert "validation.at_start" in refused.stderr and "nothing is validated: validation.every is 0" in refused.stderr


@pytest.mark.every_vector_unit
def test_bfloat16_model_loads_weights_and_predicts_within_bfloat16_precision(tmp_path):
    reference = reference_model(tmp_path / "transformer")
    config = write_config(tmp_path / "wan.yaml",
                          tiny_wan(tmp_path, weights=str(tmp_path / "transformer"), dtype="bfloat16"))
    g = torch.Generator().manual_seed(7)
    x, context, t = torch.randn(1, 4, 2, 4, 4, generator=g), torch.randn(1, 5, 32, generator=g), torch.tensor([400.0])
    with torch.no_grad():
        expected = reference(x, t, context).sample
    got = predict(tmp_path, config, {"x": x, "t": t, "context": context})["v"]
    assert got.dtype == torch.bfloat16
    relative = ((got.float() - expected).abs().max() / expected.abs().max()).item()
    assert 0 < relative < 0.05, relative  # bf16 rounding, not an identical float32 computation


def export_and_compare(tmp_path, config, inputs):
    """Trains `config` briefly, exports its checkpoint, and returns (export folder, predictions from
    the checkpoint, predictions from the export loaded as `weights`)."""
    checkpoint = run(tmp_path, "trained", config)
    path = write_config(tmp_path / "trained.yaml", {**config, "run": {**config["run"], "name": "trained"}})
    wanfw("export", path, "--checkpoint", checkpoint, "--out", tmp_path / "export", "--max-shard-size", "20000",
          check=0)
    save_file({k: v.contiguous() for k, v in inputs.items()}, tmp_path / "in.safetensors")
    wanfw("predict", path, "--checkpoint", checkpoint, "--inputs", tmp_path / "in.safetensors", "--out",
          tmp_path / "ckpt.safetensors", check=0)
    from_checkpoint = load_file(tmp_path / "ckpt.safetensors")["v"]
    exported = write_config(tmp_path / "exported.yaml", {**config, "model": {**config["model"],
                                                                              "weights": str(tmp_path / "export")}})
    return tmp_path / "export", from_checkpoint, predict(tmp_path, exported, inputs)["v"]


def test_export_writes_the_official_layout_in_shards_that_load_back(tmp_path):
    import json
    g = torch.Generator().manual_seed(12)
    inputs = {"x": torch.randn(1, 4, 2, 4, 4, generator=g), "t": torch.tensor([600.0]),
              "context": torch.randn(1, 5, 32, generator=g)}
    folder, from_checkpoint, from_export = export_and_compare(tmp_path, tiny_wan(tmp_path), inputs)
    index = json.loads((folder / "diffusion_pytorch_model.safetensors.index.json").read_text())
    shards = sorted(folder.glob("diffusion_pytorch_model-*-of-*.safetensors"))
    assert len(shards) > 1 and set(index["weight_map"].values()) == {s.name for s in shards}
    assert "blocks.0.self_attn.q.weight" in index["weight_map"]  # official names
    config = json.loads((folder / "config.json").read_text())
    assert (config["dim"], config["num_layers"], config["model_type"]) == (48, 2, "t2v")
    assert torch.equal(from_checkpoint, from_export)


def test_export_of_both_experts_writes_a_folder_each_that_loads_back(tmp_path):
    g = torch.Generator().manual_seed(13)
    inputs = {"x": torch.randn(2, 4, 2, 4, 4, generator=g), "t": torch.tensor([900.0, 100.0]),
              "context": torch.randn(2, 5, 32, generator=g)}
    folder, from_checkpoint, from_export = export_and_compare(tmp_path, tiny_wan(tmp_path, expert="both", boundary=500),
                                                              inputs)
    assert (folder / "high_noise_model" / "config.json").exists()
    assert (folder / "low_noise_model" / "diffusion_pytorch_model.safetensors.index.json").exists()
    assert torch.equal(from_checkpoint, from_export)
