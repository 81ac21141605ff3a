"""The Python references wanfw's models are compared with: the tiny Wan DiT and VAEs from diffusers
(weights saved where wanfw loads them), the official layout, and wanfw's own predictions.

diffusers is imported only when a reference is built or run: importing it costs about 9 s of CPU
a process, and most tests need only a reference's saved weights. A tiny DiT's weights are made
once a build for each seed and shape (reference_model's cache under the build folder) and copied
from there; the model itself is loaded from them when a test first runs it."""

import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from harness.equivalence import U, tiny_wan_rounding
from harness.runs import BUILD, base_config, wanfw, write_config


TOLERANCE = 1000 * U + tiny_wan_rounding(global_batch=1, tokens=1)  # 9.5e-5
TINY = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=24, in_channels=4, out_channels=4,
            text_dim=32, freq_dim=256, ffn_dim=96, num_layers=2, cross_attn_norm=True,
            qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024)


TEXT_LEN = 16  # the tiny preset's text_len: every context is zero-padded to it


def padded(context, text_len=TEXT_LEN):
    """A context zero-padded to text_len tokens, as the official model does inside its forward and
    diffusers' pipeline does before it calls the transformer."""
    return torch.nn.functional.pad(context, (0, 0, 0, text_len - context.shape[1]))


class OfficialReference:
    """diffusers' transformer, loaded from `folder` when first used, run as the official Wan model
    runs: every context zero-padded to text_len first (the transformer alone takes any length and
    pads nothing)."""

    def __init__(self, folder):
        self.folder = folder
        self.loaded = None

    @property
    def model(self):
        if self.loaded is None:  # the class save_pretrained wrote: the Wan transformer or its VACE model
            import diffusers
            cls = json.loads((Path(self.folder) / "config.json").read_text())["_class_name"]
            self.loaded = getattr(diffusers, cls).from_pretrained(self.folder).eval()
        return self.loaded

    def __call__(self, x, t, context, **kwargs):
        return self.model(x, t, padded(context), **kwargs)

    def __getattr__(self, name):
        if name in ("folder", "loaded"):  # not set yet (copying, unpickling)
            raise AttributeError(name)
        return getattr(self.model, name)


def randomised_reference(folder, seed, overrides):
    """Builds the tiny diffusers Wan transformer (with `vace_layers`: its VACE model) with every
    parameter randomised (norm weights included; a VACE model's proj_in and proj_out too, which the
    official initialisation zeroes) and saves it with save_pretrained."""
    import diffusers
    cls = diffusers.WanVACETransformer3DModel if "vace_layers" in overrides else diffusers.WanTransformer3DModel
    with torch.random.fork_rng(devices=[]):  # the caller's random stream is left as it was
        torch.manual_seed(seed)
        model = cls(**{**TINY, **overrides}).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(torch.randn_like(p) * (0.1 if p.dim() > 1 else 0.05) + (1.0 if "norm" in name else 0.0))
    model.save_pretrained(folder)


def reference_model(folder, seed=0, **overrides):
    """A tiny diffusers Wan transformer with every parameter randomised, saved in `folder` as
    save_pretrained writes it, run as the official model runs. The files come from the build's
    cache, keyed by the seed, the shape, diffusers' version and this file's text; a miss builds
    them (atomically: parallel tests may ask for the same key). The global random stream is left as
    it was, hit or miss, so what a test draws after it does not depend on the cache."""
    recipe = repr((seed, sorted(overrides.items()), importlib.metadata.version("diffusers"),
                   Path(__file__).read_bytes()))
    cached = BUILD / "test-cache" / "reference-models" / hashlib.sha256(recipe.encode()).hexdigest()[:20]
    if not cached.is_dir():
        cached.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=cached.parent))
        randomised_reference(staging, seed, overrides)
        try:
            os.rename(staging, cached)
        except OSError:  # another test made it first
            shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(cached, folder, dirs_exist_ok=True)
    return OfficialReference(folder)


def reference_folder(folder, seed=0, **overrides) -> Path:
    """`folder`, holding reference_model's saved weights: a teacher or base a test only loads."""
    reference_model(folder, seed, **overrides)
    return folder


def wan_config(tmp_path, weights, task="t2v", **model):
    config = base_config(tmp_path / "runs", model={"name": "wan22_flow_matching", "preset": "tiny", "task": task,
                                                   "weights": str(weights), **model})
    return write_config(tmp_path / "wan.yaml", config)


def predict(tmp_path, config, inputs: dict, *extra) -> dict:
    """What `wanfw predict CONFIG --inputs ... EXTRA` writes for `inputs` (a dict of tensors)."""
    save_file({k: v.contiguous() for k, v in inputs.items()}, tmp_path / "in.safetensors")
    wanfw("predict", config, "--inputs", tmp_path / "in.safetensors", "--out", tmp_path / "out.safetensors", *extra,
          check=0)
    return load_file(tmp_path / "out.safetensors")


WAN21 = dict(base_dim=8, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, temperal_downsample=[False, True, True])
WAN22 = dict(base_dim=8, decoder_base_dim=16, z_dim=48, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
             temperal_downsample=[False, True, True], is_residual=True, in_channels=12, out_channels=12, patch_size=2,
             scale_factor_spatial=16)


VERSIONS = {"wan2.1": (WAN21, 8), "wan2.2": (WAN22, 16)}


def reference_vae(folder, version, seed=0):
    """diffusers' VAE of `version` with every parameter re-drawn (gammas near 1, convolutions scaled
    by their fan-in), saved as a vae/ folder."""
    config, _ = VERSIONS[version]
    g = torch.Generator().manual_seed(seed)
    if version == "wan2.2":  # statistics for its 48 channels
        config = {**config, "latents_mean": (0.3 * torch.randn(48, generator=g)).tolist(),
                  "latents_std": (0.4 + torch.rand(48, generator=g)).tolist()}
    from diffusers import AutoencoderKLWan
    vae = AutoencoderKLWan(**config).eval()
    with torch.no_grad():
        for name, p in vae.named_parameters():
            if name.endswith("gamma"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)
    vae.save_pretrained(folder)
    return vae


def expert_pipeline(tmp_path):
    """A diffusers-layout A14B-like folder: transformer/ (high noise), transformer_2/ (low noise)."""
    high = reference_model(tmp_path / "pipeline" / "transformer", seed=10)
    low = reference_model(tmp_path / "pipeline" / "transformer_2", seed=11)
    return tmp_path / "pipeline", high, low
