"""Who may read a receipt's bundle, the user's request and the node's answer
(``GET /v1/receipts/{cid}``; docs/node.md "Receipt bundles").

Receipt CIDs are public once the receipt log is anchored (its batch manifests list them), so a
CID proves nothing. A node that keeps bundles serves one to:

- **the client that made the request.** Its answer carries ``receipt_evidence.bundle_token``
  (and the header ``X-Gym-Bundle-Token``): HMAC-SHA256 of the receipt CID under the node's
  read key, 32 random bytes kept beside the bundle store (mode 0600). The client sends it back
  as ``Authorization: Bearer <token>``;
- **a registered verifier** (audits, challenges): ``X-Gym-Verifier-Auth``, the EIP-191
  signature by its Ethereum key of ``gym-bundle-read:<cid>:<time>``, with ``X-Gym-Auth-Time``
  the unix time it signed at (within ``MAX_SKEW_S`` of the node's clock). The node asks the
  VerifierCommittee whether the signer holds an active slot (answers cached ``CACHE_S``). A
  signature by a fresh random key costs nothing to make and two chain reads to check, so at
  most ``MAX_LOOKUPS`` are checked at once; a read beyond them is answered 429 (a cached
  verifier is not: its answer needs no lookup).

Anyone else gets 401 (no credential) or 403 (one that does not hold). A receipt stays
verifiable without its bundle (its signature, and its inclusion proof at ``/proof``); a
challenged receipt's bundle is public in the challenge's evidence on IPFS.

>>> key = bytes(32)
>>> token = bundle_token(key, "bafkreiexample")
>>> access = BundleAccess(key, is_verifier=None)
>>> access.check("bafkreiexample", client_headers(token))
'client'
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

TOKEN_HEADER = "X-Gym-Bundle-Token"
AUTH_HEADER = "X-Gym-Verifier-Auth"
TIME_HEADER = "X-Gym-Auth-Time"
MAX_SKEW_S = 300
CACHE_S = 60.0
MAX_LOOKUPS = 4  # registration lookups (chain reads) at once; more readers get a 429
KEY_BYTES = 32


class AccessError(Exception):
    """The read is refused: ``status`` 401 (no credential), 403 (one that does not hold) or 429
    (too many registration lookups at once: retry)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def load_read_key(path: str | os.PathLike) -> bytes:
    """The node's read key at ``path``, created (32 random bytes, mode 0600) on first use."""
    path = Path(path)
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process created it meanwhile
            key = path.read_bytes()
        else:
            key = secrets.token_bytes(KEY_BYTES)
            with os.fdopen(fd, "wb") as out:
                out.write(key)
    if len(key) != KEY_BYTES:
        raise ValueError(f"{path} is not a {KEY_BYTES}-byte bundle read key")
    return key


def bundle_token(key: bytes, cid: str) -> str:
    """The client's token for the bundle of receipt ``cid`` (64 hex digits)."""
    return hmac.new(key, cid.encode(), hashlib.sha256).hexdigest()


def client_headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _message(cid: str, at: int) -> Any:
    from eth_account.messages import encode_defunct

    return encode_defunct(text=f"gym-bundle-read:{cid}:{at}")


def verifier_headers(account: Any, cid: str, now: float | None = None) -> dict[str, str]:
    """Headers that authenticate ``account`` (a LocalAccount: a registered verifier's key)
    for reading the bundle of ``cid``."""
    at = int(time.time() if now is None else now)
    signature = bytes(account.sign_message(_message(cid, at)).signature)
    return {AUTH_HEADER: "0x" + signature.hex(), TIME_HEADER: str(at)}


class BundleAccess:
    """The node's side: ``token(cid)`` for its answers, ``check(cid, headers)`` for reads.
    ``is_verifier(address)``: whether an address holds an active committee slot (None: the
    node knows no committee, and only clients' tokens are accepted)."""

    def __init__(self, key: bytes, is_verifier: Callable[[str], bool] | None, *,
                 clock: Callable[[], float] = time.time):
        self._key, self._is_verifier, self._clock = key, is_verifier, clock
        self._verifiers: dict[str, tuple[bool, float]] = {}  # address -> (answer, expiry)
        self._lock = threading.Lock()
        self._lookups = threading.BoundedSemaphore(MAX_LOOKUPS)

    def token(self, cid: str) -> str:
        return bundle_token(self._key, cid)

    def check(self, cid: str, headers: Mapping[str, str]) -> str:
        """``"client"`` or ``"verifier"``, whoever ``headers`` show the reader is;
        ``AccessError`` otherwise. Blocking (may read the chain): call it off the loop."""
        headers = {name.lower(): value for name, value in headers.items()}
        authorization = headers.get("authorization")
        if authorization is not None:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                    token.strip().encode(), self.token(cid).encode()):
                raise AccessError(403, "the bundle token is not this receipt's")
            return "client"
        signature = headers.get(AUTH_HEADER.lower())
        if signature is None:
            raise AccessError(401, "a receipt's bundle holds the user's request and answer: it "
                              "is served with the bundle_token of the answer (Authorization: "
                              f"Bearer), or to a registered verifier ({AUTH_HEADER})")
        return self._check_verifier(cid, signature, headers.get(TIME_HEADER.lower(), ""))

    def _check_verifier(self, cid: str, signature: str, at_text: str) -> str:
        from eth_account import Account

        try:
            at = int(at_text)
        except ValueError:
            raise AccessError(401, f"{TIME_HEADER} is the unix time of the signature") from None
        if abs(self._clock() - at) > MAX_SKEW_S:
            raise AccessError(401, f"{TIME_HEADER} is more than {MAX_SKEW_S} s from the node's "
                              "clock: sign the read again")
        try:
            address = Account.recover_message(_message(cid, at),
                                              signature=bytes.fromhex(signature.removeprefix("0x")))
        except Exception:  # noqa: BLE001 - eth-keys raises several types for junk
            raise AccessError(401, f"{AUTH_HEADER} does not recover to an address") from None
        if self._is_verifier is None:
            raise AccessError(403, "this node knows no verifier committee: only the client's "
                              "bundle_token reads a bundle here")
        if not self._verifier(address):
            raise AccessError(403, f"{address} holds no active slot in the verifier committee")
        return "verifier"

    def _verifier(self, address: str) -> bool:
        now = self._clock()
        with self._lock:
            cached = self._verifiers.get(address)
            if cached is not None and cached[1] > now:
                return cached[0]
        if not self._lookups.acquire(blocking=False):
            raise AccessError(429, "the node is checking other readers' registrations; retry "
                              "in a second")
        try:
            answer = bool(self._is_verifier(address))
        finally:
            self._lookups.release()
        with self._lock:
            if len(self._verifiers) > 4096:
                self._verifiers.clear()
            self._verifiers[address] = (answer, now + CACHE_S)
        return answer


ACTIVE_SLOT = 1  # IVerifierCommittee.VerifierInfo.state of an active slot


def committee_verifier_check(w3: Any, address: str) -> Callable[[str], bool]:
    """``is_verifier`` for ``BundleAccess``: ``candidate`` holds an active slot in the
    VerifierCommittee at ``address`` (``indexOf`` then ``verifierAt``; read with the ABI alone,
    as the node does not depend on the committee package). A chain error counts as no."""
    from web3 import Web3

    from contracts import load_artifact

    committee = w3.eth.contract(address=Web3.to_checksum_address(address),
                                abi=load_artifact("VerifierCommittee").abi)

    def is_verifier(candidate: str) -> bool:
        try:
            index, found = committee.functions.indexOf(candidate).call()
            if not found:
                return False
            holder, _stake, _unbonding, state, _pk1 = committee.functions.verifierAt(index).call()
        except Exception:  # noqa: BLE001 - RPC down, a revert: no right to read
            return False
        return state == ACTIVE_SLOT and holder.lower() == candidate.lower()

    return is_verifier


__all__ = ["AUTH_HEADER", "TIME_HEADER", "TOKEN_HEADER", "AccessError", "BundleAccess",
           "bundle_token", "client_headers", "committee_verifier_check", "load_read_key",
           "verifier_headers"]
