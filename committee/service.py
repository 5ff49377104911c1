"""One committee member at work: what `gym verifier serve` runs (docs/committee.md
"Serving").

Every ``tick``:

1. read the committee's ``ChallengeOpened`` events since the last tick (a cursor in blocks);
2. for each challenge still open that this verifier has not decided: fetch the evidence
   document from the content store (at most ``MAX_EVIDENCE_BYTES`` + 1 bytes are read: a
   larger one is rejected by the judge without being held whole), ``judge`` it with the full
   receipt verification, and, unless it abstains, sign the verdict with the verifier's BLS key;
3. send every signed verdict not yet delivered to the aggregator (``send``; HTTP in
   production, ``post_verdict``). A verdict that cannot be delivered stays queued and is sent
   again at a later tick (after the aggregator's ``Retry-After``) until it is counted or the
   challenge is no longer open; a refusal that a resend cannot change (400, 401, 409, 413)
   is final and logged.

What was decided is kept in ``state_file`` (JSON: the cursor and each challenge's outcome),
so a restarted verifier neither judges a challenge twice nor forgets a verdict it has not
delivered. A judgement is recorded as ``judging`` before it starts: one that a crash, a kill
or a stop cut short is tried again at the next start, at most ``MAX_JUDGING_ATTEMPTS`` times,
so no challenge can keep a verifier in a loop of restarts. An abstention is retried at the next tick only when its cause may pass (the
content store or chain unreachable): ``retry_abstain``.

Hostile input: the evidence CID and document come from the challenger. The document is read
bounded; everything the judge raises is contained in its ``Judgement``; one challenge's
failure is logged and never stops the others.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from committee.bls import SecretKey, g1_to_ints
from committee.client import ChallengeState, OpenedChallenge, VerifierCommittee
from committee.judge import ABSTAIN_OUTCOME, MAX_EVIDENCE_BYTES, REJECTED_OUTCOME, Judgement
from committee.messages import SignedVerdict
from ledger.evm import ChainError

log = logging.getLogger("gym.verifier")

POST_TIMEOUT_S = 30


class DeliveryRefused(Exception):
    """The aggregator refused a verdict for good (it will not accept it on a resend)."""


class DeliveryDeferred(Exception):
    """The aggregator asked for the verdict again later (429, 503, another 5xx, 404 while
    it has not seen the challenge yet); ``retry_after``: seconds it asked to wait."""

    def __init__(self, message: str, retry_after: float = 0.0):
        super().__init__(message)
        self.retry_after = retry_after


FINAL_STATUSES = (400, 401, 409, 413)  # malformed, not this verifier's, no longer open, too big
MAX_RETRY_AFTER_S = 60.0


def _retry_after(value: str | None) -> float:
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER_S) if value else 0.0
    except ValueError:  # an HTTP date, or junk: the next tick
        return 0.0


def read_bounded(chunks: Iterable[bytes], limit: int = MAX_EVIDENCE_BYTES + 1) -> bytes:
    """At most ``limit`` bytes of ``chunks`` (the rest is never read)."""
    out = bytearray()
    for chunk in chunks:
        out += chunk[: limit - len(out)]
        if len(out) >= limit:
            break
    return bytes(out)


def post_verdict(url: str, signed: SignedVerdict, account: Any = None) -> dict[str, Any]:
    """POST ``signed`` to the aggregator at ``url`` (``/v1/verdicts``), authenticated with the
    verifier's Ethereum ``account`` (``verdict_auth``); its JSON answer. ``DeliveryRefused``
    on 400/401/409/413 (a resend gets the same answer), ``DeliveryDeferred`` on any other
    refusal (429 and 503 with their ``Retry-After``), ``OSError``/``httpx.HTTPError`` when it
    could not be delivered: the last two are sent again later."""
    import httpx

    from committee.verdict_auth import HEADER, sign_post

    body = signed.to_bytes()
    headers = {"content-type": "application/json"}
    if account is not None:
        headers[HEADER] = sign_post(account, body)
    response = httpx.post(url.rstrip("/") + "/v1/verdicts", content=body, headers=headers,
                          timeout=POST_TIMEOUT_S)
    if response.status_code in FINAL_STATUSES:
        raise DeliveryRefused(f"{response.status_code}: {response.text[:300]}")
    if response.status_code != 200:
        raise DeliveryDeferred(f"{response.status_code}: {response.text[:300]}",
                               _retry_after(response.headers.get("retry-after")))
    return response.json()


class Fanout:
    """``send`` for several aggregators (``gym verifier serve --aggregator A --aggregator B``),
    so that liveness hinges on no one aggregator process: each verdict goes to every one, and
    any that gathers two thirds settles (two settling at once do not conflict: the second
    ``settle`` reverts and that aggregator drops the challenge). A verdict counts as delivered
    once every aggregator has taken it or refused it for good; until then it is sent again to
    those that have not (``DeliveryDeferred``, with the shortest ``Retry-After``). All of them
    refusing it is a ``DeliveryRefused``. What was sent where is kept in memory: after a
    restart a verdict goes to all again, and an aggregator that has it answers ``duplicate``."""

    def __init__(self, sends: dict[str, Callable[[SignedVerdict], Any]]):
        if not sends:
            raise ValueError("at least one aggregator")
        self.sends = sends
        self._done: dict[int, dict[str, bool]] = {}  # challenge -> aggregator -> accepted

    def __call__(self, signed: SignedVerdict) -> dict[str, Any]:
        done = self._done.setdefault(signed.verdict.challenge_id, {})
        answers: dict[str, Any] = {}
        waits: list[float] = []
        pending: list[str] = []
        for name, send in self.sends.items():
            if name in done:
                continue
            try:
                answers[name] = send(signed)
                done[name] = True
            except DeliveryRefused as exc:
                done[name] = False
                answers[name] = f"refused: {exc}"
            except Exception as exc:  # noqa: BLE001 - sent again at a later tick
                pending.append(f"{name}: {exc}")
                waits.append(exc.retry_after if isinstance(exc, DeliveryDeferred) else 0.0)
        if pending:
            raise DeliveryDeferred("; ".join(pending)[:600], min(waits))
        if not any(done.values()):
            raise DeliveryRefused("; ".join(str(a) for a in answers.values())[:600])
        return answers


@dataclass
class Decision:
    """What this verifier decided on one challenge."""

    outcome: str  # judge's outcome
    reason: str
    detail: str
    signed: dict | None = None  # the SignedVerdict's JSON, when one was signed
    delivered: bool = False
    opened: dict | None = None  # the ChallengeOpened event (to judge an abstention again)
    attempts: int = 0  # judgements started (JUDGING while one runs)


JUDGING = "judging"  # recorded before a judgement starts; found at start-up: it was cut short
MAX_JUDGING_ATTEMPTS = 3  # judgements cut short (crash, kill, SIGTERM) before giving up on one


class VerifierService:
    """The loop of one verifier (module docstring). ``judge_challenge(opened)``: the judgement
    of a challenge (``evidence_judge`` builds the production one); ``send(signed)``: deliver a
    verdict (``post_verdict`` bound to the aggregator's URL)."""

    def __init__(self, committee: VerifierCommittee, sk: SecretKey, *,
                 judge_challenge: Callable[[OpenedChallenge], Judgement],
                 send: Callable[[SignedVerdict], Any], state_file: Path | None = None,
                 report: Callable[[str], None] | None = None,
                 retry_abstain: bool = True, stop: Any = None) -> None:
        self.committee = committee
        self.stop = stop  # a threading.Event: set, a tick ends after the challenge at hand
        self.judging: int | None = None  # the challenge being judged right now
        self.sk = sk
        self.judge_challenge = judge_challenge
        self.send = send
        self.state_file = state_file
        self.retry_abstain = retry_abstain
        self._report = report or log.info
        self.cursor: int | None = None
        self.decisions: dict[int, Decision] = {}
        self._retry_at: dict[int, float] = {}  # challenge id -> monotonic time of the next send
        self._load()

    # ---------------------------------------------------------------- state

    def _load(self) -> None:
        if self.state_file is None or not self.state_file.exists():
            return
        try:
            state = json.loads(self.state_file.read_text())
            self.cursor = state["cursor"]
            self.decisions = {int(k): Decision(**v) for k, v in state["decisions"].items()}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ChainError(f"cannot read the verifier's state {self.state_file}: {exc}; "
                             "move it away to start from the deployment block") from None

    def _save(self) -> None:
        if self.state_file is None:
            return
        state = {"cursor": self.cursor,
                 "decisions": {str(k): vars(v) for k, v in sorted(self.decisions.items())}}
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.state_file.parent, prefix=".verifier-state-")
        with os.fdopen(fd, "w") as out:
            json.dump(state, out, indent=1)
        os.replace(tmp, self.state_file)

    # ---------------------------------------------------------------- the loop

    def identity(self) -> tuple[int, str]:
        """This verifier's slot index and address; ``ChainError`` unless it is active."""
        account = self.committee.account
        if account is None:
            raise ChainError("the verifier needs its account's key")
        index = self.committee.index_of(account.address)
        if index is None:
            raise ChainError(f"{account.address} is not a registered verifier: run "
                             "`gym verifier register`")
        slot = self.committee.slot(index)
        if not slot.active:
            raise ChainError(f"verifier {account.address} (slot {index}) is not active")
        if slot.pk1 is None or g1_to_ints(slot.pk1) != g1_to_ints(self.sk.pk1()):
            raise ChainError(f"slot {index} is registered with another BLS key than this one")
        return index, account.address

    def _judges(self, set_hash: bytes) -> bool:
        """Whether this verifier's slot is active in the set ``set_hash`` (a challenge's
        opening), the set whose verifiers judge it."""
        account = self.committee.account
        index = self.committee.index_of(account.address) if account is not None else None
        return index is not None and self.committee.set_by_hash(set_hash).active(index)

    def tick(self) -> None:
        """One pass: new challenges, judgements, deliveries."""
        head = self.committee.head()
        start = self.committee.from_block if self.cursor is None else self.cursor
        opened = self.committee.opened(from_block=start, to_block=head) if start <= head else []
        for challenge in opened:
            if self._stopping():
                self._save()  # the cursor stays: the rest are read again at the next start
                return
            decided = self.decisions.get(challenge.challenge_id)
            if decided is None or decided.outcome == JUDGING or (
                    decided.outcome == ABSTAIN_OUTCOME and self.retry_abstain):
                self._decide(challenge)
        self.cursor = max(start, head + 1)
        self._retry_abstentions(skip={c.challenge_id for c in opened})
        self._deliver()
        self._save()

    def _stopping(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    def _retry_abstentions(self, skip: set[int]) -> None:
        """Judge again the abstentions (when ``retry_abstain``) and the judgements a crash,
        kill or stop cut short (always)."""
        waiting = [d.opened for cid, d in sorted(self.decisions.items())
                   if cid not in skip and d.opened and (d.outcome == JUDGING or (
                       d.outcome == ABSTAIN_OUTCOME and self.retry_abstain))]
        for opened in waiting:
            if self._stopping():
                return
            self._decide(OpenedChallenge(**{
                **opened, "receipt_hash": bytes.fromhex(opened["receipt_hash"]),
                "set_hash": bytes.fromhex(opened.get("set_hash", ""))}))

    def _decide(self, opened: OpenedChallenge) -> None:
        challenge_id = opened.challenge_id
        record = {**vars(opened), "receipt_hash": opened.receipt_hash.hex(),
                  "set_hash": opened.set_hash.hex()}
        prior = self.decisions.get(challenge_id)
        attempts = prior.attempts if prior is not None and prior.outcome == JUDGING else 0
        try:
            status = self.committee.challenge(challenge_id).status
            if status != ChallengeState.OPEN:
                if status != ChallengeState.NONE and (
                        prior is None or prior.outcome in (ABSTAIN_OUTCOME, JUDGING)):
                    self.decisions[challenge_id] = Decision(
                        "closed", "", f"{status.label} before this verifier decided")
                return
            if opened.set_hash and not self._judges(opened.set_hash):
                # the verifiers of its opening judge it (docs/committee.md "The set")
                self.decisions[challenge_id] = Decision(
                    "closed", "", "opened before this verifier joined the committee")
                self._report(f"challenge {challenge_id}: opened before this verifier joined; "
                             "the verifiers of its opening judge it")
                return
            if attempts >= MAX_JUDGING_ATTEMPTS:
                # each try ended this process before a judgement: never loop on it
                self.decisions[challenge_id] = Decision(
                    "closed", "", f"judging it was cut short {attempts} times (crash, kill or "
                    "stop); this verifier does not judge it again", opened=record,
                    attempts=attempts)
                self._report(f"challenge {challenge_id}: judging it was cut short {attempts} "
                             "times; given up")
                return
            # recorded before judging: a restart knows this judgement was cut short
            self.decisions[challenge_id] = Decision(JUDGING, "", "", opened=record,
                                                    attempts=attempts + 1)
            self._save()
            self.judging = challenge_id
            try:
                judgement = self.judge_challenge(opened)
            finally:
                self.judging = None
        except ChainError as exc:
            # not the challenge's fault: judged again at the next tick, not counted as cut short
            self.decisions[challenge_id] = Decision(JUDGING, "", f"cannot read it now: {exc}",
                                                    opened=record, attempts=attempts)
            self._report(f"challenge {challenge_id}: cannot read it now ({exc})")
            return
        decision = Decision(judgement.outcome, judgement.reason, judgement.detail[:2000],
                            opened=record, attempts=attempts + 1)
        verdict = judgement.verdict(challenge_id, opened.receipt_hash)
        if verdict is not None:
            index, address = self.identity()
            signed = SignedVerdict.create(self.sk, verdict, chain_id=self.committee.chain_id,
                                          committee=self.committee.address,
                                          verifier_index=index, verifier=address)
            decision.signed = signed.to_json()
        self.decisions[challenge_id] = decision
        what = judgement.outcome + (f" ({judgement.reason})" if judgement.reason else "")
        self._report(f"challenge {challenge_id} against {opened.operator}: {what}; "
                     f"{judgement.detail[:300]}")

    def _deliver(self) -> None:
        """Send each signed verdict not yet counted; one the aggregator defers, or cannot
        take now, is sent again at a later tick (after its ``Retry-After``) until it is
        counted or the chain says the challenge is no longer open."""
        import time

        from committee.messages import decode_signed_verdict

        for challenge_id, decision in sorted(self.decisions.items()):
            if decision.signed is None or decision.delivered:
                continue
            if time.monotonic() < self._retry_at.get(challenge_id, 0.0):
                continue
            signed = decode_signed_verdict(json.dumps(decision.signed))
            try:
                answer = self.send(signed)
            except DeliveryRefused as exc:
                decision.delivered = True  # final: resending gets the same answer
                self._report(f"challenge {challenge_id}: the aggregator refused the verdict "
                             f"({exc})")
            except Exception as exc:  # noqa: BLE001 - try again at a later tick
                wait = exc.retry_after if isinstance(exc, DeliveryDeferred) else 0.0
                self._retry_at[challenge_id] = time.monotonic() + wait
                if self._closed(challenge_id):
                    decision.delivered = True
                    self._report(f"challenge {challenge_id}: no longer open; the verdict is "
                                 "not sent again")
                else:
                    self._report(f"challenge {challenge_id}: verdict not delivered yet ({exc})"
                                 + (f"; again in {wait:g} s" if wait else ""))
            else:
                decision.delivered = True
                self._retry_at.pop(challenge_id, None)
                self._report(f"challenge {challenge_id}: verdict delivered ({answer})")

    def _closed(self, challenge_id: int) -> bool:
        """Whether the chain says the challenge is settled, expired or gone (False when the
        chain cannot be read: the verdict stays queued)."""
        try:
            return self.committee.challenge(challenge_id).status != ChallengeState.OPEN
        except ChainError:
            return False


def evidence_judge(content: Any, check: Callable[[dict], Any], recheck: Any = None
                   ) -> Callable[[OpenedChallenge], Judgement]:
    """The production ``judge_challenge``: the evidence from ``content`` (bounded), judged with
    ``check`` (``inference_node.verify.check_receipt_bundle`` with the chain, the registry and
    the model); a swarm volunteer's work-check evidence by ``committee.work_judge`` with
    ``recheck`` (``trainer.swarm.audit.recomputer``, or None: it abstains). A document the
    content store does not have is an abstention."""
    from committee.judge import judge
    from committee.work_judge import is_work_evidence, judge_work

    def judge_challenge(opened: OpenedChallenge) -> Judgement:
        from ledger.unixfs import DagError

        try:
            # a file declaring more than the evidence limit is refused before it is read
            evidence = read_bounded(content.cat_iter(opened.evidence_cid,
                                                     max_bytes=MAX_EVIDENCE_BYTES))
        except DagError as exc:
            # the CID names a DAG that is malformed, or too costly to read for its size: the
            # content is what the challenger published, so its challenge is rejected
            return Judgement(REJECTED_OUTCOME, "", f"the evidence {opened.evidence_cid!r:.120} "
                             f"cannot be read as a file: {exc}")
        except Exception as exc:  # noqa: BLE001 - a CID we cannot fetch: abstain, retry later
            return Judgement(ABSTAIN_OUTCOME, "", f"cannot fetch the evidence "
                             f"{opened.evidence_cid!r:.120}: {type(exc).__name__}: {exc}")
        if is_work_evidence(evidence):
            return judge_work(evidence, opened.receipt_hash, content=content, recheck=recheck)
        return judge(evidence, opened.receipt_hash, check=check)

    return judge_challenge


def verifier_ops(runtime: Callable[[], Any], model_dir: str, registry: str | None,
                 swarm_data: str | None = None, swarm_model: str | None = None
                 ) -> dict[str, Callable[..., Any]]:
    """The judge worker's ops for `gym verifier serve` (``committee.judge_worker``; run in the
    worker): ``runtime()`` builds the deployment's ``LedgerRuntime`` there, the model in
    ``model_dir`` is loaded once; ``challenge(opened)`` is ``evidence_judge``, ``audit(evidence,
    receipt_hash)`` is ``committee.audits.judge_checked``, both with the full receipt
    verification against the NodeRegistry at ``registry``. With ``swarm_data`` (a dataset file
    or a directory of them) a volunteer's failed work check is re-computed, on the base weights
    in ``swarm_model`` or those the run published."""
    import tempfile

    from committee.audits import judge_checked
    from inference_node.verify import check_receipt_bundle, load_verifier_model
    from trainer.swarm.audit import recomputer

    rt, model = runtime(), Path(model_dir)
    loaded = load_verifier_model(model)

    def check(bundle: dict) -> Any:
        return check_receipt_bundle(bundle, rt, registry=registry, model_dir=model,
                                    loaded=loaded)

    recheck = None
    if swarm_data is not None:  # the worker's scratch lives as long as the worker
        scratch = Path(tempfile.mkdtemp(prefix="gym-verifier-swarm-"))
        recheck = recomputer(Path(swarm_data), swarm_model and Path(swarm_model), scratch,
                             rt.content)
    return {"challenge": evidence_judge(rt.content, check, recheck),
            "audit": lambda evidence, digest: judge_checked(evidence, digest, check=check)}


def worker_judges(worker: Any) -> tuple[Callable[[OpenedChallenge], Judgement],
                                        Callable[[bytes, bytes], tuple[Judgement, bool]]]:
    """``judge_challenge`` for ``VerifierService`` and ``judge_evidence`` for
    ``committee.audits.Auditor``, running ``worker``'s (a ``committee.judge_worker.JudgeWorker``
    over ``verifier_ops``) ops under its bounds. A judgement that passes a bound is a rejection:
    the evidence costs more to judge than verifiers allow (docs/committee.md "Judging under
    bounds"); one whose op failed in the worker is an abstention."""
    from committee.judge_worker import BoundExceeded, WorkerFailed

    def judge_challenge(opened: OpenedChallenge) -> Judgement:
        try:
            return worker.call("challenge", opened)
        except BoundExceeded as exc:
            return Judgement(REJECTED_OUTCOME, "", f"judging the evidence "
                             f"{opened.evidence_cid!r:.120} {exc}: more than verifiers allow")
        except WorkerFailed as exc:
            return Judgement(ABSTAIN_OUTCOME, "", f"cannot judge: {exc}")

    def judge_evidence(evidence: bytes, digest: bytes) -> tuple[Judgement, bool]:
        try:
            return worker.call("audit", evidence, digest)
        except BoundExceeded as exc:
            return Judgement(REJECTED_OUTCOME, "", f"checking this bundle {exc}: more than "
                             "verifiers allow"), False

    return judge_challenge, judge_evidence


__all__ = ["Decision", "DeliveryDeferred", "DeliveryRefused", "Fanout", "VerifierService", "evidence_judge", "post_verdict",
           "read_bounded", "verifier_ops", "worker_judges"]
