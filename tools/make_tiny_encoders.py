"""Makes small random encoders for a first try of tools/encode_dataset.py without the real weights:
a Wan2.1-style VAE of 4 latent channels (strides 4 x 8 x 8: the tiny and quickstart models' latent
space) and a UMT5 text encoder 32 wide (the tiny preset's text width) with a tokenizer of one token
a character, in the folders the encoder takes:

    .venv/bin/python tools/make_tiny_encoders.py encoders/
    .venv/bin/python tools/encode_dataset.py my-clips/ my-set --vae encoders/vae \\
        --text-encoder encoders/text_encoder --tokenizer encoders/tokenizer --buckets 17x64x64 --text-len 16

Random weights encode nothing a model can learn from the pictures' meaning, but every step of the
path runs as it does with the real Wan2.1 VAE and umt5-xxl (docs/data.md): buckets, shards,
`wanfw data inspect`, training, previews."""
import argparse
import string
import sys
from pathlib import Path

import torch


def make_tiny_encoders(folder: Path, words=None, seed=0) -> Path:
    """vae/, tokenizer/ and text_encoder/ in `folder`. The tokenizer takes `words` as its vocabulary
    (one token a word), or, without them, every printable ASCII character (one token a character:
    any caption gets tokens of its own)."""
    from diffusers import AutoencoderKLWan
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, UMT5Config, UMT5EncoderModel

    torch.manual_seed(seed)
    vae = AutoencoderKLWan(base_dim=8, z_dim=4, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           latents_mean=[0.1, -0.2, 0.0, 0.3], latents_std=[1.5, 0.8, 1.0, 2.0])
    vae.save_pretrained(folder / "vae")
    units = words if words is not None else [c for c in string.printable if c not in "\t\n\r\x0b\x0c"]
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{u: i + 3 for i, u in enumerate(units)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace() if words is not None else \
        pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(folder / "tokenizer")
    config = UMT5Config(vocab_size=len(vocab), d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4,
                        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    UMT5EncoderModel(config).save_pretrained(folder / "text_encoder")
    return folder


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the folder to write vae/, tokenizer/ and text_encoder/ into")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    make_tiny_encoders(args.out, seed=args.seed)
    print(f"wrote {args.out / 'vae'}, {args.out / 'tokenizer'} and {args.out / 'text_encoder'}: pass them to "
          f"tools/encode_dataset.py as --vae, --tokenizer and --text-encoder (4 latent channels, text 32 wide: "
          f"model.preset tiny)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
