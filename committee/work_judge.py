"""The decision a committee member signs on a challenge of a staked swarm volunteer: a work
check it failed (docs/swarm.md "Slashing a staked volunteer").

A volunteer registers in the NodeRegistry as a node does, its signer the address that signs
its contribution records. A challenge names the EIP-712 digest of one such record (the registry
checks that the volunteer's signer signed it, as it checks a receipt's) and points at::

    {"type": "work-check-evidence", "v": 1, "run": "<run entry CID>", "peer_id": "Qm…"}

``judge_work`` reads the published run entry, finds the ban of ``peer_id`` for a failed work
check (``hardware.swarm.banned``) and the peer's own signed record (``hardware.swarm.refused``),
and decides:

- ``rejected`` (the challenger did not make its case) when the document, the run entry or the
  ban's published evidence do not hold up (``trainer.swarm.ban_evidence.check_ban``), when the
  record is not the challenged one or not of that run and peer, or when the step re-computed
  here is within the tolerance of the peer's signed claim (the banning peer made its figure up);
- ``upheld`` (reason ``work_check``) when the re-computed step is off by more than the
  tolerance: the peer signed a claim of work it did not do;
- ``abstain`` when this verifier cannot re-compute (no copy of the run's dataset or base
  weights, the content endpoint unreachable).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from committee.client import CommitteeError
from committee.judge import ABSTAIN_OUTCOME, REJECTED_OUTCOME, UPHELD_OUTCOME, Judgement
from ledger.json_input import JSONInputError, parse_json

EVIDENCE_TYPE = "work-check-evidence"
MAX_EVIDENCE_BYTES = 4096  # the document names a run and a peer: nothing more
REASON = "work_check"



class WorkChallengeError(CommitteeError):
    """A run entry that does not hold what a challenge of a volunteer needs."""


# trainer.swarm.audit.recomputer: (run, ban line, read) -> WorkRecheck; raises
# trainer.swarm.recheck.CannotRecompute when this verifier lacks the dataset or the weights
Recheck = Callable[[Any, dict, Callable[[str, int], bytes]], Any]


@dataclass(frozen=True)
class WorkChallenge:
    id: int  # the committee's challenge id
    operator: str  # the volunteer's NodeRegistry operator
    contributor: str  # the address that signed the record
    record_hash: bytes
    evidence_cid: str


def work_evidence(run_cid: str, peer_id: str) -> bytes:
    """The evidence document of a challenge of ``peer_id``'s ban in run entry ``run_cid``."""
    return json.dumps({"type": EVIDENCE_TYPE, "v": 1, "run": run_cid, "peer_id": peer_id},
                      sort_keys=True, separators=(",", ":")).encode()


def banned_record(entry: Any, peer_id: str) -> tuple[Any, dict]:
    """(the signed contribution record of ``peer_id`` that the run entry ``entry`` keeps beside
    its ban for a failed work check (`trainer.swarm.records.Contribution`, signature checked),
    that ban line); `WorkChallengeError` naming what is missing."""
    from ledger.entries import RunEntry
    from trainer.swarm.recheck import signed_record
    from trainer.swarm.records import SwarmRecordError

    swarm = entry.hardware.get("swarm") if isinstance(entry, RunEntry) else None
    if not isinstance(swarm, dict):
        raise WorkChallengeError("not the entry of a swarm run")
    line = next((b for b in swarm.get("banned") or [] if isinstance(b, dict)
                 and b.get("peer_id") == peer_id and b.get("reason") == REASON), None)
    if line is None:
        raise WorkChallengeError(f"the run bans no peer {peer_id!r:.80} for a failed work check")
    try:
        record = signed_record(swarm, peer_id)
    except SwarmRecordError as exc:
        raise WorkChallengeError(str(exc)) from None
    if record is None:
        raise WorkChallengeError(f"the run keeps no signed record of peer {peer_id!r:.80}")
    return record, line


def open_work_challenge(run_cid: str, peer_id: str, *, committee: Any, registry: Any,
                        content: Any) -> WorkChallenge:
    """Open a committee challenge against the staked volunteer banned as ``peer_id`` in the
    published run entry ``run_cid``: its signed record is the challenged digest, the evidence
    document is stored on ``content``. ``committee``: with the challenger's key (it bonds)."""
    from ledger.contributions import contribution_digest
    from ledger.entries import MAX_ENTRY_BYTES, decode_entry

    record, _ = banned_record(decode_entry(content.cat(run_cid, max_bytes=MAX_ENTRY_BYTES)),
                              peer_id)
    operator = registry.operator_of_signer(record.contributor)
    if operator is None:
        raise WorkChallengeError(f"{record.contributor}, who signed peer {peer_id}'s record, is "
                                 "no registered signer: the volunteer has no stake to slash")
    digest = contribution_digest(record)
    cid = content.add_file(work_evidence(run_cid, peer_id), pin=True)
    challenge_id = committee.open_challenge(operator, digest,
                                            bytes.fromhex(record.signature[2:]), cid)
    return WorkChallenge(challenge_id, operator, record.contributor, digest, cid)


def is_work_evidence(evidence: bytes) -> bool:
    """Whether ``evidence`` claims to be a work-check document (cheap: the judge checks it)."""
    return len(evidence) <= MAX_EVIDENCE_BYTES and f'"{EVIDENCE_TYPE}"'.encode() in evidence


def judge_work(evidence: bytes, record_hash: bytes, *, content: Any,
               recheck: Recheck | None) -> Judgement:
    """The judgement of the challenge of record ``record_hash`` (32 bytes) with ``evidence``
    (module docstring); ``content``: the endpoint the run entry and its files come from;
    ``recheck``: this verifier's re-computation (None: it has none, it abstains)."""
    from ledger.contributions import contribution_digest
    from ledger.entries import MAX_ENTRY_BYTES, decode_entry
    from ledger.errors import ContentStoreUnreachableError, LedgerError
    from trainer.swarm.audit import SwarmRun, reader_of
    from trainer.swarm.ban_evidence import check_ban
    from trainer.swarm.recheck import CannotRecompute
    from trainer.swarm.records import SwarmRecordError

    try:
        doc = parse_json(evidence, max_bytes=MAX_EVIDENCE_BYTES, max_depth=2,
                         what="the evidence")
    except JSONInputError as exc:
        return _rejected(f"malformed evidence ({exc.reason}): {exc}")
    if (not isinstance(doc, dict) or set(doc) != {"type", "v", "run", "peer_id"}
            or doc["type"] != EVIDENCE_TYPE or doc["v"] != 1 or type(doc["v"]) is not int
            or not isinstance(doc["run"], str) or not isinstance(doc["peer_id"], str)):
        return _rejected(f"malformed evidence: not a {EVIDENCE_TYPE} v1 object with exactly "
                         "type, v, run and peer_id")
    try:
        entry = decode_entry(content.cat(doc["run"], max_bytes=MAX_ENTRY_BYTES))
    except ContentStoreUnreachableError as exc:
        return _abstain(f"cannot fetch the run entry: {exc}")
    except (LedgerError, ValueError) as exc:  # not there, not an entry: the challenger's
        return _rejected(f"the run entry {doc['run']!r:.80}: {exc}")
    try:
        record, line = banned_record(entry, doc["peer_id"])
    except WorkChallengeError as exc:
        return _rejected(f"the run entry {doc['run']!r:.80}: {exc}")
    if contribution_digest(record) != bytes(record_hash):
        return _rejected("the run's record of the peer is not the challenged one")
    peer = doc["peer_id"]
    read = reader_of(dict(entry.artifacts or {}), content)
    try:
        check_ban(line, read)
    except SwarmRecordError as exc:
        return _rejected(f"the ban's evidence does not hold up: {exc}")
    except ContentStoreUnreachableError as exc:
        return _abstain(f"cannot fetch the ban's evidence: {exc}")
    commitment_run = _commitment_run(line)
    if record.peer_id != peer or record.run != commitment_run:
        return _rejected(f"the record is of {record.peer_id}, run {record.run}; the ban of "
                         f"{peer}, run {commitment_run}")
    if recheck is None:
        return _abstain("cannot judge: this verifier re-computes no swarm work (gym verifier "
                        "serve --swarm-data)")
    try:
        again = recheck(SwarmRun.of(entry), line, read)
    except CannotRecompute as exc:
        return _abstain(f"cannot judge: {exc}")
    except SwarmRecordError as exc:
        return _rejected(f"the evidence does not hold up: {exc}")
    except Exception as exc:  # noqa: BLE001 - whatever else fails is the verifier's problem
        return _abstain(f"cannot judge: {type(exc).__name__}: {exc}")
    if not again.upheld:
        return _rejected(f"re-computed here, its claim of step {again.step} is off by "
                         f"{again.difference:.3g}, within the tolerance {again.tolerance}")
    return Judgement(UPHELD_OUTCOME, REASON, f"its signed claim of step {again.step} is off by "
                     f"{again.difference:.3g} from the step re-computed here (tolerance "
                     f"{again.tolerance})")


def _commitment_run(line: dict) -> str | None:
    from trainer.swarm.commitments import decode_commitment

    return decode_commitment(line["evidence"]["commitment"]).run


def _rejected(detail: str) -> Judgement:
    return Judgement(REJECTED_OUTCOME, "", detail)


def _abstain(detail: str) -> Judgement:
    return Judgement(ABSTAIN_OUTCOME, "", detail)
