"""Random audits of evaluations' receipts (docs/committee.md "Audits of evaluations").

An ``evaluation`` entry (docs/design.md "3.1 Entries") lists, in its receipt table
(``ledger.evaluations``), one receipt bundle per generation, each stored on the content
endpoint: the receipt a node signed, the request, the answer. ``gym verify evaluation`` checks
every signature and recomputes the figures, but re-runs a generation only when asked: the
receipts of answers a node never generated pass it, and so does the evaluation built on them.
Verifiers audit those receipts as they audit the nodes' receipt logs (``committee.audits``),
with the same judgement and the same challenge: a failing receipt is a claim its signer made,
whoever published it.

Which evaluations. ``EvaluationAuditor`` follows:

- ``logs``: ExperienceLedger logs evaluators publish to (`gym eval --publish LOG`;
  `gym verifier serve --audit-evaluation-log LOG`). Their ``Anchored`` events since the cursor,
  per checkpoint the seed of ``committee.audits.checkpoint_seed`` (``pending`` until the block
  two after the anchor is mined) and the batch manifest (at most ``MAX_EVALUATION_LEAVES`` new
  leaves, else ``unauditable``); every new leaf's entry is read (``MAX_ENTRY_BYTES``), and each
  evaluation with receipts audited with seed ``evaluation_seed(checkpoint seed, leaf)``. Other
  entries are skipped; an entry that is missing or not an entry is ``unauditable``.
- ``named``: evaluation entry CIDs (`--audit-evaluation CID`, e.g. a proposal's evidence, whose
  log the verifier may not know). Audited once, with ``named_seed(blockhash(H), cid)``, ``H``
  the head (less ``confirmations``) at the pass that audits it: later than the evaluation, so
  unknown to its node when it signed, but this verifier's own draw, not every verifier's.

Which generations. Of an evaluation's ``n`` generations (receipt-table positions, arms in the
entry's order), the ``m = min(max_per_evaluation, max(1, ceil(n * rate_bps / 10000)))`` whose
``uint256(keccak256(abi.encode(bytes32 seed, uint256 position)))`` is lowest
(``sampled_generations``): at least one per evaluation, at most ``max_per_evaluation`` (32) so
that a 200,000-generation evaluation costs 32 prefills, not 10,000. ``rate_bps`` 0 audits none.

Each sampled generation: its bundle from the content endpoint (``MAX_BUNDLE_BYTES``; missing is
``not on endpoint``, unreadable ``invalid bundle``), then ``committee.audits.audit_bundle``: the
judge on the evidence a challenge would carry with the verifier's full check, and an upheld
judgement opens that challenge against the node that signed the receipt (``failed``, with its
id). A bundle whose request or answer is not what the node signed is ``invalid bundle``: the
evaluator's fault, which no contract can slash; the evaluation then fails `gym verify
evaluation` itself. The evaluation's own findings: ``unverified`` (a local run: no receipts),
``unauditable`` (entry or receipt table missing, invalid, or not the entry's shape).

Bounds: per log and pass at most ``max_checks`` bundles, whole checkpoints at a time (one
checkpoint: at most ``MAX_EVALUATION_LEAVES`` entries, as many receipt tables, and
``max_per_evaluation`` bundles each); the named evaluations likewise share ``max_checks`` a
pass, whole evaluations at a time. A receipt table is read up to
``MAX_RECEIPT_TABLE_BYTES``. A bundle missing, unreadable or failing to be judged ends in its
generation's finding; any other failure of the content store or the chain ends the log's (or
the named evaluation's) pass in an ``error`` finding, and it is audited again at the next pass.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

from eth_abi import encode as abi_encode
from eth_utils import keccak

from committee.audits import (
    AUDIT_DELAY_BLOCKS,
    DEFAULT_MAX_CHECKS,
    DEFAULT_RATE_BPS,
    ERROR,
    INVALID_BUNDLE,
    MAX_RATE_BPS,
    UNAUDITABLE,
    AuditCursor,
    AuditedCheckpoint,
    AuditFinding,
    AuditPass,
    Check,
    JudgeEvidence,
    OpenChallenge,
    UnauditableCheckpoint,
    audit_bundle,
    audit_new_checkpoints,
    checkpoint_manifest,
    judge_checked,
    sample_threshold,
    seed_block,
)
from inference_node.evaluation_check import generations
from inference_node.verify import MAX_BUNDLE_BYTES
from ledger.chain import AnchoredEvent
from ledger.entries import MAX_ENTRY_BYTES, EvaluationEntry, decode_entry, is_content_cid
from ledger.errors import EntryError, NotFoundError, VerificationError
from ledger.evaluations import (
    MAX_RECEIPT_TABLE_BYTES,
    ReceiptTableError,
    check_receipt_table,
    decode_receipt_table,
)
from ledger.json_input import JSONInputError, parse_json

DEFAULT_MAX_PER_EVALUATION = 32  # generations re-run per evaluation, whatever its size
MAX_EVALUATION_LEAVES = 256  # new leaves of one evaluation-log checkpoint whose entries are read

NOT_ON_ENDPOINT, UNVERIFIED = "not on endpoint", "unverified"

__all__ = ["DEFAULT_MAX_PER_EVALUATION", "MAX_EVALUATION_LEAVES", "NOT_ON_ENDPOINT",
           "UNVERIFIED", "EvaluationAuditor", "evaluation_seed", "named_seed", "sample_size",
           "sampled_generations"]

_ABSENT = (NotFoundError,)  # the content endpoint does not have it
_INVALID = (VerificationError, EntryError, JSONInputError, ReceiptTableError)  # it is not one


def evaluation_seed(seed: bytes, leaf: int) -> bytes:
    """``keccak256(abi.encode(bytes32 seed, uint256 leaf))``: the seed of the evaluation at
    ``leaf`` of a checkpoint seeded by ``seed`` (``committee.audits.audit_seed``)."""
    return keccak(abi_encode(["bytes32", "uint256"], [bytes(seed), leaf]))


def named_seed(block_hash: bytes, cid: str) -> bytes:
    """``keccak256(abi.encode(bytes32 block_hash, string cid))``: the seed of an evaluation
    named by its CID, audited when ``block_hash``'s block was the head."""
    return keccak(abi_encode(["bytes32", "string"], [bytes(block_hash), cid]))


def sample_size(count: int, rate_bps: int, most: int) -> int:
    """``min(most, count, max(1, ceil(count * rate_bps / 10000)))``; 0 for no generations or a
    zero rate."""
    sample_threshold(rate_bps)  # refuses a rate outside basis points
    if count <= 0 or rate_bps == 0:
        return 0
    return min(most, count, max(1, -(-count * rate_bps // MAX_RATE_BPS)))


def sampled_generations(seed: bytes, count: int, rate_bps: int, most: int) -> list[int]:
    """The positions of ``[0, count)`` audited under ``seed``, in order: the ``sample_size``
    whose ``keccak256(abi.encode(bytes32 seed, uint256 position))`` is lowest."""
    seed = bytes(seed)
    return sorted(heapq.nsmallest(sample_size(count, rate_bps, most), range(count),
                                  key=lambda g: keccak(seed + g.to_bytes(32, "big"))))


class EvaluationAuditor:
    """Random audits of the receipts of the evaluations on ``logs`` (on-chain log ids) and of
    those ``named`` by CID (module docstring). ``contract``: the ``ledger.chain.LedgerContract``;
    ``content``: the content endpoint holding the entries, receipt tables and bundles;
    ``from_block``: where a log never audited is read from; ``check``/``judge_evidence`` and
    ``open_challenge(bundle, reason)``: as ``committee.audits.Auditor``'s (the reason it gets
    names the evaluation and generation). ``run_once`` returns an ``AuditPass`` of
    ``AuditFinding``s naming the evaluation."""

    def __init__(self, contract: Any, content: Any, *, from_block: int,
                 logs: Iterable[int] = (), named: Iterable[str] = (),
                 check: Check | None = None, judge_evidence: JudgeEvidence | None = None,
                 open_challenge: OpenChallenge, rate_bps: int = DEFAULT_RATE_BPS,
                 delay_blocks: int = AUDIT_DELAY_BLOCKS, confirmations: int = 0,
                 max_checks: int = DEFAULT_MAX_CHECKS,
                 max_per_evaluation: int = DEFAULT_MAX_PER_EVALUATION,
                 cursor: AuditCursor | None = None) -> None:
        sample_threshold(rate_bps)
        if delay_blocks < 1 or confirmations < 0 or max_checks < 1 or from_block < 0 \
                or max_per_evaluation < 1:
            raise ValueError("delay_blocks, max_checks and max_per_evaluation must be >= 1, "
                             "confirmations and from_block >= 0")
        if (check is None) == (judge_evidence is None):
            raise ValueError("an EvaluationAuditor needs check or judge_evidence (one of them)")
        self.logs = list(dict.fromkeys(logs))
        self.named = list(dict.fromkeys(named))
        if any(type(log_id) is not int or log_id <= 0 for log_id in self.logs):
            raise ValueError(f"log ids are positive integers, got {self.logs!r}")
        bad = [cid for cid in self.named if not is_content_cid(cid)]
        if bad:
            raise ValueError(f"not an entry CID: {bad[0][:80]!r}")
        self.contract, self.content, self.from_block = contract, content, from_block
        self.open_challenge = open_challenge
        self.judge_evidence = judge_evidence or (lambda evidence, digest: judge_checked(
            evidence, digest, check=check))
        self.rate_bps, self.delay_blocks, self.confirmations = rate_bps, delay_blocks, confirmations
        self.max_checks, self.max_per_evaluation = max_checks, max_per_evaluation
        self.cursor = cursor if cursor is not None else AuditCursor()

    def run_once(self) -> AuditPass:
        """Audit the evaluations anchored on the logs since the cursor and the named ones not
        audited yet, advancing the cursor."""
        result = AuditPass()
        try:
            head = self.contract.w3.eth.block_number
        except Exception as exc:  # noqa: BLE001 - the verifier's RPC: nothing to audit now
            result.findings.append(AuditFinding(0, "", 0, None, None, ERROR, "chain",
                                                f"{type(exc).__name__}: {exc}"[:500]))
            return result
        for log_id in self.logs:
            try:
                self._audit_log(log_id, head, result)
            except Exception as exc:  # noqa: BLE001 - one log never stops the others
                result.findings.append(AuditFinding(log_id, "", 0, None, None, ERROR, "log",
                                                    f"{type(exc).__name__}: {exc}"[:500]))
        checks = 0
        for cid in self.named:
            if cid in self.cursor.evaluations:
                continue
            if checks >= self.max_checks:
                break
            block = max(head - self.confirmations, 0)
            try:
                seed = named_seed(bytes(self.contract.w3.eth.get_block(block)["hash"]), cid)
                found = self.audit_evaluation(cid, seed)
            except Exception as exc:  # noqa: BLE001 - the content store or chain: next pass
                result.findings.append(AuditFinding(0, "", 0, None, None, ERROR, "evaluation",
                                                    f"{type(exc).__name__}: {exc}"[:500],
                                                    evaluation=cid))
                continue
            result.findings.extend(found)
            checks += sum(1 for f in found if f.cid is not None)
            self.cursor.evaluations[cid] = block
        return result

    def _audit_log(self, log_id: int, head: int, result: AuditPass) -> None:
        audit_new_checkpoints(
            self, log_id, "", head, result,
            lambda event, old, seed: self._audit_checkpoint(event, old, seed, result))

    def _audit_checkpoint(self, event: AnchoredEvent, old_size: int | None, seed: bytes,
                          result: AuditPass) -> int:
        """Audit the evaluations among one checkpoint's new leaves; how many bundles it
        fetched. Findings are kept only once the whole checkpoint is audited (an error
        retries it whole)."""
        try:
            manifest = checkpoint_manifest(self.content, event, old_size,
                                           max_leaves=MAX_EVALUATION_LEAVES)
        except UnauditableCheckpoint as exc:
            result.findings.append(AuditFinding(event.log_id, "", event.size, None, None,
                                                UNAUDITABLE, exc.reason, exc.detail[:500]))
            return 0
        findings: list[AuditFinding] = []
        audited: list[int] = []
        for leaf in range(manifest.from_size, event.size):
            cid = manifest.entries[leaf - manifest.from_size]
            where = {"log_id": event.log_id, "checkpoint": event.size, "leaf": leaf}
            try:
                entry = self._entry(cid)
            except (*_ABSENT, *_INVALID) as exc:
                findings.append(AuditFinding(event.log_id, "", event.size, leaf, None,
                                             UNAUDITABLE, "entry", str(exc)[:500],
                                             evaluation=cid))
                continue
            if isinstance(entry, EvaluationEntry):
                audited.append(leaf)
                findings += self.audit_evaluation(cid, evaluation_seed(seed, leaf), entry=entry,
                                                  **where)
        result.checkpoints.append(AuditedCheckpoint(
            event.log_id, "", manifest.from_size, event.size, event.block_number,
            seed_block(event.block_number, self.delay_blocks), seed, tuple(audited)))
        result.findings.extend(findings)
        return sum(1 for f in findings if f.cid is not None)

    def _entry(self, cid: str) -> Any:
        return decode_entry(self.content.cat(cid, max_bytes=MAX_ENTRY_BYTES))

    def audit_evaluation(self, cid: str, seed: bytes, *, entry: EvaluationEntry | None = None,
                         log_id: int = 0, checkpoint: int = 0, leaf: int | None = None
                         ) -> list[AuditFinding]:
        """The findings of evaluation ``cid``'s audit under ``seed``: one per sampled
        generation, or one for the evaluation. Raises only what the content store raises
        besides a missing or invalid document (the caller retries)."""
        def finding(outcome: str, reason: str = "", detail: str = "",
                    challenge_id: int | None = None, *, bundle: str | None = None,
                    generation: str = "") -> AuditFinding:
            return AuditFinding(log_id, "", checkpoint, leaf, bundle, outcome, reason,
                                detail[:500], challenge_id, evaluation=cid,
                                generation=generation)

        try:
            entry = entry if entry is not None else self._entry(cid)
        except (*_ABSENT, *_INVALID) as exc:
            return [finding(UNAUDITABLE, "entry", f"{cid}: {exc}")]
        if not isinstance(entry, EvaluationEntry):
            return [finding(UNAUDITABLE, "not_an_evaluation", f"{cid} is a {entry.type} entry")]
        if entry.receipts == "none":
            return [finding(UNVERIFIED, "unverified", "a run on a local model: no receipts to "
                            "audit (the evaluator's word)")]
        try:
            table = decode_receipt_table(self.content.cat(entry.receipts.table,
                                                          max_bytes=MAX_RECEIPT_TABLE_BYTES))
            check_receipt_table(table, entry)
        except (*_ABSENT, *_INVALID) as exc:
            return [finding(UNAUDITABLE, "receipt_table",
                            f"receipt table {entry.receipts.table}: {exc}")]
        bundles = [bundle for arm in entry.arms for bundle in table.arms[arm]]
        labels = generations(entry)
        sample = sampled_generations(seed, len(bundles), self.rate_bps, self.max_per_evaluation)
        out = []
        for position in sample:
            label = str(labels[position])
            out.append(finding(*self._audit_generation(cid, bundles[position], label),
                               bundle=bundles[position], generation=label))
        return out

    def _audit_generation(self, cid: str, bundle_cid: str, label: str
                          ) -> tuple[str, str, str, int | None]:
        try:
            data = self.content.cat(bundle_cid, max_bytes=MAX_BUNDLE_BYTES)
        except _ABSENT as exc:
            return NOT_ON_ENDPOINT, "missing", f"bundle {bundle_cid}: {exc}", None
        except VerificationError as exc:  # a DAG the bounded reader refuses, or too large
            return INVALID_BUNDLE, "malformed", f"bundle {bundle_cid}: {exc}", None
        try:
            bundle = parse_json(data, max_bytes=MAX_BUNDLE_BYTES, what=f"bundle {bundle_cid}")
        except JSONInputError as exc:
            return INVALID_BUNDLE, "malformed", str(exc), None
        if not isinstance(bundle, dict):
            return INVALID_BUNDLE, "malformed", f"bundle {bundle_cid} is not an object", None

        def open_challenge(bundle: dict, reason: str) -> int:
            return self.open_challenge(bundle, f"{reason} (evaluation {cid}, {label})")

        return audit_bundle(bundle, self.judge_evidence, open_challenge)
