"""Collecting the verifiers' signed verdicts and settling a challenge with one aggregate
(what `gym verifier aggregate` runs; docs/committee.md "Aggregation").

``VerdictPool.add(data)`` takes one ``SignedVerdict`` as it arrives from the network (at most
``MAX_SIGNED_VERDICT_BYTES``) and keeps it only when every check passes, each against the chain
as it is now:

1. it decodes (``committee.messages.decode_signed_verdict``: shape, sizes, points on the curve
   and, for ``pk2``, in the subgroup);
2. its challenge exists, is open, and names the same receipt hash;
3. its ``verifier_index`` was an active slot of the set the challenge opened with (the set that
   judges it, ``VerifierCommittee.opening_set``) and is held by its ``verifier``;
4. its signature verifies under that slot's ``pk1`` and the ``pk2`` it brings (the two-pair
   check binds ``pk2`` to ``pk1``), on the verdict digest of this chain and committee.

A verdict already held (same challenge, verifier and message) is answered ``duplicate`` before
the pairing runs, so a resend costs no CPU. Verdicts are grouped by message (challenge,
verdict, reason): only signatures on one message aggregate. ``settlement(challenge_id)`` is the
first message whose signers hold at least two thirds of that set's active stake (the contract's
rule, ``3·signers ≥ 2·active``), with the bitmap, ``σ = Σ σ_i`` and ``apk2 = Σ pk2_i``;
``settle`` sends it with that set, so verifiers joining or leaving meanwhile change nothing.

``Aggregator.tick()`` settles what has a quorum, then finalizes every settled challenge whose
appeal window is over and claims each signer's reward (``claim`` pays the verifier, whoever
sends it), and expires open challenges past the settlement timeout. One challenge's failure is
logged and never stops the others.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from committee.bls import (
    BLSError,
    G1Point,
    G2Point,
    aggregate_pk2,
    aggregate_signatures,
    g1_from_ints,
)
from committee.client import ChallengeState, CommitteeChallenge, VerifierCommittee
from committee.committee_set import CommitteeSet
from committee.messages import SignedVerdict, Verdict, decode_signed_verdict, reason_text
from ledger.evm import ChainError, ContractRevertError

log = logging.getLogger("gym.verifier.aggregate")

MAX_PENDING_CHALLENGES = 1024  # challenges with verdicts held at once; more are refused


class PoolError(ValueError):
    """A signed verdict is refused; ``status`` is the HTTP status the aggregator answers."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Settlement:
    """A quorum: the message, who signed it and the aggregates ``settle`` takes."""

    verdict: Verdict
    signer_bitmap: int
    sigma: G1Point
    apk2: G2Point
    signer_stake: int
    active_stake: int


@dataclass
class _Held:
    """The verdicts of one challenge: message (verdict, reason) -> index -> signed verdict."""

    by_message: dict[tuple[int, bytes], dict[int, SignedVerdict]] = field(default_factory=dict)


class VerdictPool:
    """Signed verdicts checked against ``committee`` (module docstring). Thread-safe."""

    def __init__(self, committee: VerifierCommittee) -> None:
        self.committee = committee
        self._held: dict[int, _Held] = {}
        self._sets: dict[int, CommitteeSet] = {}  # the set each held challenge opened with
        self._lock = threading.Lock()

    def add(self, data: bytes | str, *, poster: str | None = None) -> tuple[str, SignedVerdict]:
        """Check and keep one signed verdict; ("accepted" | "duplicate", it). ``poster``: the
        address that signed the post (``verdict_auth``; the HTTP endpoint requires one), which
        must be the verdict's verifier. ``PoolError`` (400; 401 for another poster; 404 for an
        unknown challenge, 409 for one no longer open, 503 when the pool is full) when
        refused, every cheap check before the pairing; ``ChainError`` when the chain cannot
        be read."""
        try:
            signed = decode_signed_verdict(data)
        except BLSError as exc:
            raise PoolError(str(exc)) from None
        if poster is not None and poster.lower() != signed.verifier.lower():
            raise PoolError(f"the post is signed by {poster}, not by the verdict's verifier "
                            f"{signed.verifier}", 401)
        verdict = signed.verdict
        key = (verdict.verdict, verdict.reason)
        with self._lock:
            held = self._held.get(verdict.challenge_id)
            if held is not None and held.by_message.get(key, {}).get(
                    signed.verifier_index) == signed:
                return "duplicate", signed
        challenge = self.committee.challenge(verdict.challenge_id)
        if challenge.status == ChallengeState.NONE:
            raise PoolError(f"no committee challenge {verdict.challenge_id}", 404)
        if challenge.status != ChallengeState.OPEN:
            raise PoolError(f"challenge {verdict.challenge_id} is {challenge.status.label}, not "
                            "open", 409)
        if verdict.receipt_hash != challenge.receipt_hash:
            raise PoolError(f"the verdict names receipt 0x{verdict.receipt_hash.hex()}, "
                            f"challenge {verdict.challenge_id} is about "
                            f"0x{challenge.receipt_hash.hex()}")
        judging = self.judging_set(verdict.challenge_id)
        index = signed.verifier_index
        slot = self.committee.slot(index)
        if not judging.active(index) or slot.verifier != signed.verifier:
            raise PoolError(f"slot {index} was no active verifier held by {signed.verifier} when "
                            f"challenge {verdict.challenge_id} opened")
        pk1 = g1_from_ints(judging.pk1s[index])
        if not signed.verify(pk1, chain_id=self.committee.chain_id,
                             committee=self.committee.address):
            raise PoolError(f"the signature of verifier {signed.verifier_index} does not "
                            "verify under its registered key")
        with self._lock:
            if verdict.challenge_id not in self._held and len(self._held) >= MAX_PENDING_CHALLENGES:
                raise PoolError("the aggregator holds verdicts for too many challenges", 503)
            held = self._held.setdefault(verdict.challenge_id, _Held())
            held.by_message.setdefault(key, {})[signed.verifier_index] = signed
        return "accepted", signed

    def pending(self) -> list[int]:
        with self._lock:
            return sorted(self._held)

    def signatures(self, challenge_id: int) -> dict[tuple[int, bytes], dict[int, SignedVerdict]]:
        with self._lock:
            held = self._held.get(challenge_id)
            return {k: dict(v) for k, v in held.by_message.items()} if held else {}

    def drop(self, challenge_id: int) -> None:
        with self._lock:
            self._held.pop(challenge_id, None)
            self._sets.pop(challenge_id, None)

    def judging_set(self, challenge_id: int) -> CommitteeSet:
        """The set challenge ``challenge_id`` opened with (read once, then kept)."""
        with self._lock:
            found = self._sets.get(challenge_id)
        if found is None:
            found = self.committee.opening_set(challenge_id)
            with self._lock:
                if len(self._sets) >= MAX_PENDING_CHALLENGES:  # keep those of held verdicts
                    self._sets = {k: v for k, v in self._sets.items() if k in self._held}
                self._sets[challenge_id] = found
        return found

    def settlement(self, challenge_id: int, judging: CommitteeSet) -> Settlement | None:
        """The first message whose signers, among the active slots of ``judging`` (the set the
        challenge opened with), hold two thirds of its stake; None without a quorum."""
        active = judging.active_stake
        for signed in self.signatures(challenge_id).values():
            members = {i: s for i, s in signed.items() if judging.active(i)}
            signer_stake = judging.stake_of(sum(1 << i for i in members))
            if members and active and 3 * signer_stake >= 2 * active:
                ordered = [members[i] for i in sorted(members)]
                return Settlement(ordered[0].verdict, sum(1 << i for i in members),
                                  aggregate_signatures(s.sigma for s in ordered),
                                  aggregate_pk2(s.pk2 for s in ordered), signer_stake, active)
        return None


def describe(verdict: Verdict) -> str:
    if verdict.verdict == 1:
        return f"upheld ({reason_text(verdict.reason)})"
    return "rejected"


class Aggregator:
    """The pool plus the chain work of `gym verifier aggregate` (module docstring).
    ``committee`` needs a key (it sends ``settle``, ``finalize``, ``claim``, ``expire``);
    ``finalize``: also finalize and claim; ``now``: the chain's clock (the latest block's
    timestamp), injectable for tests."""

    def __init__(self, committee: VerifierCommittee, *, finalize: bool = True,
                 now: Callable[[], int] | None = None,
                 report: Callable[[str], None] | None = None, roots: Any = None) -> None:
        self.committee = committee
        self.pool = VerdictPool(committee)
        self.roots = roots  # a committee.rewards.pool.RootPool: reward roots to attest
        self.finalize_after_window = finalize
        self._now = now or (lambda: int(committee.w3.eth.get_block("latest")["timestamp"]))
        self._report = report or log.info
        self._settled: set[int] = set()  # settled by us, to finalize
        self._watch: set[int] = set()  # open challenges seen, to expire when due
        self._cursor: int | None = None  # next block to scan for ChallengeOpened
        self._lock = threading.Lock()  # one tick at a time
        self.settlements: dict[int, Settlement] = {}

    def submit(self, data: bytes | str, *, poster: str | None = None) -> dict[str, Any]:
        status, signed = self.pool.add(data, poster=poster)
        v = signed.verdict
        if status == "accepted":
            self._report(f"verdict from verifier {signed.verifier_index} on challenge "
                         f"{v.challenge_id}: {describe(v)}")
        return {"status": status, "challenge_id": v.challenge_id,
                "verifier_index": signed.verifier_index}

    def submit_root(self, data: bytes | str, *, poster: str | None = None) -> dict[str, Any]:
        """One verifier's signed root of a reward epoch (``RootPool.add``)."""
        if self.roots is None:
            raise PoolError("this aggregator collects no reward roots (the deployment has no "
                            "RewardDistributor)", 404)
        return self.roots.add(data, poster=poster)

    def tick(self) -> None:
        """Settle, finalize, claim, expire, attest reward roots: one pass (module docstring)."""
        with self._lock:
            if self.roots is not None:
                self._try("attesting reward roots", self.roots.tick)
            self._try("reading new challenges", self._scan)
            for challenge_id in self.pool.pending():
                self._try(f"settling challenge {challenge_id}", self._settle, challenge_id)
            if self.finalize_after_window:
                for challenge_id in sorted(self._settled):
                    self._try(f"finalizing challenge {challenge_id}", self._finalize,
                              challenge_id)
            self._try("expiring challenges", self._expire_due)

    def _try(self, what: str, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except (ChainError, BLSError, PoolError) as exc:
            self._report(f"{what} failed: {exc}")
        except Exception:  # one challenge's bug never stops the others
            log.exception("%s failed", what)

    def _settle(self, challenge_id: int) -> None:
        challenge = self.committee.challenge(challenge_id)
        if challenge.status != ChallengeState.OPEN:
            self.pool.drop(challenge_id)
            if challenge.status == ChallengeState.SETTLED:
                self._settled.add(challenge_id)
            return
        judging = self.pool.judging_set(challenge_id)
        found = self.pool.settlement(challenge_id, judging)
        if found is None:
            return
        try:
            self.committee.settle(found.verdict, found.signer_bitmap, found.sigma, found.apk2,
                                  judging)
        except ContractRevertError as exc:
            if exc.name != "CommitteeWrongStatus":
                raise
            # another aggregator settled it first (they run side by side): nothing to do
            self.pool.drop(challenge_id)
            self._settled.add(challenge_id)
            self._report(f"challenge {challenge_id} was settled by another aggregator")
            return
        self.pool.drop(challenge_id)
        self.settlements[challenge_id] = found
        self._settled.add(challenge_id)
        signers = found.signer_bitmap.bit_count()
        self._report(f"challenge {challenge_id} settled {describe(found.verdict)}: {signers} "
                     f"signers holding {found.signer_stake} of {found.active_stake} stake")

    def _finalize(self, challenge_id: int) -> None:
        challenge = self.committee.challenge(challenge_id)
        if challenge.status == ChallengeState.SETTLED:
            ends = challenge.settled_at + self.committee.appeal_window()
            if self._now() < ends:
                return
            if self._raced(self.committee.finalize, challenge_id):
                self._report(f"challenge {challenge_id} finalized")
            challenge = self.committee.challenge(challenge_id)
        if challenge.status == ChallengeState.REVERSED:
            if self._raced(self.committee.finalize, challenge_id):
                self._report(f"challenge {challenge_id} (reversed by governance) finalized")
            challenge = self.committee.challenge(challenge_id)
        if challenge.status == ChallengeState.FINALIZED:
            self._claim_all(challenge)
            self._settled.discard(challenge_id)

    def _claim_all(self, challenge: CommitteeChallenge) -> None:
        if not challenge.reward_share:
            return
        for index in challenge.signers:
            if challenge.claimed_bitmap >> index & 1:
                continue
            if self._raced(self.committee.claim, challenge.challenge_id, index):
                self._report(f"challenge {challenge.challenge_id}: reward "
                             f"{challenge.reward_share} claimed for verifier {index}")

    @staticmethod
    def _raced(call: Callable[..., Any], *args: Any) -> bool:
        """``call(*args)``; False when another aggregator did it first (the contract refuses a
        second finalize or claim with these errors), so side-by-side aggregators agree."""
        try:
            call(*args)
        except ContractRevertError as exc:
            if exc.name not in ("CommitteeWrongStatus", "CommitteeNothingToClaim"):
                raise
            return False
        return True

    def _scan(self) -> None:
        head = self.committee.head()
        start = self.committee.from_block if self._cursor is None else self._cursor
        if start > head:
            return
        for opened in self.committee.opened(from_block=start, to_block=head):
            self._watch.add(opened.challenge_id)
        self._cursor = head + 1

    def _expire_due(self) -> None:
        timeout = self.committee.settlement_timeout()
        if timeout is None or not self._watch:
            return
        now = self._now()
        for challenge_id in sorted(self._watch):
            challenge = self.committee.challenge(challenge_id)
            if challenge.status != ChallengeState.OPEN:
                self._watch.discard(challenge_id)
            elif challenge.opened_at and now >= challenge.opened_at + timeout:
                self.committee.expire(challenge_id)
                self.pool.drop(challenge_id)
                self._watch.discard(challenge_id)
                self._report(f"challenge {challenge_id} expired without a quorum: bond returned")


def run_forever(aggregator: Aggregator, interval_s: float, stop: threading.Event) -> None:
    """``tick`` every ``interval_s`` until ``stop`` is set."""
    while not stop.is_set():
        aggregator.tick()
        stop.wait(interval_s)




# --------------------------------------------------------------------------- HTTP

MAX_CONCURRENT_CHECKS = 2  # pairing checks at once (~1 s of CPU each); more wait their turn
MAX_WAITING = 32  # authenticated posts waiting for a check; more are answered 429 at once
CHECK_WAIT_S = 20.0  # how long a post waits for a check before a 429 (verifiers wait 30 s)
RETRY_AFTER_S = 1  # what a 429 asks the verifier to wait
READ_TIMEOUT_S = 10  # a connection that sends nothing for this long is closed


def make_http_server(aggregator: Aggregator, host: str, port: int, *,
                     read_timeout_s: float = READ_TIMEOUT_S,
                     max_checks: int = MAX_CONCURRENT_CHECKS,
                     check_wait_s: float = CHECK_WAIT_S) -> Any:
    """The aggregator's HTTP endpoint (a ``ThreadingHTTPServer``, not started):

    - ``POST /v1/verdicts``: one ``SignedVerdict`` (at most ``MAX_SIGNED_VERDICT_BYTES``; a
      larger ``Content-Length`` is refused unread with 413) -> 200 ``{"status": "accepted" |
      "duplicate", "challenge_id", "verifier_index"}``, or ``{"error": message}`` with 400
      (malformed, wrong receipt, not a verifier, bad signature), 401 (no ``X-Gym-Verifier-Auth``,
      or it is not the verdict's verifier: ``committee.verdict_auth``, checked before anything
      else), 404 (no such challenge), 409 (no longer open), 429 (no check free within
      ``check_wait_s``, or ``MAX_WAITING`` posts already waiting; ``Retry-After``), 503 (pool
      full, chain unreachable). An authenticated post waits its turn for one of
      ``max_checks`` checks, so verifiers arriving together are checked back to back rather
      than sent away to retry into an idle aggregator;
    - ``POST /v1/roots``: one ``gym-signed-root`` of a reward epoch, authenticated and bounded
      alike (``committee.rewards.pool.RootPool.add``: 409 for an epoch running or attested;
      404 when the aggregator collects no roots);
    - ``GET /health``: ``{"status": "ok", "pending": [challenge ids with verdicts held]}``.
    """
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from committee.messages import MAX_SIGNED_VERDICT_BYTES

    checks = threading.BoundedSemaphore(max_checks)
    waiting = threading.BoundedSemaphore(MAX_WAITING)

    from committee.verdict_auth import HEADER, AuthError, check_poster

    class Handler(BaseHTTPRequestHandler):
        server_version = "gym-verifier-aggregate"
        timeout = read_timeout_s  # socket timeout: a stalled request frees its thread

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.address_string(), *args)

        def _answer(self, status: int, body: dict[str, Any],
                    headers: dict[str, str] | None = None) -> None:
            import json

            data = json.dumps(body).encode()
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/health":
                self._answer(200, {"status": "ok", "pending": aggregator.pool.pending()})
            else:
                self._answer(404, {"error": f"no route {self.path[:100]}"})

        def do_POST(self) -> None:
            route = self.path.rstrip("/")
            if route not in ("/v1/verdicts", "/v1/roots"):
                self._answer(404, {"error": f"no route {self.path[:100]}"})
                return
            submit = aggregator.submit if route == "/v1/verdicts" else aggregator.submit_root
            try:
                length = int(self.headers.get("content-length", ""))
            except ValueError:
                self._answer(411, {"error": "a Content-Length is required"})
                return
            if not 0 < length <= MAX_SIGNED_VERDICT_BYTES:
                self.close_connection = True
                self._answer(413, {"error": f"a signed verdict is 1 to "
                                            f"{MAX_SIGNED_VERDICT_BYTES} bytes, not {length}"})
                return
            try:
                body = self.rfile.read(length)
            except TimeoutError:
                self.close_connection = True
                return
            if len(body) != length:
                self.close_connection = True
                return
            try:
                poster = check_poster(body, self.headers.get(HEADER))
            except AuthError as exc:
                self._answer(401, {"error": str(exc)})
                return
            if not waiting.acquire(blocking=False):
                self._answer(429, {"error": "too many verdicts waiting to be checked; retry"},
                             {"Retry-After": str(RETRY_AFTER_S)})
                return
            try:
                turn = checks.acquire(timeout=check_wait_s) if check_wait_s > 0 else \
                    checks.acquire(blocking=False)
            finally:
                waiting.release()
            if not turn:
                self._answer(429, {"error": "too many verdicts being checked; retry"},
                             {"Retry-After": str(RETRY_AFTER_S)})
                return
            try:
                self._answer(200, submit(body, poster=poster))
            except PoolError as exc:
                self._answer(exc.status, {"error": str(exc)})
            except ChainError as exc:
                self._answer(503, {"error": f"cannot read the chain: {exc}"})
            except Exception as exc:  # a bug answers 500 and the server goes on
                log.exception("checking a verdict failed")
                self._answer(500, {"error": f"{type(exc).__name__}"})
            finally:
                checks.release()

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


__all__ = ["Aggregator", "PoolError", "Settlement", "VerdictPool", "describe", "make_http_server",
           "run_forever"]
