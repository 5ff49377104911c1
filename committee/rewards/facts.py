"""An epoch's facts, read from chain + content endpoint alone (docs/rewards.md "Sources").

Every read is bounded at the epoch's last block (events in ``[first, last]``, state read at
``last``), so a table computed later, or by another verifier, sees the same chain. Content is
what the chain names (batch manifests, entries); a document the endpoint answers it does not
have, or that does not decode, counts nothing (the same for everyone who asks), while an
endpoint that cannot be reached stops the computation (``ContentStoreUnreachableError``): a
table computed from part of the content would differ from the others'.

Bounded work: of one log, an epoch reads at most ``MAX_EPOCH_LEAVES`` leaves and
``MAX_EPOCH_BYTES`` of entries, in log order (a checkpoint past the leaf budget and every leaf
past the byte budget count nothing, the same cut for everyone): a node that anchors more than
that costs the verifiers no more, and it could only have moved its own slice.

- **uses** (``data``): the checkpoints of each registered node's receipt log anchored in the
  epoch; each receipt of their batch manifests names the experiences it injected; an
  experience counts when it is the ``add`` of a leaf of the curated library by the epoch's
  end; its author is the owner of the log the leaf was curated from (at its curation). A
  receipt that a challenge proved bad by the epoch's end (``NodeRegistry.upheld_receipts``:
  its operator and EIP-712 hash) counts for nobody.
- **stakes**: each node active at the epoch's last block, with its stake then.
- **contributions** (``compute``): the ``run`` entries curated into the library in the epoch,
  and the contribution entries naming each, signed by their contributor, from the run's own
  log as anchored by the epoch's end.
- **settlements** (``verification``): committee challenges finalized in the epoch and never
  reversed, with the verifiers of the slots that signed, as the slots were when it settled.
- **audits** (``verification``, ``availability``): the audit reports
  (``committee.audit_reports``) in the ``gym-audits`` logs of each verifier active at the
  epoch's last block (the first 8 it created, those it still owns then), anchored in
  the epoch, on checkpoints of the counted nodes anchored in the epoch (within the log's
  ``MAX_EPOCH_LEAVES``, so a report costs at most that much hashing); a report counts only
  when the chain agrees with it (``ReportChecker``), and only a verifier's first on each
  checkpoint (a wrong first report is not made good by a later one); a report that called
  such a proven-bad receipt ``verified`` counts nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eth_utils import to_checksum_address

from committee.rewards.table import (
    AuditReport,
    Contribution,
    EpochFacts,
    EpochWindow,
    RewardsError,
    Settlement,
    Use,
)
from ledger.batches import BatchError, fetch_batch, verify_batch
from ledger.entries import (
    MAX_ENTRY_BYTES,
    AuditEntry,
    ContributionEntry,
    ExperienceEntry,
    ReceiptEntry,
    RunEntry,
    decode_entry,
)
from ledger.errors import (
    ContentIntegrityError,
    ContentStoreError,
    ContentStoreUnreachableError,
    EntryError,
    NotFoundError,
    VerificationError,
)

if TYPE_CHECKING:
    from committee.client import VerifierCommittee
    from inference_node.registry import NodeRegistry
    from ledger.chain import AnchoredEvent, LedgerContract
    from ledger.content import ContentStore

MAX_EPOCH_LEAVES = 1 << 20  # leaves of one log read for an epoch, in log order
MAX_EPOCH_BYTES = 1 << 30  # bytes of its entries


@dataclass
class Sources:
    """The clients an epoch is read through (each bound to the deployment)."""

    ledger: LedgerContract
    registry: NodeRegistry
    committee: VerifierCommittee
    content: ContentStore
    curated_log_id: int
    from_block: int = 0  # the deployment block: where event scans start


def sources_from(rt: Any, registry_address: str, committee_address: str) -> Sources:
    """The ``Sources`` of a ledger runtime (its chain, content endpoint and curated library)
    and the deployment's NodeRegistry and VerifierCommittee."""
    from committee.client import VerifierCommittee
    from inference_node.registry import NodeRegistry

    w3, start = rt.contract.w3, rt.chain.deployment_block
    if rt.chain.curated_log_id is None:
        raise RewardsError("the deployment has no curated library")
    return Sources(ledger=rt.contract,
                   registry=NodeRegistry(w3, registry_address, from_block=start),
                   committee=VerifierCommittee(w3, committee_address, from_block=start),
                   content=rt.content, curated_log_id=rt.chain.curated_log_id, from_block=start)


def _read(content: ContentStore, cid: str, max_bytes: int = MAX_ENTRY_BYTES
          ) -> tuple[Any | None, int]:
    """(the entry ``cid`` decoded, its size); None when the endpoint does not have it, it is
    larger than ``max_bytes`` or it is no entry."""
    try:
        data = content.cat(cid, max_bytes=max_bytes)
    except ContentStoreUnreachableError:
        raise
    except (NotFoundError, ContentStoreError, ContentIntegrityError, ValueError):
        return None, max_bytes
    try:
        return decode_entry(data), len(data)
    except (EntryError, ValueError):
        return None, len(data)


@dataclass
class _Budget:
    """What one log may cost a table's computation in an epoch (a node that anchors more
    counts no more: the cut falls at the same leaf for everyone, in log order)."""

    leaves: int
    bytes: int


def _checkpoint_entries(sources: Sources, log_id: int, events: list[AnchoredEvent],
                        first: int):
    """(leaf index, cid, entry or None) of the leaves of log ``log_id``'s checkpoints anchored
    from block ``first`` on (``events``: the log's ``Anchored`` events from its first, in chain
    order), in log order, within a ``_Budget``; a checkpoint whose manifest is missing or does
    not match its event is skipped whole."""
    budget = _Budget(MAX_EPOCH_LEAVES, MAX_EPOCH_BYTES)
    previous = 0
    for event in events:
        old, previous = previous, event.size
        if event.block_number < first or event.batch_cid is None:
            continue
        if event.size - old > budget.leaves:
            return  # the rest of the epoch's leaves of this log are past its budget
        try:
            manifest = fetch_batch(sources.content, event.batch_cid)
            verify_batch(manifest, log_id=log_id, from_size=old, to_size=event.size)
        except ContentStoreUnreachableError:
            raise
        except (NotFoundError, ContentStoreError, VerificationError, BatchError, ValueError):
            continue
        budget.leaves -= len(manifest.entries)
        for leaf, cid in enumerate(manifest.entries, start=old):
            if budget.bytes <= 0:
                return
            entry, size = _read(sources.content, cid, min(MAX_ENTRY_BYTES, budget.bytes))
            budget.bytes -= size
            yield leaf, cid, entry


def _owner_at(sources: Sources, log_id: int, block: int) -> str | None:
    try:
        info = sources.ledger.contract.functions.logInfo(log_id).call(block_identifier=block)
    except Exception:  # noqa: BLE001 (an unknown log id: no author)
        return None
    owner = to_checksum_address(info[0])
    return None if int(owner, 16) == 0 else owner


def curated(sources: Sources, last: int) -> list[tuple[str, Any, int, int]]:
    """(entry CID, entry or None, source log id, block) of every leaf curated into the library
    by block ``last``, in library order."""
    appended = sources.ledger.leaves_appended(sources.curated_log_id, sources.from_block, last)
    origin = {bytes(e["leafHash"]): (e["sourceLogId"], e["block"])
              for e in sources.ledger.leaves_curated(sources.curated_log_id, sources.from_block,
                                                     last)}
    out = []
    for event in appended:
        if event.entry_cid is None:
            continue
        source, block = origin.get(bytes(event.leaf_hash), (0, event.block_number))
        out.append((event.entry_cid, _read(sources.content, event.entry_cid)[0], source, block))
    return out


def gather(sources: Sources, window: EpochWindow,
           progress: Callable[[str, int, int], None] | None = None) -> EpochFacts:
    """The facts of ``window`` (module docstring)."""
    from inference_node.receipts import ReceiptDomain, receipt_hash

    first, last = window.first_block, window.last_block
    report = progress or (lambda what, done, total: None)

    # the library: who added each experience, and the runs curated in the epoch
    authors: dict[str, str] = {}
    runs: dict[str, int] = {}  # run entry CID -> its source log
    owners: dict[tuple[int, int], str | None] = {}
    for cid, entry, source, block in curated(sources, last):
        if isinstance(entry, ExperienceEntry) and entry.op == "add" or isinstance(entry, RunEntry):
            key = (source, block)
            if key not in owners:
                owners[key] = _owner_at(sources, source, block) if source else None
            if owners[key] is None:
                continue
            if isinstance(entry, ExperienceEntry):
                authors[cid] = owners[key]
            elif first <= block <= last:
                runs[cid] = source

    # the nodes: registered by the end of the epoch, active then with their stake
    stakes: dict[str, int] = {}
    logs: dict[str, int] = {}
    registry = sources.registry
    for args in registry.registered(to_block=last):
        operator = to_checksum_address(args["operator"])
        logs[operator] = int(args["receiptLogId"])
    for operator in logs:
        node = registry.contract.functions.nodeOf(operator).call(block_identifier=last)
        active = registry.contract.functions.isActive(operator).call(block_identifier=last)
        if active and node[4] > 0:
            stakes[operator] = int(node[4])

    # receipts a challenge proved bad by the epoch's end: they count for nobody, and an audit
    # report that called one verified counts nothing
    upheld = registry.upheld_receipts(to_block=last)
    domain = ReceiptDomain(sources.ledger.w3.eth.chain_id, sources.ledger.address)
    disproven: dict[int, set[int]] = {}  # receipt log id -> its leaves proven bad
    uses: Counter[tuple[str, str]] = Counter()
    anchored: dict[int, list[AnchoredEvent]] = {}
    for n, (operator, log_id) in enumerate(sorted(logs.items())):
        report("receipt logs", n, len(logs))
        if operator not in stakes:
            continue
        bad = upheld.get(operator)
        events = anchored[log_id] = sources.ledger.anchored(log_id, sources.from_block, last)
        for leaf, _cid, entry in _checkpoint_entries(sources, log_id, events, first):
            if not isinstance(entry, ReceiptEntry):
                continue
            if bad and receipt_hash(entry, domain) in bad:  # what the node signed
                disproven.setdefault(log_id, set()).add(leaf)
                continue
            for experience in set(entry.experience_ids):
                if experience in authors:
                    uses[(operator, experience)] += 1
    report("receipt logs", len(logs), len(logs))

    contributions: list[Contribution] = []
    for run_cid, log_id in sorted(runs.items()):
        seen: set[str] = set()
        events = sources.ledger.anchored(log_id, sources.from_block, last)
        for _leaf, cid, entry in _checkpoint_entries(sources, log_id, events, 0):
            if isinstance(entry, ContributionEntry) and entry.run_cid == run_cid \
                    and cid not in seen and _signed(entry):
                seen.add(cid)
                contributions.append(Contribution(run_cid, cid, entry.contributor,
                                                  entry.credited_samples))

    return EpochFacts(
        window=window, stakes=stakes,
        uses=tuple(Use(node, x, authors[x], count) for (node, x), count in sorted(uses.items())),
        contributions=tuple(contributions), settlements=tuple(settlements(sources, first, last)),
        audits=tuple(audit_reports(sources, first, last,
                                   {op: logs[op] for op in stakes}, anchored, disproven)))


def audit_reports(sources: Sources, first: int, last: int, logs: dict[str, int],
                  anchored: dict[int, list[AnchoredEvent]],
                  disproven: dict[int, set[int]] | None = None) -> list[AuditReport]:
    """The audit reports that count in ``[first, last]`` (module docstring): ``logs``,
    operator -> receipt log of the counted nodes; ``anchored``, their ``Anchored`` events by
    ``last``; ``disproven``, receipt log id -> the leaves a challenge upheld by ``last``
    proved bad."""
    from committee.audit_reports import AUDITS_LOG, MAX_AUDIT_LOGS, Checkpoint, ReportChecker
    from ledger.chain import LogKind

    committee = sources.committee
    slots = {to_checksum_address(args["verifier"]): int(args["index"]) for _, args in
             committee.events("VerifierRegistered", sources.from_block, last)}
    active = set()
    for verifier, index in slots.items():
        slot = committee.slot(index, block=last)
        if slot.active and slot.verifier == verifier:
            active.add(verifier)
    audit_logs: list[tuple[str, int]] = []
    per_verifier: Counter[str] = Counter()
    for created in sources.ledger.logs_created(sources.from_block, last):
        if created.owner in active and created.name == AUDITS_LOG \
                and created.kind == LogKind.PUBLISHER \
                and per_verifier[created.owner] < MAX_AUDIT_LOGS:
            per_verifier[created.owner] += 1
            audit_logs.append((created.owner, created.log_id))
    checkpoints: dict[int, list[Checkpoint]] = {}
    for log_id, events in anchored.items():  # the epoch's, within the log's leaf budget
        budget, previous = MAX_EPOCH_LEAVES, 0
        checkpoints[log_id] = []
        for event in events:
            old, previous = previous, event.size
            if event.block_number < first:
                continue
            budget -= event.size - old
            if budget < 0:
                break  # past the budget: unaudited for the table, as its uses count nothing
            checkpoints[log_id].append(Checkpoint(old, event.size, event.block_number))
    w3 = sources.ledger.w3
    checker = ReportChecker(first, last, logs, checkpoints,
                            lambda n: bytes(w3.eth.get_block(n)["hash"]), disproven)
    out = []
    seen: set[tuple[str, int, int]] = set()
    for verifier, log_id in sorted(audit_logs):
        if _owner_at(sources, log_id, last) != verifier:
            continue  # the log changed hands: its reports are no longer this verifier's
        events = sources.ledger.anchored(log_id, sources.from_block, last)
        for _leaf, cid, entry in _checkpoint_entries(sources, log_id, events, first):
            if not isinstance(entry, AuditEntry) or (verifier, entry.log_id, entry.size) in seen:
                continue
            checkpoint = checker.checkpoint(entry)
            if checkpoint is None:
                continue
            seen.add((verifier, entry.log_id, entry.size))  # its first report on it, or none
            counted = checker.check(verifier, cid, entry, checkpoint)
            if counted is not None:
                out.append(counted)
    return out


def _signed(entry: ContributionEntry) -> bool:
    from ledger.contributions import recover_contributor

    try:
        recover_contributor(entry)  # raises unless the contributor signed it
    except EntryError:
        return False
    return True


def settlements(sources: Sources, first: int, last: int) -> list[Settlement]:
    """Committee challenges finalized in ``[first, last]`` and not reversed, with the
    verifiers that signed each (the slots' holders when it settled)."""
    committee = sources.committee
    reversed_ = {int(args["challengeId"]) for _, args in
                 committee.events("SettlementReversed", sources.from_block, last)}
    settled_at = {int(args["challengeId"]): log["blockNumber"] for log, args in
                  committee.events("ChallengeSettled", sources.from_block, last)}
    out = []
    for _, args in committee.events("ChallengeFinalized", first, last):
        challenge = int(args["challengeId"])
        if challenge in reversed_ or challenge not in settled_at:
            continue
        block = settled_at[challenge]
        bitmap = committee.challenge(challenge).signer_bitmap
        signers = []
        for index in range(bitmap.bit_length()):
            if bitmap >> index & 1:
                slot = committee.slot(index, block=block)
                signers.append(slot.verifier)
        out.append(Settlement(challenge, tuple(signers)))
    return out


def window_of(distributor: Any, epoch: int) -> EpochWindow:
    """Epoch ``epoch`` of the RewardDistributor client ``distributor``; ``RewardsError`` while
    it has not ended."""
    first, last = distributor.epoch_bounds(epoch)
    head = distributor.head()
    if head <= last:
        raise RewardsError(f"epoch {epoch} runs to block {last}; the chain is at block {head} "
                           f"(it ends in {last - head + 1} blocks)")
    budget, bps = distributor.budget_of(epoch)
    return EpochWindow(distributor.chain_id, distributor.address, epoch, first, last, budget,
                       tuple(bps))


__all__ = ["EpochWindow", "Sources", "audit_reports", "curated", "gather", "settlements",
           "sources_from", "window_of"]
