"""ti2v on image samples: a TI2V-5B data set mixes video buckets with single-frame ones (images).
A video sample keeps its first latent frame clean as the image condition; an image has nothing
after that frame, so it is trained from its text alone, exactly as t2v trains it. Mixed image and
video buckets train alike on one device and on sequence-parallel groups. Real torchrun, CPU."""

import torch

from harness.equivalence import assert_same_training, tiny_wan_rounding
from harness.layouts import CPU, DDP, LR, run_on, tiny_wan
from harness.runs import metrics

IMAGES = {"buckets": ["1x8x8"], "num_samples": 24}


def test_a_ti2v_image_sample_trains_bitwise_as_t2v_trains_it(tmp_path):
    ti2v = run_on(tmp_path, "ti2v", CPU, 4, tiny_wan("ti2v"), data=IMAGES)
    t2v = run_on(tmp_path, "t2v", CPU, 4, tiny_wan("t2v"), data=IMAGES)  # the same DiT, seed, noise and levels
    assert [r["loss"] for r in metrics(tmp_path, "ti2v")] == [r["loss"] for r in metrics(tmp_path, "t2v")]
    assert all(torch.equal(ti2v.weights[k], t2v.weights[k]) for k in t2v.weights)
    # Videos differ: there ti2v keeps the first frame clean and out of the loss.
    videos = {"buckets": ["3x8x8"], "num_samples": 24}
    run_on(tmp_path, "ti2v_video", CPU, 4, tiny_wan("ti2v"), data=videos)
    run_on(tmp_path, "t2v_video", CPU, 4, tiny_wan("t2v"), data=videos)
    assert [r["loss"] for r in metrics(tmp_path, "ti2v_video")] != [r["loss"] for r in metrics(tmp_path, "t2v_video")]


def test_mixed_image_and_video_buckets_train_alike_on_sequence_parallel_groups(tmp_path):
    mixed = {"buckets": ["1x8x8", "3x8x8"], "num_samples": 24}  # 16 and 48 tokens: both divide over 2 ranks
    model = tiny_wan("ti2v")
    whole = run_on(tmp_path, "whole", CPU, 2, model, data=mixed, trainer={"max_steps": 6})
    split = run_on(tmp_path, "ddp_sp2", {**DDP, "sequence_parallel": 2}, 2, model, 2, data=mixed,
                   trainer={"max_steps": 6})
    print(f"ti2v, image and video buckets, ddp sp2 vs one device: "
          f"{assert_same_training(split, whole, lr=LR, tolerance=tiny_wan_rounding(2, 48))}")
