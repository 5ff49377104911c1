"""Proof-of-inference receipts, the wire format: build, sign and recover (EIP-712), bundle.

Spec: docs/design.md "3.6 Receipts"; the entry is ``ledger.entries.ReceiptEntry``
(type ``receipt``, v1), its canonical bytes RFC 8785 (``ledger.entries.encode_entry``). This
module implements it, in detail:

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

v2 appends ``string sampler, string finishReason`` to ``Receipt`` (``TYPES_V2``), and a v2
receipt whose prompt was rendered under a chat template other than the model's own
(``chat_template``: ``inference_node.chat_templates``) appends ``bytes32 chatTemplate`` after
them (``TYPES_V2_TEMPLATE``); one without it was rendered under the model's own.

A CID (experience ids, adapter) is signed as its 32-byte sha2-256 digest: entry CIDs are
raw-codec sha2-256 CIDv1, so the digest determines the CID (``adapterCid`` is zero when
absent). Floats are signed as their RFC 8785 spelling (``"0.7"``), exact where a fixed-point
integer would round. ``signature`` is the 65-byte ``r || s || v`` (v 27/28), lowercase hex.

Activation commitment: ``activationCommitment`` is a TOPLOC commitment to the final hidden states
at the decode positions, ``toploc1:<topk>:<batch>:<b64>.<b64>…``; ``inference_node.activations``
builds and checks it. A ``ReceiptSigner`` commits to the activations its engine captured (else
one prefill) and signs.

Bundle: what ``gym verify receipt`` reads (``bundle_json``), the receipt with its evidence::

    {"type": "receipt-bundle", "v": 1, "receipt": {…}, "domain": {EIP-712 domain},
     "route": "chat" | "completion", "request": {the request body},
     "response": {"text": …, "token_ids": […]},
     "inclusion": <ledger.proofs inclusion proof document from the node's receipt log> | null}

``inference_node.verify`` checks a bundle. Parsing and signature checks raise
``ReceiptError`` (``inference_node.errors``) whose ``reason`` is one of ``REASONS``.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rfc8785
from eth_account import Account
from eth_keys import keys
from eth_keys.exceptions import BadSignature
from eth_keys.exceptions import ValidationError as KeysValidationError
from eth_utils import keccak

from inference_node.activations import commit_activations, decode_hidden_states
from inference_node.errors import ReceiptError
from ledger.entries import (
    GYM_SAMPLER,
    LibraryRef,
    ReceiptEntry,
    ReceiptEntryV2,
    Sampling,
    TokenCounts,
    decode_entry,
    encode_entry,
    weights_digest,
)
from ledger.errors import EntryError
from ledger.evm import ZERO_ADDRESS
from ledger.multiformats import CID, MultiformatError

DOMAIN_NAME = "GymLedger Receipt"
DOMAIN_VERSION = "1"


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
                  adapter_cid: str | None = None, at: int | None = None,
                  finish_reason: str | None = None, sampler: str = GYM_SAMPLER,
                  chat_template: str | None = None) -> ReceiptEntry:
    """An unsigned receipt; ``EntryError`` if a field breaks the entry format's rules. With
    ``finish_reason`` a v2 receipt (``request_json`` is then the normalized request, the
    tokens were chosen by ``sampler``: gym-sampler/1, or /2 when the request set its knobs,
    and ``chat_template`` is the digest of the template the prompt was rendered under when
    not the model's own), else v1."""
    if finish_reason is None and chat_template is not None:
        raise ValueError("only a v2 receipt (with a finish_reason) binds a chat template")
    v2 = {} if finish_reason is None else {"sampler": sampler, "finish_reason": finish_reason,
                                           "chat_template": chat_template}
    return (ReceiptEntryV2 if v2 else ReceiptEntry)(**v2,
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

# Receipt v2: the same structs, and the sampler and how the answer ended signed with them.
TYPES_V2: dict[str, list[dict[str, str]]] = {
    **TYPES, "Receipt": [*TYPES["Receipt"], {"name": "sampler", "type": "string"},
                         {"name": "finishReason", "type": "string"}]}
# A v2 receipt whose prompt was rendered under a chat template other than the model's own: the
# template's digest signed last (another type hash: the field cannot be dropped unnoticed).
TYPES_V2_TEMPLATE: dict[str, list[dict[str, str]]] = {
    **TYPES, "Receipt": [*TYPES_V2["Receipt"], {"name": "chatTemplate", "type": "bytes32"}]}
_TYPES = {"v1": TYPES, "v2": TYPES_V2, "v2+chatTemplate": TYPES_V2_TEMPLATE}


def _types_of(receipt: ReceiptEntry) -> str:
    """Which of ``_TYPES`` a receipt is signed under."""
    if receipt.v == 1:
        return "v1"
    return "v2+chatTemplate" if receipt.chat_template is not None else "v2"


def typed_data(receipt: ReceiptEntry, domain: ReceiptDomain) -> dict[str, Any]:
    """The EIP-712 ``eth_signTypedData_v4`` JSON of ``receipt`` (its signature left out)."""
    return {"types": copy.deepcopy(_TYPES[_types_of(receipt)]), "primaryType": "Receipt",
            "domain": domain.to_json(), "message": typed_data_message(receipt)}


def typed_data_message(receipt: ReceiptEntry) -> dict[str, Any]:
    """The ``message`` of `typed_data`: the receipt's fields as the EIP-712 types have them."""
    s, lib = receipt.sampling, receipt.library
    message = {
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
    if receipt.v == 2:
        message.update(sampler=receipt.sampler, finishReason=receipt.finish_reason)
        if receipt.chat_template is not None:
            message["chatTemplate"] = _bytes32(receipt.chat_template)
    return message


def _encode_type(types: dict[str, list[dict]], primary: str) -> str:
    """EIP-712 ``encodeType``: the struct, then the structs its fields name, sorted by name
    (the receipt's structs nest one level deep)."""
    def one(name: str) -> str:
        return f"{name}(" + ",".join(f"{f['type']} {f['name']}" for f in types[name]) + ")"

    return one(primary) + "".join(one(name) for name in sorted(
        {f["type"] for f in types[primary] if f["type"] in types}))


@functools.cache
def _type_hash(name: str, types: str = "v1") -> bytes:
    """``typeHash`` of a struct of one of ``_TYPES`` (a constant: computed once)."""
    return keccak(_encode_type(_TYPES[types], name).encode())


def _hash_struct(name: str, value: dict[str, Any], types: str = "v1") -> bytes:
    """EIP-712 ``hashStruct`` for the field types of one of ``_TYPES`` (`_types_of`)."""
    fields = _TYPES[types]
    encoded = [_type_hash(name, types)]
    for field in fields[name]:
        kind, item = field["type"], value[field["name"]]
        if kind in fields:
            encoded.append(_hash_struct(kind, item, types))
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
                  + _hash_struct("Receipt", typed_data_message(receipt), _types_of(receipt)))


def sign_receipt(receipt: ReceiptEntry, key: str | bytes, domain: ReceiptDomain) -> ReceiptEntry:
    """``receipt`` signed by ``key``; its ``node`` must be the key's address."""
    account = Account.from_key(key)
    if account.address.lower() != receipt.node:
        raise ValueError(f"receipt names node {receipt.node}, the key is {account.address}")
    unsigned = receipt.model_copy(update={"signature": None})
    signed = account.unsafe_sign_hash(receipt_hash(unsigned, domain))
    return type(receipt)(**{**unsigned.model_dump(exclude_none=True),
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
            entry = (ReceiptEntryV2 if data.get("v") == 2 else ReceiptEntry)(**data)
        else:
            if isinstance(data, str):
                data = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
            entry = decode_entry(data)
    except (EntryError, ValueError, TypeError) as exc:
        raise ReceiptError("malformed", f"not a receipt entry ({exc})") from None
    if not isinstance(entry, ReceiptEntry):
        raise ReceiptError("malformed", f"a {entry.type!r} entry, not a receipt")
    return entry


def bundle_json(receipt: ReceiptEntry, domain: ReceiptDomain, *, route: str, request: Any,
                text: str, completion_token_ids: Sequence[int],
                inclusion: dict | None = None) -> dict[str, Any]:
    """What ``gym verify receipt`` reads: the receipt with the evidence to recheck it. For a v2
    receipt ``request`` may be the body the client sent: it is normalized, with what it left
    unset taken from the receipt (``normalized_request.from_client_request``)."""
    if receipt.v == 2:
        from inference_node.normalized_request import FORMAT, from_client_request

        if not (isinstance(request, dict) and request.get("v") == FORMAT):
            request = from_client_request(route, request, max_tokens=receipt.sampling.max_tokens,
                                          seed=receipt.sampling.seed)
    bundle = {"type": "receipt-bundle", "v": receipt.v,
              "receipt": json.loads(encode_entry(receipt)), "domain": domain.to_json(),
              "request": request,
              "response": {"text": text, "token_ids": list(completion_token_ids)},
              "inclusion": inclusion}
    if receipt.v == 1:  # v2 names the route inside its normalized request
        bundle["route"] = route
    return bundle


def library_ref(log_id: str, size: int, root: str) -> LibraryRef:
    """A ``LibrarySnapshot``'s (log_id, size, root) in receipt form; no library is log 0 at
    size 0 with the RFC 9162 empty root."""
    from ledger.rfc9162 import EMPTY_ROOT

    body = root.removeprefix("0x")
    return LibraryRef(log_id=int(log_id, 0) if log_id else 0, size=size,
                      root="0x" + (body if body else EMPTY_ROOT.hex()))


class ReceiptSigner:
    """What a node needs to issue receipts: its key, domain, model and the model's digest, and
    the digest of its chat template when not the model's own (its chat receipts bind it)."""

    def __init__(self, key: str | bytes, domain: ReceiptDomain, model: Any, model_digest: str,
                 adapter_cid: str | None = None, chat_template: str | None = None, *,
                 model_loader: Callable[[], Any] | None = None) -> None:
        self._account = Account.from_key(key)  # the key stays in here, never logged
        self.address = self._account.address.lower()
        self._secp256k1 = _native_key(bytes(self._account.key))
        self.domain, self.model, self.model_digest = domain, model, model_digest
        self.adapter_cid, self.chat_template = adapter_cid, chat_template
        # an engine that captures its own activations: the model to re-compute them with,
        # loaded only if one answer comes without them
        self.model_loader = model_loader

    def __repr__(self) -> str:
        return f"ReceiptSigner(node={self.address}, domain={self.domain})"

    def issue(self, *, library: LibraryRef, experience_ids: Sequence[str], request_json: Any,
              prompt_ids: Sequence[int], text: str, completion_ids: Sequence[int],
              temperature: float, top_p: float, max_tokens: int, seed: int,
              activations: Sequence[Any] | None = None, finish_reason: str | None = None,
              sampler: str = GYM_SAMPLER, timings: dict[str, float] | None = None
              ) -> ReceiptEntry:
        """Commit to the activations, build and sign the receipt. ``activations``: the decode
        positions' final hidden states captured by the engine; without them, one prefill.
        ``finish_reason``: a v2 receipt (``request_json`` the normalized request, the tokens
        chosen by the verifiable sampler; a chat one binds the node's chat template); without
        it v1, kept for tests of old receipts. ``timings`` gets the seconds spent on the
        ``commitment`` (a prefill included), the ``digests`` (the receipt built: its request,
        text and token digests) and the ``signature`` (its EIP-712 hash, signed)."""
        started = time.perf_counter()
        if activations is None:
            if self.model is None and self.model_loader is not None:
                self.model = self.model_loader()
            if self.model is None:
                raise RuntimeError("the engine captured no activations and the signer has no "
                                   "model to recompute them")
            activations = decode_hidden_states(self.model, prompt_ids, completion_ids)
        elif len(activations) != len(completion_ids):
            raise RuntimeError(f"{len(activations)} captured activations for "
                               f"{len(completion_ids)} completion tokens")
        commitment = commit_activations(activations)
        committed = time.perf_counter()
        receipt = build_receipt(
            node=self.address, model_digest=self.model_digest, adapter_cid=self.adapter_cid,
            library=library, experience_ids=experience_ids, request_json=request_json, text=text,
            completion_token_ids=completion_ids, prompt_tokens=len(prompt_ids),
            temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed,
            activation_commitment=commitment, finish_reason=finish_reason, sampler=sampler,
            chat_template=self.chat_template if finish_reason is not None
            and request_json.get("route") == "chat" else None)
        built = time.perf_counter()
        signed = receipt.model_copy(update={"signature": "0x" + self.sign_digest(
            receipt_hash(receipt, self.domain)).hex()})
        if timings is not None:
            timings["commitment"] = committed - started
            timings["digests"] = built - committed
            timings["signature"] = time.perf_counter() - built
        return signed

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
