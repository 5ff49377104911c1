"""A curation proposal's measured evidence, read and re-verified for the proposal page.

``governance.evidence.proposal_evidence`` reads the evaluations the proposal's document names,
checks each against the leaves the calldata appends (``leaves``: the document is the
proposer's word) and sums it up; ``governance.evidence.verify`` re-checks every receipt,
request, library and figure from the chain and the content endpoint, as `gym gov show` does.

Verifying reads every receipt bundle of an evaluation, too slow to repeat on each page view,
so ``VerificationCache`` keeps each outcome by evidence CID: the entry is content-addressed and
cannot change, but the registration of the node that signed its receipts can (slashed,
deregistered), so an outcome is kept at most ``ttl_s`` (300 s), and at most ``max_items`` of
them (the least recently used go first). An outcome that says nothing (the chain or the
endpoint did not answer: ``verified`` None) is not kept, so the next view tries again.

Whatever an evidence document holds, the page shows it: an unreadable document, an
evaluation of something else, or a check that breaks comes back as an item that FAILS with
its reason (``failure``), never as an error page.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from governance.evidence import Evidence, EvidenceError, proposal_evidence, verify

log = logging.getLogger(__name__)


class VerificationCache:
    """``(verified, detail)`` by evidence CID, each for ``ttl_s`` seconds, at most
    ``max_items`` (least recently used dropped first); safe to share between request threads."""

    def __init__(self, ttl_s: float = 300.0, max_items: int = 256,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s, self.max_items, self.clock = ttl_s, max_items, clock
        self._items: OrderedDict[str, tuple[float, bool, str]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, cid: str) -> tuple[bool, str] | None:
        with self._lock:
            item = self._items.get(cid)
            if item is None:
                return None
            stored_at, verified, detail = item
            if self.clock() - stored_at >= self.ttl_s:
                del self._items[cid]
                return None
            self._items.move_to_end(cid)
            return verified, detail

    def put(self, cid: str, verified: bool, detail: str) -> None:
        with self._lock:
            self._items[cid] = (self.clock(), verified, detail)
            self._items.move_to_end(cid)
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True)
class _Chain:
    deployment_block: int  # where event scans start


@dataclass(frozen=True)
class LedgerReader:
    """What ``governance.evidence`` reads through (a ``LedgerRuntime``'s ``content``,
    ``contract`` and ``chain.deployment_block``), made of the dashboard's own."""

    content: Any  # ledger.content.ContentStore
    contract: Any  # ledger.chain.LedgerContract
    chain: _Chain

    @classmethod
    def of(cls, content: Any, contract: Any, deployment_block: int) -> LedgerReader:
        return cls(content, contract, _Chain(deployment_block))


def failure(cid: str, reason: str, message: str) -> Evidence:
    """An item that FAILS with ``reason``: what the page shows for evidence it cannot use
    (``cid``: the evaluation's, or the proposal document's when that cannot be read)."""
    return Evidence(cid, None, [], False, f"FAILS ({reason}): {message}")


def read_evidence(reader: LedgerReader, document_cid: str, leaves: Sequence[tuple[int, str]],
                  cache: VerificationCache, *, registry: Any = None,
                  trusted_verifiers: frozenset[str] = frozenset()) -> list[Evidence]:
    """The evidence document ``document_cid`` names for the proposal appending ``leaves``
    (``(source log id, entry CID)``), each summarized and verified (the cached outcome when
    there is one)."""
    try:
        found = proposal_evidence(reader, document_cid, check=False, leaves=leaves)
    except EvidenceError as exc:
        return [failure(document_cid, exc.reason, str(exc))]
    except Exception as exc:  # hostile bytes the checks did not foresee: shown, not a 500
        log.exception("reading the evidence of proposal document %s", document_cid)
        return [failure(document_cid, "malformed", f"the proposal document's evidence cannot "
                        f"be read: {type(exc).__name__}: {exc}")]
    out = []
    for item in found:
        if item.entry is None:  # not this proposal's evidence: the reason is in the item
            out.append(item)
            continue
        known = cache.get(item.cid)
        if known is not None:
            item.verified, item.verify_detail = known
        else:
            try:
                verify(item, reader, registry, trusted_verifiers)
            except Exception as exc:  # a check that breaks must not take the page with it
                log.exception("verifying evaluation %s", item.cid)
                item.verified = None
                item.verify_detail = f"could not be checked: {type(exc).__name__}: {exc}"
            if item.verified is not None:
                cache.put(item.cid, item.verified, item.verify_detail)
        out.append(item)
    return out
