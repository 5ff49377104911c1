"""The decision a committee member signs for one challenge: ``judge`` (docs/committee.md
"Judging").

A challenge names an on-chain ``receipt_hash`` (the EIP-712 digest of a receipt whose signature
the contract has checked against a registered node's key) and points at an evidence document
(``inference_node.challenges.challenge_evidence``)::

    {"type": "challenge-evidence", "v": 1, "reason", "receipt_hash": "0x<64>", "bundle"}

``judge`` reads that document and returns a ``Judgement``: ``upheld`` (the receipt fails
verification: the node is slashed), ``rejected`` (the challenger did not make its case: its
bond is forfeited) or ``abstain`` (this verifier cannot decide for reasons outside the evidence:
it signs nothing). It is a function of the evidence bytes, the receipt hash and what ``check``
(the full receipt verification, ``inference_node.verify.check_receipt_bundle`` in production)
returns or raises, so honest verifiers with the same chain, content store and model sign the
same verdict.

Only what the node signed can slash it. The bundle's other parts are the challenger's word:

1. The evidence is parsed with ``ledger.json_input.parse_json`` (``MAX_EVIDENCE_BYTES``,
   ``MAX_EVIDENCE_DEPTH``); anything but a challenge-evidence v1 object with exactly its five
   members and a bundle object is ``rejected`` (junk costs the challenger its bond).
2. The bundle's receipt, under the bundle's domain, must hash to ``receipt_hash`` (and the
   document's own ``receipt_hash`` must say so): otherwise the evidence is about another
   receipt, ``rejected``.
3. Evidence checks, each ``rejected`` when it fails, because each failure is in a part the
   challenger supplies and the node did not sign: the bundle's signature recovers to the
   receipt's ``node`` (the contract checked *a* signature by the node over the hash; the one in
   the bundle can be swapped); the request and response hash to the receipt's digests; a v1
   bundle's ``route`` (not signed in v1) is the one its request's shape says. The bundle's
   receipt-log inclusion proof (unsigned) is removed before ``check`` runs: a proof the
   challenger can forge or omit must not decide the verdict either way.
4. ``check(bundle)``: a ``ReceiptError`` whose reason is a fault of the signed receipt
   (``UPHELD_REASONS``) is ``upheld`` with that reason; reasons that are the evidence's fault
   (``EVIDENCE_REASONS``) are ``rejected``; reasons that say the verifier lacks something or
   that describe the registry's state now rather than the receipt (``ABSTAIN_REASONS``) are
   ``abstain``; a reason in none of these sets (a code added later) is ``upheld`` under
   ``reason_name``. Any other exception (content store or chain unreachable, ``NodeError``,
   a bug) is ``abstain``.
5. Every check passed: ``rejected``, provided the checks that need the verifier's own
   resources ran (``REQUIRED_CHECKS``, plus ``V2_REQUIRED_CHECKS`` for v2 receipts); one of
   them skipped or missing means the verifier was not fully equipped: ``abstain``.

``check`` must be given everything (chain, content store, NodeRegistry, model): a failure is
raised without the list of checks before it, so the judge cannot tell that a check before the
failing one was skipped (a verifier without the registry would uphold ``sampling`` where a full
one says ``registered_model``). Only when nothing fails does it see the skips.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from committee.messages import REJECTED, UPHELD, Verdict, reason_bytes
from inference_node import receipts
from inference_node.errors import ReceiptError
from inference_node.receipts import (
    ReceiptDomain,
    parse_receipt,
    request_digest,
    response_digest,
    verify_receipt_signature,
)
from inference_node.verify import MAX_BUNDLE_BYTES, ReceiptCheck
from ledger.json_input import DEFAULT_MAX_DEPTH, JSONInputError, parse_json

EVIDENCE_TYPE = "challenge-evidence"
# The document wraps one bundle (at most MAX_BUNDLE_BYTES, as `gym verify receipt` reads it)
# in five members and one more level of nesting.
MAX_EVIDENCE_BYTES = MAX_BUNDLE_BYTES + 4096
MAX_EVIDENCE_DEPTH = DEFAULT_MAX_DEPTH + 1

UPHELD_OUTCOME, REJECTED_OUTCOME, ABSTAIN_OUTCOME = "upheld", "rejected", "abstain"

# ReceiptError reasons that the signed receipt (with the request and response its digests
# bind) is wrong: the node is slashed.
UPHELD_REASONS = frozenset({
    "malformed",  # after the evidence checks: the signed request or tokens are unusable
    "token_counts", "experience_ids", "library_root", "library_state", "registered_model",
    "response_format", "activation_mismatch", "sampling", "termination", "response_text",
})
# Reasons in what the challenger supplies, not what the node signed: the challenge fails.
EVIDENCE_REASONS = frozenset({
    "bad_signature", "wrong_signer", "request_digest", "response_digest",
    "wrong_domain",  # signed for another deployment: not this committee's to judge (the
    # contract checks only the hash, so an honest receipt from another chain could be replayed)
})
# Reasons that describe the verifier (its model, its content store) or the registry's state at
# the time of judging rather than the receipt: this verifier does not vote.
ABSTAIN_REASONS = frozenset({
    "model_digest",  # the verifier's model is not the receipt's
    "chat_template",  # the verifier has no template with the receipt's digest (a node's own
    # --chat-template): never uphold against an honest node for what the verifier lacks
    "experience_content",  # the experiences' texts cannot be fetched (content store)
    "adapter",  # the receipt's adapter cannot be fetched or loaded (content store)
    "not_registered", "node_deregistered", "node_slashed",  # the node's status now, not then
    "not_included", "receipt_log", "not_anchored",  # unreachable: the judge drops the proof
})

# Checks that need the verifier's own resources (registry, chain and content store, model):
# skipped or absent means the verifier could not judge.
REQUIRED_CHECKS = ("signature", "request/response", "registration", "library", "activations")
V2_REQUIRED_CHECKS = ("termination", "sampling")

_REASON_CHARS = re.compile(r"[^\x21-\x7e]")


def reason_name(code: str) -> str:
    """``code`` as a verdict reason ``reason_bytes`` accepts, deterministically: characters
    outside printable ASCII without space become ``_``; a result longer than 32 characters is
    cut to its first 23 and ``~`` and the first 8 hex digits of its SHA-256 (so two long codes
    with the same start stay apart); an empty one is ``unknown``. Every reason in
    ``inference_node.errors.REASONS`` is its own name."""
    name = _REASON_CHARS.sub("_", code) if isinstance(code, str) else ""
    if not name:
        return "unknown"
    if len(name) > 32:
        name = name[:23] + "~" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return name


@dataclass(frozen=True)
class Judgement:
    """A verifier's decision on one challenge. ``reason``: the failing check's name when
    upheld, ``""`` otherwise; ``detail``: for people (logs, the CLI), never signed."""

    outcome: str  # UPHELD_OUTCOME, REJECTED_OUTCOME or ABSTAIN_OUTCOME
    reason: str = ""
    detail: str = ""

    def verdict(self, challenge_id: int, receipt_hash: bytes) -> Verdict | None:
        """The ``Verdict`` to sign, or None when abstaining."""
        if self.outcome == UPHELD_OUTCOME:
            return Verdict(challenge_id, receipt_hash, UPHELD, reason_bytes(self.reason))
        if self.outcome == REJECTED_OUTCOME:
            return Verdict(challenge_id, receipt_hash, REJECTED)
        return None


def _rejected(detail: str) -> Judgement:
    return Judgement(REJECTED_OUTCOME, "", detail)


def _abstain(detail: str) -> Judgement:
    return Judgement(ABSTAIN_OUTCOME, "", detail)


def judge(evidence: bytes, receipt_hash: bytes, *,
          check: Callable[[dict], list[ReceiptCheck]]) -> Judgement:
    """The judgement of a challenge against the receipt ``receipt_hash`` (32 bytes, as the
    contract holds it) with ``evidence`` (the document's bytes); ``check`` runs the full receipt
    verification on a bundle (module docstring)."""
    bundle = _evidence_bundle(evidence, receipt_hash)
    if isinstance(bundle, Judgement):
        return bundle
    refused = _evidence_checks(bundle)
    if refused is not None:
        return _rejected(refused)
    v2 = bundle["v"] == 2
    bundle = {key: value for key, value in bundle.items() if key != "inclusion"}
    try:
        checks = check(bundle)
    except ReceiptError as exc:
        if exc.reason in EVIDENCE_REASONS:
            return _rejected(f"the evidence fails, not the receipt: {exc}")
        if exc.reason in ABSTAIN_REASONS:
            return _abstain(f"cannot judge: {exc}")
        return Judgement(UPHELD_OUTCOME, reason_name(exc.reason), str(exc))
    except Exception as exc:  # noqa: BLE001 - whatever else fails is the verifier's problem
        return _abstain(f"cannot judge: {type(exc).__name__}: {exc}")
    by_name = {c.name: c for c in checks}
    needed = REQUIRED_CHECKS + (V2_REQUIRED_CHECKS if v2 else ())
    missing = [name for name in needed if name not in by_name or by_name[name].passed is None]
    if missing:
        why = "; ".join(f"{name}: {by_name[name].detail}" if name in by_name
                        else f"{name}: not run" for name in missing)
        return _abstain(f"cannot judge, checks not run: {why}")
    return _rejected(f"the receipt verifies: {len(checks)} checks, "
                     f"{sum(1 for c in checks if c.passed)} passed")


def _evidence_bundle(evidence: bytes, receipt_hash: bytes) -> dict | Judgement:
    """The evidence's bundle, its receipt hashing to ``receipt_hash``; or the rejection."""
    try:
        doc = parse_json(evidence, max_bytes=MAX_EVIDENCE_BYTES, max_depth=MAX_EVIDENCE_DEPTH,
                         what="the evidence")
    except JSONInputError as exc:
        return _rejected(f"malformed evidence ({exc.reason}): {exc}")
    keys = {"type", "v", "reason", "receipt_hash", "bundle"}
    if (not isinstance(doc, dict) or set(doc) != keys or doc["type"] != EVIDENCE_TYPE
            or type(doc["v"]) is not int or doc["v"] != 1 or not isinstance(doc["reason"], str)
            or not isinstance(doc["bundle"], dict)):
        return _rejected(f"malformed evidence: not a {EVIDENCE_TYPE} v1 object with exactly "
                         f"{sorted(keys)} (reason a string, bundle an object)")
    bundle = doc["bundle"]
    if bundle.get("type") != "receipt-bundle" or type(bundle.get("v")) is not int \
            or bundle["v"] not in (1, 2):
        return _rejected("malformed evidence: the bundle is not a receipt-bundle v1 or v2")
    try:
        receipt = parse_receipt(bundle.get("receipt"))
        domain = ReceiptDomain.from_json(bundle.get("domain"))
        digest = receipts.receipt_hash(receipt, domain)
    except (ReceiptError, ValueError, TypeError) as exc:
        return _rejected(f"malformed evidence: the bundle's receipt or domain: {exc}")
    claimed = "0x" + bytes(receipt_hash).hex()
    if digest != bytes(receipt_hash):
        return _rejected(f"the evidence is about receipt 0x{digest.hex()}, not the challenged "
                         f"{claimed}")
    if not isinstance(doc["receipt_hash"], str) or doc["receipt_hash"].lower() != claimed:
        return _rejected(f"the evidence names receipt {doc['receipt_hash']!r:.80}, not the "
                         f"challenged {claimed}")
    if receipt.v != bundle["v"]:
        return _rejected(f"malformed evidence: a v{bundle['v']} bundle holds a v{receipt.v} "
                         "receipt")
    return bundle


def _evidence_checks(bundle: dict) -> str | None:
    """Why the parts of ``bundle`` the node did not sign fail to present its receipt, or None:
    the signature is the node's, request and response hash to the signed digests, a v1
    bundle's (unsigned) route fits its request."""
    receipt = parse_receipt(bundle["receipt"])
    try:
        verify_receipt_signature(receipt, ReceiptDomain.from_json(bundle["domain"]))
    except ReceiptError as exc:
        return f"the bundle's signature is not the node's: {exc}"
    request, response = bundle.get("request"), bundle.get("response")
    if not isinstance(request, dict) or not isinstance(response, dict) \
            or not isinstance(response.get("text"), str) \
            or not isinstance(response.get("token_ids"), list):
        return "malformed evidence: the bundle needs request {…} and response {text, token_ids}"
    try:
        if request_digest(request) != receipt.request_digest:
            return "the bundle's request is not the one the receipt signs"
        if response_digest(response["text"], response["token_ids"]) != receipt.response_digest:
            return "the bundle's response is not the one the receipt signs"
    except (ValueError, TypeError, OverflowError) as exc:
        return f"malformed evidence: the bundle's request or response cannot be hashed ({exc})"
    if receipt.v == 1:
        route, shape = bundle.get("route"), _route_of(request)
        if route != shape:
            return (f"the v1 bundle's route {route!r:.40} is not its request's "
                    f"({shape or 'neither chat nor completion'})")
    return None


def _route_of(request: dict[str, Any]) -> str | None:
    """The route a v1 request body's shape says: messages (chat) or prompt (completion)."""
    if "messages" in request and "prompt" not in request:
        return "chat"
    if "prompt" in request and "messages" not in request:
        return "completion"
    return None
