"""The two records a swarm peer publishes in the run's DHT (docs/design.md "3.13 Swarm records",
docs/swarm.md): what it trains (`PeerSpec`) and what it contributed (`Contribution`, EIP-712).

    spec = PeerSpec(run="arith-1", peer_id=..., address=..., method="sft", ...)
    record = sign_contribution(Contribution(run=..., ...), key)
    assert verify_contribution(record) == record.contributor

- `PeerSpec`: the run's identity as this peer holds it (method, base model name and weights
  digest, dataset digest, config digest, global target batch size, local steps, collaborative
  steps) with the peer's libp2p id, its signing address, the DHT owner key its values are
  stored under, and the addresses it listens on.
  `spec_difference` names the first field where a joiner differs from a peer of the run: such a
  joiner is refused before it trains. The spec binds the address and the DHT owner key to the
  peer id: its libp2p public key (RSA, DER), whose multihash is the peer id, signs
  ``gym-swarm/1 bind RUN ADDRESS OWNER`` (PKCS#1 v1.5, SHA-256); `decode_spec` refuses a spec
  whose key or signature does not hold, so nobody can claim another peer's id for their own
  address, and a copy of a peer's spec stored under another owner key speaks for nobody.
- `Contribution`: run id, config digest, peer id, contributor address, the samples and local
  optimizer steps it processed, the collaborative step (hivemind epoch) it reached, and the
  averaging rounds it took part in, each as (epoch, samples it brought to that round); signed
  with EIP-712 (`ledger.contributions`: `SwarmContribution`, domain name "GymLedger Swarm",
  version "1", no chain) by the contributor's key. The publishing peer appends the records it
  accepts to the run's log as ``contribution`` entries.

Both come from peers and are hostile until checked: `decode_spec` and `decode_contribution` take
plain JSON-like values (what the DHT returns), bound sizes and counts, refuse unknown or missing
fields and wrong types with one `SwarmRecordError` naming the field.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from ledger.contributions import (
    contribution_typed_data,
    recover_contributor,
    sign_contribution_data,
)
from ledger.entries import MAX_CONTRIBUTION_ROUNDS
from ledger.errors import EntryError
from trainer.errors import TrainerError

SWARM_RECORDS = "swarm_records.json"  # a peer's accepted records, in its run dir beside run.json
MAX_ROUNDS = MAX_CONTRIBUTION_ROUNDS  # rounds one record lists (a longer run lists the last)
MAX_MADDRS = 8
MAX_TEXT = 256  # run ids, peer ids, names, multiaddrs
MAX_COUNT = 2**53 - 1  # integers survive JSON and JavaScript
MAX_KEY_HEX = 2048  # a libp2p RSA public key (DER) or signature, hex (RSA-4096 fits)

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_ADDRESS = re.compile(r"0x[0-9a-f]{40}")
_SIGNATURE = re.compile(r"0x[0-9a-f]{130}")


class SwarmRecordError(TrainerError, ValueError):
    """A swarm record that is malformed or whose signature does not hold; names the field."""


def check_run_id(run: str) -> str:
    """``run`` if it is a valid swarm run name (the prefix of every DHT key of the run)."""
    if not isinstance(run, str) or not _RUN_ID.fullmatch(run):
        raise SwarmRecordError(f"run id {run!r}: 1 to 64 letters, digits, '.', '_' or '-', "
                               "starting with a letter or digit")
    return run


@dataclass(frozen=True)
class PeerSpec:
    run: str
    peer_id: str  # libp2p peer id (base58)
    address: str  # the signing key's address, 0x + 40 lowercase hex
    method: str
    base_model: str
    base_digest: str  # sha256: weights digest of the base model
    dataset_digest: str  # sha256: of the dataset file
    config_digest: str  # sha256: of the run's training settings (swarm.peer.config_digest)
    target_batch_size: int  # samples per collaborative step, all peers together
    local_steps: int  # 0: gradients averaged every step; H: parameters averaged every H steps
    max_steps: int  # collaborative steps of the run
    maddrs: tuple[str, ...] = field(default=())  # where the peer listens (announced)
    libp2p_key: str = ""  # hex DER of the peer's libp2p RSA public key
    dht_owner: str = ""  # hex: the DHT subkey (hivemind owner key) its values are stored under
    binding: str = ""  # hex: the libp2p key's signature over bind_message(run, address, owner)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "maddrs": list(self.maddrs)}


def bind_message(run: str, address: str, dht_owner: str) -> bytes:
    return f"gym-swarm/1 bind {run} {address} {dht_owner}".encode()


def libp2p_peer_id(public_key_der: bytes) -> str:
    """The libp2p peer id (base58) of an RSA public key: the sha2-256 multihash of its
    protobuf ``PublicKey{Type: RSA, Data: DER}`` (libp2p's peer-ids spec)."""
    import base58

    size = len(public_key_der)
    varint = bytearray()
    while True:
        byte, size = size & 0x7F, size >> 7
        varint.append(byte | (0x80 if size else 0))
        if not size:
            break
    encoded = b"\x08\x00\x12" + bytes(varint) + public_key_der
    return base58.b58encode(b"\x12\x20" + hashlib.sha256(encoded).digest()).decode()


def sign_with_libp2p_key(private_key_der: bytes, message: bytes) -> tuple[str, str]:
    """(public key, signature), hex: ``message`` signed by a libp2p RSA private key (DER),
    PKCS#1 v1.5 over SHA-256."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding

    key = serialization.load_der_private_key(private_key_der, password=None)
    public = key.public_key().public_bytes(serialization.Encoding.DER,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return public.hex(), key.sign(message, padding.PKCS1v15(), hashes.SHA256()).hex()


def verify_libp2p_signature(key_hex: str, peer_id: str, message: bytes, signature_hex: str,
                            what: str) -> None:
    """`SwarmRecordError` (``what``: the field named) unless ``key_hex`` is an RSA key of 2048
    to 4096 bits whose multihash is ``peer_id`` and it signed ``message``."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    try:
        der, signature = bytes.fromhex(key_hex), bytes.fromhex(signature_hex)
        key = serialization.load_der_public_key(der)
    except ValueError:
        raise SwarmRecordError(f"{what}: not a hex DER public key and signature") from None
    if not isinstance(key, rsa.RSAPublicKey) or not 2048 <= key.key_size <= 4096:
        raise SwarmRecordError(f"{what}: not an RSA key of 2048 to 4096 bits")
    if libp2p_peer_id(der) != peer_id:
        raise SwarmRecordError(f"{what}: not the key of peer {peer_id}")
    try:
        key.verify(signature, message, padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        raise SwarmRecordError(f"{what}: peer {peer_id}'s key did not sign it") from None


def sign_binding(private_key_der: bytes, run: str, address: str, dht_owner: str
                 ) -> tuple[str, str]:
    """(libp2p_key, binding) for a spec: the public key and its signature of the binding."""
    return sign_with_libp2p_key(private_key_der, bind_message(run, address, dht_owner))


def verify_binding(spec: PeerSpec) -> None:
    """`SwarmRecordError` unless the spec's key is its peer id's and signed its address."""
    try:
        verify_libp2p_signature(spec.libp2p_key, spec.peer_id,
                                bind_message(spec.run, spec.address, spec.dht_owner),
                                spec.binding, "peer spec.libp2p_key")
    except SwarmRecordError as exc:
        if "did not sign" in str(exc):
            raise SwarmRecordError(f"peer spec.binding: peer {spec.peer_id}'s key did not "
                                   f"sign {spec.address} and its DHT owner key") from None
        raise


# The fields a joiner must share with the run, in the order differences are reported.
SHARED_FIELDS = ("method", "base_model", "base_digest", "dataset_digest", "config_digest",
                 "target_batch_size", "local_steps", "max_steps")


def spec_difference(mine: PeerSpec, theirs: PeerSpec) -> str | None:
    """The first run field where ``mine`` and ``theirs`` differ, as one phrase, else None."""
    for name in SHARED_FIELDS:
        a, b = getattr(mine, name), getattr(theirs, name)
        if a != b:
            return f"{name} is {a} here but {b} at peer {theirs.peer_id}"
    return None


@dataclass(frozen=True)
class Round:
    epoch: int  # the collaborative step this averaging round ended
    samples: int  # samples this peer accumulated for it


@dataclass(frozen=True)
class Contribution:
    run: str
    config_digest: str
    peer_id: str
    contributor: str  # address, 0x + 40 lowercase hex
    samples: int  # samples processed in all (rounds' samples plus any not averaged yet)
    steps: int  # local optimizer steps
    epoch: int  # the collaborative step reached
    rounds: tuple[Round, ...] = ()
    signature: str | None = None  # 0x + 130 hex; None while unsigned

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["rounds"] = [asdict(r) for r in self.rounds]
        if self.signature is None:
            del data["signature"]
        return data


# --------------------------------------------------------------------------- decoding


def _fields(value: Any, required: set[str], optional: set[str], what: str) -> dict:
    if not isinstance(value, dict):
        raise SwarmRecordError(f"{what}: not an object")
    unknown = set(value) - required - optional
    if unknown:
        raise SwarmRecordError(f"{what}: unknown field {min(map(str, unknown))!r}")
    missing = required - set(value)
    if missing:
        raise SwarmRecordError(f"{what}: missing field {min(missing)!r}")
    return value


def _text(value: Any, name: str, pattern: re.Pattern | None = None) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise SwarmRecordError(f"{name}: a string of 1 to {MAX_TEXT} characters")
    if pattern is not None and not pattern.fullmatch(value):
        raise SwarmRecordError(f"{name}: {value!r} is not of the form {pattern.pattern}")
    return value


def _count(value: Any, name: str) -> int:
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise SwarmRecordError(f"{name}: an integer from 0 to 2^53-1")
    return value


def _hex(value: Any, name: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_KEY_HEX:
        raise SwarmRecordError(f"{name}: a hex string of at most {MAX_KEY_HEX} characters")
    return value


def decode_spec(value: Any) -> PeerSpec:
    """The `PeerSpec` a DHT value holds, its binding verified (`verify_binding`);
    `SwarmRecordError` naming the first bad field."""
    names = {f for f in PeerSpec.__dataclass_fields__}
    data = _fields(value, names, set(), "peer spec")
    maddrs = data["maddrs"]
    if not isinstance(maddrs, list) or len(maddrs) > MAX_MADDRS:
        raise SwarmRecordError(f"peer spec.maddrs: a list of at most {MAX_MADDRS} strings")
    spec = PeerSpec(
        run=check_run_id(data["run"]), peer_id=_text(data["peer_id"], "peer spec.peer_id"),
        address=_text(data["address"], "peer spec.address", _ADDRESS),
        method=_text(data["method"], "peer spec.method"),
        base_model=_text(data["base_model"], "peer spec.base_model"),
        base_digest=_text(data["base_digest"], "peer spec.base_digest", _DIGEST),
        dataset_digest=_text(data["dataset_digest"], "peer spec.dataset_digest", _DIGEST),
        config_digest=_text(data["config_digest"], "peer spec.config_digest", _DIGEST),
        target_batch_size=_count(data["target_batch_size"], "peer spec.target_batch_size"),
        local_steps=_count(data["local_steps"], "peer spec.local_steps"),
        max_steps=_count(data["max_steps"], "peer spec.max_steps"),
        maddrs=tuple(_text(m, f"peer spec.maddrs[{i}]") for i, m in enumerate(maddrs)),
        libp2p_key=_hex(data["libp2p_key"], "peer spec.libp2p_key"),
        dht_owner=_hex(data["dht_owner"], "peer spec.dht_owner"),
        binding=_hex(data["binding"], "peer spec.binding"))
    verify_binding(spec)
    return spec


def decode_contribution(value: Any) -> Contribution:
    """The `Contribution` a DHT value or a ledger entry holds (signature not checked: see
    `verify_contribution`); `SwarmRecordError` naming the first bad field."""
    names = {f for f in Contribution.__dataclass_fields__}
    data = _fields(value, names - {"signature"}, {"signature"}, "contribution")
    rounds = data["rounds"]
    if not isinstance(rounds, list) or len(rounds) > MAX_ROUNDS:
        raise SwarmRecordError(f"contribution.rounds: a list of at most {MAX_ROUNDS} rounds")
    parsed = []
    for i, item in enumerate(rounds):
        where = f"contribution.rounds[{i}]"
        one = _fields(item, {"epoch", "samples"}, set(), where)
        parsed.append(Round(_count(one["epoch"], where + ".epoch"),
                            _count(one["samples"], where + ".samples")))
        if i and parsed[-1].epoch <= parsed[-2].epoch:
            raise SwarmRecordError(f"{where}.epoch: rounds are listed by increasing epoch")
    signature = data.get("signature")
    if signature is not None:
        _text(signature, "contribution.signature", _SIGNATURE)
    return Contribution(
        run=check_run_id(data["run"]),
        config_digest=_text(data["config_digest"], "contribution.config_digest", _DIGEST),
        peer_id=_text(data["peer_id"], "contribution.peer_id"),
        contributor=_text(data["contributor"], "contribution.contributor", _ADDRESS),
        samples=_count(data["samples"], "contribution.samples"),
        steps=_count(data["steps"], "contribution.steps"),
        epoch=_count(data["epoch"], "contribution.epoch"), rounds=tuple(parsed),
        signature=signature)


# --------------------------------------------------------------------------- EIP-712
# The signed record's typed data lives in `ledger.contributions`: the ledger checks it again.


def typed_data(record: Contribution) -> dict[str, Any]:
    """The ``eth_signTypedData_v4`` JSON of ``record`` (its signature left out)."""
    return contribution_typed_data(record)


def sign_contribution(record: Contribution, key: str | bytes) -> Contribution:
    """``record`` signed by ``key``, whose address must be ``record.contributor``."""
    from dataclasses import replace

    try:
        return replace(record, signature=sign_contribution_data(record, key))
    except EntryError as exc:
        raise SwarmRecordError(exc.problems[0][1]) from None


def verify_contribution(record: Contribution) -> str:
    """The contributor, when ``record``'s signature recovers to it; else `SwarmRecordError`."""
    try:
        return recover_contributor(record)
    except EntryError as exc:
        raise SwarmRecordError(f"contribution.{exc}") from None
