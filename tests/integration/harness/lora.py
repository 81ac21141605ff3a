"""LoRA on the tiny Wan DiT: the adapted layers and their diffusers names, a base to adapt, the LoRA
experiment and what it predicts."""

import pytest

from harness.distill import inputs as distill_inputs
from harness.references import predict as predict_outputs, reference_folder
from harness.runs import base_config, write_run_config


LAYERS = [f"blocks.{b}.{part}" for b in range(2) for part in
          [f"{a}.{p}" for a in ("self_attn", "cross_attn") for p in "qkvo"] + ["ffn.0", "ffn.2"]]


DIFFUSERS = {"self_attn.q": "attn1.to_q", "self_attn.k": "attn1.to_k", "self_attn.v": "attn1.to_v",
             "self_attn.o": "attn1.to_out.0", "cross_attn.q": "attn2.to_q", "cross_attn.k": "attn2.to_k",
             "cross_attn.v": "attn2.to_v", "cross_attn.o": "attn2.to_out.0", "ffn.0": "ffn.net.0.proj",
             "ffn.2": "ffn.net.2"}


def diffusers_name(layer):
    block, rest = layer.split(".", 2)[1], layer.split(".", 2)[2]
    return f"blocks.{block}.{DIFFUSERS[rest]}"


def lora_model(base, **lora):
    return {"name": "wan22_flow_matching", "preset": "tiny", "weights": str(base),
            "lora": {"rank": 4, "alpha": 8, **lora}}


def experiment(tmp_path, name, model, steps=20, checkpoint_every=0, **sections):
    c = base_config(tmp_path / "runs", model=model,
                    data={"num_samples": 32, "batch_size": 4, "workers": 0, "buckets": ["2x4x4"]},
                    optimizer={"lr": 1e-2, "weight_decay": 0.0},
                    trainer={"max_steps": steps, "log_every": 1, "progress": "lines"},
                    checkpoint={"every": checkpoint_every, "keep_last": 0})
    for key, value in sections.items():
        c[key] = {**c.get(key, {}), **value}
    return write_run_config(tmp_path, name, c)


@pytest.fixture
def base(tmp_path):
    return reference_folder(tmp_path / "base", seed=5)


def inputs():
    return distill_inputs(9, (150.0, 720.0))


def predict(tmp_path, config, given, *extra):
    return predict_outputs(tmp_path, config, given, *extra)["v"]
