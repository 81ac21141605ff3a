"""Distribution-matching distillation (DMD) from a tiny teacher: the model section, the experiment,
its run folder, and the distance between two sets of samples the quality tests use."""

import json

import torch
from safetensors.torch import load_file, save_file

from harness.references import reference_model
from harness.runs import SOURCE, base_config, checkpoints, read_csv, run_dir, wanfw, write_config, write_run_config


CYCLE = 3  # generator 1 step, critic 2
BOUNDARY = 875
# Both experts of a two-expert teacher on their shared base; 4 steps at shift 5: levels 1.0,
# 0.9375 (high noise) and 0.8333, 0.625 (low noise), as the Lightning LoRAs take them.
EXPERTS = {"teacher_expert": "both", "teacher_boundary": BOUNDARY, "shared_base": True, "lora": {"rank": 4},
           "critic_lora": {"rank": 4}, "generator_steps": 4}


def two_experts(folder):
    """Two tiny diffusers DiTs of other random weights in `folder`, as the official A14B download
    holds them; returns the folder and each expert's reference model ("high", "low")."""
    return folder, {"high": reference_model(folder / "high_noise_model", seed=5),
                    "low": reference_model(folder / "low_noise_model", seed=6)}


def dmd(teacher, **model):
    return {"name": "wan22_distill", "teacher_preset": "tiny", "teacher_weights": str(teacher), "objective": "dmd",
            "inputs": "generator", "latent_size": "3x4x4", "generator_steps": 3, "real_guidance": 2.0,
            "critic_updates_per_generator_update": CYCLE - 1, "critic_lr_scale": 2.0, **model}


def config(tmp_path, teacher, name="dmd", steps=6, **model):
    c = base_config(tmp_path / "runs", model=dmd(teacher, **model),
                    data={"num_samples": 24, "batch_size": 4, "workers": 0},
                    optimizer={"lr": 1e-3, "weight_decay": 0.0},
                    trainer={"max_steps": steps, "log_every": 1, "progress": "lines"},
                    checkpoint={"every": 1, "keep_last": 0})
    return write_run_config(tmp_path, name, c)


def shared_name(name):
    """A separate critic's adapter name as the shared base holds it (the generator's second set)."""
    return name.replace("critic.", "generator.", 1).replace(".lora_A.", ".critic_lora_A.").replace(
        ".lora_B.", ".critic_lora_B.") if name.startswith("critic.") else name


def mmd2(x, y):
    """Unbiased MMD^2 (Gretton et al. 2012) of samples x [m, d] and y [n, d], RBF kernels at 0.5, 1
    and 2 times the median squared distance, summed: zero in expectation iff the distributions match."""
    both = torch.cat([x, y]).double()
    d = torch.cdist(both, both) ** 2
    median, m, n = d[d > 0].median(), len(x), len(y)
    total = 0.0
    for scale in (0.5, 1.0, 2.0):
        k = torch.exp(-d / (2 * scale * median))
        kxx, kyy, kxy = k[:m, :m], k[m:, m:], k[:m, m:]
        total += ((kxx.sum() - kxx.diag().sum()) / (m * (m - 1)) + (kyy.sum() - kyy.diag().sum()) / (n * (n - 1))
                  - 2 * kxy.mean()).item()
    return total


def assert_resumes_mid_cycle_to_the_same_bits(tmp_path, path):
    """Runs `path` (7 steps, a checkpoint each), then again as if killed after step 5, a critic step
    in the middle of cycle 2: the resumed run's last checkpoint holds the uninterrupted one's
    tensors bit for bit. Returns them ("model", "optimizer")."""
    wanfw("run", path, check=0)
    saved = checkpoints(run_dir(tmp_path, "dmd"))
    uninterrupted = {kind: load_file(saved[-1] / f"{kind}.safetensors") for kind in ("model", "optimizer")}
    for late in saved[5:]:
        for f in late.iterdir():
            f.unlink()
        late.rmdir()
    resumed = wanfw("run", path, "--resume", "auto", check=0)
    assert "step-00000005" in resumed.stdout
    last = checkpoints(run_dir(tmp_path, "dmd"))[-1]
    assert last.name == "step-00000007"
    for kind, tensors in uninterrupted.items():
        again = load_file(last / f"{kind}.safetensors")
        assert again.keys() == tensors.keys()
        assert all(torch.equal(again[k], tensors[k]) for k in tensors), kind
    return uninterrupted


def assert_block_swap_and_activation_offload_change_no_bit(tmp_path, teacher, streamed, blocks, **model):
    """Runs the DMD experiment of `model` (with gradient checkpointing) resident, with `streamed`
    of its `blocks` blocks streamed from host memory, and with each checkpointed block's input
    offloaded there: the latter two print every step's loss and end with the weights of the first,
    bit for bit."""
    runs = {}
    for name, swap, offload in (("resident", None, False), ("swapped", {"blocks": streamed, "ring": 1}, False),
                                ("offloaded", None, True)):
        path = config(tmp_path, teacher, name=name, gradient_checkpointing=True, activation_offload=offload, **model)
        if swap:
            write_config(path, {**json.loads(path.read_text()), "block_swap": swap})
        result = wanfw("run", path, check=0)
        run = run_dir(tmp_path, name)
        runs[name] = (result.stdout + result.stderr, [r["loss"] for r in read_csv(run / "metrics.csv")],
                      load_file(checkpoints(run)[-1] / "model.safetensors"))
    assert f"block swap: {streamed} of {blocks} blocks stream from" in runs["swapped"][0]
    assert "activation offload" in runs["offloaded"][0]
    for name in ("swapped", "offloaded"):
        assert runs[name][1] == runs["resident"][1], name  # every step's loss, as printed
        a, b = runs[name][2], runs["resident"][2]
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


def one_caption_teacher(folder, buckets, name):
    """The quickstart's model trained in `folder` with one caption for its 8 patterns at `buckets`
    (a caption then stands for 8 quite different latents) as run `name`, and exported to
    runs/<name>-export. Returns the command-line settings of its data."""
    one_caption = ["--set", "data.captions=1", "--set", f'data.buckets=["{buckets}"]']
    quickstart = SOURCE / "examples" / "quickstart.yaml"
    wanfw("run", quickstart, *one_caption, "--set", f"run.name={name}", cwd=folder, check=0)
    wanfw("export", quickstart, "--checkpoint", f"runs/{name}/version_0", "--out", f"runs/{name}-export", cwd=folder,
          check=0)
    return one_caption


def expert_adapters_student(tmp_path, experts, folder):
    """wan22_flow_matching on the two `experts` with each expert's adapters as `wanfw export` wrote
    them to `folder` (<expert>_model/wan_lora.safetensors), loaded to train further (so unmerged, as
    the DMD generator runs them), sampling as the generator of EXPERTS does: 4 renoise steps at
    shift 5, no guidance. Returns its config file."""
    load = [{"file": str(folder / f"{e}_model" / "wan_lora.safetensors"), "train": True, "expert": e}
            for e in ("high_noise", "low_noise")]
    return write_config(tmp_path / "student.json", base_config(tmp_path / "runs", model={
        "name": "wan22_flow_matching", "preset": "tiny", "weights": str(experts), "expert": "both",
        "boundary": BOUNDARY, "lora": {"rank": 4, "load": load}, "sample_steps": 4, "sample_solver": "renoise",
        "sample_shift": 5.0, "sample_guidance": 1.0, "sample_size": "3x4x4"},
        data={"num_samples": 24, "batch_size": 4, "workers": 0}))


def sampled(tmp_path, name, *where):
    """The latents `wanfw sample WHERE...` draws for fixed conditioning: 4 samples of 3x4x4, seed 9."""
    conditioning = tmp_path / "conditioning.safetensors"
    if not conditioning.exists():
        g = torch.Generator().manual_seed(5)
        save_file({"context": torch.randn(4, 5, 32, generator=g), "noise": torch.randn(4, 4, 3, 4, 4, generator=g)},
                  conditioning)
    wanfw("sample", *where, "--inputs", conditioning, "--seed", "9", "--out", tmp_path / f"{name}.safetensors",
          check=0)
    return load_file(tmp_path / f"{name}.safetensors")["latents"]


def distances_to_the_teachers_40_steps(folder, teacher, students, count=200):
    """MMD^2 (mmd2) to the teacher's 40-step samples from seed 1001, of: its 40 steps from seed 2002
    (the floor), its own 4 steps, and each of `students` (name: `wanfw sample` arguments, the
    config first), `count` latents each from seed 2002. `teacher`: the teacher's `wanfw sample`
    arguments, the config first; runs in `folder`."""
    def draw(config_file, seed, *extra):
        out = folder / f"samples-{len(list(folder.glob('samples-*')))}.safetensors"
        wanfw("sample", config_file, "--count", str(count), "--seed", str(seed), "--out", out, *extra, cwd=folder,
              check=0)
        return load_file(out)["latents"].flatten(1)

    reference = draw(teacher[0], 1001, *teacher[1:], "--set", "model.sample_steps=40")
    distances = {
        "teacher 40 steps, other seeds (floor)": mmd2(draw(teacher[0], 2002, *teacher[1:], "--set",
                                                            "model.sample_steps=40"), reference),
        "teacher 4 steps": mmd2(draw(teacher[0], 2002, *teacher[1:], "--set", "model.sample_steps=4"), reference)}
    for name, student in students.items():
        distances[name] = mmd2(draw(student[0], 2002, *student[1:]), reference)
    return distances
