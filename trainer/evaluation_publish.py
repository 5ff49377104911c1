"""`gym eval --publish LOG`: an evaluation as an ``evaluation`` entry, anchored on a log
(docs/design.md "3.1 Entries", ``evaluation``; ``ledger.evaluations``).

Through a signing node (``--base-url``), every arm runs on that one node: the baseline with
``X-Gym-Library: none`` (the base model alone), the library arm with ``X-Gym-Library: <log id>``
(the published log under test, which the node verifies from chain + content store before it
prompts with it; ``inference_node.library_choice``). Each generation's receipt binds the library
it ran with, the normalized request (problem, sampling seed) and the answer. Once the node has
anchored its receipt log, each generation's receipt bundle (the receipt, request, answer and
its inclusion proof: what ``gym verify receipt`` reads) is fetched from the node with the
answer's bundle token, re-checked to name its receipt, and stored on the content endpoint; the
receipt table lists the bundles' CIDs by arm in (seed, problem, sample) order. The subject
(log, size, root, live experiences) and the model digest are read from the receipts, which must
all agree. The dataset file goes to the content endpoint too, so `gym verify evaluation CID`
needs nothing but the chain and the content endpoint (and the model, for its re-runs).

On a local model the arms run here, with the library's texts read from the chain and content
endpoint (``ledger.published.read_published_log``, folded); the entry says ``receipts: none``,
evidence nobody can check but the evaluator.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.canonical_json import canonical_bytes
from ledger.entries import (
    EntryError,
    EvaluationEntry,
    ReceiptEntry,
    decode_entry,
    encode_entry,
    entry_cid,
)
from ledger.errors import NotFoundError
from ledger.evaluations import ReceiptTable, encode_receipt_table
from ledger.json_input import JSONInputError, parse_json
from trainer.errors import TrainerError

LIBRARY_HEADER = "X-Gym-Library"  # inference_node.library_choice (a wire name, not an import)
MAX_BUNDLE_BYTES = 16 * 1024 * 1024  # what `gym verify receipt` reads at most
POLL_S = 2.0


class EvaluationPublishError(TrainerError):
    """The evaluation cannot be published as it is (its receipts disagree, a bundle is
    missing, the node never anchored them)."""


@dataclass(frozen=True)
class Fetched:
    """One generation's receipt bundle as the node sent it, and its receipt, decoded."""

    data: bytes
    receipt: ReceiptEntry


@dataclass(frozen=True)
class PublishedEvaluation:
    cid: str  # the evaluation entry
    leaf: int  # its leaf in the log it was appended to
    entry: EvaluationEntry
    table: str | None  # the receipt table, None for a local run


def prompt_digest(agent_objective: str) -> str:
    """``task.prompt_digest``: sha256 of the rollout objective (the system prompt) as sent."""
    return "sha256:" + hashlib.sha256(agent_objective.strip().encode()).hexdigest()


def library_texts(rt: Any, log_id: int) -> tuple[dict, list[tuple[str, str]]]:
    """The subject of a published log at its last anchored checkpoint, and its live
    experiences (cid, text), replayed from the chain and the content endpoint."""
    from ledger.entries import decode_entry, fold_library
    from ledger.published import read_published_log

    kept: list[tuple[str, Any]] = []
    published = read_published_log(
        rt.contract, rt.content, log_id, from_block=rt.chain.deployment_block,
        keep=lambda index, cid, data: kept.append((cid, decode_entry(data))))
    if not published.size:
        raise EvaluationPublishError(f"log {log_id} has no anchored checkpoint yet")
    state = fold_library(kept[:published.size])
    if not state:
        raise EvaluationPublishError(f"log {log_id} holds no live experience at size "
                                     f"{published.size}")
    subject = {"kind": "library", "log_id": log_id, "size": published.size,
               "root": "0x" + published.root.hex(), "entries": list(state)}
    return subject, list(state.items())


def fetch_bundles(base_url: str, evidence: list[dict | None], *, wait_s: float,
                  on_fetched: Callable[[int], None] | None = None,
                  on_wait: Callable[[str], None] | None = None) -> list[Fetched]:
    """The bundle bytes of every generation (``evidence``: its receipt CID and bundle token),
    each with its receipt-log inclusion proof at an anchored checkpoint (the proof's
    ``anchor``): refetched every 2 s for up to ``wait_s`` seconds while the node has not yet
    anchored it (its proof is then at the log's unanchored size)."""
    import httpx

    base = base_url.rstrip("/").removesuffix("/v1")
    out: list[Fetched] = []
    deadline = time.monotonic() + wait_s
    with httpx.Client(timeout=30.0, follow_redirects=False) as client:
        for position, signed in enumerate(evidence):
            if signed is None or not signed.get("bundle_token"):
                raise EvaluationPublishError(
                    f"generation {position}: the node's answer carries no receipt or bundle "
                    "token (is it a signing `gym node serve` keeping bundles?)")
            cid = signed["receipt_cid"]
            while True:
                data = _get(client, f"{base}/v1/receipts/{cid}", signed["bundle_token"])
                bundle, receipt = _parse(data, cid)
                inclusion = bundle.get("inclusion")
                if isinstance(inclusion, dict) and inclusion.get("anchor"):
                    break  # a proof at an anchored checkpoint (before: at the log's size)
                if time.monotonic() > deadline:
                    raise EvaluationPublishError(
                        f"the node has not anchored receipt {cid} after {wait_s:g} s: wait "
                        "longer (--wait) or lower its --anchor-interval")
                if on_wait is not None:
                    on_wait(cid)
                time.sleep(POLL_S)
            out.append(Fetched(data, receipt))
            if on_fetched is not None:
                on_fetched(1)
    return out


def _get(client: Any, url: str, token: str) -> bytes:
    import httpx

    try:
        with client.stream("GET", url, headers={"Authorization": f"Bearer {token}"}) as reply:
            data = bytearray()
            for part in reply.iter_bytes():
                data += part
                if len(data) > MAX_BUNDLE_BYTES:
                    raise EvaluationPublishError(f"{url}: over {MAX_BUNDLE_BYTES} bytes")
            if reply.status_code != 200:
                raise EvaluationPublishError(f"{url} answered {reply.status_code}: "
                                             f"{bytes(data[:200]).decode(errors='replace')}")
    except httpx.HTTPError as exc:
        raise EvaluationPublishError(f"cannot fetch {url}: {exc}") from None
    return bytes(data)


def _parse(data: bytes, cid: str) -> tuple[dict, ReceiptEntry]:
    """The bundle and its receipt, which must be a valid receipt entry whose CID is ``cid``."""
    try:
        bundle = parse_json(data, max_bytes=MAX_BUNDLE_BYTES, what="receipt bundle")
    except JSONInputError as exc:
        raise EvaluationPublishError(f"receipt {cid}: the node's bundle is not JSON: {exc}"
                                     ) from None
    receipt = bundle.get("receipt") if isinstance(bundle, dict) else None
    try:
        encoded = canonical_bytes(receipt)
        entry = decode_entry(encoded) if entry_cid(encoded) == cid else None
    except (ValueError, EntryError):
        entry = None
    if not isinstance(entry, ReceiptEntry):
        raise EvaluationPublishError(f"the node sent no valid bundle of receipt {cid}")
    return bundle, entry


def subject_from_receipts(bundles: dict[str, list[Fetched]], library_arm: str | None
                          ) -> tuple[dict | None, str, str]:
    """(subject, model digest, node) read from the receipts, which must agree: one node, one
    model, no library in the baseline, one library in ``library_arm``."""
    nodes, models, libraries = set(), set(), set()
    for arm, fetched in bundles.items():
        for receipt in (f.receipt for f in fetched):
            nodes.add(receipt.node)
            models.add(receipt.model_digest)
            lib = receipt.library
            if arm == library_arm:
                libraries.add((lib.log_id, lib.size, lib.root, tuple(receipt.experience_ids)))
            elif lib.log_id != 0:
                raise EvaluationPublishError(f"arm {arm!r} ran with library log {lib.log_id}, "
                                             "not none")
    if len(nodes) != 1 or len(models) != 1:
        raise EvaluationPublishError(f"the receipts name {len(nodes)} nodes and {len(models)} "
                                     "models: one node serving one model must sign them all")
    if library_arm is None:
        return None, models.pop(), nodes.pop()
    if len(libraries) != 1:
        raise EvaluationPublishError(
            f"the library arm ran with {len(libraries)} different states of its log (it grew "
            "during the evaluation): run it again")
    log_id, size, root, ids = libraries.pop()
    if not ids:
        raise EvaluationPublishError(f"log {log_id} at size {size} has no live experience")
    subject = {"kind": "library", "log_id": log_id, "size": size, "root": root,
               "entries": list(ids)}
    return subject, models.pop(), nodes.pop()


def build_entry(*, subject: dict, baseline: str, dataset_cid: str, problems: int,
                verifier: str, agent_objective: str, model_digest: str, k: int,
                seeds: list[int], temperature: float, top_p: float, max_tokens: int,
                results: dict, receipts: Any) -> EvaluationEntry:
    """The entry from ``trainer.evaluate.evaluate_arms``'s ``results`` (per-seed values)."""
    arms = {arm: {"per_seed": [
        {"seed": seed, "mean_at_k": results[arm]["mean_at_k"]["values"][i],
         "pass_at_k": results[arm]["pass_at_k"]["values"][i]} for i, seed in enumerate(seeds)]}
        for arm in results["arms"]}
    return EvaluationEntry(
        subject=subject, baseline=baseline,
        task={"dataset": dataset_cid, "problems": problems, "verifier": verifier,
              "prompt_digest": prompt_digest(agent_objective)},
        model_digest=model_digest,
        sampling={"k": k, "seeds": seeds, "temperature": temperature, "top_p": top_p,
                  "max_tokens": max_tokens},
        arms=arms, receipts=receipts)


def store_table(content: Any, bundles: dict[str, list[Fetched]]) -> str:
    """Each bundle stored on the content endpoint, and the receipt table naming them."""
    arms = {arm: [content.add_file(f.data, pin=True) for f in fetched]
            for arm, fetched in bundles.items()}
    return content.add_file(encode_receipt_table(ReceiptTable(arms)), pin=True)


def append_and_anchor(rt: Any, log: str, entry: EvaluationEntry) -> tuple[str, int]:
    """The entry appended to ``log`` (created if new) and anchored: its CID and leaf."""
    from ledger.publish import append_entries, publish

    data = encode_entry(entry)
    store = rt.store
    try:
        store.get_log(log)
    except NotFoundError:
        store.create_log(log)
    appended = append_entries(store, rt.content, log, [data])
    publish(store, rt.content, rt.contract, log)
    return appended.cids[0], appended.old_size


def publish_from_node(rt: Any, log: str, bundles: dict[str, list[Fetched]], results: dict, *,
                      dataset: Path, problems: int, verifier: str, agent_objective: str,
                      k: int, seeds: list[int], max_tokens: int) -> PublishedEvaluation:
    """An evaluation run through a signing node, published: ``bundles`` (arm -> its
    generations' bundles, ``fetch_bundles``; "baseline" and "library") stored with their
    table and the dataset on ``rt``'s content endpoint, the entry built from ``results``
    (``trainer.evaluate.evaluate_arms``'s, for those arms) and the receipts, appended to
    ``log`` and anchored."""
    content = rt.content
    subject, model_digest, node = subject_from_receipts(bundles, "library")
    table = store_table(content, bundles)
    entry = build_entry(
        subject=subject, baseline="baseline",
        dataset_cid=content.add_file(dataset.read_bytes(), pin=True), problems=problems,
        verifier=verifier, agent_objective=agent_objective, model_digest=model_digest, k=k,
        seeds=seeds, temperature=results["temperature"], top_p=results["top_p"],
        max_tokens=max_tokens, results=results, receipts={"node": node, "table": table})
    cid, leaf = append_and_anchor(rt, log, entry)
    return PublishedEvaluation(cid, leaf, entry, table)
