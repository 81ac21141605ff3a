"""VACE on the tiny DiT: the diffusers reference configs and wanfw's model section for each, the
inputs of a forward with reference frames, the official names of a diffusers VACE checkpoint, and
data set folders whose control context determines the target."""
import sys
from pathlib import Path

import torch

from harness.equivalence import U, tiny_wan_rounding
from harness.runs import SOURCE

# diffusers' own tiny VACE configs (its model test and its pipeline test) and one of ours: hints
# after blocks 0, 1 and 3 of 5, on the tiny preset's width and a 4-channel latent (72 = 4 + 4 + 64).
CONFIGS = {
    "diffusers_model_test": dict(num_attention_heads=2, attention_head_dim=12, ffn_dim=32, num_layers=4,
                                 in_channels=16, out_channels=16, vace_layers=[0, 2], vace_in_channels=48),
    "diffusers_pipeline_test": dict(num_attention_heads=2, attention_head_dim=12, ffn_dim=32, num_layers=3,
                                    in_channels=16, out_channels=16, vace_layers=[0, 2], vace_in_channels=96),
    "hints_after_0_1_3_of_5": dict(num_attention_heads=2, attention_head_dim=24, ffn_dim=96, num_layers=5,
                                   in_channels=4, out_channels=4, vace_layers=[0, 1, 3], vace_in_channels=72),
}


def model_section(reference: dict) -> dict:
    """wanfw's model options for a diffusers VACE config (the tiny preset's text width and length)."""
    return dict(dim=reference["num_attention_heads"] * reference["attention_head_dim"],
                num_heads=reference["num_attention_heads"], ffn_dim=reference["ffn_dim"],
                num_layers=reference["num_layers"], in_dim=reference["in_channels"],
                out_dim=reference["out_channels"], vace_layers=reference["vace_layers"],
                vace_in_dim=reference["vace_in_channels"])


def tolerance(reference: dict, tokens: int) -> float:
    """TOLERANCE of tests/integration/harness/references.py for a deeper DiT: the time embedding's
    float32 angles (1000 u) and the forward's rounding through every main and VACE block, the
    context's patch embedding and the projections counted as one more block."""
    blocks = reference["num_layers"] + len(reference["vace_layers"]) + 1
    return 1000 * U + tiny_wan_rounding(global_batch=1, tokens=tokens, layers=blocks)


def forward_inputs(reference: dict, seed: int, batch=2, frames=2, references=1, height=16, width=16) -> dict:
    """A forward's inputs: noisy latents with `references` reference frames before the video's,
    integer timesteps, a text context shorter than text_len, and the VACE context laid out as the
    official pipeline lays it: a reference frame is its latent beside zeros (no reactive part, a
    zero mask), a video frame inactive, reactive and mask channels."""
    g = torch.Generator().manual_seed(seed)
    c = reference["out_channels"]
    total = references + frames
    x = torch.randn(batch, c, total, height, width, generator=g)
    video = torch.randn(batch, reference["vace_in_channels"], frames, height, width, generator=g)
    refs = torch.cat([torch.randn(batch, c, references, height, width, generator=g),
                      torch.zeros(batch, reference["vace_in_channels"] - c, references, height, width)], 1)
    t = torch.randint(0, 1000, (batch,), generator=g).float()
    return {"x": x, "t": t, "context": torch.randn(batch, 7, 32, generator=g),
            "vace_context": torch.cat([refs, video], 2)}


def distinct_scales(reference: dict) -> torch.Tensor:
    """One scale a hint, each different: 0.5, 1.25, 2.0, ..."""
    return torch.tensor([0.5 + 0.75 * k for k in range(len(reference["vace_layers"]))])


# diffusers' names -> the official ones, for the parts of a VACE checkpoint (the official VACE model
# and diffusers' conversion: before_proj <-> proj_in, after_proj <-> proj_out, the norms swapped).
OFFICIAL = [
    ("condition_embedder.time_embedder.linear_1.", "time_embedding.0."),
    ("condition_embedder.time_embedder.linear_2.", "time_embedding.2."),
    ("condition_embedder.time_proj.", "time_projection.1."),
    ("condition_embedder.text_embedder.linear_1.", "text_embedding.0."),
    ("condition_embedder.text_embedder.linear_2.", "text_embedding.2."),
    (".attn1.to_out.0.", ".self_attn.o."), (".attn1.to_q.", ".self_attn.q."), (".attn1.to_k.", ".self_attn.k."),
    (".attn1.to_v.", ".self_attn.v."), (".attn1.norm_q.", ".self_attn.norm_q."),
    (".attn1.norm_k.", ".self_attn.norm_k."), (".attn2.to_out.0.", ".cross_attn.o."),
    (".attn2.to_q.", ".cross_attn.q."), (".attn2.to_k.", ".cross_attn.k."), (".attn2.to_v.", ".cross_attn.v."),
    (".attn2.norm_q.", ".cross_attn.norm_q."), (".attn2.norm_k.", ".cross_attn.norm_k."),
    (".norm2.", ".norm3."), (".ffn.net.0.proj.", ".ffn.0."), (".ffn.net.2.", ".ffn.2."),
    (".proj_in.", ".before_proj."),
]


def official_name(key: str) -> str:
    if key == "scale_shift_table":
        return "head.modulation"
    if key.startswith("proj_out."):
        return "head.head." + key[len("proj_out."):]
    if key.endswith(".scale_shift_table"):
        return key[:-len("scale_shift_table")] + "modulation"
    for diffusers, official in OFFICIAL:
        key = key.replace(diffusers, official)
    return key.replace(".proj_out.", ".after_proj.")


def control_dataset(folder: Path, samples: int, bucket=(2, 8, 8), channels=4, shuffled=False, seed=0,
                    negated=False) -> Path:
    """A data set folder in the real format for a tiny VACE model in the control mode of the official
    pipeline (mask all ones: no inactive part): each sample's latents are random, its reactive
    latents are those latents (the control video is the target), and every caption is the same, so
    only the control tells one sample from another. `shuffled`: each sample carries another
    sample's control, which then tells nothing. `negated`: the control video is the target negated
    (another control for a model that learned the first)."""
    sys.path.insert(0, str(SOURCE / "tools"))
    from dataset_folder import Folder  # the data set format's one Python writer
    g = torch.Generator().manual_seed(seed)
    f, h, w = bucket
    latents = [torch.randn(channels, f, h, w, generator=g) for _ in range(samples)]
    order = torch.randperm(samples, generator=g).tolist() if shuffled else list(range(samples))
    out = Folder(folder, "control-", 1 << 30, {"vae": "control test"}, f"control test {seed} {shuffled}",
                 "manifest.json")
    caption = {"context": out.store("context/caption", torch.randn(6, 32, generator=g).bfloat16())}
    out.manifest["empty_caption"] = {"context": out.store("context/empty", torch.randn(3, 32, generator=g).bfloat16())}
    for i, x in enumerate(latents):
        reactive = -latents[order[i]] if negated else latents[order[i]]
        control = torch.cat([torch.zeros(channels, f, h, w), reactive, torch.ones(64, f, h, w)])
        out.add({"id": f"sample_{i:04d}", "bucket": "x".join(map(str, bucket)), "caption_hash": "same",
                 "fields": {"latents": out.store(f"latents/{i}", x.bfloat16()),
                            "vace_context": out.store(f"vace_context/{i}", control.bfloat16()), **caption}})
    out.flush()
    return folder
