"""Robust aggregation of the peers' updates in a swarm round (docs/swarm.md "Hostile peers").

    refused = boundary(updates)            # peer -> "non_finite" | "out_of_bound"
    kept = {p: u for p, u in updates.items() if p not in refused}
    average = centered_clip([kept[p] for p in sorted(kept)])

Every peer of a round holds every other peer's update (trainer.swarm.gather all-gathers
them), so each runs these functions itself over the same inputs in the same order (sorted by
peer id) and gets bit-identical results: there is no reducer to trust.

- `boundary`: a part that is not finite, or whose norm is above ``NORM_RATIO`` times the
  median norm of the round's parts (plus ``NORM_SLACK``), is refused before it is averaged.
  Such a part, signed by its sender, is evidence: honest peers never send one (their parts
  are averages of finite gradients or weights of one model).
- `centered_clip`: Karimireddy, He and Jaggi's CenteredClip ("Learning from History for
  Byzantine Robust Optimization", ICML 2021), the aggregator BTARD-SGD runs inside its
  all-reduce: start at the coordinate-wise median and move, ``ITERATIONS`` times, by the mean
  of every part's difference clipped to a radius ``tau`` (the median of the parts' distances
  from the start: the honest majority's spread). It tolerates f hostile parts of n when
  f < n/2: a hostile part moves the result by at most tau/n per iteration, whatever its norm
  or direction; with every part honest and close together it is the mean.

Tensors are float32; the functions take and return ``torch.Tensor``.
"""

from __future__ import annotations

NORM_RATIO = 100.0  # a part this many times the round's median norm is out of bound
NORM_SLACK = 1.0  # ... plus this much (L2): parts of zero-initialised tensors (LoRA's B) grow
ITERATIONS = 3  # CenteredClip's iterations (BTARD uses a few; each is one pass over the parts)


def norms(parts) -> list[float]:
    """The L2 norm of each part (inf for a part that is not finite)."""
    import torch

    out = []
    for part in parts:
        value = float(torch.linalg.vector_norm(part.double()))
        out.append(value if torch.isfinite(part).all() else float("inf"))
    return out


def bound(parts) -> float:
    """The largest norm a part of this round may have: ``NORM_RATIO`` times the median norm of
    the finite parts, plus ``NORM_SLACK``."""
    finite = sorted(n for n in norms(parts) if n != float("inf"))
    if not finite:
        return NORM_SLACK
    middle = len(finite) // 2
    median = finite[middle] if len(finite) % 2 else (finite[middle - 1] + finite[middle]) / 2
    return NORM_RATIO * median + NORM_SLACK


def boundary(updates: dict[str, list]) -> dict[str, str]:
    """The peers whose update must be refused, with why: ``non_finite`` (a NaN or an infinity
    in any tensor) or ``out_of_bound`` (a tensor whose norm is above `bound` of that tensor's
    parts). ``updates``: peer -> its tensors, each peer's list in the same order and shapes."""
    import torch

    refused: dict[str, str] = {}
    peers = sorted(updates)
    for peer in peers:
        if not all(bool(torch.isfinite(t).all()) for t in updates[peer]):
            refused[peer] = "non_finite"
    count = len(updates[peers[0]]) if peers else 0
    for index in range(count):
        finite = [p for p in peers if p not in refused]
        parts = [updates[p][index] for p in finite]
        limit = bound(parts)
        for peer, size in zip(finite, norms(parts), strict=True):
            if size > limit:
                refused[peer] = "out_of_bound"
    return refused


def coordinate_median(stacked):
    """The coordinate-wise median of ``stacked`` (n x ...), the mean of the two middle values
    for an even n (so two parts give their mean)."""
    import torch

    n = stacked.shape[0]
    ordered = torch.sort(stacked, dim=0).values
    if n % 2:
        return ordered[n // 2].clone()
    return (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def centered_clip(parts, iterations: int = ITERATIONS):
    """CenteredClip of ``parts`` (a list of same-shaped float tensors): see the module
    docstring. One part is returned as it is."""
    import torch

    if not parts:
        raise ValueError("centered_clip of no parts")
    stacked = torch.stack([p.float() for p in parts])
    if len(parts) == 1:
        return stacked[0].clone()
    n = stacked.shape[0]
    center = coordinate_median(stacked)
    flat = stacked.reshape(n, -1)
    distances = torch.linalg.vector_norm(flat - center.reshape(1, -1), dim=1)
    tau = float(torch.median(distances))  # the lower middle for an even n
    if tau == 0.0:  # most parts are the center itself: it is the majority's value
        return center
    for _ in range(iterations):
        difference = flat - center.reshape(1, -1)
        length = torch.linalg.vector_norm(difference, dim=1, keepdim=True)
        scale = torch.clamp(tau / torch.clamp(length, min=1e-30), max=1.0)
        center = center + (difference * scale).mean(dim=0).reshape(center.shape)
    return center


def aggregate(updates: dict[str, list]) -> list:
    """The robust average of each tensor over ``updates`` (peer -> tensors), peers taken in
    sorted order: the same inputs give the same bits on every peer."""
    peers = sorted(updates)
    count = len(updates[peers[0]])
    return [centered_clip([updates[p][i] for p in peers]) for i in range(count)]
