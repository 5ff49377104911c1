"""What each rank of a training run did, for ``run.json``'s ``run.hardware.distributed``
(``trainer.gradient.train.distributed_section``): the batches it trained on with a digest of
their input ids, and a digest of its trained adapter weights. With several ranks
(``trainer.gradient.distributed``) the input digests differ (each rank reads its shard) and the
weight digests agree (DDP averaged the gradients)."""

from __future__ import annotations

import hashlib
from typing import Any


class RankTrace:
    """What one rank trained on: the batches its model ran with gradients, and a digest of
    their input ids (a forward pre-hook on the model)."""

    def __init__(self, model: Any) -> None:
        self.batches = 0
        self._digest = hashlib.sha256()
        self._handle = model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, _module: Any, args: tuple, kwargs: dict) -> None:
        import torch

        ids = kwargs.get("input_ids", args[0] if args else None)
        if torch.is_grad_enabled() and isinstance(ids, torch.Tensor):
            self.batches += 1
            self._digest.update(ids.detach().cpu().numpy().tobytes())

    def close(self) -> dict[str, Any]:
        self._handle.remove()
        return {"batches": self.batches, "inputs_digest": "sha256:" + self._digest.hexdigest()}


def weights_digest(model: Any, state: dict[str, Any] | None = None) -> str:
    """sha256 over the trainable parameters, by name, as float32 bytes; with ``state`` (a
    state dict gathered from sharded ranks: FSDP, ZeRO) their values are taken from it."""
    digest = hashlib.sha256()
    for name, param in sorted(model.named_parameters()):
        if param.requires_grad and (state is None or name in state):
            value = param if state is None else state[name]
            digest.update(name.encode() + b"\0")
            digest.update(value.detach().float().cpu().numpy().tobytes())
    return "sha256:" + digest.hexdigest()
