"""What "the same weights" means for two runs that differ only in where the work ran — ranks,
accumulated micro-batches, data-parallel replicas, a resume on another world size — and the
tolerances that follow from float32 arithmetic, whichever CPU vector unit computes it.

Two such runs compute the same sums in another order: a batch of 4 as one matrix product or as
two of 2, averaged on one rank or across two, with kernels whose blocking depends on the shapes
and the vector unit. So they agree to rounding, not bitwise, and the tolerance is derived here:

1. Gradients. A gradient passes through `depth` reductions on its way from the loss (matrix
   products, attention, norms), the longest of `terms` products. In the probabilistic model of
   rounding (each rounding an independent error of at most u = 2^-24, relative), a sum of n terms
   errs by more than lam * sqrt(n) * u of its terms' magnitudes with a probability below
   2 exp(-lam^2 / 2) (Higham and Mary, SIAM J. Sci. Comput. 2019); independent reductions add in
   quadrature. So the two runs' averaged gradients (AdamW's bias-corrected first moments) agree
   within  delta = lam * u * sqrt(terms * depth) * G,  G the model's largest gradient (the largest
   root of AdamW's bias-corrected second moment). lam = 6: exceeded with probability 3e-8 per
   element, never in a model of 1e5 elements.
2. Weights. AdamW moves each element by lr * m/(sqrt(v) + eps): it divides a gradient by its
   own running size. An element's rounding delta therefore moves its step by up to
   2 delta / sqrt(v) of a step, and never by more than the two runs' steps pointing opposite ways
   (2 c steps, c the largest |m/sqrt(v)| AdamW's averages allow after `steps` steps). Over `steps`
   steps of at most `lr`, element i differs by at most
       lr * steps * min(2 c, 2 delta / (sqrt(v_i) + eps)).
   Where a gradient is large this is a tiny fraction of a step; where it is all cancellation
   (attention key biases, whose true gradient is zero; zero-initialised adapters in their first
   steps) it is a whole step either way: that is what AdamW does with rounding, in PyTorch too.
   The bound is first order: it holds while the runs stay within rounding of each other, as these
   tests' few steps at small learning rates do.

A change that alters the math (a sample drawing other noise on another rank, a gradient averaged
over the wrong count, a replica that missed an update) moves gradients by a sizeable fraction and
weights by a whole step, orders of magnitude beyond both bounds.

The model-wide figure people quote — the largest weight difference relative to the largest
weight — is reported too (`Comparison.relative`), not asserted: it mixes elements AdamW treats
very differently.
"""


import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from harness.runs import checkpoints

U = 2.0 ** -24  # float32 unit roundoff
CONFIDENCE = 6.0  # lam above
BETAS = (0.9, 0.999)  # AdamW's defaults, and wanfw's
EPS = 1e-8


@dataclass(frozen=True)
class Trained:
    """A checkpoint's weights, AdamW state and step count."""
    weights: dict
    exp_avg: dict
    exp_avg_sq: dict
    step: int
    updates: dict = None  # AdamW's own step count per parameter (a model in phases updates each in its phase only)


def checkpoint_file(checkpoint: Path, kind: str) -> dict:
    """A checkpoint's `kind` ("model", "optimizer") as whole tensors: its `<kind>.safetensors`, or
    the pieces its `<kind>.pieces.json` lists (a strategy that shards the state wrote them, a file a
    rank), joined along dim 0."""
    whole = checkpoint / f"{kind}.safetensors"
    if whole.exists():
        return load_file(whole)
    index = json.loads((checkpoint / f"{kind}.pieces.json").read_text())
    files, tensors = {}, {}
    for name, entry in index["tensors"].items():
        parts = []
        for piece in entry["pieces"]:
            if piece["file"] not in files:
                files[piece["file"]] = load_file(checkpoint / piece["file"])
            parts.append(files[piece["file"]][name])
        tensors[name] = parts[0] if not entry["shape"] else torch.cat(parts)
        assert list(tensors[name].shape) == entry["shape"], (name, tensors[name].shape, entry["shape"])
    return tensors


def trained(checkpoint: Path) -> Trained:
    """Reads a checkpoint folder (`.../checkpoints/step-N`), written whole or in pieces."""
    optimizer = checkpoint_file(checkpoint, "optimizer")
    moments = lambda suffix: {k[: -len(suffix)]: v for k, v in optimizer.items() if k.endswith(suffix)}
    step = json.loads((checkpoint / "trainer_state.json").read_text())["step"]
    updates = {k: int(v.reshape(-1)[0].item()) for k, v in moments(".step").items()}
    return Trained(checkpoint_file(checkpoint, "model"), moments(".exp_avg"), moments(".exp_avg_sq"), step, updates)


def rounding(terms: int, depth: int) -> float:
    """The relative rounding of values computed through `depth` reductions of up to `terms` terms
    (1. above): of the gradients, relative to the model's largest; of a forward pass, relative to
    its outputs' scale."""
    return CONFIDENCE * U * math.sqrt(terms * depth)


def tiny_wan_rounding(global_batch: int, tokens: int, layers: int = 2, freq_dim: int = 256) -> float:
    """`rounding` for the Wan DiT: the longest sum is the global batch's tokens or the
    time embedding's input width; each block adds 16 reductions (self- and cross-attention: three
    projections, scores, softmax, mix, output; feed-forward: two; three norms), the embeddings and
    head 6."""
    return rounding(max(global_batch * tokens, freq_dim), 16 * layers + 6)


def largest_step_ratio(steps: int, betas=BETAS) -> float:
    """c above: the largest |m_hat / sqrt(v_hat)| after `steps` steps, by Cauchy-Schwarz over the
    two averages' weights."""
    b1, b2 = betas
    first = [(1 - b1) * b1 ** (steps - k) / (1 - b1 ** steps) for k in range(1, steps + 1)]
    second = [(1 - b2) * b2 ** (steps - k) / (1 - b2 ** steps) for k in range(1, steps + 1)]
    return math.sqrt(sum(a * a / b for a, b in zip(first, second)))


@dataclass(frozen=True)
class Comparison:
    gradients: float  # the largest averaged-gradient difference / delta (<= 1 passes)
    weights: float  # the largest element's weight difference / its bound (<= 1 passes)
    relative: float  # the largest weight difference / the largest weight (reported)
    worst: str  # the tensor holding the weights' worst element

    def __str__(self):
        return (f"gradients at {self.gradients:.2g} of their bound, weights at {self.weights:.2g} ({self.worst}); "
                f"largest weight difference {self.relative:.2g} of the largest weight")


def compare(a: Trained, b: Trained, *, lr: float, tolerance: float, betas=BETAS, eps=EPS) -> Comparison:
    """Compares run `a` with the reference `b` (both after the same number of steps)."""
    assert a.step == b.step, (a.step, b.step)
    assert a.weights.keys() == b.weights.keys() and a.exp_avg.keys() == b.exp_avg.keys()
    # Each parameter's own AdamW steps (fewer than the run's for a model that trains in phases).
    steps = {k: (b.updates or {}).get(k, b.step) for k in b.exp_avg}
    assert all(steps[k] == (a.updates or {}).get(k, a.step) for k in steps)
    b1, b2 = betas
    mean = lambda k, m: m.double() / (1 - b1 ** steps[k])  # bias-corrected moments
    rms = {k: (v.double() / (1 - b2 ** steps[k])).sqrt() for k, v in b.exp_avg_sq.items()}
    largest = max(r.max().item() for r in rms.values())
    delta = tolerance * largest
    gradients = max((mean(k, a.exp_avg[k]) - mean(k, b.exp_avg[k])).abs().max().item() for k in b.exp_avg) / delta
    weights, worst = 0.0, ""
    for name, reference in b.weights.items():
        difference = (a.weights[name].double() - reference.double()).abs()
        if name in rms:  # trained: AdamW's bound
            cap = 2 * largest_step_ratio(steps[name], betas)
            bound = lr * steps[name] * torch.clamp(2 * delta / (rms[name] + eps), max=cap)
        else:  # not optimised (a frozen buffer): equal to rounding of its own size
            bound = torch.full_like(difference, tolerance * max(reference.abs().max().item(), 1e-30))
        ratio = (difference / bound).max().item()
        if ratio > weights:
            weights, worst = ratio, name
    relative = (max((a.weights[k] - b.weights[k]).abs().max() for k in b.weights) /
                max(b.weights[k].abs().max() for k in b.weights)).item()
    return Comparison(gradients, weights, relative, worst)


def assert_same_training(a: Trained, b: Trained, *, lr: float, tolerance: float, **adamw) -> Comparison:
    """Fails unless `a` and `b` agree to the rounding bounds above; returns the comparison."""
    c = compare(a, b, lr=lr, tolerance=tolerance, **adamw)
    assert c.gradients <= 1 and c.weights <= 1, str(c)
    return c


def assert_same_training_history(a: list, b: list, *, lr: float, tolerance: float, betas=BETAS,
                                 eps=EPS) -> Comparison:
    """assert_same_training over runs checkpointed after every step (`a`, `b`: their Trained states,
    step 1 first): each step's update is bounded with the moments of that step, and the bounds
    add up (triangle inequality). Needed where an element's gradient is tiny at its first update
    and larger later (a model in phases: a critic that starts as a copy of its teacher), which the
    final moments alone would take for a large one."""
    assert [x.step for x in a] == [x.step for x in b] == list(range(1, len(b) + 1))
    b1, b2 = betas
    bounds = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in b[-1].weights.items()}
    gradients, before = 0.0, {}
    for x, y in zip(a, b):
        steps = {k: y.updates.get(k, y.step) if y.updates else y.step for k in y.exp_avg}
        rms = {k: (v.double() / (1 - b2 ** steps[k])).sqrt() for k, v in y.exp_avg_sq.items()}
        delta = tolerance * max(r.max().item() for r in rms.values())
        for k in y.exp_avg:
            if steps[k] == before.get(k, 0):
                continue  # not updated in this step (another phase's)
            difference = (x.exp_avg[k].double() - y.exp_avg[k].double()).abs() / (1 - b1 ** steps[k])
            gradients = max(gradients, difference.max().item() / delta)
            cap = 2 * largest_step_ratio(steps[k], betas)
            bounds[k] += lr * torch.clamp(2 * delta / (rms[k] + eps), max=cap)
        before = steps
    weights, worst = 0.0, ""
    for name, reference in b[-1].weights.items():
        difference = (a[-1].weights[name].double() - reference.double()).abs()
        bound = bounds[name] if name in b[-1].exp_avg else torch.full_like(
            difference, tolerance * max(reference.abs().max().item(), 1e-30))
        ratio = (difference / bound).max().item()
        if ratio > weights:
            weights, worst = ratio, name
    relative = (max((a[-1].weights[k] - b[-1].weights[k]).abs().max() for k in b[-1].weights) /
                max(b[-1].weights[k].abs().max() for k in b[-1].weights)).item()
    c = Comparison(gradients, weights, relative, worst)
    assert c.gradients <= 1 and c.weights <= 1, str(c)
    return c


def checkpoint(tmp_path, name, step=None):
    saved = checkpoints(tmp_path / "runs" / name / "version_0")
    if step is not None:
        saved = [p for p in saved if p.name == f"step-{step:08d}"]
    return saved[-1]


def weights(tmp_path, name, step=None):
    return checkpoint_file(checkpoint(tmp_path, name, step), "model")


def state(tmp_path, name, step=None):
    """The run's weights and AdamW state at `step` (default: its last checkpoint)."""
    return trained(checkpoint(tmp_path, name, step))


def history(tmp_path, name):
    """The run's state after each of its steps (a run checkpointed every step), step 1 first."""
    return [trained(p) for p in checkpoints(tmp_path / "runs" / name / "version_0")]


def largest_relative_difference(a, b):
    """The model's largest weight difference relative to its largest weight."""
    assert a.keys() == b.keys()
    return (max((a[k] - b[k]).abs().max() for k in a) / max(b[k].abs().max() for k in b)).item()
