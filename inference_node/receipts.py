"""Proof-of-inference receipts: build, sign (EIP-712), commit to activations, verify.

Spec: DESIGN.md "Proof-of-inference receipts"; the entry is ``ledger.entries.ReceiptEntry``
(type ``receipt``, v1), its canonical bytes RFC 8785 (``ledger.entries.encode_entry``). This
module fixes what DESIGN.md leaves open:

Digests (``sha256:`` + 64 hex digits, the entry format's ``Sha256Digest``):

- ``request_digest`` = SHA-256 of the RFC 8785 bytes of the request body *as JSON* (parsed and
  re-canonicalised, so whitespace and key order do not matter; values do).
- ``response_digest`` = SHA-256 of the RFC 8785 bytes of ``{"text": <completion text>,
  "token_ids": [<completion token ids, EOS included>]}`` (an echoed prompt is not part of it).
  The token ids are what the activation commitment is over; re-tokenising text would not give
  them back.
- ``model_digest`` = ``trainer.publish.model_digest``'s definition (names and SHA-256 of the
  weight and config files), repeated here because ``inference_node`` may not import ``trainer``.

Signature: EIP-712 typed data (EIP-712 §"Specification of the eth_signTypedData JSON RPC"),
so a contract can ``ecrecover`` it. Domain ``{name: "GymLedger Receipt", version: "1", chainId,
verifyingContract}``: ``verifyingContract`` is the ExperienceLedger that holds the library the
receipt names (and the node's receipt log), ``chainId`` its chain; a node run without a chain
signs with ``chainId`` 0 and the zero address ("unbound" receipts, not valid against any
deployment). Types, primary type ``Receipt``::

    Receipt(address node, bytes32 modelDigest, bytes32 adapterCid, Library library,
            bytes32[] experienceIds, bytes32 requestDigest, bytes32 responseDigest,
            Sampling sampling, Tokens tokens, uint64 time, string activationCommitment)
    Library(uint256 logId, uint256 size, bytes32 root)
    Sampling(string temperature, string topP, uint32 maxTokens, uint64 seed)
    Tokens(uint32 prompt, uint32 completion)

A CID (experience ids, adapter) is signed as its 32-byte sha2-256 digest: entry CIDs are
raw-codec sha2-256 CIDv1, so the digest determines the CID (``adapterCid`` is zero when
absent). Floats are signed as their RFC 8785 spelling (``"0.7"``), exact where a fixed-point
integer would round. ``signature`` is the 65-byte ``r || s || v`` (v 27/28), lowercase hex.

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

Bundle: what ``gym verify receipt`` reads (``bundle_json``), the receipt with its evidence::

    {"type": "receipt-bundle", "v": 1, "receipt": {…}, "domain": {EIP-712 domain},
     "route": "chat" | "completion", "request": {the request body},
     "response": {"text": …, "token_ids": […]},
     "inclusion": <ledger.proofs inclusion proof document from the node's receipt log> | null}

``verify_receipt_bundle`` checks, in order: signature (and the domain, when the verifier names
one), request and response digests, token counts; with the NodeRegistry
(``inference_node.registry``) that the signer is a registered, active node serving the
receipt's model (and that the inclusion proof is in its registered receipt log); with the chain
and content store the library (``rootAt`` equals the receipt's root; the verified fold of the
log at that size is exactly ``experience_ids``, in order), the inclusion proof and its
anchoring; with the model, its digest and the activation commitment (rebuilding the prompt with
the node's own injector; for a receipt that names an adapter, the caller passes the base with
that adapter merged, ``inference_node.adapters.load_verifier_adapter``).

Verification raises ``ReceiptError`` (a ``ledger`` ``VerificationError``) whose ``reason`` is
one of ``REASONS``.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rfc8785
from eth_account import Account
from eth_keys import keys
from eth_keys.exceptions import BadSignature
from eth_keys.exceptions import ValidationError as KeysValidationError
from eth_utils import keccak

from ledger.entries import (
    LibraryRef,
    ReceiptEntry,
    Sampling,
    TokenCounts,
    decode_entry,
    encode_entry,
    entry_cid,
    weights_digest,
)
from ledger.errors import EntryError, VerificationError
from ledger.errors import LedgerError as LedgerErrorBase
from ledger.evm import ZERO_ADDRESS
from ledger.multiformats import CID, MultiformatError

DOMAIN_NAME = "GymLedger Receipt"
DOMAIN_VERSION = "1"

COMMITMENT_SCHEME = "toploc1"
TOPK = 128  # values committed per group (TOPLOC's default); capped by the hidden size
DECODE_BATCH = 32  # decode positions per polynomial (TOPLOC's default)
# Acceptance per group, from the TOPLOC paper's bf16 thresholds: share of top-k whose exponent
# differs, and mean / median mantissa error of the others.
MAX_EXP_MISMATCH_SHARE = 0.25
MAX_MANT_ERR_MEAN = 10.0
MAX_MANT_ERR_MEDIAN = 8.0


REASONS = (
    "malformed",  # not a receipt / bundle, or a field is unusable
    "bad_signature",  # absent or not a valid secp256k1 signature over the typed data
    "wrong_signer",  # valid signature, but by another address than ``node``
    "wrong_domain",  # signed for another chain or contract than the verifier's
    "request_digest",  # the request does not hash to ``request_digest``
    "response_digest",  # the response does not hash to ``response_digest``
    "token_counts",  # prompt / completion token counts disagree with the evidence
    "experience_ids",  # the experiences offered are not the ones the receipt names
    "experience_content",  # an experience's text cannot be fetched or is not its CID's
    "library_root",  # ``library`` is not the root anchored on chain at that size
    "library_state",  # the experiences are not the active set of the library at that size
    "not_included",  # the receipt-log inclusion proof fails or is for another entry
    "not_anchored",  # the receipt log's root at that size is not the one on chain
    "model_digest",  # the model given to the verifier is not the receipt's model
    "adapter",  # the receipt's adapter cannot be fetched, fails its CIDs, or has another base
    "activation_mismatch",  # the prefill's top-k activations disagree with the commitment
    "not_registered",  # no node in the NodeRegistry signs with the receipt's key
    "node_deregistered",  # the signer's node has left the registry (unbonding)
    "node_slashed",  # the signer's node was slashed below the minimum stake: not active
    "registered_model",  # the node is registered with another model digest
    "receipt_log",  # the inclusion proof is not in the node's registered receipt log
)


class ReceiptError(VerificationError):
    """A receipt does not check out; ``reason`` is one of ``REASONS``."""

    def __init__(self, reason: str, message: str, *, expected: object = None,
                 computed: object = None):
        assert reason in REASONS, reason
        super().__init__(f"{reason}: {message}", expected=expected, computed=computed)
        self.reason = reason


@dataclass(frozen=True)
class ReceiptDomain:
    """The EIP-712 domain a node signs under (module docstring)."""

    chain_id: int = 0
    verifying_contract: str = ZERO_ADDRESS

    def to_json(self) -> dict[str, Any]:
        return {"name": DOMAIN_NAME, "version": DOMAIN_VERSION, "chainId": self.chain_id,
                "verifyingContract": self.verifying_contract.lower()}

    @classmethod
    def from_json(cls, obj: Any) -> ReceiptDomain:
        if (not isinstance(obj, dict) or obj.get("name") != DOMAIN_NAME
                or obj.get("version") != DOMAIN_VERSION or type(obj.get("chainId")) is not int
                or not isinstance(obj.get("verifyingContract"), str)):
            raise ReceiptError("malformed", f"not a {DOMAIN_NAME!r} v{DOMAIN_VERSION} domain: "
                               f"{obj!r}")
        return cls(obj["chainId"], obj["verifyingContract"].lower())


# --------------------------------------------------------------------------- digests


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def request_digest(request_json: Any) -> str:
    """Digest of a request body given as parsed JSON (a dict)."""
    return _sha256(rfc8785.dumps(request_json))


def response_digest(text: str, token_ids: Sequence[int]) -> str:
    return _sha256(rfc8785.dumps({"text": text, "token_ids": list(token_ids)}))


def model_digest(model_dir: str | Path) -> str:
    """``sha256:`` over the names and SHA-256 of the model's weight and config files
    (``ledger.entries.weights_digest``, as an adapter entry's ``base_model.weights_digest``)."""
    digest = weights_digest(model_dir)
    if digest is None:
        raise ValueError(f"{model_dir} holds no weight or config files to digest")
    return digest


# --------------------------------------------------------------------------- build and sign


def build_receipt(*, node: str, model_digest: str, library: LibraryRef | dict,
                  experience_ids: Sequence[str], request_json: Any, text: str,
                  completion_token_ids: Sequence[int], prompt_tokens: int, temperature: float,
                  top_p: float, max_tokens: int, seed: int, activation_commitment: str,
                  adapter_cid: str | None = None, at: int | None = None) -> ReceiptEntry:
    """An unsigned receipt; ``EntryError`` if a field breaks the entry format's rules."""
    return ReceiptEntry(
        node=node.lower(), model_digest=model_digest, adapter_cid=adapter_cid,
        library=library if isinstance(library, LibraryRef) else LibraryRef(**library),
        experience_ids=list(experience_ids), request_digest=request_digest(request_json),
        response_digest=response_digest(text, completion_token_ids),
        sampling=Sampling(temperature=float(temperature), top_p=float(top_p),
                          max_tokens=max_tokens, seed=seed),
        tokens=TokenCounts(prompt=prompt_tokens, completion=len(completion_token_ids)),
        time=int(time.time()) if at is None else at,
        activation_commitment=activation_commitment)


def _cid_digest(cid: str) -> bytes:
    try:
        return CID.parse(cid).digest
    except MultiformatError as exc:  # the entry model already refuses these
        raise ReceiptError("malformed", f"not a CID: {cid!r} ({exc})") from None


def _bytes32(digest: str) -> bytes:
    """``sha256:<hex>`` or ``0x<hex>`` (validated by the entry model) as 32 bytes."""
    return bytes.fromhex(digest.removeprefix("sha256:").removeprefix("0x"))


def _number(value: float) -> str:
    return rfc8785.dumps(value).decode()


# The EIP-712 types of a receipt (``eth_signTypedData_v4``); never mutated.
TYPES: dict[str, list[dict[str, str]]] = {
    "EIP712Domain": [{"name": "name", "type": "string"},
                     {"name": "version", "type": "string"},
                     {"name": "chainId", "type": "uint256"},
                     {"name": "verifyingContract", "type": "address"}],
    "Receipt": [{"name": "node", "type": "address"},
                {"name": "modelDigest", "type": "bytes32"},
                {"name": "adapterCid", "type": "bytes32"},
                {"name": "library", "type": "Library"},
                {"name": "experienceIds", "type": "bytes32[]"},
                {"name": "requestDigest", "type": "bytes32"},
                {"name": "responseDigest", "type": "bytes32"},
                {"name": "sampling", "type": "Sampling"},
                {"name": "tokens", "type": "Tokens"},
                {"name": "time", "type": "uint64"},
                {"name": "activationCommitment", "type": "string"}],
    "Library": [{"name": "logId", "type": "uint256"}, {"name": "size", "type": "uint256"},
                {"name": "root", "type": "bytes32"}],
    "Sampling": [{"name": "temperature", "type": "string"},
                 {"name": "topP", "type": "string"},
                 {"name": "maxTokens", "type": "uint32"},
                 {"name": "seed", "type": "uint64"}],
    "Tokens": [{"name": "prompt", "type": "uint32"},
               {"name": "completion", "type": "uint32"}],
}


def typed_data(receipt: ReceiptEntry, domain: ReceiptDomain) -> dict[str, Any]:
    """The EIP-712 ``eth_signTypedData_v4`` JSON of ``receipt`` (its signature left out)."""
    return {"types": copy.deepcopy(TYPES), "primaryType": "Receipt",
            "domain": domain.to_json(), "message": typed_data_message(receipt)}


def typed_data_message(receipt: ReceiptEntry) -> dict[str, Any]:
    """The ``message`` of `typed_data`: the receipt's fields as the EIP-712 types have them."""
    s, lib = receipt.sampling, receipt.library
    return {
        "node": receipt.node,
        "modelDigest": _bytes32(receipt.model_digest),
        "adapterCid": _cid_digest(receipt.adapter_cid) if receipt.adapter_cid else b"\0" * 32,
        "library": {"logId": lib.log_id, "size": lib.size, "root": _bytes32(lib.root)},
        "experienceIds": [_cid_digest(cid) for cid in receipt.experience_ids],
        "requestDigest": _bytes32(receipt.request_digest),
        "responseDigest": _bytes32(receipt.response_digest),
        "sampling": {"temperature": _number(s.temperature), "topP": _number(s.top_p),
                     "maxTokens": s.max_tokens, "seed": s.seed},
        "tokens": {"prompt": receipt.tokens.prompt, "completion": receipt.tokens.completion},
        "time": receipt.time,
        "activationCommitment": receipt.activation_commitment,
    }


def _encode_type(types: dict[str, list[dict]], primary: str) -> str:
    """EIP-712 ``encodeType``: the struct, then the structs its fields name, sorted by name
    (the receipt's structs nest one level deep)."""
    def one(name: str) -> str:
        return f"{name}(" + ",".join(f"{f['type']} {f['name']}" for f in types[name]) + ")"

    return one(primary) + "".join(one(name) for name in sorted(
        {f["type"] for f in types[primary] if f["type"] in types}))


@functools.cache
def _type_hash(name: str) -> bytes:
    """``typeHash`` of a struct of `TYPES` (a constant: computed once)."""
    return keccak(_encode_type(TYPES, name).encode())


def _hash_struct(name: str, value: dict[str, Any]) -> bytes:
    """EIP-712 ``hashStruct`` for the field types of `TYPES`."""
    encoded = [_type_hash(name)]
    for field in TYPES[name]:
        kind, item = field["type"], value[field["name"]]
        if kind in TYPES:
            encoded.append(_hash_struct(kind, item))
        elif kind == "string":
            encoded.append(keccak(item.encode()))
        elif kind == "bytes32[]":
            encoded.append(keccak(b"".join(item)))
        elif kind == "bytes32":
            encoded.append(item)
        elif kind == "address":
            encoded.append(bytes(12) + bytes.fromhex(item.removeprefix("0x")))
        else:  # uint32 / uint64 / uint256
            encoded.append(int(item).to_bytes(32, "big"))
    return keccak(b"".join(encoded))


@functools.lru_cache(maxsize=64)
def _domain_separator(domain: ReceiptDomain) -> bytes:
    return _hash_struct("EIP712Domain", domain.to_json())


def receipt_hash(receipt: ReceiptEntry, domain: ReceiptDomain) -> bytes:
    """The 32-byte EIP-712 digest a contract passes to ``ecrecover``: ``keccak(0x1901 ||
    domainSeparator || hashStruct(receipt))``, computed directly for these fixed types (what
    eth-account's generic ``encode_typed_data`` gives, test_receipts checks, in a tenth of
    the time; the type hashes and each domain's separator are computed once)."""
    return keccak(b"\x19\x01" + _domain_separator(domain)
                  + _hash_struct("Receipt", typed_data_message(receipt)))


def sign_receipt(receipt: ReceiptEntry, key: str | bytes, domain: ReceiptDomain) -> ReceiptEntry:
    """``receipt`` signed by ``key``; its ``node`` must be the key's address."""
    account = Account.from_key(key)
    if account.address.lower() != receipt.node:
        raise ValueError(f"receipt names node {receipt.node}, the key is {account.address}")
    unsigned = receipt.model_copy(update={"signature": None})
    signed = account.unsafe_sign_hash(receipt_hash(unsigned, domain))
    return ReceiptEntry(**{**unsigned.model_dump(exclude_none=True),
                           "signature": "0x" + bytes(signed.signature).hex()})


def verify_receipt_signature(receipt: ReceiptEntry, domain: ReceiptDomain) -> str:
    """The signer's address (lowercase); ``ReceiptError`` bad_signature / wrong_signer."""
    if receipt.signature is None:
        raise ReceiptError("bad_signature", "the receipt is not signed")
    unsigned = receipt.model_copy(update={"signature": None})
    try:
        raw = bytes.fromhex(receipt.signature[2:])
        if len(raw) != 65 or raw[64] not in (27, 28):
            raise ValueError("not 65 bytes r || s || v with v 27 or 28")
        signature = keys.Signature(signature_bytes=raw[:64] + bytes([raw[64] - 27]))
        signer = signature.recover_public_key_from_msg_hash(
            receipt_hash(unsigned, domain)).to_checksum_address().lower()
    except (BadSignature, KeysValidationError, ValueError) as exc:
        raise ReceiptError("bad_signature", f"not a valid signature ({exc})") from None
    if signer != receipt.node:
        raise ReceiptError("wrong_signer", "the receipt was signed by another key, or edited "
                           "after signing", expected=receipt.node, computed=signer)
    return signer


# --------------------------------------------------------------------------- header form


def receipt_header(receipt: ReceiptEntry) -> str:
    """``X-Gym-Receipt``: unpadded base64url of the receipt's canonical bytes."""
    return base64.urlsafe_b64encode(encode_entry(receipt)).rstrip(b"=").decode()


def parse_receipt(data: bytes | str | dict) -> ReceiptEntry:
    """A receipt from its canonical bytes, a header value, or its JSON object."""
    try:
        if isinstance(data, dict):
            entry = ReceiptEntry(**data)
        else:
            if isinstance(data, str):
                data = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
            entry = decode_entry(data)
    except (EntryError, ValueError, TypeError) as exc:
        raise ReceiptError("malformed", f"not a receipt entry ({exc})") from None
    if not isinstance(entry, ReceiptEntry):
        raise ReceiptError("malformed", f"a {entry.type!r} entry, not a receipt")
    return entry


# --------------------------------------------------------------------------- activations


def decode_hidden_states(model: Any, prompt_ids: Sequence[int],
                         completion_ids: Sequence[int]) -> list[Any]:
    """Final hidden states (bfloat16, CPU) at the positions that produced each completion
    token: one prefill over ``prompt + completion[:-1]``."""
    import torch

    if not prompt_ids or not completion_ids:
        raise ValueError("an activation commitment needs a prompt and at least one token")
    device = next(model.parameters()).device
    ids = torch.tensor([[*prompt_ids, *completion_ids[:-1]]], device=device)
    with torch.inference_mode():  # the body only: the LM head's logits are not needed
        hidden = model.base_model(input_ids=ids, use_cache=False)[0][0]
    rows = hidden[len(prompt_ids) - 1:].to(torch.bfloat16).cpu()
    return list(rows)


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
    for group, result in enumerate(results):
        share = result.exp_mismatches / topk
        if (share > MAX_EXP_MISMATCH_SHARE or result.mant_err_mean > MAX_MANT_ERR_MEAN
                or result.mant_err_median > MAX_MANT_ERR_MEDIAN):
            raise ReceiptError(
                "activation_mismatch",
                f"group {group}: {result.exp_mismatches}/{topk} exponents differ, mantissa error "
                f"mean {result.mant_err_mean:.1f} median {result.mant_err_median:.1f} (limits "
                f"{MAX_EXP_MISMATCH_SHARE:.0%}, {MAX_MANT_ERR_MEAN}, {MAX_MANT_ERR_MEDIAN})")


def bundle_json(receipt: ReceiptEntry, domain: ReceiptDomain, *, route: str, request: Any,
                text: str, completion_token_ids: Sequence[int],
                inclusion: dict | None = None) -> dict[str, Any]:
    """What ``gym verify receipt`` reads: the receipt with the evidence to recheck it."""
    return {"type": "receipt-bundle", "v": 1, "receipt": json.loads(encode_entry(receipt)),
            "domain": domain.to_json(), "route": route, "request": request,
            "response": {"text": text, "token_ids": list(completion_token_ids)},
            "inclusion": inclusion}


def library_ref(log_id: str, size: int, root: str) -> LibraryRef:
    """A ``LibrarySnapshot``'s (log_id, size, root) in receipt form; no library is log 0 at
    size 0 with the RFC 9162 empty root."""
    from ledger.rfc9162 import EMPTY_ROOT

    body = root.removeprefix("0x")
    return LibraryRef(log_id=int(log_id, 0) if log_id else 0, size=size,
                      root="0x" + (body if body else EMPTY_ROOT.hex()))


class ReceiptSigner:
    """What a node needs to issue receipts: its key, domain, model and the model's digest."""

    def __init__(self, key: str | bytes, domain: ReceiptDomain, model: Any, model_digest: str,
                 adapter_cid: str | None = None) -> None:
        self._account = Account.from_key(key)  # the key stays in here, never logged
        self.address = self._account.address.lower()
        self._secp256k1 = _native_key(bytes(self._account.key))
        self.domain, self.model, self.model_digest = domain, model, model_digest
        self.adapter_cid = adapter_cid

    def __repr__(self) -> str:
        return f"ReceiptSigner(node={self.address}, domain={self.domain})"

    def issue(self, *, library: LibraryRef, experience_ids: Sequence[str], request_json: Any,
              prompt_ids: Sequence[int], text: str, completion_ids: Sequence[int],
              temperature: float, top_p: float, max_tokens: int, seed: int,
              activations: Sequence[Any] | None = None) -> ReceiptEntry:
        """Commit to the activations, build and sign the receipt. ``activations``: the decode
        positions' final hidden states captured by the engine; without them, one prefill."""
        if activations is None:
            if self.model is None:
                raise RuntimeError("the engine captured no activations and the signer has no "
                                   "model to recompute them")
            activations = decode_hidden_states(self.model, prompt_ids, completion_ids)
        elif len(activations) != len(completion_ids):
            raise RuntimeError(f"{len(activations)} captured activations for "
                               f"{len(completion_ids)} completion tokens")
        commitment = commit_activations(activations)
        receipt = build_receipt(
            node=self.address, model_digest=self.model_digest, adapter_cid=self.adapter_cid,
            library=library, experience_ids=experience_ids, request_json=request_json, text=text,
            completion_token_ids=completion_ids, prompt_tokens=len(prompt_ids),
            temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed,
            activation_commitment=commitment)
        return receipt.model_copy(update={"signature": "0x" + self.sign_digest(
            receipt_hash(receipt, self.domain)).hex()})

    def sign_digest(self, digest: bytes) -> bytes:
        """65 bytes r || s || v (v 27 or 28) over the 32-byte `digest`: libsecp256k1 directly
        when `coincurve` is installed (RFC 6979 nonces and low s, as eth-keys signs through
        it), else eth-account."""
        if self._secp256k1 is None:
            return bytes(self._account.unsafe_sign_hash(digest).signature)
        raw = self._secp256k1.sign_recoverable(digest, hasher=None)
        return raw[:64] + bytes([raw[64] + 27])


def _native_key(secret: bytes) -> Any:
    try:
        import coincurve
    except ImportError:
        return None
    return coincurve.PrivateKey(secret)


# --------------------------------------------------------------------------- full check


@dataclass(frozen=True)
class ReceiptCheck:
    name: str  # signature, request, response, library, inclusion, anchoring, model, activations
    passed: bool | None  # None: skipped
    detail: str


def verify_receipt_bundle(bundle: Any, *, domain: ReceiptDomain | None = None,
                          contract: Any = None, content: Any = None, model: Any = None,
                          tokenizer: Any = None, model_dir: str | Path | None = None,
                          from_block: int = 0, registry: Any = None) -> list[ReceiptCheck]:
    """Check a receipt bundle (``bundle_json``); the checks passed and skipped, or the first
    ``ReceiptError``. ``domain``: the one the verifier expects (else the bundle's is used);
    ``registry`` (``inference_node.registry.NodeRegistry``): the signer is a registered, active
    node serving the receipt's model; ``contract`` + ``content``: library root and state, log
    inclusion anchoring; ``model`` + ``tokenizer`` (+ ``model_dir`` for its digest): the
    activation commitment."""
    if not isinstance(bundle, dict) or bundle.get("type") != "receipt-bundle" \
            or bundle.get("v") != 1:
        raise ReceiptError("malformed", "not a receipt-bundle v1 document")
    receipt = parse_receipt(bundle.get("receipt"))
    signed_domain = ReceiptDomain.from_json(bundle.get("domain"))
    if domain is not None and domain != signed_domain:
        raise ReceiptError("wrong_domain", "the receipt is signed for another deployment",
                           expected=domain, computed=signed_domain)
    signer = verify_receipt_signature(receipt, signed_domain)
    checks = [ReceiptCheck("signature", True, f"signed by {signer}")]
    request, response = bundle.get("request"), bundle.get("response")
    if not isinstance(request, dict) or not isinstance(response, dict) \
            or not isinstance(response.get("text"), str) \
            or not isinstance(response.get("token_ids"), list):
        raise ReceiptError("malformed", "the bundle needs request {…} and response {text, "
                           "token_ids}")
    computed = request_digest(request)
    if computed != receipt.request_digest:
        raise ReceiptError("request_digest", "the request is not the one the receipt signs",
                           expected=receipt.request_digest, computed=computed)
    token_ids = response["token_ids"]
    computed = response_digest(response["text"], token_ids)
    if computed != receipt.response_digest:
        raise ReceiptError("response_digest", "the response is not the one the receipt signs",
                           expected=receipt.response_digest, computed=computed)
    if len(token_ids) != receipt.tokens.completion:
        raise ReceiptError("token_counts", "completion token count",
                           expected=receipt.tokens.completion, computed=len(token_ids))
    checks.append(ReceiptCheck("request/response", True, "digests match"))

    receipt_log_id = None
    if registry is not None:
        check, receipt_log_id = _check_registration(receipt, registry)
        checks.append(check)
    else:
        checks.append(ReceiptCheck("registration", None, "needs the NodeRegistry"))

    texts: dict[str, str] | None = {} if not receipt.experience_ids else None
    if not receipt.library.log_id:
        if receipt.experience_ids:
            raise ReceiptError("experience_ids", "experiences named without a library (log 0)",
                               expected=[], computed=list(receipt.experience_ids))
        checks.append(ReceiptCheck("library", True, "none (log 0): no experiences injected"))
    elif contract is not None and content is not None:
        texts = _check_library(receipt, contract, content, from_block)
        checks.append(ReceiptCheck("library", True, f"log {receipt.library.log_id} at size "
                                   f"{receipt.library.size}: root anchored, "
                                   f"{len(texts)} experiences are its active set"))
    else:
        checks.append(ReceiptCheck("library", None, "needs the chain and content store"))

    checks.extend(_check_inclusion(receipt, bundle.get("inclusion"), contract, receipt_log_id))

    if model is None:
        checks.append(ReceiptCheck("activations", None, "needs --model"))
        return checks
    if model_dir is not None and model_digest(model_dir) != receipt.model_digest:
        raise ReceiptError("model_digest", "the model given is not the receipt's",
                           expected=receipt.model_digest, computed=model_digest(model_dir))
    if texts is None:
        raise ReceiptError("experience_content", "the experiences' texts need the chain and "
                           "content store to rebuild the prompt")
    prompt_ids = _rebuild_prompt(bundle.get("route"), request, receipt, texts, tokenizer)
    if len(prompt_ids) != receipt.tokens.prompt:
        raise ReceiptError("token_counts", "prompt tokens after injecting the library",
                           expected=receipt.tokens.prompt, computed=len(prompt_ids))
    verify_activations(decode_hidden_states(model, prompt_ids, token_ids),
                       receipt.activation_commitment)
    checks.append(ReceiptCheck("activations", True, "one prefill matches the TOPLOC commitment"))
    return checks


def _check_library(receipt: ReceiptEntry, contract: Any, content: Any, from_block: int
                   ) -> dict[str, str]:
    from inference_node.sync import LibrarySyncError, library_at

    lib = receipt.library
    anchored = "0x" + contract.root_at(lib.log_id, lib.size).hex()
    if anchored != lib.root:
        raise ReceiptError("library_root", f"log {lib.log_id} at size {lib.size} is anchored "
                           "with another root", expected=anchored, computed=lib.root)
    kind = contract.log_info(lib.log_id).kind
    try:
        state = library_at(contract, content, lib.log_id, kind, lib.size, from_block=from_block)
    except LibrarySyncError as exc:
        raise ReceiptError("experience_content", str(exc)) from None
    if list(state) != list(receipt.experience_ids):
        raise ReceiptError("library_state", "the experiences named are not the library's "
                           "active set at that size", expected=list(state),
                           computed=list(receipt.experience_ids))
    return state


def _check_registration(receipt: ReceiptEntry, registry: Any) -> tuple[ReceiptCheck, int]:
    """The registry's record of the receipt's signer; the check and its receipt log id."""
    from contracts.gym_token import format_gym

    operator = registry.operator_of_signer(receipt.node)
    if operator is None:
        raise ReceiptError("not_registered", f"no node in the NodeRegistry signs with "
                           f"{receipt.node}")
    node = registry.node_of(operator)
    if node is None:  # withdrawn between the two reads
        raise ReceiptError("not_registered", f"operator {operator} has no node any more")
    if node.unbonding_ends:
        raise ReceiptError("node_deregistered", f"node {operator} deregistered; its stake "
                           f"unbonds at {node.unbonding_ends} (unix time)")
    if not node.active:
        raise ReceiptError("node_slashed", f"node {operator} stakes {format_gym(node.stake)}, "
                           f"below the minimum {format_gym(registry.min_stake())}: "
                           "slashed, and not active")
    if node.model_digest != receipt.model_digest:
        raise ReceiptError("registered_model", f"node {operator} is registered serving another "
                           "model", expected=node.model_digest, computed=receipt.model_digest)
    return (ReceiptCheck("registration", True, f"active node of operator {operator}, stake "
                         f"{format_gym(node.stake)}, receipt log {node.receipt_log_id}"),
            node.receipt_log_id)


def _check_inclusion(receipt: ReceiptEntry, doc: Any, contract: Any,
                     receipt_log_id: int | None = None) -> list[ReceiptCheck]:
    from ledger.proofs import check_anchored_root, verify_proof_document, verify_proof_entry

    if doc is None:
        return [ReceiptCheck("inclusion", None, "the bundle has no receipt-log proof")]
    try:
        proof = verify_proof_document(doc)
    except VerificationError as exc:
        raise ReceiptError("not_included", str(exc)) from None
    data = encode_entry(receipt)
    cid = entry_cid(data)
    if proof.entry_cid != cid:
        raise ReceiptError("not_included", "the proof is for another entry", expected=cid,
                           computed=proof.entry_cid)
    try:  # the document's entry_cid is a claim: the proven leaf must hash from these bytes
        proof = verify_proof_entry(proof, data)
    except VerificationError as exc:
        raise ReceiptError("not_included", str(exc)) from None
    if receipt_log_id is not None and proof.log_id != receipt_log_id:
        raise ReceiptError("receipt_log", "the proof is for another log than the node's "
                           "registered receipt log", expected=receipt_log_id,
                           computed=proof.log_id)
    checks = [ReceiptCheck("inclusion", True, f"leaf {proof.index} of log {proof.log_id} at "
                           f"size {proof.size}")]
    if contract is None:
        return [*checks, ReceiptCheck("anchoring", None, "needs the chain")]
    try:
        check_anchored_root(contract, proof)
    except (VerificationError, LedgerErrorBase) as exc:
        raise ReceiptError("not_anchored", str(exc)) from None
    return [*checks, ReceiptCheck("anchoring", True, "rootAt matches")]


def _rebuild_prompt(route: Any, request: dict, receipt: ReceiptEntry, texts: dict[str, str],
                    tokenizer: Any) -> list[int]:
    from inference_node.injection import LibraryInjector
    from inference_node.library import LibrarySnapshot
    from inference_node.protocol import ChatCompletionRequest, CompletionRequest

    snapshot = LibrarySnapshot("verify", str(receipt.library.log_id), receipt.library.size,
                               receipt.library.root,
                               tuple((eid, texts[eid]) for eid in receipt.experience_ids))
    injector = LibraryInjector(tokenizer)
    try:
        if route == "chat":
            chat = ChatCompletionRequest.model_validate(request)
            messages = [{"role": m.role, "content": m.text()} for m in chat.messages]
            injected = injector.chat(messages, snapshot)
        elif route == "completion":
            injected = injector.completion(CompletionRequest.model_validate(request)
                                           .prompt_text(), snapshot)
        else:
            raise ReceiptError("malformed", f"route must be 'chat' or 'completion', got {route!r}")
    except ValueError as exc:  # pydantic's ValidationError
        raise ReceiptError("malformed", f"the request is not a valid {route} request ({exc})"
                           ) from None
    return injected.prompt.all_token_ids
