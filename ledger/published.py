"""A published log as any host sees it: replayed from the chain's events and the content
endpoint, with no local log store (that store is the publisher's cache, not a requirement).

``read_published_log`` runs the audit's replay (``ledger.audit.audit_log``: every batch manifest
and entry fetched, re-hashed and validated, every anchored root recomputed) and keeps each
leaf's hash and entry CID, so a token holder, an auditor or a prover on another host gets what
the publisher's store would give: inclusion proofs at an anchored checkpoint, the entries, the
anchors. A log that does not replay cleanly is refused with its first discrepancy.

    published = read_published_log(contract, content, log_id, from_block=deployment_block)
    published.proof(2)                    # audit path of leaf 2 at the last checkpoint
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ledger import rfc9162
from ledger.entries import entry_leaf_hash
from ledger.errors import LedgerError

if TYPE_CHECKING:
    from ledger.audit import CheckpointAudit
    from ledger.chain import LedgerContract, LogKind
    from ledger.content import ContentStore


class PublishedLogError(LedgerError):
    """A published log that cannot be read whole from the chain and the content endpoint."""


@dataclass
class PublishedLog:
    """Log ``log_id`` as replayed: its name, kind, on-chain size and root, every leaf's hash
    and entry CID (``size`` of each), and its anchored checkpoints."""

    log_id: int
    name: str
    kind: LogKind
    size: int
    root: bytes
    leaf_hashes: list[bytes]
    entry_cids: list[str]
    checkpoints: list[CheckpointAudit]

    def proof(self, index: int, size: int | None = None) -> list[bytes]:
        """The RFC 9162 audit path of leaf ``index`` in the tree of ``size`` (default: the
        whole log, its last anchored checkpoint)."""
        size = self.size if size is None else size
        if not 0 <= index < size <= self.size:
            raise PublishedLogError(f"log {self.name!r} (on-chain log {self.log_id}) has no "
                                    f"leaf {index} at size {size}: it has {self.size} anchored")
        return rfc9162.inclusion_proof(self.leaf_hashes[:size], index)

    def root_at(self, size: int) -> bytes:
        return rfc9162.root(self.leaf_hashes[:size])


def read_published_log(contract: LedgerContract, content: ContentStore, log_id: int, *,
                       from_block: int = 0, keep: Callable[[int, str, bytes], None] | None = None,
                       progress: Callable[[int, int], None] | None = None) -> PublishedLog:
    """Replay log ``log_id`` (module docstring). ``keep(index, cid, bytes)`` sees each entry
    as it is read (to keep the ones a caller wants); ``PublishedLogError`` names the first
    discrepancy of a log that does not replay cleanly."""
    from ledger.audit import audit_log

    leaf_hashes: list[bytes] = []
    cids: list[str] = []

    def collect(index: int, cid: str, data: bytes) -> None:
        if index == len(leaf_hashes):
            leaf_hashes.append(entry_leaf_hash(data))
            cids.append(cid)
        if keep is not None:
            keep(index, cid, data)

    report = audit_log(contract, content, log_id, from_block=from_block, on_entry=collect,
                       progress=progress)
    if not report.ok:
        raise PublishedLogError(
            f"log {report.name!r} (on-chain log {log_id}) does not replay cleanly from the chain "
            f"and the content endpoint: {report.discrepancies[0].message}; see "
            f"`gym audit {log_id}`")
    if len(leaf_hashes) != report.size or rfc9162.root(leaf_hashes) != report.root:
        raise PublishedLogError(f"the replay of log {log_id} does not end at its anchored root")
    return PublishedLog(log_id, report.name, report.kind, report.size, report.root, leaf_hashes,
                        cids, report.checkpoints)


__all__ = ["PublishedLog", "PublishedLogError", "read_published_log"]
