"""The signed contribution record of a volunteer training peer (docs/design.md "3.13 Swarm
records"): its EIP-712 typed data, signing and verification, shared by the peers that sign
and check it (`trainer.swarm`) and by the ledger that keeps the accepted ones as
``contribution`` entries (`ledger.entries.ContributionEntry`, checked again by `gym audit`).

    typed = contribution_typed_data(record)          # eth_signTypedData_v4 JSON
    signature = sign_contribution_data(record, key)  # 0x + 130 hex
    assert recover_contributor(record) == record.contributor
    digest = contribution_digest(record)             # the 32 bytes signed (a challenge names it)

A record is anything with the fields ``run``, ``config_digest`` (``sha256:`` + 64 hex),
``peer_id``, ``contributor`` (0x + 40 lowercase hex), ``samples``, ``steps``, ``epoch``,
``rounds`` (items with ``epoch`` and ``samples``) and ``signature``: the swarm's
`Contribution` and the ledger's entry both are.

EIP-712: ``SwarmContribution(string run,bytes32 configDigest,string peerId,address
contributor,uint64 samples,uint64 steps,uint64 epoch,Round[] rounds)`` with
``Round(uint64 epoch,uint64 samples)``, domain ``{name: "GymLedger Swarm", version: "1"}``
(no chain: the record is about work, not a chain's state).
"""

from __future__ import annotations

from typing import Any

from ledger.errors import EntryError

DOMAIN = {"name": "GymLedger Swarm", "version": "1"}
TYPES = {
    "EIP712Domain": [{"name": "name", "type": "string"}, {"name": "version", "type": "string"}],
    "SwarmContribution": [
        {"name": "run", "type": "string"}, {"name": "configDigest", "type": "bytes32"},
        {"name": "peerId", "type": "string"}, {"name": "contributor", "type": "address"},
        {"name": "samples", "type": "uint64"}, {"name": "steps", "type": "uint64"},
        {"name": "epoch", "type": "uint64"}, {"name": "rounds", "type": "Round[]"}],
    "Round": [{"name": "epoch", "type": "uint64"}, {"name": "samples", "type": "uint64"}],
}


def contribution_typed_data(record: Any) -> dict[str, Any]:
    """The ``eth_signTypedData_v4`` JSON of ``record`` (its signature left out)."""
    from eth_utils import to_checksum_address

    return {"types": TYPES, "primaryType": "SwarmContribution", "domain": DOMAIN,
            "message": {"run": record.run,
                        "configDigest": "0x" + record.config_digest.removeprefix("sha256:"),
                        "peerId": record.peer_id,
                        "contributor": to_checksum_address(record.contributor),
                        "samples": record.samples, "steps": record.steps, "epoch": record.epoch,
                        "rounds": [{"epoch": r.epoch, "samples": r.samples}
                                   for r in record.rounds]}}


def contribution_digest(record: Any) -> bytes:
    """The EIP-712 digest the record's signature signs: keccak256(0x1901 || domain separator ||
    hashStruct(record)), what a NodeRegistry challenge of its contributor names."""
    from eth_account.messages import encode_typed_data
    from eth_utils import keccak

    signable = encode_typed_data(full_message=contribution_typed_data(record))
    return keccak(b"\x19" + signable.version + signable.header + signable.body)


def sign_contribution_data(record: Any, key: str | bytes) -> str:
    """The signature (0x + 130 hex) of ``record`` by ``key``, whose address must be the
    record's contributor; `EntryError` otherwise."""
    from eth_account import Account
    from eth_account.messages import encode_typed_data

    account = Account.from_key(key)
    if account.address.lower() != record.contributor:
        raise EntryError(f"the key's address {account.address.lower()} is not the "
                         f"contributor {record.contributor}", field="contributor")
    signed = account.sign_message(encode_typed_data(full_message=contribution_typed_data(record)))
    return "0x" + signed.signature.hex().removeprefix("0x")


def recover_contributor(record: Any) -> str:
    """The contributor, when ``record.signature`` recovers to it; else `EntryError` (field
    ``signature``) saying what it recovers to."""
    from eth_account import Account
    from eth_account.messages import encode_typed_data

    if record.signature is None:
        raise EntryError("missing", field="signature")
    try:
        signer = Account.recover_message(
            encode_typed_data(full_message=contribution_typed_data(record)),
            signature=bytes.fromhex(record.signature[2:]))
    except Exception as exc:  # noqa: BLE001 (eth-keys raises several kinds on a bad signature)
        raise EntryError(f"does not recover ({exc})", field="signature") from None
    if signer.lower() != record.contributor:
        raise EntryError(f"signed by {signer.lower()}, not by the contributor "
                         f"{record.contributor}", field="signature")
    return record.contributor
