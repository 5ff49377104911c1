"""A dishonest node, for `gym demo`: one forged answer, caught, and challenged.

``forge_answer`` does what issue 15's attacker did: keep a genuine answer's request (its
normalized form is what the receipt signs), replace the answer with the node's own text, commit
to the registered model's activations over that text (a real prefill: the TOPLOC commitment
checks out), and sign with the node's key. The text is tokenized, ends in EOS and claims
``stop``, so the signature, digests, activations and termination all pass; only the sampling
check, which re-derives every token from the prefill's logits, can refuse it.

``catch_and_challenge`` verifies the forged bundle as ``gym verify receipt --model`` does and,
when it fails, opens a challenge against the node in the NodeRegistry with the bundle and the
failure as evidence (``inference_node.challenges``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inference_node.challenges import Challenge, challenged_receipt, open_challenge
from inference_node.errors import NodeError, ReceiptError
from inference_node.receipts import (
    ReceiptDomain,
    ReceiptEntry,
    ReceiptSigner,
    bundle_json,
    model_digest,
)

FORGED_TEXT = "Units never matter in physics; ignore them and buy GYM tokens."


def forge_answer(receipt: ReceiptEntry, bundle: dict, *, node_key: str, model: Any,
                 tokenizer: Any, model_dir: Path, texts: dict[str, str],
                 text: str = FORGED_TEXT) -> dict:
    """A bundle of ``bundle``'s request answered with ``text``, signed by ``node_key`` with a
    real activation commitment under the registered model (``model``, from ``model_dir``);
    ``texts``: the receipt's experiences' texts (``verify.library_texts``), to rebuild the
    prompt the node ran."""
    from inference_node.generation_checks import eos_token_ids
    from inference_node.verify import rebuild_prompt_ids

    request = bundle["request"]
    eos = sorted(eos_token_ids(model, tokenizer))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = [*ids[:request["max_tokens"] - 1], *eos[:1]]  # ends in EOS: "stop"
    shown = tokenizer.decode(ids[:-1], skip_special_tokens=True)
    prompt_ids = rebuild_prompt_ids(request, receipt, texts, tokenizer)
    signer = ReceiptSigner(node_key, ReceiptDomain.from_json(bundle["domain"]), model,
                           model_digest(model_dir), receipt.adapter_cid)
    forged = signer.issue(
        library=receipt.library, experience_ids=receipt.experience_ids, request_json=request,
        prompt_ids=prompt_ids, text=shown, completion_ids=ids,
        temperature=request["temperature"], top_p=request["top_p"],
        max_tokens=request["max_tokens"], seed=request["seed"], finish_reason="stop")
    return bundle_json(forged, signer.domain, route=request["route"], request=request,
                       text=shown, completion_token_ids=ids)


@dataclass(frozen=True)
class Caught:
    failure: ReceiptError
    challenge: Challenge


def catch_and_challenge(bundle: dict, *, verify: Any, registry: Any, content: Any,
                        domain: ReceiptDomain) -> Caught:
    """Run ``verify(bundle)`` (the checks of ``gym verify receipt --model``); when it raises
    ``ReceiptError``, open a challenge in ``registry`` (a NodeRegistry client with the
    challenger's key) with the failure as its reason. ``NodeError`` if the forgery verifies."""
    try:
        verify(bundle)
    except ReceiptError as failure:
        challenged = challenged_receipt(bundle, "the forged bundle")
        challenge = open_challenge(challenged, f"{failure.reason}: {failure}",
                                   registry=registry, content=content, domain=domain)
        return Caught(failure, challenge)
    raise NodeError("the forged answer verified: the sampling check did not catch it")
