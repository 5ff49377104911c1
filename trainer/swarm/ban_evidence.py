"""A ban's evidence, re-checked by anyone who holds it (docs/swarm.md "Hostile peers",
`gym audit`): the ban lines a peer writes to ``swarm_evidence/bans.jsonl``, listed in
``run.hardware.swarm.banned`` and published with the run (their files as the run entry's
``swarm_evidence/NAME`` artifacts).

    check = check_ban(line, read)   # read(name, limit) -> the bytes of an evidence file
    check.proven                    # True: the evidence alone proves the ban
    check.detail                    # what was checked, in one line

- ``equivocation``: two valid commitments of the peer for one round, two digests: proven.
- ``non_finite``: the peer's valid commitment and the payload it signs, which holds a NaN or an
  infinity: proven.
- ``out_of_bound``: every update of the round, each with its member's valid commitment: the
  boundary run again over them refuses the peer's: proven.
- ``work_check``: the peer's valid commitment carries the claim (step, parameters, sketch) the
  evidence names, the step's rows are the peer's assignment, the kept parameters are the ones
  claimed at, and the re-computed sketch the evidence gives is off by more than the tolerance.
  The re-computation itself is the banning peer's figure (proven False): re-running it needs
  the run's base model and dataset with the kept parameters.

A line that does not prove what it says is a `SwarmRecordError` naming why. Lines and files
come from whoever published them: every field is bounded before any work.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from trainer.swarm.commitments import (
    CODECS,
    decode_commitment,
    decode_payload,
    equivocation,
    non_finite_evidence,
    payload_digest,
    payload_size,
    verify_commitment,
)
from trainer.swarm.records import SwarmRecordError

REASONS = ("equivocation", "non_finite", "out_of_bound", "work_check")
MAX_ROUND_MEMBERS = 64  # updates an out-of-bound ban's round lists
MAX_TENSORS = 4096  # tensors of one update
MAX_PAYLOAD = 1 << 30  # bytes of one ban's evidence files, all together
MAX_DATASET_ROWS = 1 << 24  # rows of a work check's dataset (its assignment is a permutation)
FILE_NAME = re.compile(r"[0-9a-f]{64}\.(update|params)")

Read = Callable[[str, int], bytes]  # (evidence file name, its expected length) -> its bytes


@dataclass(frozen=True)
class BanCheck:
    peer_id: str
    reason: str
    proven: bool  # the evidence alone proves it (else: the re-computation is the banner's)
    detail: str


def local_reader(directory) -> Read:
    """``read`` over a run's own ``swarm_evidence`` directory."""
    from pathlib import Path

    def read(name: str, limit: int) -> bytes:
        try:
            with open(Path(directory) / name, "rb") as file:
                return file.read(limit + 1)
        except OSError as exc:
            raise SwarmRecordError(f"ban.evidence: {name}: {exc.strerror}") from None

    return read


def check_ban(line, read: Read) -> BanCheck:
    """Re-check one ban ``line``; ``read`` gives the evidence files it names."""
    if not isinstance(line, dict) or not isinstance(line.get("evidence"), dict):
        raise SwarmRecordError("ban: an object with peer_id, reason, averager, group, evidence")
    peer, reason = line.get("peer_id"), line.get("reason")
    if not isinstance(peer, str) or not 0 < len(peer) <= 128:
        raise SwarmRecordError("ban.peer_id: a peer id")
    if reason not in REASONS:
        raise SwarmRecordError(f"ban.reason: one of {', '.join(REASONS)}")
    evidence = line["evidence"]
    if reason == "equivocation":
        texts = evidence.get("commitments")
        if not isinstance(texts, list) or len(texts) != 2:
            raise SwarmRecordError("ban.evidence.commitments: two commitments")
        first, second = (_commitment(text, line) for text in texts)
        if equivocation(first, second) != peer:
            raise SwarmRecordError("ban: the commitments are another peer's")
        return BanCheck(peer, reason, True, f"two signed updates for round {first.group[:8]}: "
                                            f"{first.digest[7:19]} and {second.digest[7:19]}")
    commitment = _commitment(evidence.get("commitment"), line)
    if commitment.peer_id != peer:
        raise SwarmRecordError("ban: the commitment is another peer's")
    if reason == "work_check":
        return _work_check(line, commitment, read)
    codec, shapes = evidence.get("codec"), _shapes(evidence.get("shapes"))
    if codec not in CODECS:
        raise SwarmRecordError(f"ban.evidence.codec: one of {', '.join(CODECS)}")
    payload = _file(read, evidence.get("payload"), commitment.bytes)
    if reason == "non_finite":
        non_finite_evidence(commitment, payload, shapes, codec)
        return BanCheck(peer, reason, True, f"its signed update {commitment.digest[7:19]} holds "
                                            "a NaN or an infinity")
    return _out_of_bound(line, commitment, payload, shapes, codec, read)


def _commitment(text, line: dict):
    """The valid commitment ``text`` of the line's round."""
    commitment = verify_commitment(decode_commitment(text))
    if commitment.group != line.get("group") or commitment.averager != line.get("averager"):
        raise SwarmRecordError("ban: a commitment of another round than the ban names")
    return commitment


def _shapes(value) -> list[list[int]]:
    if not isinstance(value, list) or not 0 < len(value) <= MAX_TENSORS or not all(
            isinstance(shape, list) and len(shape) <= 8
            and all(type(d) is int and 0 <= d < 2**31 for d in shape) for shape in value):
        raise SwarmRecordError(f"ban.evidence.shapes: at most {MAX_TENSORS} tensor shapes")
    return value


def _file(read: Read, name, length: int) -> bytes:
    if not isinstance(name, str) or not FILE_NAME.fullmatch(name):
        raise SwarmRecordError("ban.evidence: an evidence file is named by its sha256")
    if length > MAX_PAYLOAD:
        raise SwarmRecordError(f"ban.evidence: {name} is over {MAX_PAYLOAD} bytes")
    data = read(name, length)
    if len(data) != length:
        raise SwarmRecordError(f"ban.evidence: {name} holds {len(data)} bytes, not {length}")
    return data


def _out_of_bound(line: dict, commitment, payload: bytes, shapes, codec: str,
                  read: Read) -> BanCheck:
    from trainer.swarm.robust import boundary

    members = line["evidence"].get("round")
    if not isinstance(members, dict) or not 1 < len(members) <= MAX_ROUND_MEMBERS:
        raise SwarmRecordError(f"ban.evidence.round: 2 to {MAX_ROUND_MEMBERS} members' updates")
    if payload_size(shapes, codec) != commitment.bytes:
        raise SwarmRecordError("ban.evidence.shapes: not the shapes of the signed update")
    if commitment.bytes * len(members) > MAX_PAYLOAD:
        raise SwarmRecordError(f"ban.evidence.round: over {MAX_PAYLOAD} bytes of updates")
    updates = {}
    for member, item in sorted(members.items()):
        if not isinstance(item, dict):
            raise SwarmRecordError(f"ban.evidence.round[{member}]: commitment and payload")
        signed = _commitment(item.get("commitment"), line)
        if signed.peer_id != member or signed.run != commitment.run:
            raise SwarmRecordError(f"ban.evidence.round[{member}]: another peer's commitment")
        data = payload if signed == commitment else _file(read, item.get("payload"),
                                                          signed.bytes)
        if payload_digest(data) != signed.digest:
            raise SwarmRecordError(f"ban.evidence.round[{member}]: not its signed update")
        updates[member] = decode_payload(data, shapes, codec)
    if line["peer_id"] not in updates:
        raise SwarmRecordError("ban.evidence.round: the banned peer's update is not in it")
    if members[line["peer_id"]].get("commitment") != line["evidence"]["commitment"]:
        raise SwarmRecordError("ban.evidence.round: another update of the banned peer")
    verdict = boundary(updates).get(line["peer_id"])
    if verdict != "out_of_bound":
        raise SwarmRecordError(f"ban: the round's boundary does not refuse its update "
                               f"({verdict or 'kept'})")
    return BanCheck(line["peer_id"], "out_of_bound", True,
                    f"its signed update is over the bound of a round of {len(updates)} signed "
                    "updates")


def _work_check(line: dict, commitment, read: Read) -> BanCheck:
    from trainer.swarm.work import TOLERANCE, decode_claims, difference, rows_of_step

    evidence, peer = line["evidence"], line["peer_id"]
    numbers = {name: evidence.get(name) for name in
               ("step", "dataset_rows", "seed", "local_batch", "micro_batch")}
    for name, value in numbers.items():
        if type(value) is not int or not 0 <= value < 2**53:
            raise SwarmRecordError(f"ban.evidence.{name}: an integer")
    if not 0 < numbers["local_batch"] <= 1 << 16 or not 0 < numbers[
            "dataset_rows"] <= MAX_DATASET_ROWS:
        raise SwarmRecordError(f"ban.evidence: a local batch of 1 to 65536 rows of a dataset "
                               f"of 1 to {MAX_DATASET_ROWS} rows")
    claims = {c.step: c for c in decode_claims(list(commitment.claims), numbers["local_batch"])}
    claim = claims.get(numbers["step"])
    if claim is None:
        raise SwarmRecordError(f"ban: its commitment claims no step {numbers['step']}")
    recomputed = evidence.get("recomputed")
    if not isinstance(recomputed, list) or len(recomputed) != len(claim.sketch) or not all(
            isinstance(x, (int, float)) and math.isfinite(x) for x in recomputed):
        raise SwarmRecordError("ban.evidence.recomputed: the re-computed sketch")
    if list(claim.sketch) != evidence.get("claimed") or claim.parameters != evidence.get(
            "parameters"):
        raise SwarmRecordError("ban.evidence: the claim is not the one its commitment signs")
    off = difference(claim.sketch, tuple(float(x) for x in recomputed))
    if not off > TOLERANCE:
        raise SwarmRecordError(f"ban: the sketches differ by {off:.3g}, within the tolerance "
                               f"{TOLERANCE}")
    rows = rows_of_step(numbers["dataset_rows"], numbers["seed"], peer, numbers["step"],
                        numbers["local_batch"])
    if evidence.get("rows") != rows:
        raise SwarmRecordError("ban.evidence.rows: not the rows assigned to that step")
    shapes = _shapes(evidence.get("shapes"))
    kept = _file(read, evidence.get("parameters_payload"), payload_size(shapes))
    if payload_digest(kept) != claim.parameters:
        raise SwarmRecordError("ban.evidence.parameters_payload: not the parameters claimed at")
    return BanCheck(peer, "work_check", False,
                    f"its signed claim of step {claim.step} is off by {off:.3g} (tolerance "
                    f"{TOLERANCE}) from the banning peer's re-computation at the kept "
                    "parameters")
