#!/usr/bin/env python3
"""The chaos driver: trains the tiny Wan DiT under torchrun, kills, terminates or stops a rank at a
random moment or at a named point of a step or of writing a checkpoint (WANFW_FAULT), resumes
with `--resume auto` (sometimes on another world size) until the run ends, and compares the end with the uninterrupted run of the
same layout: bitwise where every attempt ran on that layout, within equivalence.py's bound where
one did not.

    .venv/bin/python tests/integration/faults/chaos.py --trials 50 [--seed S] [--layouts fsdp_2,dmd] [--out DIR]

Trials take the layouts in turn, so every layout asked for is tried; each trial draws from
Random(seed + trial) the fault (a random moment or a named point; SIGKILL, SIGTERM, or SIGSTOP
for a rank that hangs; which rank) and the layouts of its resumes. A trial ends `ok`, `lost` (the
run could not be finished from what the fault left), `hang` (a launch outlived its time),
`unnamed` (a stopped rank failed the run without being named) or `changed` (the end differs from
the uninterrupted run). The seed is printed first: a trial is repeated by running again with it.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/integration: the harness

from harness.equivalence import assert_same_training, tiny_wan_rounding, trained  # noqa: E402
from harness.launch import PRELOADED_TORCHRUN, TORCHRUN, free_port, launched_ranks  # noqa: E402
from harness.runs import WANFW, base_config, checkpoints, write_config  # noqa: E402

LR = 1e-3
STEPS, EVERY = 6, 2  # checkpoints at steps 2, 4 and 6
GLOBAL_BATCH = 4
TIME_LIMIT = 240  # seconds a launch may take before it counts as a hang
CPU = {"name": "single", "device": "cpu"}
DDP = {"name": "ddp", "timeout_s": 20}  # how long the others wait for a stopped rank
FSDP = {"name": "fsdp", "timeout_s": 20}
WAN = {"name": "wan22_flow_matching", "preset": "tiny", "text_len": 4, "timestep_sampling": "logit_normal"}
SMALL, SEQUENCE = ["3x4x4"], ["3x8x8"]  # 12 tokens; 48 (24 a rank of a sequence-parallel pair)

# name: (strategy, batch per rank, ranks, model, buckets); every one a global batch of 4.
LAYOUTS = {
    "single": (CPU, 4, 1, WAN, SMALL),
    "ddp_2": (DDP, 2, 2, WAN, SMALL),
    "fsdp_2": (FSDP, 2, 2, WAN, SMALL),
    "fsdp_4": (FSDP, 1, 4, WAN, SMALL),
    "fsdp_sp_2": ({**FSDP, "sequence_parallel": 2}, 2, 4, WAN, SEQUENCE),
    "fsdp_hybrid": ({**FSDP, "replicate": 2}, 1, 4, WAN, SMALL),  # 2 replica groups of 2 shards
    "grad_accum": ({"name": "grad_accum", "steps": 2, "inner": DDP}, 1, 2, WAN, SMALL),
    "lora": (DDP, 2, 2, {**WAN, "lora": {"rank": 4, "alpha": 8, "dropout": 0.2}}, SMALL),
    "dmd": (DDP, 2, 2, None, SMALL),  # the model needs a teacher: dmd_model()
}
# A resume may move to another world size: layouts whose checkpoints every other one here reads.
RESIZABLE = ("single", "ddp_2", "fsdp_2", "fsdp_4", "fsdp_hybrid")
STEP_POINTS = ("step-forward", "step-gradients", "step-optimizer")  # WANFW_FAULT's points (host/fault_point.hpp)
SHARDED_POINTS = ("checkpoint-pieces", "checkpoint-index")  # written by strategies that shard the state


def dmd_model(teacher):
    return {"name": "wan22_distill", "teacher_preset": "tiny", "teacher_weights": str(teacher), "objective": "dmd",
            "inputs": "generator", "latent_size": "3x4x4", "generator_steps": 2, "real_guidance": 2.0,
            "critic_updates_per_generator_update": 1}


class Workspace:
    def __init__(self, folder: Path):
        self.folder = folder
        self.teacher = None
        self.twins = {}

    def model(self, layout):
        model = LAYOUTS[layout][3]
        if model is not None:
            return model
        if self.teacher is None:
            from harness.references import reference_model
            self.teacher = self.folder / "teacher"
            reference_model(self.teacher, seed=3)
        return dmd_model(self.teacher)

    def config(self, name, layout, training_layout=None):
        """The config of run `name`; `training_layout` (default `layout`) says which strategy trains it."""
        strategy, batch, _, _, buckets = LAYOUTS[training_layout or layout]
        c = base_config(self.folder / "runs", strategy=strategy, model=self.model(layout),
                        data={"num_samples": 24, "batch_size": batch, "workers": 0, "buckets": buckets},
                        optimizer={"lr": LR, "weight_decay": 0.01},
                        trainer={"max_steps": STEPS, "log_every": 1, "progress": "lines"},
                        checkpoint={"every": EVERY, "keep_last": 0})
        c["run"]["name"] = name
        return write_config(self.folder / f"{name}.json", c)

    def twin(self, layout):
        """The uninterrupted run of `layout`, when its first checkpoint appeared and when it ended
        (seconds from its launch)."""
        if layout not in self.twins:
            for attempt in range(3):  # a port probed free can be taken before torchrun listens on it
                started, first = time.monotonic(), None
                process = launch(self.config(f"twin_{layout}", layout), LAYOUTS[layout][2], [], {})
                while process.poll() is None and first is None:
                    if checkpoints(self.run_dir(f"twin_{layout}")):
                        first = time.monotonic() - started
                    time.sleep(0.02)
                code, output = finish(process)
                if "failed to listen on any local network address" not in output:
                    break
            if code != 0 or first is None:
                raise RuntimeError(f"the uninterrupted {layout} run failed:\n{output[-3000:]}")
            self.twins[layout] = (trained(checkpoints(self.run_dir(f"twin_{layout}"))[-1]), first,
                                  time.monotonic() - started)
        return self.twins[layout]

    def run_dir(self, name):
        """The run's newest version folder: a resume that finds no checkpoint starts the next one."""
        versions = sorted((self.folder / "runs" / name).glob("version_*"), key=lambda p: int(p.name[8:]))
        return versions[-1] if versions else self.folder / "runs" / name / "version_0"


def launch(config, ranks, args, env):
    """Starts wanfw (under torchrun for several ranks), its output into a file next to `config`."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    log = Path(config).with_suffix(".log")
    if ranks == 1:
        with open(log, "w") as output:
            process = subprocess.Popen([str(WANFW), "run", str(config), *args], stdout=output,
                                       stderr=subprocess.STDOUT, env=environment, start_new_session=True)
    else:
        process = PRELOADED_TORCHRUN.start(
            [str(TORCHRUN), "--no-python", f"--nproc-per-node={ranks}", "--master-addr=127.0.0.1",
             f"--master-port={free_port()}", str(WANFW), "run", str(config), *args], environment, log,
            new_session=True)
    process.log = log
    return process


def finish(process, limit=TIME_LIMIT):
    """(exit code, output); exit code None when the launch outlived `limit` (it is then killed)."""
    try:
        process.wait(timeout=limit)
        return process.returncode, process.log.read_text(errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return None, process.log.read_text(errors="replace")


def signal_rank(process, run_dir, rank, signum, after, delay, ranks):
    """Sends `signum` to `rank` of `process` `delay` seconds after its checkpoint of step `after`
    appeared (None: after the launch), once every rank runs. Returns the newest checkpoint then
    (None: none yet), or False when the run ended first."""
    started = time.monotonic() if after is None else None
    while process.poll() is None:
        saved = checkpoints(run_dir)
        if started is None and f"step-{after:08d}" in [p.name for p in saved]:
            started = time.monotonic()
        targets = launched_ranks(process)
        if started is not None and time.monotonic() - started >= delay and len(targets) == ranks:
            try:
                os.kill(targets[rank], signum)
            except ProcessLookupError:
                return False
            return saved[-1].name if saved else None
        time.sleep(0.02)
    return False


def trial(workspace, rng, number, layout):
    twin, first, seconds = workspace.twin(layout)
    name = f"trial_{number:03d}_{layout}"
    ranks = LAYOUTS[layout][2]
    sharded = LAYOUTS[layout][0].get("name") == "fsdp"
    if rng.random() < 0.5:  # a named point of a step or of writing a checkpoint
        point = rng.choice(STEP_POINTS + ("checkpoint-rename",) + (SHARDED_POINTS if sharded else ()))
        # SIGSTOP: a rank that hangs in a step, where the others wait for it in a collective.
        signame = rng.choice(["KILL", "KILL", "TERM"] + (["STOP"] if ranks > 1 and point in STEP_POINTS else []))
        rank = 0 if point in ("checkpoint-index", "checkpoint-rename") else rng.randrange(ranks)
        step = rng.randrange(1, STEPS + 1) if point.startswith("step-") else rng.randrange(EVERY, STEPS + 1, EVERY)
        fault = f"{point},rank={rank},step={step},signal={signame}"
        process = launch(workspace.config(name, layout), ranks, [], {"WANFW_FAULT": fault})
        code, output = finish(process)
    else:  # a random moment of the run: the start, a step, a collective, a checkpoint
        # SIGSTOP: a rank that hangs instead of dying (on one rank nobody is left to notice). Only
        # before the first checkpoint: a rank stopped after the last collective would be noticed
        # by no other rank, and torchrun waits for its workers without a limit.
        signame = rng.choice(["KILL", "KILL", "TERM"] + (["STOP"] if ranks > 1 else []))
        after = None if signame == "STOP" else rng.choice([None, EVERY, 2 * EVERY])
        between = (seconds - first) / (STEPS // EVERY)  # about the time from one checkpoint to the next
        delay = rng.uniform(0.3 * first, first) if after is None else rng.uniform(0, between)
        rank = rng.randrange(ranks)
        for attempt in range(3):  # a run that ends before the signal lands is started again, the signal sooner
            shutil.rmtree(workspace.folder / "runs" / name, ignore_errors=True)
            process = launch(workspace.config(name, layout), ranks, [], {})
            landed = signal_rank(process, workspace.run_dir(name), rank, getattr(signal, f"SIG{signame}"), after,
                                 delay, ranks)
            code, output = finish(process)
            if landed is not False:
                break
            after, delay = None, 0.5 * first / (attempt + 1)  # again, before the first checkpoint
        moment = f"step-{after:08d} appeared" if after else "the launch"
        fault = f"SIG{signame} to rank {rank} {delay:.1f} s after {moment} " + (
            "(the run ended first)" if landed is False else f"(landed with {landed or 'no checkpoint'} saved)")
    named = f"rank {rank} stopped responding" in output or f"rank {rank} never joined" in output
    if signame == "STOP" and code is not None and code != 0 and not named:
        return layout, fault, "unnamed", output
    if code is None:
        return layout, fault, "hang", output
    resumed_on = []
    for _ in range(3):
        saved = checkpoints(workspace.run_dir(name))
        if saved and saved[-1].name == f"step-{STEPS:08d}":
            break
        target = rng.choice(RESIZABLE) if layout in RESIZABLE and rng.random() < 0.5 else layout
        resumed_on.append(target)
        process = launch(workspace.config(name, layout, target), LAYOUTS[target][2], ["--resume", "auto"], {})
        code, output = finish(process)
        if code is None:
            return layout, fault, "hang", output
    saved = checkpoints(workspace.run_dir(name))
    if not saved or saved[-1].name != f"step-{STEPS:08d}":
        return layout, fault, "lost", output
    end = trained(saved[-1])
    where = f"resumed on {', '.join(resumed_on) or 'nothing (it finished)'}"
    if all(target == layout for target in resumed_on):
        same = all(set(getattr(end, n)) == set(getattr(twin, n)) and
                   all(getattr(end, n)[k].equal(getattr(twin, n)[k]) for k in getattr(twin, n))
                   for n in ("weights", "exp_avg", "exp_avg_sq"))
        return layout, f"{fault}; {where}", "ok" if same else "changed", "bitwise" if same else "not bitwise"
    try:
        c = assert_same_training(end, twin, lr=LR, tolerance=tiny_wan_rounding(GLOBAL_BATCH, 12))
        return layout, f"{fault}; {where}", "ok", str(c)
    except AssertionError as e:
        return layout, f"{fault}; {where}", "changed", str(e)[:500]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--out", type=Path, help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    layouts = args.layouts.split(",")
    if unknown := [name for name in layouts if name not in LAYOUTS]:
        parser.error(f"--layouts: no layout {', '.join(unknown)}; the layouts are {', '.join(LAYOUTS)}")
    print(f"chaos: seed {seed}, {args.trials} trials over {', '.join(layouts)}", flush=True)
    with tempfile.TemporaryDirectory() as temporary:
        workspace = Workspace(args.out or Path(temporary))
        workspace.folder.mkdir(parents=True, exist_ok=True)
        outcomes = []
        for number in range(args.trials):
            layout, fault, outcome, detail = trial(workspace, random.Random(seed + number), number,
                                                   layouts[number % len(layouts)])
            outcomes.append(outcome)
            print(f"trial {number:3d} {layout:10s} {outcome:8s} {fault} ({detail if outcome == 'ok' else ''})",
                  flush=True)
            if outcome != "ok":
                print(detail[-3000:], flush=True)
    summary = {k: outcomes.count(k) for k in ("ok", "lost", "hang", "changed", "unnamed")}
    print(f"chaos: seed {seed}: {json.dumps(summary)}", flush=True)
    return 0 if summary["ok"] == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
