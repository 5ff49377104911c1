"""Who posts a signed verdict: the verifier's Ethereum key over the body, checked in
microseconds before the aggregator spends a pairing check (docs/committee.md "Delivery").

A ``SignedVerdict`` names its verifier's address and slot; anyone can copy those from the
chain and post a well-formed verdict with a junk BLS signature, and each one would cost the
aggregator a pairing check (0.7-1.5 s of CPU). So the verifier signs the exact body bytes
with the secp256k1 key it registered with (EIP-191 ``personal_sign`` of ``keccak256(body)``)
and sends the signature in the ``X-Gym-Verifier-Auth`` header (0x + 130 hex digits). The
aggregator recovers the signer (about 0.3 ms) and refuses the post (401) unless it is the
address the verdict names; only then does it look at the chain and check the BLS signature.

>>> from eth_account import Account
>>> account = Account.from_key("0x" + "11" * 32)
>>> body = b'{"type": "gym-signed-verdict"}'
>>> header = sign_post(account, body)
>>> recover_poster(body, header) == account.address
True
"""

from __future__ import annotations

from typing import Any

HEADER = "X-Gym-Verifier-Auth"
_HEX_LENGTH = 2 + 130  # 0x + r || s || v


class AuthError(ValueError):
    """The post carries no verifier signature, or one that does not recover."""


def _message(body: bytes) -> Any:
    from eth_account.messages import encode_defunct
    from eth_utils import keccak

    return encode_defunct(primitive=keccak(body))


def sign_post(account: Any, body: bytes) -> str:
    """The ``X-Gym-Verifier-Auth`` value for ``body``, signed by ``account`` (a LocalAccount)."""
    return "0x" + bytes(account.sign_message(_message(body)).signature).hex()


def recover_poster(body: bytes, header: str | None) -> str:
    """The checksummed address that signed ``body``; ``AuthError`` if it cannot be told."""
    from eth_account import Account

    if not header:
        raise AuthError(f"a verdict is posted with its verifier's signature in {HEADER}")
    if len(header) != _HEX_LENGTH or not header.startswith("0x"):
        raise AuthError(f"{HEADER} is 0x and 130 hex digits (r || s || v)")
    try:
        signature = bytes.fromhex(header[2:])
        return Account.recover_message(_message(body), signature=signature)
    except Exception as exc:  # noqa: BLE001 - eth-keys raises several types for junk
        raise AuthError(f"{HEADER} does not recover to an address ({type(exc).__name__})") from None


def check_poster(body: bytes, header: str | None) -> str:
    """The poster's address when it is the verifier ``body`` names (read with the JSON
    parser only: no curve point is decoded); ``AuthError`` otherwise."""
    from committee.messages import MAX_SIGNED_VERDICT_BYTES
    from ledger.json_input import JSONInputError, parse_json

    poster = recover_poster(body, header)
    try:
        claimed = parse_json(body, max_bytes=MAX_SIGNED_VERDICT_BYTES, max_depth=8,
                             what="signed verdict")
    except JSONInputError:
        claimed = None
    verifier = claimed.get("verifier") if isinstance(claimed, dict) else None
    if not isinstance(verifier, str) or verifier.lower() != poster.lower():
        raise AuthError(f"the post is signed by {poster}, not by the verdict's verifier "
                        f"{verifier!r:.60}")
    return poster


__all__ = ["HEADER", "AuthError", "check_poster", "recover_poster", "sign_post"]
