"""Evidence on curation proposals: ``evaluation`` entries a proposal names
(`gym gov propose-curation --evidence CID`), checked against what the proposal adds, summed up
for voters, and re-verified (docs/design.md "Flow 2", "3.1 Entries" ``evaluation``).

A curation proposal's document (``governance.curation``) lists the CIDs of its evidence under
``"evidence"`` and its description names each with its effect, so a voter reading either sees
it. An evaluation is evidence *for this proposal* only when its subject is the library the
proposal adds: the same publisher log, and exactly the live experiences the proposal's leaves
add, in their order (``check_subject``; a library in the entry other than the proposal's is
refused, reason ``subject``); given the calldata's leaves, the document must list exactly
those (``check_document_leaves``, reason ``document``), since the document is the proposer's
word and the calldata is what executes. ``summarize`` turns an entry into the lines a voter
reads first: the effect of the library against the baseline per seed, mean and spread
(``ledger.evaluations.effect``), the task and the sampling. ``verify`` re-checks it from the chain
and the content endpoint (``inference_node.evaluation_check``; no model: every receipt's
signature, registration, library and inclusion, each request, the figures) and names the
command that re-runs generations in full.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from governance.errors import CurationError
from ledger.entries import (
    EntryError,
    EvaluationEntry,
    ExperienceEntry,
    decode_entry,
    fold_library,
)
from ledger.errors import LedgerError
from ledger.evaluations import METRICS, effect

MAX_EVIDENCE = 8  # evaluations one proposal may name


class EvidenceError(CurationError):
    """An evaluation that cannot serve as this proposal's evidence; ``reason`` names why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Evidence:
    """One evaluation a proposal names, as a voter sees it."""

    cid: str
    entry: EvaluationEntry | None
    summary_lines: list[str] = field(default_factory=list)
    verified: bool | None = None  # None: not checked (or a local run: nothing to check)
    verify_detail: str = ""
    cli_command: str = ""
    verdict: str | None = None  # the subject arm's Mean@k verdict: helps, hurts, no clear effect


def read_evaluation(content: Any, cid: str) -> EvaluationEntry:
    """The evaluation entry ``cid`` from the content endpoint; ``EvidenceError`` otherwise."""
    from ledger.entries import MAX_ENTRY_BYTES

    try:
        entry = decode_entry(content.cat(cid, max_bytes=MAX_ENTRY_BYTES))
    except (EntryError, LedgerError) as exc:
        raise EvidenceError("not_an_evaluation", f"evidence {cid}: {exc}") from None
    if not isinstance(entry, EvaluationEntry):
        raise EvidenceError("not_an_evaluation", f"evidence {cid} is a {entry.type} entry, not "
                            "an evaluation (`gym eval --publish` makes one)")
    return entry


def added_experiences(entries: Sequence[tuple[str, bytes]]) -> list[str]:
    """The live experiences (CIDs, in order) that leaves ``(cid, bytes)`` add to a library."""
    decoded = []
    for cid, data in entries:
        entry = decode_entry(data)
        if isinstance(entry, ExperienceEntry) and entry.op != "add":
            continue  # an update/delete acts on the curated library, not on the subject
        decoded.append((cid, entry))
    return list(fold_library(decoded))


def check_subject(entry: EvaluationEntry, cid: str, source_log_id: int,
                  experiences: Sequence[str]) -> None:
    """``EvidenceError`` (reason ``subject``) unless ``entry`` evaluated the library the
    proposal adds: publisher log ``source_log_id``, exactly ``experiences`` live."""
    s = entry.subject
    if s.kind != "library":
        raise EvidenceError("subject", f"evidence {cid} evaluates an adapter, not the library "
                            "this proposal adds")
    if s.log_id != source_log_id:
        raise EvidenceError("subject", f"evidence {cid} evaluates log {s.log_id}; this "
                            f"proposal curates from log {source_log_id}")
    if list(s.entries) != list(experiences):
        raise EvidenceError("subject", f"evidence {cid} evaluates {len(s.entries)} "
                            f"experience(s) of log {s.log_id} at size {s.size}, not the "
                            f"{len(experiences)} this proposal adds (publish the evaluation "
                            "of exactly these leaves)")


def check_document_evidence(content: Any, document: dict) -> list[tuple[str, EvaluationEntry]]:
    """Each evidence CID a curation document names, read and checked against its entries."""
    cids = document.get("evidence") or []
    if not isinstance(cids, list) or len(cids) > MAX_EVIDENCE \
            or not all(isinstance(c, str) for c in cids):
        raise EvidenceError("malformed", f"the document's evidence is not a list of at most "
                            f"{MAX_EVIDENCE} CIDs")
    source = document.get("source") or {}
    if not isinstance(source, dict):
        raise EvidenceError("malformed", "the document's source is not an object")
    try:
        leaves = [(e["cid"], _canonical(e["entry"])) for e in document.get("entries") or []]
        experiences = added_experiences(leaves)
    except (EntryError, KeyError, TypeError, ValueError) as exc:
        raise EvidenceError("malformed", f"the document's entries cannot be read: {exc}"
                            ) from None
    out = []
    for cid in cids:
        entry = read_evaluation(content, cid)
        check_subject(entry, cid, source.get("log_id"), experiences)
        out.append((cid, entry))
    return out


def _canonical(body: Any) -> bytes:
    from ledger.canonical_json import canonical_bytes

    return canonical_bytes(body)


def task_line(entry: EvaluationEntry) -> str:
    """``task: 3 problems of dataset CID, verifier 'math'; k=4, temperature 0.7, ...``."""
    s, problems = entry.sampling, entry.task.problems
    return (f"task: {problems} problem{'s' if problems != 1 else ''} of dataset "
            f"{entry.task.dataset}, verifier {entry.task.verifier!r}; k={s.k}, temperature "
            f"{s.temperature:g}, top_p {s.top_p:g}, {s.max_tokens} max tokens, model "
            f"{entry.model_digest[:19]}…")


def summarize(cid: str, entry: EvaluationEntry) -> Evidence:
    """What a voter reads first: the effect per metric, then the task and sampling."""
    k = entry.sampling.k
    lines = [effect(entry, metric=metric).summary(k) for metric in METRICS]
    main = effect(entry)
    seeds = ", ".join(f"{seed}: {d:+.3f}" for seed, d in zip(main.seeds, main.differences,
                                                              strict=True))
    lines.append(f"per seed ({main.arm} - {main.baseline}, Mean@{k}): {seeds}")
    lines.append(task_line(entry))
    if entry.receipts == "none":
        lines.append("receipts: none — a run on the evaluator's own model: unverified evidence")
    else:
        lines.append(f"receipts: every generation signed by node {entry.receipts.node}")
    return Evidence(cid, entry, lines, verdict=main.verdict,
                    cli_command=rerun_command(cid, entry))


def rerun_command(cid: str, entry: EvaluationEntry) -> str:
    """The command that checks ``entry`` for yourself: `gym verify evaluation` (every receipt,
    and 8 generations re-run with the model); for a local run, which has no receipts, the
    `gym eval` that repeats it (its problems, seeds and sampling; TASK.jsonl is dataset
    ``task.dataset`` from the content endpoint). `gym verify evaluation` runs only math and
    exact unless told, so a verifier that is code is named. (The entry's field patterns keep
    every value shell-safe.)"""
    task, s = entry.task, entry.sampling
    if entry.receipts != "none":
        trust = "" if task.verifier in ("math", "exact") else f" --verifier {task.verifier}"
        return f"gym verify evaluation {cid} --sample 8 --model MODEL_DIR{trust}"
    library = f" --library-log {entry.subject.log_id}" if entry.subject.kind == "library" else ""
    return (f"gym eval --dataset TASK.jsonl --limit {task.problems} --verifier {task.verifier}"
            f"{library} --model MODEL_DIR -k {s.k} --seeds {len(s.seeds)} --temperature "
            f"{s.temperature:g} --max-new-tokens {s.max_tokens}")


def description_lines(evidence: Sequence[tuple[str, EvaluationEntry]]) -> list[str]:
    """The description's evidence section: one line per evaluation with its effect."""
    if not evidence:
        return []
    lines = ["Evidence:"]
    for cid, entry in evidence:
        e = effect(entry)
        kind = "unverified, local run" if entry.receipts == "none" else "with receipts"
        lines.append(f"- evaluation {cid} ({kind}): {e.summary(entry.sampling.k)}")
    return lines


def verify(evidence: Evidence, rt: Any, registry: Any = None,
           trusted_verifiers: frozenset[str] | set[str] = frozenset()) -> Evidence:
    """``evidence`` with ``verified`` and ``verify_detail`` filled from
    ``inference_node.evaluation_check.verify_evaluation`` (no re-run: the command to run one
    is ``cli_command``). A local run is not verifiable (``verified`` None)."""
    from inference_node.evaluation_check import EvaluationRefused, verify_evaluation
    from inference_node.receipts import ReceiptDomain

    if evidence.entry is None or evidence.entry.receipts == "none":
        evidence.verified, evidence.verify_detail = None, "a local run: no receipts to check"
        return evidence
    contract = rt.contract
    try:
        report = verify_evaluation(
            evidence.cid, content=rt.content, contract=contract, registry=registry,
            domain=ReceiptDomain(contract.w3.eth.chain_id, contract.address.lower()),
            from_block=rt.chain.deployment_block, trusted_verifiers=trusted_verifiers)
    except EvaluationRefused as exc:
        evidence.verified = False
        evidence.verify_detail = f"FAILS ({exc.reason}): {exc}"
    except LedgerError as exc:
        evidence.verified, evidence.verify_detail = None, f"could not be checked: {exc}"
    else:
        skipped = "" if registry is not None else " (registration not checked: no NodeRegistry)"
        evidence.verified = True
        evidence.verify_detail = (f"{report.generations} receipts checked: signatures, "
                                  f"libraries, inclusion, requests and every figure{skipped}")
    return evidence


MAX_DOCUMENT_BYTES = 4 * 1024 * 1024


def read_document(content: Any, document_cid: str) -> dict:
    """A curation proposal's document from the content endpoint (bounded, parsed)."""
    from ledger.json_input import JSONInputError, parse_json

    try:
        document = parse_json(content.cat(document_cid, max_bytes=MAX_DOCUMENT_BYTES),
                              max_bytes=MAX_DOCUMENT_BYTES, what=f"document {document_cid}")
    except (LedgerError, JSONInputError) as exc:
        raise EvidenceError("malformed", f"proposal document {document_cid}: {exc}") from None
    if not isinstance(document, dict):
        raise EvidenceError("malformed", f"proposal document {document_cid} is not an object")
    return document


def check_document_leaves(document: dict, leaves: Sequence[tuple[int, str]]) -> None:
    """``EvidenceError`` (reason ``document``) unless the document lists exactly ``leaves``,
    ``(source log id, entry CID)`` of each leaf the proposal's calldata appends, in order: the
    calldata is what executes; the document, and so the subject its evidence is checked
    against, is the proposer's word."""
    source = document.get("source") or {}
    entries = document.get("entries") or []
    listed = [(source.get("log_id") if isinstance(source, dict) else None,
               e.get("cid") if isinstance(e, dict) else None)
              for e in (entries if isinstance(entries, list) else [])]
    if listed != [tuple(leaf) for leaf in leaves]:
        raise EvidenceError("document", f"the proposal document lists {len(listed)} entr"
                            f"{'y' if len(listed) == 1 else 'ies'}, not the {len(leaves)} "
                            "leaves its calldata appends: its evidence measures something "
                            "else")


def proposal_evidence(rt: Any, document_cid: str | None, *, registry: Any = None,
                      check: bool = True,
                      trusted_verifiers: frozenset[str] | set[str] = frozenset(),
                      leaves: Sequence[tuple[int, str]] | None = None) -> list[Evidence]:
    """The evidence a curation proposal's document names, each summarized and (``check``)
    verified; an evaluation that is not this proposal's evidence comes back ``verified``
    False with the reason. [] for a proposal without a document or without evidence.
    ``leaves``: the calldata's ``(source log id, entry CID)`` pairs, which the document must
    list (``check_document_leaves``)."""
    if document_cid is None:
        return []
    document = read_document(rt.content, document_cid)
    cids = document.get("evidence") or []
    try:
        if leaves is not None and cids:
            check_document_leaves(document, leaves)
        checked = check_document_evidence(rt.content, document)
    except EvidenceError as exc:
        return [Evidence(str(cid), None, [], False, f"FAILS ({exc.reason}): {exc}")
                for cid in (cids if isinstance(cids, list) else [])[:MAX_EVIDENCE]] or [
            Evidence("?", None, [], False, f"FAILS ({exc.reason}): {exc}")]
    out = []
    for cid, entry in checked:
        evidence = summarize(cid, entry)
        out.append(verify(evidence, rt, registry, trusted_verifiers) if check else evidence)
    return out
