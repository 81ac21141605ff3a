"""encode_dataset.py's encoders: the Wan VAE (normalised latents, image conditions) and the UMT5 text
encoder with its tokenizer."""
import sys
from pathlib import Path

import torch

from dataset_media import clean_caption


class Encoders:
    def __init__(self, args, device, dtype):
        from diffusers import AutoencoderKLWan
        from transformers import AutoTokenizer, UMT5EncoderModel

        def load(kind, loader, path, folder):
            """A model folder itself, or a pipeline folder (local or on the Hub) holding it in `folder`."""
            p = Path(path)
            local_model = p.exists() and not (p / folder).is_dir()
            try:
                return loader(path, **({} if local_model else {"subfolder": folder}))
            except (OSError, ValueError) as e:
                if p.exists():
                    raise
                reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                sys.exit(f"--{kind} {path}: no such folder here, and the model hub did not give it ({reason}). "
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
        tokens = self.tokenizer([clean_caption(text)], padding="max_length", max_length=self.text_len, truncation=True,
                                add_special_tokens=True, return_attention_mask=True, return_tensors="pt")
        length = int(tokens.attention_mask.gt(0).sum())
        hidden = self.text(tokens.input_ids.to(self.device), tokens.attention_mask.to(self.device)).last_hidden_state
        return hidden[0, :max(length, 1)].to(self.dtype).cpu()
