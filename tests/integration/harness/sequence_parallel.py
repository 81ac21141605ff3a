"""The sequence-parallel layouts' data: latents whose tokens divide over the ranks of a group."""


DIVIDES = {"buckets": ["3x8x8"], "num_samples": 24}  # 3 x 4 x 4 = 48 tokens in 1x2x2 patches: 24 a rank
GLOBAL_BATCH = 2
