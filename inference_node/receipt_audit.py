"""Auditing a node's receipt log: what `gym audit` adds when the replayed log holds receipts.

``ledger.audit.audit_log`` replays the log from chain + content store and hands every valid
entry to a ``ReceiptCollector`` (its ``on_entry`` hook). Then, with no model and no node:

- ``check_signatures``: every receipt's EIP-712 signature under the deployment's domain (chain
  id + ExperienceLedger address, as ``verify.check_receipt_bundle`` builds it) recovers to its
  ``node``, and all receipts are signed by one signer, the node (the most common signer; the
  others are named). Every failure is reported with its receipt's CID and leaf, not only the
  first.
- ``verify_sample`` (``--sample N [--seed S]``): N receipts chosen at random (``random.Random``
  seeded with S: the same S chooses the same receipts), each bundle fetched from the node
  (``bundle_sources.fetch_bundle``) and checked in full by the caller's ``check`` (``gym
  audit`` passes ``check_receipt_bundle`` with the chain, the NodeRegistry and ``--model``).
  A bundle the node no longer retains (404) is reported as ``not retained``: the node's
  retention period is over, which says nothing about the receipt; it does not fail the audit.
  A node that cannot be reached does (the sample could not be checked).

Reasons are ``inference_node.errors.REASONS`` values, plus ``not_a_receipt`` (an entry of
another type in a log that holds receipts) and ``unreachable``.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from inference_node.bundle_sources import AccessRefusedError, NotRetainedError
from inference_node.errors import NodeError, ReceiptError
from inference_node.receipts import ReceiptDomain, verify_receipt_signature
from ledger.entries import ReceiptEntry, decode_entry
from ledger.errors import EntryError

if TYPE_CHECKING:
    from rich.console import Console

MAX_SAMPLE = 10_000  # bundles fetched and checked in one audit


@dataclass(frozen=True)
class AuditedReceipt:
    leaf: int
    cid: str
    receipt: ReceiptEntry


@dataclass(frozen=True)
class ReceiptFinding:
    leaf: int
    cid: str
    outcome: str  # "failed", "verified", "not retained", "refused", "unreachable"
    reason: str  # a REASONS value (or not_a_receipt, unreachable, not_retained); "" when verified
    detail: str


class ReceiptCollector:
    """``audit_log``'s ``on_entry`` hook: keeps the receipts of the replayed log, in order."""

    def __init__(self) -> None:
        self.receipts: list[AuditedReceipt] = []
        self.others: list[tuple[int, str, str]] = []  # (leaf, cid, entry type)

    def __call__(self, leaf: int, cid: str, data: bytes) -> None:
        try:
            entry = decode_entry(data)
        except EntryError:  # audit_log hands over valid entries only
            return
        if isinstance(entry, ReceiptEntry):
            self.receipts.append(AuditedReceipt(leaf, cid, entry))
        else:
            self.others.append((leaf, cid, entry.type))


@dataclass
class ReceiptAuditReport:
    receipts: int
    signer: str | None = None  # the node: the most common signer
    signers: dict[str, int] = field(default_factory=dict)
    failures: list[ReceiptFinding] = field(default_factory=list)  # signatures, other entries
    sampled: list[ReceiptFinding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures and all(s.outcome in ("verified", "not retained")
                                         for s in self.sampled)


def check_signatures(collector: ReceiptCollector, domain: ReceiptDomain) -> ReceiptAuditReport:
    """Every receipt's signature under ``domain``, and one signer for all (module docstring)."""
    report = ReceiptAuditReport(len(collector.receipts))
    for leaf, cid, kind in collector.others:
        report.failures.append(ReceiptFinding(leaf, cid, "failed", "not_a_receipt",
                                              f"a {kind!r} entry in a receipt log"))
    signed_by: list[tuple[AuditedReceipt, str]] = []
    for item in collector.receipts:
        try:
            signed_by.append((item, verify_receipt_signature(item.receipt, domain)))
        except ReceiptError as exc:
            report.failures.append(ReceiptFinding(item.leaf, item.cid, "failed", exc.reason,
                                                  str(exc)))
    counts = collections.Counter(signer for _, signer in signed_by)
    report.signers = dict(counts)
    if counts:
        report.signer = counts.most_common(1)[0][0]
    for item, signer in signed_by:
        if signer != report.signer:
            report.failures.append(ReceiptFinding(
                item.leaf, item.cid, "failed", "wrong_signer", f"signed by {signer}, the log's "
                f"other receipts by {report.signer}"))
    report.failures.sort(key=lambda f: f.leaf)
    return report


def choose_sample(receipts: list[AuditedReceipt], n: int, seed: int | None
                  ) -> list[AuditedReceipt]:
    """``n`` receipts chosen at random (all when fewer), reproducibly for a given ``seed``,
    in log order."""
    if not 0 < n <= MAX_SAMPLE:
        raise NodeError(f"--sample must be between 1 and {MAX_SAMPLE}, got {n}")
    chosen = random.Random(seed).sample(receipts, min(n, len(receipts)))
    return sorted(chosen, key=lambda r: r.leaf)


def verify_sample(report: ReceiptAuditReport, chosen: list[AuditedReceipt],
                  fetch: Callable[[str], Any], check: Callable[[Any], Any],
                  progress: Callable[[int], None] | None = None) -> None:
    """Fetch (``fetch(cid)``, ``bundle_sources.fetch_bundle``) and check (``check(bundle)``)
    each chosen receipt's bundle; every outcome goes to ``report.sampled``."""
    for done, item in enumerate(chosen, start=1):
        try:
            bundle = fetch(item.cid)
            check(bundle)
        except NotRetainedError as exc:
            finding = ReceiptFinding(item.leaf, item.cid, "not retained", "not_retained",
                                     str(exc))
        except ReceiptError as exc:
            finding = ReceiptFinding(item.leaf, item.cid, "failed", exc.reason, str(exc))
        except AccessRefusedError as exc:  # up, but this reader has no right to the bundle
            finding = ReceiptFinding(item.leaf, item.cid, "refused", "refused", str(exc))
        except NodeError as exc:
            finding = ReceiptFinding(item.leaf, item.cid, "unreachable", "unreachable",
                                     str(exc))
        else:
            finding = ReceiptFinding(item.leaf, item.cid, "verified", "", "every check passed")
        report.sampled.append(finding)
        if progress is not None:
            progress(done)


def print_receipt_audit(report: ReceiptAuditReport, console: Console, owner: str | None = None
                        ) -> None:
    """The receipt part of `gym audit`'s report: signer, failures, the sample's outcomes."""
    from rich.table import Table

    from ledger.tables import print_table

    whose = ""
    if owner is not None and report.signer is not None:
        whose = (" (the log's owner)" if report.signer == owner.lower()
                 else f" (not the log's owner {owner})")
    console.print(f"{report.receipts} receipts; signer {report.signer}{whose}", highlight=False)
    if report.failures:
        table = Table("leaf", "receipt", "reason", "detail", title="receipt failures")
        for f in report.failures:
            table.add_row(str(f.leaf), f.cid, f.reason, f.detail)
        print_table(table, console)
    else:
        console.print(f"[green]every receipt's signature is valid[/green], all by {report.signer}",
                      highlight=False)
    if report.sampled:
        table = Table("leaf", "receipt", "outcome", "reason", "detail",
                      title=f"{len(report.sampled)} receipts checked in full")
        colour = {"verified": "green", "not retained": "yellow"}
        for s in report.sampled:
            table.add_row(str(s.leaf), s.cid, f"[{colour.get(s.outcome, 'red')}]{s.outcome}[/]",
                          s.reason, s.detail)
        print_table(table, console)
        gone = sum(s.outcome == "not retained" for s in report.sampled)
        if gone:
            console.print(f"[yellow]{gone} bundles not retained[/yellow] by the node (its "
                          "retention period is over): not checked, not counted as failures")
    if report.ok:
        console.print("[green]receipt audit clean[/green]")
    else:
        bad = len(report.failures) + sum(s.outcome in ("failed", "refused", "unreachable")
                                         for s in report.sampled)
        console.print(f"[red]receipt audit failed[/red]: {bad} receipts")
