"""The activation commitment a receipt carries: build it, check it (TOPLOC).

Activation commitment (TOPLOC, Ong et al. 2025, the ``toploc`` package): the final hidden
states (the model body's output, after its final norm: ``hidden_states[-1]``) at the C positions
that produced the C completion tokens (the "decode positions"), in bfloat16;
``toploc.build_proofs_base64(..., skip_prefill=True)`` encodes the top-k values of each group
of ``DECODE_BATCH`` positions as a polynomial. Written ``toploc1:<topk>:<batch>:<b64>.<b64>…``.
As TOPLOC inside vLLM, the node takes these states from its own decoding
(``SamplingParams.capture_activations``: the engine keeps the body's output of every forward
pass), so a receipt costs no extra model pass; an engine that cannot capture them falls back to
one prefill over ``prompt + completion[:-1]`` (``decode_hidden_states``). A verifier with the
model runs that prefill and accepts when every group is within the ``toploc`` tolerances below:
decoding with a KV cache, in a batch, gives states that differ from the prefill's only in float
rounding, far inside them, while a different model, prompt, library or completion moves the
top-k. The check is locality-sensitive, not a hash: a one-token edit of a long response can stay
within the tolerances, so it is the signed response digest that binds the exact text, and the
commitment that binds the computation to the model and the context.

Spec: docs/design.md "3.6 Receipts"; the receipt that signs the commitment is
``inference_node.receipts``. A mismatch raises ``ReceiptError`` ``activation_mismatch``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inference_node.errors import ReceiptError

COMMITMENT_SCHEME = "toploc1"
TOPK = 128  # values committed per group (TOPLOC's default); capped by the hidden size
DECODE_BATCH = 32  # decode positions per polynomial (TOPLOC's default)
# Acceptance per group, from the TOPLOC paper's bf16 thresholds: share of top-k whose exponent
# differs, and mean / median mantissa error of the others.
MAX_EXP_MISMATCH_SHARE = 0.25
MAX_MANT_ERR_MEAN = 10.0
MAX_MANT_ERR_MEDIAN = 8.0


def decode_hidden_states(model: Any, prompt_ids: Sequence[int],
                         completion_ids: Sequence[int]) -> list[Any]:
    """Final hidden states (bfloat16, CPU) at the positions that produced each completion
    token: one prefill over ``prompt + completion[:-1]``."""
    return prefill(model, prompt_ids, completion_ids, logits=False)[0]


def prefill(model: Any, prompt_ids: Sequence[int], completion_ids: Sequence[int], *,
            logits: bool = True) -> tuple[list[Any], Any]:
    """One prefill over ``prompt + completion[:-1]``: the final hidden states at the positions
    that produced each completion token (bfloat16, CPU; what the commitment is over) and, with
    ``logits``, the LM head's float32 logits at those positions ([completion, vocab], CPU; what
    the sampling check reads), from the same body output."""
    import torch

    if not prompt_ids or not completion_ids:
        raise ValueError("an activation commitment needs a prompt and at least one token")
    device = next(model.parameters()).device
    ids = torch.tensor([[*prompt_ids, *completion_ids[:-1]]], device=device)
    with torch.inference_mode():  # the body, then the LM head on the decode positions only
        hidden = model.base_model(input_ids=ids, use_cache=False)[0][0][len(prompt_ids) - 1:]
        scores = None
        if logits:
            scores = model.get_output_embeddings()(hidden).float().cpu()
    return list(hidden.to(torch.bfloat16).cpu()), scores


def commit_activations(states: Sequence[Any]) -> str:
    """The ``toploc1`` commitment to ``states`` (module docstring)."""
    import toploc

    topk = min(TOPK, states[0].numel())
    proofs = toploc.build_proofs_base64(list(states), DECODE_BATCH, topk, skip_prefill=True)
    null = toploc.ProofPoly.null(topk).to_base64()
    if not proofs or null in proofs:  # toploc logs and returns null proofs on failure
        raise RuntimeError("toploc could not build the activation proofs")
    return f"{COMMITMENT_SCHEME}:{topk}:{DECODE_BATCH}:" + ".".join(proofs)


def verify_activations(states: Sequence[Any], commitment: str) -> None:
    """``ReceiptError`` activation_mismatch unless ``states`` match ``commitment``."""
    topk, results = _proof_results(states, commitment)
    for group, result in enumerate(results):
        share = result.exp_mismatches / topk
        if (share > MAX_EXP_MISMATCH_SHARE or result.mant_err_mean > MAX_MANT_ERR_MEAN
                or result.mant_err_median > MAX_MANT_ERR_MEDIAN):
            raise ReceiptError(
                "activation_mismatch",
                f"group {group}: {result.exp_mismatches}/{topk} exponents differ, mantissa error "
                f"mean {result.mant_err_mean:.1f} median {result.mant_err_median:.1f} (limits "
                f"{MAX_EXP_MISMATCH_SHARE:.0%}, {MAX_MANT_ERR_MEAN}, {MAX_MANT_ERR_MEDIAN})")


def tolerance_used(states: Sequence[Any], commitment: str) -> float:
    """How much of the acceptance tolerance ``states`` use against ``commitment``: the
    largest, over its groups, of each measure divided by its limit (0: identical top-k;
    above 1: refused). ``ReceiptError`` for a malformed or unreadable commitment."""
    topk, results = _proof_results(states, commitment)
    return max((max(r.exp_mismatches / topk / MAX_EXP_MISMATCH_SHARE,
                    r.mant_err_mean / MAX_MANT_ERR_MEAN, r.mant_err_median / MAX_MANT_ERR_MEDIAN)
                for r in results), default=0.0)


def _proof_results(states: Sequence[Any], commitment: str) -> tuple[int, list[Any]]:
    """(top-k, toploc's per-group results) of ``states`` against ``commitment``."""
    import toploc
    import torch

    parts = commitment.split(":")
    if len(parts) != 4 or parts[0] != COMMITMENT_SCHEME or not (parts[1] + parts[2]).isdigit():
        raise ReceiptError("malformed", f"not a {COMMITMENT_SCHEME} commitment")
    topk, batch, proofs = int(parts[1]), int(parts[2]), parts[3].split(".")
    groups = -(-len(states) // batch)
    if len(proofs) != groups or topk > states[0].numel() or topk < 1:
        raise ReceiptError("activation_mismatch", f"the commitment has {len(proofs)} groups of "
                           f"top-{topk}; the prefill gives {groups} groups",
                           expected=len(proofs), computed=groups)
    threads = torch.get_num_threads()
    try:
        results = toploc.verify_proofs_base64(list(states), proofs, batch, topk,
                                              skip_prefill=True)
    except (RuntimeError, ValueError) as exc:  # a corrupt proof, inside the C++ extension
        raise ReceiptError("activation_mismatch", f"unreadable proofs ({exc})") from None
    finally:  # toploc 0.1.6's verify resets torch to one thread per core: undo it
        torch.set_num_threads(threads)
    return topk, list(results)
