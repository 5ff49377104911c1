"""Update commitments: what a swarm peer signs for each averaging round (docs/design.md "3.13
Swarm records", docs/swarm.md "Hostile peers").

    payload = update_payload(tensors)                 # float32 bytes, tensor after tensor
    commitment = sign_commitment(identity_der, run, "grad", group_id, payload)
    verify_commitment(decode_commitment(text), run="arith-1")   # -> Commitment
    evidence = equivocation(a, b)                     # two commitments, one round, two digests

A peer sends its update to every member of its averaging group with a commitment: the run, the
averager (``grad`` or ``state``), the round's group id, the sha256 of the payload and its
length, signed by the peer's libp2p RSA key (the key whose multihash is its peer id, as the
spec's binding), message ``gym-swarm/1 update RUN AVERAGER GROUP DIGEST BYTES CLAIMS`` (CLAIMS:
the sha256 of the work claims it carries, trainer.swarm.work). The commitment speaks for the
peer to anyone:

- two valid commitments of one peer for one round with different digests prove it sent
  different updates to different peers (equivocation): `equivocation` checks such a pair;
- a valid commitment whose payload holds a NaN or an infinity proves it sent a poisoned update:
  `non_finite_evidence` checks the pair (commitment, payload);
- a claim in it whose re-computed sketch differs proves it claimed work it did not do.

Commitments come from peers: `decode_commitment` bounds the text and every field and names the
first bad one in a `SwarmRecordError`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass

from trainer.swarm.records import (
    SwarmRecordError,
    check_run_id,
    sign_with_libp2p_key,
    verify_libp2p_signature,
)

AVERAGERS = ("grad", "state")
MAX_COMMITMENT = 512 * 1024  # characters of one commitment's JSON (with its work claims)
MAX_CLAIMS = 1024  # work claims one commitment carries (trainer.swarm.work)
MAX_GROUP_HEX = 128
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_HEX = re.compile(r"[0-9a-f]+")


@dataclass(frozen=True)
class Commitment:
    run: str
    averager: str  # "grad" or "state"
    group: str  # hex of hivemind's group id
    peer_id: str
    digest: str  # sha256: of the payload
    bytes: int  # the payload's length
    key: str  # hex DER of the peer's libp2p RSA public key
    signature: str  # hex
    claims: tuple = ()  # the work claims of a gradient round (trainer.swarm.work), as JSON

    def claims_digest(self) -> str:
        text = json.dumps(list(self.claims), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()

    def message(self) -> bytes:
        return (f"gym-swarm/1 update {self.run} {self.averager} {self.group} {self.digest} "
                f"{self.bytes} {self.claims_digest()}").encode()

    def encode(self) -> str:
        return json.dumps({**asdict(self), "claims": list(self.claims)}, sort_keys=True,
                          separators=(",", ":"))

    def round(self) -> tuple[str, str, str, str]:
        """What names the round and the sender: two commitments of one round differ only in
        their digest (and signature)."""
        return self.run, self.averager, self.group, self.peer_id


CODECS = ("none", "float16", "8bit")  # how an update's values are sent (--compression)


def update_payload(tensors, codec: str = "none") -> bytes:
    """The bytes a peer sends: each tensor in order, as little-endian float32 (``none``),
    float16, or ``8bit``: per tensor its minimum and step (two float32) and one byte a value,
    value = minimum + byte x step (uniform quantisation over the tensor's range)."""
    import numpy

    out = []
    for tensor in tensors:
        values = tensor.detach().float().contiguous().cpu().numpy().astype("<f4")
        if codec == "none":
            out.append(values.tobytes())
        elif codec == "float16":
            out.append(values.astype("<f2").tobytes())
        elif codec == "8bit":
            low = float(values.min()) if values.size else 0.0
            high = float(values.max()) if values.size else 0.0
            step = (high - low) / 255 if high > low else 0.0
            codes = numpy.zeros(values.shape, "u1") if step == 0.0 or not numpy.isfinite(
                step) else numpy.clip(numpy.rint((values - low) / step), 0, 255).astype("u1")
            out.append(numpy.array([low, step], "<f4").tobytes() + codes.tobytes())
        else:
            raise ValueError(f"codec {codec!r}: one of {', '.join(CODECS)}")
    return b"".join(out)


def payload_size(shapes, codec: str = "none") -> int:
    """The length of `update_payload` of tensors of ``shapes``."""
    sizes = [_numel(shape) for shape in shapes]
    if codec == "none":
        return 4 * sum(sizes)
    if codec == "float16":
        return 2 * sum(sizes)
    return sum(8 + size for size in sizes)


def decode_payload(data: bytes, shapes, codec: str = "none") -> list:
    """The float32 tensors of ``shapes`` that `update_payload` encoded in ``data`` (whose
    length must be `payload_size`)."""
    import numpy
    import torch

    if len(data) != payload_size(shapes, codec):
        raise SwarmRecordError(f"update: {len(data)} bytes, not the "
                               f"{payload_size(shapes, codec)} of this round's tensors")
    out, start = [], 0
    for shape in shapes:
        size = _numel(shape)
        if codec == "none":
            values = numpy.frombuffer(data, "<f4", size, start)
            start += 4 * size
        elif codec == "float16":
            values = numpy.frombuffer(data, "<f2", size, start).astype("<f4")
            start += 2 * size
        else:
            low, step = numpy.frombuffer(data, "<f4", 2, start)
            codes = numpy.frombuffer(data, "u1", size, start + 8)
            with numpy.errstate(all="ignore"):  # a NaN range decodes to NaN: the boundary's
                values = (low + codes.astype("<f4") * step).astype("<f4")
            start += 8 + size
        out.append(torch.from_numpy(values.copy()).reshape(tuple(shape)))
    return out


def _numel(shape) -> int:
    size = 1
    for dim in shape:
        size *= int(dim)
    return size


def payload_digest(payload: bytes) -> str:
    return "sha256:" + hashlib.sha256(payload).hexdigest()


def sign_commitment(identity_der: bytes, peer_id: str, run: str, averager: str, group: bytes,
                    payload: bytes, claims: tuple = ()) -> Commitment:
    """The signed commitment of ``payload`` for one round (``group``: hivemind's group id),
    with the work ``claims`` (JSON values) it vouches for."""
    unsigned = Commitment(run=check_run_id(run), averager=averager, group=group.hex(),
                          peer_id=peer_id, digest=payload_digest(payload), bytes=len(payload),
                          key="", signature="", claims=tuple(claims))
    key, signature = sign_with_libp2p_key(identity_der, unsigned.message())
    return Commitment(**{**asdict(unsigned), "key": key, "signature": signature,
                         "claims": tuple(claims)})


def decode_commitment(text) -> Commitment:
    """The `Commitment` in ``text`` (JSON), fields checked, signature not yet (see
    `verify_commitment`)."""
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError:
            raise SwarmRecordError("commitment: not UTF-8") from None
    if not isinstance(text, str) or len(text) > MAX_COMMITMENT:
        raise SwarmRecordError(f"commitment: a JSON object of at most {MAX_COMMITMENT} "
                               "characters")
    try:
        data = json.loads(text)
    except ValueError:
        raise SwarmRecordError("commitment: not JSON") from None
    names = set(Commitment.__dataclass_fields__)
    if not isinstance(data, dict) or set(data) != names:
        raise SwarmRecordError("commitment: an object with exactly the fields "
                               + ", ".join(sorted(names)))
    if not isinstance(data["claims"], list) or len(data["claims"]) > MAX_CLAIMS:
        raise SwarmRecordError(f"commitment.claims: a list of at most {MAX_CLAIMS} claims")
    for name in names - {"bytes", "claims"}:
        if not isinstance(data[name], str) or not data[name]:
            raise SwarmRecordError(f"commitment.{name}: a non-empty string")
    check_run_id(data["run"])
    if data["averager"] not in AVERAGERS:
        raise SwarmRecordError(f"commitment.averager: one of {', '.join(AVERAGERS)}")
    if len(data["group"]) > MAX_GROUP_HEX or not _HEX.fullmatch(data["group"]):
        raise SwarmRecordError(f"commitment.group: hex of at most {MAX_GROUP_HEX} characters")
    if not _DIGEST.fullmatch(data["digest"]):
        raise SwarmRecordError("commitment.digest: sha256: and 64 hex digits")
    if type(data["bytes"]) is not int or not 0 <= data["bytes"] <= 2**40:
        raise SwarmRecordError("commitment.bytes: an integer from 0 to 2^40")
    if len(data["peer_id"]) > 128:
        raise SwarmRecordError("commitment.peer_id: at most 128 characters")
    for name in ("key", "signature"):
        if len(data[name]) > 2048 or not _HEX.fullmatch(data[name]):
            raise SwarmRecordError(f"commitment.{name}: hex of at most 2048 characters")
    return Commitment(**{**data, "claims": tuple(data["claims"])})


def verify_commitment(commitment: Commitment, *, run: str | None = None,
                      averager: str | None = None, group: bytes | None = None,
                      peer_id: str | None = None) -> Commitment:
    """``commitment`` when its key is its peer id's and signed it, and it is of the round
    asked for (each given field); else `SwarmRecordError` naming what differs."""
    expected = {"run": run, "averager": averager,
                "group": group.hex() if group is not None else None, "peer_id": peer_id}
    for name, value in expected.items():
        if value is not None and getattr(commitment, name) != value:
            raise SwarmRecordError(f"commitment.{name}: {getattr(commitment, name)!r}, not "
                                   f"this round's {value!r}")
    verify_libp2p_signature(commitment.key, commitment.peer_id, commitment.message(),
                            commitment.signature, "commitment.signature")
    return commitment


def check_payload(commitment: Commitment, payload: bytes) -> None:
    """`SwarmRecordError` unless ``payload`` is the one ``commitment`` signed."""
    if len(payload) != commitment.bytes or payload_digest(payload) != commitment.digest:
        raise SwarmRecordError(f"update of peer {commitment.peer_id}: not the payload its "
                               "commitment signed")


def equivocation(first: Commitment, second: Commitment) -> str:
    """The sender's peer id when ``first`` and ``second`` are both its valid commitments for
    one round with different digests (it sent two updates); else `SwarmRecordError`."""
    if first.round() != second.round():
        raise SwarmRecordError("equivocation: the commitments are of different rounds or peers")
    if first.digest == second.digest:
        raise SwarmRecordError("equivocation: the commitments sign the same update")
    verify_commitment(first)
    verify_commitment(second)
    return first.peer_id


def non_finite_evidence(commitment: Commitment, payload: bytes, shapes,
                        codec: str = "none") -> str:
    """The sender's peer id when ``payload`` is the one its valid ``commitment`` signed and,
    decoded as tensors of ``shapes`` sent with ``codec``, holds a NaN or an infinity; else
    `SwarmRecordError`."""
    import torch

    verify_commitment(commitment)
    check_payload(commitment, payload)
    if all(bool(torch.isfinite(t).all()) for t in decode_payload(payload, shapes, codec)):
        raise SwarmRecordError("evidence: the update is finite")
    return commitment.peer_id
