"""Random audits of the registered nodes' receipt logs (docs/committee.md "Random audits").

A node anchors its receipt log on the ExperienceLedger (``inference_node.receipt_log``): the
``Anchored`` event of log ``L`` at size ``b``, mined in block ``B``, names the batch manifest of
leaves ``[a, b)`` (``a`` the previous anchored size). Verifiers sample those leaves with
randomness the chain fixes after the anchor, so a node cannot know when it signs or anchors
which receipts will be checked, and every honest verifier samples the same ones:

- ``audit_seed(blockhash(B + AUDIT_DELAY_BLOCKS), L, b)`` =
  ``keccak256(abi.encode(bytes32 blockHash, uint256 L, uint256 b))``. Until block
  ``B + AUDIT_DELAY_BLOCKS`` exists (and has ``confirmations`` blocks on top of it) the
  checkpoint is ``pending``: nothing is guessed. (Anvil mines a block per transaction, so there
  the block exists once two more transactions, or ``evm_mine`` calls, happened.)
- Leaf ``i`` of ``[a, b)`` is sampled iff ``uint256(keccak256(abi.encode(bytes32 seed,
  uint256 i))) < rate_bps * 2**256 / 10000`` (integer division): an independent Bernoulli draw
  per leaf at ``rate_bps`` basis points (``sampled_leaves``; 10000 samples every leaf).

``Auditor.run_once`` is one pass of a verifier service: for every active node of the
NodeRegistry (its ``receipt_log_id`` and ``endpoint``), the log's ``Anchored`` events since the
cursor; per checkpoint the seed (or ``pending``, which stops that log for this pass), the batch
manifest from the content store (``ledger.batches``: the entry CIDs of ``[a, b)``, checked
against the event's log id and sizes), and per sampled leaf ``audit_receipt``:

1. ``fetch(endpoint, cid)`` (``inference_node.bundle_sources.fetch_bundle``): a 404 is ``not
   retained``, a 401/403 ``refused`` (the node is up and will not serve this verifier), any
   other failure ``unreachable``; a bundle of another receipt, or whose
   signature does not recover, is ``invalid bundle``. None of these can be proven on chain
   (the contract sees only a receipt hash and the node's signature), so they are reported,
   never challenged.
2. The bundle goes to ``committee.judge.judge`` as the evidence a challenge would carry
   (``inference_node.challenges.challenge_evidence``), with the verifier's ``check`` (the full
   ``gym verify receipt``): a verifier opens only a challenge it would itself uphold.
   ``upheld`` calls ``open_challenge(bundle, reason)`` (its challenge id is the finding's;
   ``failed`` either way, ``challenge_id`` None when opening raised); ``rejected`` after
   ``check`` passed is ``verified``; ``rejected`` for the bundle's own parts (request or
   response not the signed digests, another deployment's receipt) is ``invalid bundle``;
   ``abstain`` (the verifier lacks its model, content, RPC) is ``abstained``.

Hostile data: a log's checkpoint spans at most ``MAX_CHECKPOINT_LEAVES`` leaves (else
``unauditable``, as a missing or mismatched manifest is); bundles are read with the
``fetch_bundle`` limits; every exception of one receipt ends in its finding, every exception
of one log (chain reads, a content store error) in one ``error`` finding for it, so one node
never stops the audit of another. The cursor (``AuditCursor``: per log the last audited size
and its block) moves past a checkpoint once all of its sample has a finding, whatever the
findings say; a checkpoint whose audit stopped on an error is retried on the next pass. At most
``max_checks`` bundles are fetched per log and pass, whole checkpoints at a time (a checkpoint
once started is finished). Fetches are sequential: a node that answers slowly costs up to
``fetch``'s timeout per sampled receipt (``fetch_bundle``: 30 s; pass a ``functools.partial``
with a shorter ``timeout_s``), bounded by ``max_checks``.

The receipts of evaluations are audited the same way (``committee.evaluation_audits``): the
manifest check (``checkpoint_manifest``) and step 2 (``audit_bundle``) are shared.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eth_abi import encode as abi_encode
from eth_utils import keccak

from committee.judge import ABSTAIN_OUTCOME, UPHELD_OUTCOME, Judgement, judge
from inference_node.bundle_sources import (
    AccessRefusedError,
    NotRetainedError,
    fetch_bundle,
    receipt_cid,
)
from inference_node.challenges import challenge_evidence, challenged_receipt
from inference_node.errors import NodeError, ReceiptError
from inference_node.receipts import receipt_hash
from ledger.batches import BatchError, BatchManifest, fetch_batch, verify_batch
from ledger.chain import AnchoredEvent
from ledger.errors import LedgerError, NotFoundError, VerificationError
from ledger.json_input import JSONInputError, parse_json

AUDIT_DELAY_BLOCKS = 2  # the seed is the hash of the second block after the anchor's
DEFAULT_RATE_BPS = 500  # 5 % of each checkpoint's new receipts
MAX_RATE_BPS = 10_000
MAX_CHECKPOINT_LEAVES = 1_000_000  # leaves one checkpoint may add and still be audited
DEFAULT_MAX_CHECKS = 1_000  # bundles fetched per log and pass
MAX_CURSOR_BYTES = 1024 * 1024

VERIFIED, FAILED, NOT_RETAINED, UNREACHABLE = "verified", "failed", "not retained", "unreachable"
REFUSED = "refused"  # the node answered 401/403: up, but it will not serve this verifier
INVALID_BUNDLE, ABSTAINED, PENDING = "invalid bundle", "abstained", "pending"
UNAUDITABLE, ERROR = "unauditable", "error"  # a checkpoint's manifest; a log's chain reads


def judge_checked(evidence: bytes, digest: bytes, *, check: Check) -> tuple[Judgement, bool]:
    """``committee.judge.judge`` of an audit's ``evidence``, and whether ``check`` passed (a
    rejection after it did means the receipt verifies, one before it that the bundle's own
    parts are wrong)."""
    passed: list[bool] = []

    def checked(bundle: dict) -> Any:
        checks = check(bundle)
        passed.append(True)
        return checks

    return judge(evidence, digest, check=checked), bool(passed)


def audit_seed(block_hash: bytes, log_id: int, size: int) -> bytes:
    """``keccak256(abi.encode(bytes32 block_hash, uint256 log_id, uint256 size))``."""
    return keccak(abi_encode(["bytes32", "uint256", "uint256"],
                             [bytes(block_hash), log_id, size]))


def sample_threshold(rate_bps: int) -> int:
    """``rate_bps * 2**256 // 10000``: a leaf is sampled when its draw is below it."""
    if type(rate_bps) is not int or not 0 <= rate_bps <= MAX_RATE_BPS:
        raise ValueError(f"rate_bps must be an integer in [0, {MAX_RATE_BPS}], got {rate_bps!r}")
    return rate_bps * 2**256 // MAX_RATE_BPS


def leaf_draw(seed: bytes, leaf: int) -> bytes:
    """``keccak256(abi.encode(bytes32 seed, uint256 leaf))``: leaf ``leaf``'s draw."""
    return keccak(bytes(seed) + leaf.to_bytes(32, "big"))


def is_sampled(seed: bytes, leaf: int, rate_bps: int) -> bool:
    """Whether ``leaf`` is drawn under ``seed``: ``uint256(keccak256(abi.encode(bytes32 seed,
    uint256 leaf))) < sample_threshold(rate_bps)``."""
    return int.from_bytes(leaf_draw(seed, leaf), "big") < sample_threshold(rate_bps)


def sampled_leaves(seed: bytes, old_size: int, size: int, rate_bps: int) -> list[int]:
    """The leaves of ``[old_size, size)`` drawn under ``seed``, in order. Each leaf's draw
    depends on the seed and its index alone."""
    if not 0 <= old_size <= size or size - old_size > MAX_CHECKPOINT_LEAVES:
        raise ValueError(f"leaves [{old_size}, {size}): not a range of at most "
                         f"{MAX_CHECKPOINT_LEAVES} leaves")
    threshold = sample_threshold(rate_bps)
    return [i for i in range(old_size, size)
            if int.from_bytes(leaf_draw(seed, i), "big") < threshold]


def seed_block(anchor_block: int, delay_blocks: int = AUDIT_DELAY_BLOCKS) -> int:
    """The block whose hash seeds the audit of a checkpoint anchored in ``anchor_block``."""
    return anchor_block + delay_blocks


def checkpoint_seed(w3: Any, event: AnchoredEvent, *, head: int | None = None,
                    delay_blocks: int = AUDIT_DELAY_BLOCKS, confirmations: int = 0
                    ) -> bytes | None:
    """The audit seed of the checkpoint ``event`` anchored, or None while its seed block (with
    ``confirmations`` blocks after it) is not mined yet: pending. ``head``: the chain's block
    number, read when not given."""
    block = seed_block(event.block_number, delay_blocks)
    head = w3.eth.block_number if head is None else head
    if block + confirmations > head:
        return None
    return audit_seed(bytes(w3.eth.get_block(block)["hash"]), event.log_id, event.size)


@dataclass(frozen=True)
class AuditFinding:
    """What the audit of one sampled receipt (``leaf``, ``cid``), or of a whole checkpoint or
    log (``leaf`` None), found. ``outcome``: one of the constants above; ``reason``: the
    failing check (``failed``, ``invalid bundle``) or a short code; ``challenge_id``: the
    challenge ``open_challenge`` opened (``failed`` only). An evaluation's audit
    (``committee.evaluation_audits``) names the evaluation, the generation and its bundle's
    CID; ``log_id``, ``checkpoint`` and ``leaf`` are then where the entry is anchored (0, 0
    and None for one named by its CID), ``operator`` is empty."""

    log_id: int
    operator: str
    checkpoint: int  # the anchored size; 0 for a log-level finding
    leaf: int | None
    cid: str | None
    outcome: str
    reason: str = ""
    detail: str = ""
    challenge_id: int | None = None
    evaluation: str | None = None  # an evaluation's audit (committee.evaluation_audits): its CID
    generation: str = ""  # ... and the generation whose bundle ``cid`` is

    def where(self) -> str:
        """What was audited, for a report line."""
        if self.evaluation is not None:
            return f"evaluation {self.evaluation}" + (f" ({self.generation})"
                                                      if self.generation else "")
        return f"log {self.log_id}" + (f" leaf {self.leaf}" if self.leaf is not None else "")


@dataclass(frozen=True)
class AuditedCheckpoint:
    """A checkpoint whose sample was audited: leaves ``[old_size, size)``, seeded by the hash
    of block ``seed_block``."""

    log_id: int
    operator: str
    old_size: int
    size: int
    anchor_block: int
    seed_block: int
    seed: bytes
    sampled: tuple[int, ...]


@dataclass
class AuditPass:
    """One ``Auditor.run_once``: the findings and the checkpoints audited, in order."""

    findings: list[AuditFinding] = field(default_factory=list)
    checkpoints: list[AuditedCheckpoint] = field(default_factory=list)


@dataclass
class LogCursor:
    """Where a log's audit stands: ``size`` the last audited checkpoint's (None before the
    first), ``block`` where to look for the next ``Anchored`` events."""

    size: int | None
    block: int


@dataclass
class AuditCursor:
    """Per log id, its ``LogCursor``; ``evaluations``: the evaluations audited by their CID
    (``committee.evaluation_audits``), each with the block whose hash drew its sample;
    ``to_json``/``from_json`` for a service to keep it across restarts."""

    logs: dict[int, LogCursor] = field(default_factory=dict)
    evaluations: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        doc: dict = {"type": "audit-cursor", "v": 1,
                     "logs": {str(log_id): {"size": c.size, "block": c.block}
                              for log_id, c in sorted(self.logs.items())}}
        if self.evaluations:
            doc["evaluations"] = dict(sorted(self.evaluations.items()))
        return doc

    @classmethod
    def from_json(cls, data: bytes) -> AuditCursor:
        """A cursor from ``to_json``'s JSON bytes; ``ValueError`` when it is not one."""
        try:
            doc = parse_json(data, max_bytes=MAX_CURSOR_BYTES, max_depth=4, what="audit cursor")
        except JSONInputError as exc:
            raise ValueError(str(exc)) from None
        if not isinstance(doc, dict) or doc.get("type") != "audit-cursor" or doc.get("v") != 1 \
                or not isinstance(doc.get("logs"), dict):
            raise ValueError("not an audit-cursor v1 document")
        logs = {}
        for key, item in doc["logs"].items():
            size = item.get("size") if isinstance(item, dict) else -1
            block = item.get("block") if isinstance(item, dict) else -1
            if not key.isdigit() or not (size is None or (type(size) is int and size >= 0)) \
                    or type(block) is not int or block < 0:
                raise ValueError(f"audit cursor: bad entry for log {key[:20]!r}")
            logs[int(key)] = LogCursor(size, block)
        evaluations = doc.get("evaluations", {})
        if not isinstance(evaluations, dict) or not all(
                isinstance(cid, str) and type(block) is int and block >= 0
                for cid, block in evaluations.items()):
            raise ValueError("audit cursor: bad evaluations")
        return cls(logs, evaluations)


Check = Callable[[dict], Any]
JudgeEvidence = Callable[[bytes, bytes], "tuple[Judgement, bool]"]
OpenChallenge = Callable[[dict, str], int]
Fetch = Callable[[str, str], dict]


class Auditor:
    """Random audits of every active registered node's receipt log (module docstring).

    ``contract``: the ``ledger.chain.LedgerContract`` (its ``w3`` gives block hashes);
    ``registry``: an ``inference_node.registry.NodeRegistry`` (``nodes()``); ``content``: the
    content store holding the batch manifests; ``from_block``: where a log never audited is
    read from (the deployment block); ``check(bundle)``: the full receipt verification
    (``inference_node.verify.check_receipt_bundle`` with chain, content store, registry and
    model), or ``judge_evidence(evidence, receipt_hash)``: ``judge_checked`` with that
    check, run elsewhere (``gym verifier serve`` runs it in its bounded judge worker,
    ``committee.judge_worker``); ``open_challenge(bundle, reason)``: opens a challenge with
    that bundle as its evidence and returns its id; ``fetch(endpoint, cid)``: a node's
    bundle."""

    def __init__(self, contract: Any, registry: Any, content: Any, *, from_block: int,
                 check: Check | None = None, open_challenge: OpenChallenge,
                 fetch: Fetch = fetch_bundle, judge_evidence: JudgeEvidence | None = None,
                 rate_bps: int = DEFAULT_RATE_BPS, delay_blocks: int = AUDIT_DELAY_BLOCKS,
                 confirmations: int = 0, max_checks: int = DEFAULT_MAX_CHECKS,
                 cursor: AuditCursor | None = None) -> None:
        sample_threshold(rate_bps)  # refuses a bad rate now
        if delay_blocks < 1 or confirmations < 0 or max_checks < 1 or from_block < 0:
            raise ValueError("delay_blocks and max_checks must be >= 1, confirmations and "
                             "from_block >= 0")
        if (check is None) == (judge_evidence is None):
            raise ValueError("an Auditor needs check or judge_evidence (one of them)")
        self.contract, self.registry, self.content = contract, registry, content
        self.from_block, self.open_challenge, self.fetch = from_block, open_challenge, fetch
        self.judge_evidence = judge_evidence or (lambda evidence, digest: judge_checked(
            evidence, digest, check=check))
        self.rate_bps, self.delay_blocks, self.confirmations = rate_bps, delay_blocks, confirmations
        self.max_checks = max_checks
        self.cursor = cursor if cursor is not None else AuditCursor()

    def run_once(self) -> AuditPass:
        """Audit what was anchored since the cursor, advancing it (module docstring)."""
        result = AuditPass()
        try:
            head = self.contract.w3.eth.block_number
            nodes = self.registry.nodes()
        except Exception as exc:  # noqa: BLE001 - the verifier's RPC: nothing to audit now
            result.findings.append(AuditFinding(0, "", 0, None, None, ERROR, "chain",
                                                f"{type(exc).__name__}: {exc}"[:500]))
            return result
        seen: set[int] = set()
        for node in nodes:
            log_id = getattr(node, "receipt_log_id", 0)
            if not getattr(node, "active", False) or type(log_id) is not int or log_id <= 0 \
                    or log_id in seen:
                continue
            seen.add(log_id)
            try:
                self._audit_log(node, log_id, head, result)
            except Exception as exc:  # noqa: BLE001 - one log never stops the others
                result.findings.append(AuditFinding(
                    log_id, node.operator, 0, None, None, ERROR, "log",
                    f"{type(exc).__name__}: {exc}"[:500]))
        return result

    def _audit_log(self, node: Any, log_id: int, head: int, result: AuditPass) -> None:
        audit_new_checkpoints(
            self, log_id, node.operator, head, result,
            lambda event, old, seed: self._audit_checkpoint(node, event, old, seed, result))

    def _audit_checkpoint(self, node: Any, event: AnchoredEvent, old_size: int | None,
                          seed: bytes, result: AuditPass) -> int:
        """Audit one checkpoint's sample; how many bundles it fetched."""
        manifest = self._manifest(node, event, old_size, result)
        if manifest is None:
            return 0
        old = manifest.from_size
        leaves = sampled_leaves(seed, old, event.size, self.rate_bps)
        result.checkpoints.append(AuditedCheckpoint(
            event.log_id, node.operator, old, event.size, event.block_number,
            seed_block(event.block_number, self.delay_blocks), seed, tuple(leaves)))
        for leaf in leaves:
            result.findings.append(self.audit_receipt(
                node, event.log_id, event.size, leaf, manifest.entries[leaf - old]))
        return len(leaves)

    def _manifest(self, node: Any, event: AnchoredEvent, old_size: int | None,
                  result: AuditPass) -> BatchManifest | None:
        """The checkpoint's batch manifest, or None with an ``unauditable`` finding."""
        try:
            return checkpoint_manifest(self.content, event, old_size)
        except UnauditableCheckpoint as exc:
            result.findings.append(AuditFinding(event.log_id, node.operator, event.size, None,
                                                None, UNAUDITABLE, exc.reason, exc.detail[:500]))
            return None

    def audit_receipt(self, node: Any, log_id: int, checkpoint: int, leaf: int, cid: str
                      ) -> AuditFinding:
        """Fetch, judge and, when upheld, challenge receipt ``cid`` (leaf ``leaf`` of checkpoint
        ``checkpoint``) of ``node``'s log (module docstring); never raises."""
        def finding(outcome: str, reason: str = "", detail: str = "",
                    challenge_id: int | None = None) -> AuditFinding:
            return AuditFinding(log_id, node.operator, checkpoint, leaf, cid, outcome, reason,
                                detail[:500], challenge_id)

        try:
            bundle = self.fetch(node.endpoint, cid)
        except NotRetainedError as exc:
            return finding(NOT_RETAINED, "not_retained", str(exc))
        except AccessRefusedError as exc:
            return finding(REFUSED, "refused", str(exc))
        except ReceiptError as exc:
            return finding(INVALID_BUNDLE, exc.reason, str(exc))
        except Exception as exc:  # noqa: BLE001 - NodeError, or whatever a hostile node causes
            return finding(UNREACHABLE, "unreachable", f"{type(exc).__name__}: {exc}")
        try:
            if not isinstance(bundle, dict) or receipt_cid(bundle.get("receipt")) != cid:
                return finding(INVALID_BUNDLE, "malformed", "the node sent the bundle of "
                               "another receipt")
        except (ReceiptError, NodeError) as exc:
            return finding(INVALID_BUNDLE, getattr(exc, "reason", "malformed"), str(exc))
        except Exception as exc:  # noqa: BLE001 - a bundle no parser expected
            return finding(INVALID_BUNDLE, "malformed", f"{type(exc).__name__}: {exc}")
        return finding(*audit_bundle(bundle, self.judge_evidence, self.open_challenge))


class UnauditableCheckpoint(LedgerError):
    """A checkpoint whose leaves cannot be audited: ``reason`` (``batch-invalid``, ``batch``,
    ``oversized``) and ``detail``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def checkpoint_manifest(content: Any, event: AnchoredEvent, old_size: int | None, *,
                        max_leaves: int = MAX_CHECKPOINT_LEAVES) -> BatchManifest:
    """The batch manifest of the checkpoint ``event`` anchored, checked against the event
    (and against ``old_size``, the previous checkpoint's size, when known), with at most
    ``max_leaves`` new leaves; ``UnauditableCheckpoint`` otherwise. A content store that fails
    otherwise than by a missing or invalid document raises its error (retried)."""
    if old_size is not None and event.size - old_size > max_leaves:
        raise UnauditableCheckpoint("oversized", f"the checkpoint adds {event.size - old_size} "
                                    f"leaves, more than {max_leaves}")
    if event.batch_cid is None:
        raise UnauditableCheckpoint(
            "batch-invalid", f"batchCid 0x{event.batch_cid_bytes.hex()[:80]} is not a CID")
    try:
        manifest = fetch_batch(content, event.batch_cid)
        verify_batch(manifest, log_id=event.log_id,
                     from_size=manifest.from_size if old_size is None else old_size,
                     to_size=event.size)
    except (NotFoundError, VerificationError, BatchError) as exc:  # missing, corrupt, invalid,
        # mismatched
        raise UnauditableCheckpoint("batch", f"batch manifest {event.batch_cid}: {exc}"
                                    ) from None
    if event.size - manifest.from_size > max_leaves:
        raise UnauditableCheckpoint("oversized", f"the checkpoint adds "
                                    f"{event.size - manifest.from_size} leaves, more than "
                                    f"{max_leaves}")
    return manifest


def audit_bundle(bundle: dict, judge_evidence: JudgeEvidence, open_challenge: OpenChallenge
                 ) -> tuple[str, str, str, int | None]:
    """Step 2 of the module docstring for a bundle in hand: ``(outcome, reason, detail,
    challenge_id)``. The bundle is judged as the evidence a challenge would carry; ``upheld``
    opens that challenge (``open_challenge(bundle, reason)``). Never raises."""
    try:
        challenged = challenged_receipt(bundle)
        digest = receipt_hash(challenged.receipt, challenged.domain)
        evidence = challenge_evidence("audit", digest, bundle)  # RFC 8785: may refuse it
    except (ReceiptError, NodeError) as exc:
        return INVALID_BUNDLE, getattr(exc, "reason", "malformed"), str(exc), None
    except Exception as exc:  # noqa: BLE001 - a bundle no parser expected
        return INVALID_BUNDLE, "malformed", f"{type(exc).__name__}: {exc}", None
    try:
        judgement, checked = judge_evidence(evidence, digest)
    except Exception as exc:  # noqa: BLE001 - judge's own failure: this verifier cannot say
        return ABSTAINED, "", f"{type(exc).__name__}: {exc}", None
    if judgement.outcome == UPHELD_OUTCOME:
        try:
            challenge_id = open_challenge(bundle, judgement.reason)
        except Exception as exc:  # noqa: BLE001 - reported; the service may retry it
            return FAILED, judgement.reason, (f"{judgement.detail}; could not open the "
                                              f"challenge: {type(exc).__name__}: {exc}"), None
        return FAILED, judgement.reason, judgement.detail, int(challenge_id)
    if judgement.outcome == ABSTAIN_OUTCOME:
        return ABSTAINED, "", judgement.detail, None
    if checked:
        return VERIFIED, "", judgement.detail, None
    return INVALID_BUNDLE, "evidence", judgement.detail, None


def audit_new_checkpoints(auditor: Any, log_id: int, operator: str, head: int,
                          result: AuditPass,
                          audit: Callable[[AnchoredEvent, int | None, bytes], int]) -> None:
    """Audit log ``log_id``'s checkpoints anchored since ``auditor.cursor`` (its ``contract``,
    ``from_block``, ``max_checks``, ``delay_blocks``, ``confirmations``), oldest first:
    ``audit(event, old size, seed)`` each, which says how many bundles it fetched, until
    ``max_checks`` are spent or a checkpoint's seed block is not mined yet (a ``pending``
    finding); the cursor moves past each checkpoint audited. What receipt-log audits and
    evaluation audits (``committee.evaluation_audits``) share."""
    cursor = auditor.cursor.logs.get(log_id) or LogCursor(None, auditor.from_block)
    checks = 0
    for event in auditor.contract.anchored(log_id, cursor.block, head):
        if cursor.size is not None and event.size <= cursor.size:
            continue  # audited (the cursor's block is read again)
        if checks >= auditor.max_checks:
            return
        seed = checkpoint_seed(auditor.contract.w3, event, head=head,
                               delay_blocks=auditor.delay_blocks,
                               confirmations=auditor.confirmations)
        if seed is None:
            result.findings.append(AuditFinding(
                log_id, operator, event.size, None, None, PENDING, "",
                f"anchored in block {event.block_number}: its seed is the hash of block "
                f"{seed_block(event.block_number, auditor.delay_blocks)}, not mined yet "
                f"(head {head})"))
            return
        checks += audit(event, cursor.size, seed)
        cursor = LogCursor(event.size, event.block_number)
        auditor.cursor.logs[log_id] = cursor
