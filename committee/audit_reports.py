"""Audit reports: what a verifier's random audits found, published so that anyone can count
them (docs/rewards.md "Audits").

Publishing (``AuditPublisher``): for each checkpoint one ``Auditor.run_once`` audited, an
``audit`` entry (``ledger.entries.AuditEntry``: the node, its log, the checkpoint's leaves
``[from_size, size)``, the rate, and per sampled leaf its outcome) is appended to a log of the
verifier's named ``AUDITS_LOG`` on chain (created at first use, owned by the verifier's
account; a verifier that lost its data directory starts another, and counting reads the first
``MAX_AUDIT_LOGS`` it created), and the log is anchored once per pass. A checkpoint whose
sample is empty is not reported: nothing was checked. Reports not appended yet (the chain or
the content endpoint failed) are kept in ``pending_file`` (written before the auditor's cursor
moves past their checkpoints) and sent again at the next pass, after a restart too; at most
``MAX_PENDING_REPORTS``, the oldest dropped beyond.

Checking (``ReportChecker.check``): a report counts only when the chain agrees with it. Its node is
a registered node whose receipt log is ``log_id``; the log has a checkpoint at ``size``
anchored in the epoch, right after one at ``from_size``; the checkpoint's seed block is mined
by the epoch's end; ``rate_bps`` is at least ``MIN_RATE_BPS``; and ``leaves`` are exactly the
leaves ``committee.audits.sampled_leaves`` draws at that rate; and it called ``verified`` no
receipt that a challenge upheld by the epoch's end (a lazy verifier that reports every receipt
verified without checking loses the report's point when one of them is caught). Who anchored
the audits log is who reports: its owner's transaction is the report's signature.
"""

from __future__ import annotations

import contextlib
import json
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eth_utils import to_checksum_address

from committee.audits import (
    ABSTAINED,
    AUDIT_DELAY_BLOCKS,
    DEFAULT_RATE_BPS,
    MAX_CHECKPOINT_LEAVES,
    VERIFIED,
    AuditedCheckpoint,
    AuditFinding,
    AuditPass,
    audit_seed,
    leaf_draw,
    sample_threshold,
    seed_block,
)
from committee.rewards.table import AuditReport
from ledger.entries import AUDIT_OUTCOMES, MAX_AUDIT_LEAVES, AuditEntry, encode_entry

AUDITS_LOG = "gym-audits"  # the on-chain name of a verifier's log of audit reports
MAX_AUDIT_LOGS = 8  # logs of that name read per verifier
MIN_RATE_BPS = DEFAULT_RATE_BPS  # a report drawn at a lower rate counts for nothing
MAX_PENDING_REPORTS = 1024  # reports kept while publishing fails; the oldest dropped beyond


def report_entry(checkpoint: AuditedCheckpoint, findings: Iterable[AuditFinding],
                 rate_bps: int) -> AuditEntry | None:
    """The report of ``checkpoint`` from its ``findings`` (those of its sampled leaves; others
    are ignored), or None when its sample is empty or larger than a report holds."""
    sampled = checkpoint.sampled
    if not sampled or len(sampled) > MAX_AUDIT_LEAVES:
        return None
    outcome = {f.leaf: f.outcome for f in findings
               if f.log_id == checkpoint.log_id and f.checkpoint == checkpoint.size
               and f.leaf in sampled and f.outcome in AUDIT_OUTCOMES}
    return AuditEntry(node=checkpoint.operator.lower(), log_id=checkpoint.log_id,
                      from_size=checkpoint.old_size, size=checkpoint.size, rate_bps=rate_bps,
                      leaves=list(sampled),
                      outcomes=[outcome.get(leaf, ABSTAINED) for leaf in sampled])


class AuditPublisher:
    """Appends a report per audited checkpoint to the verifier's audits log and anchors it:
    ``store`` (a ``ledger.logstore.LogStore``) keeps it as ``gym-audits/<address>`` (one data
    directory may serve several verifiers), on chain it is named ``AUDITS_LOG``, created and
    anchored by ``contract`` (the ``LedgerContract`` with the verifier's key). With
    ``pending_file``, the reports not appended yet survive a restart (``LedgerError`` at start
    when the file cannot be read: it is left as it is)."""

    def __init__(self, store: Any, content: Any, contract: Any, rate_bps: int,
                 pending_file: Path | None = None) -> None:
        self.store, self.content, self.contract, self.rate_bps = store, content, contract, rate_bps
        self.log = f"{AUDITS_LOG}/{contract.account.address}"
        self.pending_file = pending_file
        self.pending: list[bytes] = self._read_pending()  # not appended yet (kept on failure)
        self.dropped = 0  # reports dropped beyond MAX_PENDING_REPORTS
        self.unanchored = True  # leaves appended and maybe not anchored (a restart: check)
        self.bound = False  # the log's chain binding checked

    def _read_pending(self) -> list[bytes]:
        from ledger.entries import decode_entry
        from ledger.errors import LedgerError

        if self.pending_file is None or not self.pending_file.exists():
            return []
        try:
            reports = json.loads(self.pending_file.read_bytes())["reports"]
            data = [bytes.fromhex(r) for r in reports][-MAX_PENDING_REPORTS:]
            for d in data:
                if not isinstance(decode_entry(d), AuditEntry):
                    raise TypeError("not an audit report")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise LedgerError(f"{self.pending_file}: cannot read the audit reports not yet "
                             f"published ({exc}); move it aside to start without them"
                             ) from None
        return data

    def _keep_pending(self, new: list[bytes]) -> None:
        """Add ``new`` reports to the pending ones (once each, the oldest dropped beyond
        ``MAX_PENDING_REPORTS``) and write them to ``pending_file`` (removed when none)."""
        for data in new:
            if data not in self.pending:
                self.pending.append(data)
        if len(self.pending) > MAX_PENDING_REPORTS:
            self.dropped += len(self.pending) - MAX_PENDING_REPORTS
            del self.pending[:-MAX_PENDING_REPORTS]
        if self.pending_file is None:
            return
        if not self.pending:
            self.pending_file.unlink(missing_ok=True)
            return
        tmp = self.pending_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"reports": [d.hex() for d in self.pending]}))
        tmp.replace(self.pending_file)

    def publish(self, result: AuditPass) -> list[str]:
        """Report ``result``'s checkpoints, and any a failed call kept; the CIDs appended.
        Raises what the store or chain raised: the reports stay pending for the next call,
        and leaves appended but not anchored are anchored by it."""
        from ledger.chain import LogKind
        from ledger.errors import NotFoundError
        from ledger.publish import (
            NothingToPublishError,
            append_entries,
            check_chain_binding,
            publish,
        )

        entries = [report_entry(c, result.findings, self.rate_bps) for c in result.checkpoints]
        self._keep_pending([encode_entry(e) for e in entries if e is not None])
        try:
            log = self.store.get_log(self.log)
        except NotFoundError:
            if not self.pending:
                return []
            log = self.store.create_log(self.log)
        data, cids = self.pending, []
        if log.chain_log_id is None:
            log_id, _ = self.contract.create_log(AUDITS_LOG, LogKind.PUBLISHER)
            self.store.set_chain_log_id(self.log, log_id, self.contract.binding())
            self.bound = True
        elif not self.bound:
            check_chain_binding(self.store, self.contract, self.log)
            self.bound = True
        if data:
            cids = list(append_entries(self.store, self.content, self.log, data).cids)
            self.pending, self.unanchored = [], True
            self._keep_pending([])
        if self.unanchored:
            with contextlib.suppress(NothingToPublishError):  # a restart: all anchored already
                publish(self.store, self.content, self.contract, self.log)
            self.unanchored = False
        return cids


# ----------------------------------------------------------------------------- counting


@dataclass(frozen=True)
class Checkpoint:
    """A node's receipt-log checkpoint: leaves ``[from_size, size)`` anchored in block
    ``block``."""

    from_size: int
    size: int
    block: int


BlockHash = Callable[[int], bytes]


class ReportChecker:
    """``check`` tells whether a report counts in the epoch ``[first, last]`` (module
    docstring). ``logs``: operator -> receipt log id of the nodes that count (active at the
    epoch's end); ``checkpoints``: log id -> its checkpoints anchored by ``last``, in order;
    ``block_hash(n)``; ``disproven``: log id -> its leaves whose receipts a challenge upheld
    by ``last`` (a report that called one of them verified counts nothing).

    Bounded work whatever the reports: each checkpoint's per-leaf draws are hashed once
    (``_Draws``), and a report costs its own length after that, at any rate it states."""

    def __init__(self, first: int, last: int, logs: dict[str, int],
                 checkpoints: dict[int, list[Checkpoint]], block_hash: BlockHash,
                 disproven: dict[int, set[int]] | None = None) -> None:
        self.first, self.last, self.block_hash = first, last, block_hash
        self.disproven = disproven or {}
        self.logs = {to_checksum_address(node): log for node, log in logs.items()}
        self.by_size = {log: {c.size: c for c in cps} for log, cps in checkpoints.items()}
        self._draws: dict[tuple[int, int], _Draws | None] = {}

    def checkpoint(self, entry: AuditEntry) -> Checkpoint | None:
        """The counted checkpoint ``entry`` reports on, or None."""
        if self.logs.get(to_checksum_address(entry.node)) != entry.log_id:
            return None
        checkpoint = self.by_size.get(entry.log_id, {}).get(entry.size)
        if checkpoint is None or checkpoint.from_size != entry.from_size \
                or not self.first <= checkpoint.block <= self.last \
                or seed_block(checkpoint.block, AUDIT_DELAY_BLOCKS) > self.last:
            return None
        return checkpoint

    def check(self, verifier: str, cid: str, entry: AuditEntry,
              checkpoint: Checkpoint | None = None) -> AuditReport | None:
        """The report ``entry`` (``cid``) of ``verifier`` as it counts, or None;
        ``checkpoint``: what ``checkpoint(entry)`` already returned, if asked."""
        checkpoint = checkpoint or self.checkpoint(entry)
        if checkpoint is None or entry.rate_bps < MIN_RATE_BPS or not entry.leaves:
            return None
        key = (entry.log_id, entry.size)
        if key not in self._draws:
            seed = audit_seed(self.block_hash(seed_block(checkpoint.block, AUDIT_DELAY_BLOCKS)),
                              entry.log_id, entry.size)
            self._draws[key] = (_Draws(seed, entry.from_size, entry.size)
                                if entry.size - entry.from_size <= MAX_CHECKPOINT_LEAVES
                                else None)
        draws = self._draws[key]
        if draws is None or not draws.is_sample(entry.leaves, entry.rate_bps):
            return None
        bad = self.disproven.get(entry.log_id)
        if bad and any(leaf in bad and outcome == VERIFIED
                       for leaf, outcome in zip(entry.leaves, entry.outcomes, strict=True)):
            return None  # it called verified a receipt a challenge proved bad
        checked = [o for o in entry.outcomes if o != ABSTAINED]
        return AuditReport(to_checksum_address(verifier), cid, to_checksum_address(entry.node),
                           entry.log_id, entry.size, len(checked),
                           bool(checked) and all(o == VERIFIED for o in checked))


class _Draws:
    """The draws of leaves ``[from_size, size)`` under ``seed`` (``committee.audits``'s rule),
    kept as their top 64 bits, sorted once: whether a list of leaves is exactly the sample at
    a rate costs the list's length and a binary search. A draw whose top 64 bits equal the
    threshold's is decided in full (a chance of 2^-64 per leaf)."""

    def __init__(self, seed: bytes, from_size: int, size: int) -> None:
        self.seed, self.from_size = bytes(seed), from_size
        self.top = array("Q", (int.from_bytes(leaf_draw(self.seed, i)[:8], "big")
                               for i in range(from_size, size)))
        self.sorted = array("Q", sorted(self.top))  # 8 bytes a leaf, as ``top``

    def _drawn(self, leaf: int, threshold: int, top: int) -> bool:
        mine = self.top[leaf - self.from_size]
        if mine != top:
            return mine < top
        return int.from_bytes(leaf_draw(self.seed, leaf), "big") < threshold

    def is_sample(self, leaves: list[int], rate_bps: int) -> bool:
        threshold = sample_threshold(rate_bps)
        top = threshold >> 192
        below = bisect_left(self.sorted, top)
        ties = bisect_right(self.sorted, top) - below
        if ties:  # count the drawn leaves among those whose top bits tie the threshold's
            below += sum(1 for i, t in enumerate(self.top)
                         if t == top and self._drawn(self.from_size + i, threshold, top))
        return len(leaves) == below and all(
            self.from_size <= leaf < self.from_size + len(self.top)
            and self._drawn(leaf, threshold, top) for leaf in leaves)


__all__ = ["AUDITS_LOG", "MAX_AUDIT_LOGS", "MAX_PENDING_REPORTS", "MIN_RATE_BPS",
           "AuditPublisher", "Checkpoint", "ReportChecker", "report_entry"]
