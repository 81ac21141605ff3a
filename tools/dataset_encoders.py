"""encode_dataset.py's encoders: the Wan VAE (normalised latents, image conditions) and the UMT5 text
encoder with its tokenizer."""
import os
import socket
import sys
from functools import cache
from pathlib import Path
from urllib.parse import urlparse

import torch

from dataset_media import clean_caption


@cache
def hub_reachable() -> bool:
    """Whether the model hub answers a connection within a few seconds. Unreachable (no network, no
    name resolution), the encoders come from the local hub cache only: the hub client would otherwise
    retry for half a minute before failing. Behind a proxy the answer is left to the hub client."""
    from huggingface_hub import constants
    if constants.HF_HUB_OFFLINE:
        return False
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=5).close()
        return True
    except OSError:
        return False


class Encoders:
    def __init__(self, args, device, dtype):
        from diffusers import AutoencoderKLWan
        from transformers import AutoTokenizer, UMT5EncoderModel

        def load(kind, loader, path, folder):
            """A model folder itself, or a pipeline folder (local or on the Hub) holding it in `folder`."""
            p = Path(path)
            local_model = p.exists() and not (p / folder).is_dir()
            options = {} if local_model else {"subfolder": folder}
            if not p.exists() and not hub_reachable():
                options["local_files_only"] = True  # what an earlier download left in the hub cache
            try:
                return loader(path, **options)
            except (OSError, ValueError) as e:
                if p.exists():
                    raise
                reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                hub = f"the model hub did not give it ({reason})" if hub_reachable() else \
                    "the model hub cannot be reached from here and the hub cache does not hold it"
                sys.exit(f"--{kind} {path}: no such folder here, and {hub}. "
                         f"Download it once where the hub is reachable (huggingface-cli download {path} "
                         f"--local-dir DIR) and pass DIR; or, for a first try without the real weights, make small "
                         f"random encoders: tools/make_tiny_encoders.py DIR (docs/data.md)")
        self.vae = load("vae", AutoencoderKLWan.from_pretrained, args.vae, "vae").to(device).eval() \
            if args.vae else None
        self.text = load("text-encoder", UMT5EncoderModel.from_pretrained, args.text_encoder, "text_encoder")
        self.text = self.text.to(device).eval()
        tokenizer = args.tokenizer or args.text_encoder
        self.tokenizer = load("tokenizer" if args.tokenizer else "text-encoder", AutoTokenizer.from_pretrained,
                              tokenizer, "tokenizer")
        self.device, self.dtype, self.text_len = device, dtype, args.text_len
        self.cut_captions = 0  # captions of more than text_len tokens, encoded at text_len
        if self.vae is None:  # prompts alone
            return
        c = self.vae.config
        self.spatial = c.scale_factor_spatial or 8
        self.temporal = c.scale_factor_temporal or 4
        self.mean = torch.tensor(c.latents_mean).view(1, -1, 1, 1, 1).to(device)
        self.inv_std = 1.0 / torch.tensor(c.latents_std).view(1, -1, 1, 1, 1).to(device)

    @torch.no_grad()
    def latents(self, video):
        """[3, F, H, W] in [-1, 1] -> [C, F', H', W'] normalised latents."""
        x = video.unsqueeze(0).to(self.device, self.vae.dtype)
        z = self.vae.encode(x).latent_dist.mode()
        return ((z.float() - self.mean) * self.inv_std)[0].to(self.dtype).cpu()

    def image_condition(self, video, last_frame=False):
        """The first frame of [3, F, H, W] followed by F - 1 zero frames, encoded: [C, F', H', W'];
        `last_frame`: the last frame kept too (first-last-frame video), zero frames between."""
        condition = torch.zeros_like(video)
        condition[:, 0] = video[:, 0]
        if last_frame:
            condition[:, -1] = video[:, -1]
        return self.latents(condition)

    @torch.no_grad()
    def caption(self, text):
        """[L, text_dim] at the caption's real length."""
        if len(self.tokenizer(clean_caption(text), add_special_tokens=True).input_ids) > self.text_len:
            self.cut_captions += 1
        tokens = self.tokenizer([clean_caption(text)], padding="max_length", max_length=self.text_len, truncation=True,
                                add_special_tokens=True, return_attention_mask=True, return_tensors="pt")
        length = int(tokens.attention_mask.gt(0).sum())
        hidden = self.text(tokens.input_ids.to(self.device), tokens.attention_mask.to(self.device)).last_hidden_state
        return hidden[0, :max(length, 1)].to(self.dtype).cpu()
