"""The verifiers' signed roots of reward epochs, collected by `gym verifier aggregate` and
attested once two thirds of the committee's stake signed one (docs/rewards.md "Attestation");
and ``RootSigner``, what each `gym verifier serve` adds to its loop: the table of every
ended, unattested epoch computed by the verifier itself, its root signed and delivered.

``RootPool.add`` checks a ``gym-signed-root`` as it arrives, each check against the chain as it
is now, every cheap one before the pairing: it decodes; its poster is its verifier; its epoch
has ended and has no attested root; its slot is active in the committee's current set and held
by that verifier; its signature verifies. A verifier's later root for an epoch replaces its
earlier one (one claim per verifier per epoch). ``tick`` attests every epoch whose signatures
reach the quorum (``attestation.quorum``: verified as they came, no pairing per tick) and
forgets attested ones. Only the last ``MAX_EPOCHS`` ended epochs are collected (an older one
is attested by hand, `gym rewards attest`), so the pool holds at most ``MAX_EPOCHS`` × the
set's slots roots.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from committee.aggregator import PoolError
from committee.bls import BLSError, g1_from_ints
from committee.rewards.attestation import SignedRoot, decode_signed_root
from committee.rewards.distributor import EpochStatus
from committee.rewards.table import RewardsError
from ledger.errors import LedgerError
from ledger.evm import ChainError

if TYPE_CHECKING:
    from committee.bls import SecretKey
    from committee.client import VerifierCommittee
    from committee.rewards.distributor import RewardDistributor
    from committee.rewards.facts import Sources

log = logging.getLogger("gym.verifier.rewards")

MAX_EPOCHS = 16  # epochs with roots held at once
LOOKBACK_EPOCHS = 4  # ended epochs a verifier signs (the older ones: `gym rewards sign`)
RESEND_S = 60.0  # a delivered root of an epoch still unattested is sent again after this
# an epoch still unattested is computed again after this: its first table may have been made
# while the endpoint lacked a document the others read, and a root nobody else signs waits
RECOMPUTE_S = 600.0


class RootPool:
    """Signed roots checked against ``distributor`` and ``committee`` (module docstring)."""

    def __init__(self, distributor: RewardDistributor, committee: VerifierCommittee,
                 report: Callable[[str], None] | None = None) -> None:
        self.distributor = distributor
        self.committee = committee
        self._report = report or log.info
        # epoch -> slot -> (its root, the slot's key it verified under)
        self._held: dict[int, dict[int, tuple[SignedRoot, tuple[int, int]]]] = {}
        self._lock = threading.Lock()

    def add(self, data: bytes | str, *, poster: str | None = None) -> dict[str, Any]:
        """Check and keep one signed root; ``{"status": "accepted" | "duplicate", "epoch",
        "verifier_index"}``. ``PoolError`` (400; 401 for another poster; 409 for an epoch
        still running, already attested, or older than the last ``MAX_EPOCHS``)."""
        try:
            signed = decode_signed_root(data)
        except BLSError as exc:
            raise PoolError(str(exc)) from None
        if poster is not None and poster.lower() != signed.verifier.lower():
            raise PoolError(f"the post is signed by {poster}, not by the root's verifier "
                            f"{signed.verifier}", 401)
        epoch, index = signed.claim.epoch, signed.verifier_index
        answer = {"epoch": epoch, "verifier_index": index}
        with self._lock:
            if self._held.get(epoch, {}).get(index, (None,))[0] == signed:
                return {"status": "duplicate", **answer}
        current = self.distributor.current_epoch()
        if epoch >= current:
            raise PoolError(f"epoch {epoch} has not ended (the current epoch is {current})", 409)
        if epoch < current - MAX_EPOCHS:
            raise PoolError(f"epoch {epoch} is older than the {MAX_EPOCHS} epochs an aggregator "
                            f"collects: `gym rewards attest {epoch}` posts it by hand", 409)
        if self.distributor.epoch_root(epoch).status == EpochStatus.ATTESTED:
            raise PoolError(f"epoch {epoch} is attested already", 409)
        active = self.committee.active_set()
        if not active.active(index) or self.committee.slot(index).verifier != signed.verifier:
            raise PoolError(f"slot {index} is no active verifier held by {signed.verifier}")
        key = active.pk1s[index]
        if not signed.verify(g1_from_ints(key), chain_id=self.distributor.chain_id,
                             distributor=self.distributor.address):
            raise PoolError(f"the signature of verifier {index} does not verify under its key")
        with self._lock:
            self._held.setdefault(epoch, {})[index] = (signed, key)
        self._report(f"root of epoch {epoch} from verifier {index}: 0x{signed.claim.root.hex()} "
                     f"(table {signed.claim.table_cid})")
        return {"status": "accepted", **answer}

    def pending(self) -> list[int]:
        with self._lock:
            return sorted(self._held)

    def tick(self) -> None:
        """Attest each held epoch whose roots reach the quorum; forget attested epochs and
        those fallen out of the last ``MAX_EPOCHS``. The signatures were verified as they
        came: a tick sums those whose slot still holds the key they verified under (no pairing
        runs here; the contract checks the aggregate)."""
        from committee.rewards.attestation import quorum
        from committee.rewards.epochs import post_aggregate

        current = self.distributor.current_epoch()
        active = self.committee.active_set() if self.pending() else None
        for epoch in self.pending():
            if epoch < current - MAX_EPOCHS:
                self._drop(epoch)
                continue
            with self._lock:
                held = list(self._held.get(epoch, {}).values())
            found = quorum([signed for signed, key in held
                            if active.active(signed.verifier_index)
                            and active.pk1s[signed.verifier_index] == key], active)
            try:
                if self.distributor.epoch_root(epoch).status == EpochStatus.ATTESTED:
                    self._drop(epoch)  # by another aggregator, or by hand
                    continue
                if found is None:
                    continue  # no quorum yet
                post_aggregate(self.distributor, found, active)
            except ChainError as exc:
                self._report(f"attesting epoch {epoch} failed: {exc}")
                continue
            self._drop(epoch)
            self._report(f"attested epoch {epoch}: root 0x{found.claim.root.hex()}, signed by "
                         f"slots {bin(found.signer_bitmap)[2:][::-1]}")

    def _drop(self, epoch: int) -> None:
        with self._lock:
            self._held.pop(epoch, None)


class RootSigner:
    """One verifier's share of the rewards (module docstring): each ``tick``, for the last
    ``LOOKBACK_EPOCHS`` ended epochs with no attested root, compute the table, sign its root
    and ``send`` it (``send(signed)`` raises when it could not be delivered: tried again at the
    next tick; a delivered root of an epoch still unattested is sent again after
    ``RESEND_S``; its table is computed again after ``RECOMPUTE_S``, and a changed root is
    sent at once). An epoch whose table pays nobody has no root to sign."""

    def __init__(self, sources: Sources, distributor: RewardDistributor,
                 committee: VerifierCommittee, sk: SecretKey, verifier: str,
                 send: Callable[[SignedRoot], Any], *,
                 report: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sources, self.distributor, self.committee = sources, distributor, committee
        self.sk, self.verifier, self.send = sk, verifier, send
        self._report = report or log.info
        self._clock = clock
        self._signed: dict[int, SignedRoot | None] = {}  # epoch -> its root (None: empty)
        self._sent_at: dict[int, float] = {}
        self._computed_at: dict[int, float] = {}

    def tick(self) -> None:
        from committee.rewards.epochs import sign_epoch

        try:
            current = self.distributor.current_epoch()
        except LedgerError as exc:
            self._report(f"reward epochs not read: {exc}")
            return
        for epoch in range(max(0, current - LOOKBACK_EPOCHS), current):
            try:
                attested = self.distributor.epoch_root(epoch).status == EpochStatus.ATTESTED
            except LedgerError as exc:
                self._report(f"epoch {epoch} not read: {exc}")
                continue
            if attested:
                self._signed.pop(epoch, None)
                self._sent_at.pop(epoch, None)
                self._computed_at.pop(epoch, None)
                continue
            stale = (epoch in self._signed
                     and self._clock() - self._computed_at[epoch] >= RECOMPUTE_S)
            if epoch not in self._signed or stale:
                try:
                    table, _, signed = sign_epoch(self.sources, self.distributor,
                                                  self.committee, epoch, self.sk, self.verifier)
                except (RewardsError, LedgerError) as exc:  # the chain or the endpoint: later
                    self._report(f"epoch {epoch}'s table not computed: {exc}")
                    continue
                held, fresh = self._signed.get(epoch), signed if table.accounts else None
                if (held and held.claim) != (fresh and fresh.claim):
                    self._sent_at.pop(epoch, None)  # another root than the one sent: at once
                self._signed[epoch], self._computed_at[epoch] = fresh, self._clock()
                self._report(f"computed {'again ' if stale else ''}epoch {epoch}'s table: "
                             f"{len(table.accounts)} accounts, root 0x{table.root.hex()} "
                             f"(table {signed.claim.table_cid})")
            signed = self._signed[epoch]
            sent = self._sent_at.get(epoch)
            if signed is None or sent is not None and self._clock() - sent < RESEND_S:
                continue
            try:
                answer = self.send(signed)
            except Exception as exc:  # noqa: BLE001 (sent again at the next tick)
                self._report(f"root of epoch {epoch} not delivered: {exc}")
                continue
            self._sent_at[epoch] = self._clock()
            self._report(f"root of epoch {epoch} delivered: {answer}")


def post_root(urls: list[str], account: Any) -> Callable[[SignedRoot], Any]:
    """``send`` for ``RootSigner``: POST to each aggregator of ``urls`` (``/v1/roots``),
    authenticated as the verdicts are (``committee.verdict_auth``); delivered once one took it
    (each answer is returned), else an error naming every refusal."""
    import httpx

    from committee.verdict_auth import HEADER, sign_post

    def send(signed: SignedRoot) -> Any:
        body = signed.to_bytes()
        headers = {"content-type": "application/json", HEADER: sign_post(account, body)}
        answers, failed = {}, []
        for url in urls:
            try:
                response = httpx.post(url.rstrip("/") + "/v1/roots", content=body,
                                      headers=headers, timeout=30)
            except httpx.HTTPError as exc:
                failed.append(f"{url}: {exc}")
                continue
            if response.status_code == 200:
                answers[url] = response.json()
            else:
                failed.append(f"{url}: {response.status_code} {response.text[:200]}")
        if not answers:
            raise ChainError("; ".join(failed)[:600])
        return answers

    return send


__all__ = ["RootPool", "RootSigner", "post_root"]
