"""`gym verify evaluation CID`: re-check an ``evaluation`` entry from the chain and the content
endpoint (docs/design.md "3.1 Entries", ``evaluation``; ``ledger.evaluations``).

``verify_evaluation`` fetches the entry, its receipt table, its dataset and every generation's
receipt bundle, and checks, in order (each failure an ``EvaluationRefused`` whose ``reason``
names it, like ``gym verify receipt``'s reasons):

| check | refuses with |
|---|---|
| the entry is an evaluation with receipts (a local run is unverified evidence) | ``not_an_evaluation``, ``unverified`` |
| the receipt table's format, and one bundle per generation of every arm | ``receipt_table``, ``missing_generation`` |
| the dataset holds the entry's problems; the verifier is one this verifier trusts | ``dataset``, ``verifier`` |
| each bundle: ``verify_receipt_bundle`` (signature under the deployment's domain, digests, the signer registered and active for the model, library root and state, inclusion in its receipt log and anchoring) | ``receipt`` (the detail names the receipt's own reason) |
| each receipt is the entry's node and model, and no receipt stands for two generations | ``other_node``, ``other_model``, ``duplicate_generation`` |
| no receipt was slashed for (an upheld challenge, ``NodeRegistry.receiptRecord``: a committee audit found it false) | ``slashed`` |
| each request is the one the entry says: the rollout prompt (objective by its digest, the problem's text), sampling, and the seed of its (seed, problem, sample) | ``other_request`` |
| each receipt's library is its arm's: none for the baseline, the subject (log, size, root, live experiences) for the library arm | ``other_library`` |
| every per-seed Mean@k and Pass@k, recomputed by scoring the signed answers with the named verifier (``ledger.evaluations.seed_figures``, bit for bit) | ``figures`` |
| ``sample`` generations re-run in full with the model (activations, termination, sampling) | ``rerun`` |

The verifier named by the entry is code: only ``math`` and ``exact`` are run unless the caller
trusts more (``trusted_verifiers``: `gym verify evaluation --verifier python:mod:fn`), so an
entry from anyone cannot make a verifier import what it names.

Bounds: the table is at most 16 MiB, the dataset at most ``MAX_DATASET_BYTES``, each bundle at
most 16 MiB; the library check replays a log once per distinct library, the registration is
read once per signer.
"""

from __future__ import annotations

import hashlib
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inference_node.errors import ReceiptError
from inference_node.verify import MAX_BUNDLE_BYTES, ReceiptCheck, verify_receipt_bundle
from ledger.entries import EntryError, EvaluationEntry, decode_entry, encode_entry, entry_cid
from ledger.errors import LedgerError, VerificationError
from ledger.evaluations import (
    MAX_RECEIPT_TABLE_BYTES,
    ReceiptTableError,
    ReceiptTableMismatchError,
    check_receipt_table,
    decode_receipt_table,
    generations_per_arm,
    seed_figures,
)
from ledger.json_input import JSONInputError, parse_json

MAX_DATASET_BYTES = 64 * 1024 * 1024
SAFE_VERIFIERS = frozenset({"math", "exact"})
REASONS = ("not_an_evaluation", "unverified", "receipt_table", "missing_generation", "dataset",
           "verifier", "receipt", "other_node", "other_model", "duplicate_generation", "slashed",
           "other_request", "other_library", "figures", "rerun")


class EvaluationRefused(VerificationError):
    """The evaluation does not hold: ``reason`` (one of ``REASONS``) names the check."""

    def __init__(self, reason: str, message: str, *, expected: object = None,
                 computed: object = None) -> None:
        super().__init__(message, expected=expected, computed=computed)
        self.reason = reason


@dataclass(frozen=True)
class Generation:
    arm: str
    seed: int
    problem: int
    sample: int

    def __str__(self) -> str:
        return f"{self.arm}, seed {self.seed}, problem {self.problem}, sample {self.sample}"


@dataclass
class EvaluationReport:
    cid: str
    entry: EvaluationEntry
    checks: list[ReceiptCheck] = field(default_factory=list)
    generations: int = 0
    rerun: list[Generation] = field(default_factory=list)


class _Registry:
    """A NodeRegistry read once per signer (an evaluation's receipts share one)."""

    def __init__(self, registry: Any) -> None:
        self._registry, self._memo = registry, {}

    def __getattr__(self, name: str) -> Callable:
        method = getattr(self._registry, name)

        def memo(*args: Any) -> Any:
            key = (name, *args)
            if key not in self._memo:
                self._memo[key] = method(*args)
            return self._memo[key]
        return memo


def generations(entry: EvaluationEntry) -> list[Generation]:
    """Every generation of the entry in receipt-table order, arm by arm."""
    return [Generation(arm, seed, problem, sample) for arm in entry.arms
            for seed in entry.sampling.seeds for problem in range(entry.task.problems)
            for sample in range(entry.sampling.k)]


def read_entry(content: Any, cid: str) -> EvaluationEntry:
    from ledger.entries import MAX_ENTRY_BYTES

    try:
        entry = decode_entry(content.cat(cid, max_bytes=MAX_ENTRY_BYTES))
    except EntryError as exc:
        raise EvaluationRefused("not_an_evaluation", f"{cid} is not a valid entry: {exc}"
                                ) from None
    if not isinstance(entry, EvaluationEntry):
        raise EvaluationRefused("not_an_evaluation", f"{cid} is a {entry.type} entry, not an "
                                "evaluation")
    return entry


def read_problems(content: Any, entry: EvaluationEntry) -> list[dict]:
    """The entry's first ``task.problems`` problems from its dataset (JSONL) on the content
    endpoint, read as `gym eval` read them (``trainer.data.load_problems``)."""
    from trainer.data import DatasetError, load_problems

    try:
        data = content.cat(entry.task.dataset, max_bytes=MAX_DATASET_BYTES)
    except LedgerError as exc:
        raise EvaluationRefused("dataset", f"dataset {entry.task.dataset}: {exc}") from None
    with tempfile.TemporaryDirectory(prefix="gym-eval-") as tmp:
        path = Path(tmp) / "dataset.jsonl"
        path.write_bytes(data)
        try:
            problems = load_problems(path, entry.task.problems)
        except DatasetError as exc:
            raise EvaluationRefused("dataset", f"dataset {entry.task.dataset}: {exc}") from None
    if len(problems) != entry.task.problems:
        raise EvaluationRefused("dataset", f"dataset {entry.task.dataset} has {len(problems)} "
                                f"problems, the entry scores {entry.task.problems}",
                                expected=entry.task.problems, computed=len(problems))
    return problems


def load_entry_verifier(name: str, trusted: frozenset[str] | set[str] = frozenset()):
    from trainer.verifiers import VerifierError, load_verifier

    if name not in SAFE_VERIFIERS and name not in trusted:
        raise EvaluationRefused("verifier", f"the entry's verifier {name!r} is code this "
                                "verifier has not been told to run: pass --verifier "
                                f"{name} if you trust it")
    try:
        return load_verifier(name)
    except VerifierError as exc:
        raise EvaluationRefused("verifier", str(exc)) from None


def request_seed(seed: int, problem: int, sample: int) -> int:
    """The request seed `gym eval` sends for a generation (``trainer.backends.OpenAIBackend``)."""
    from trainer.backends import derive_seed

    return derive_seed(seed, problem, sample) % 2**31


def verify_evaluation(cid: str, *, content: Any, contract: Any = None, registry: Any = None,
                      domain: Any = None, from_block: int = 0,
                      trusted_verifiers: frozenset[str] | set[str] = frozenset(),
                      sample: int = 0, sample_seed: int | None = None,
                      model: Any = None, tokenizer: Any = None, model_dir: Path | None = None,
                      on_progress: Callable[[int, str], None] | None = None
                      ) -> EvaluationReport:
    """Check evaluation ``cid`` (module docstring); the report, or ``EvaluationRefused``.
    ``on_progress(n, what)``: ``n`` more generations checked."""
    entry = read_entry(content, cid)
    report = EvaluationReport(cid, entry)
    checks = report.checks
    k = entry.sampling.k
    figures = f"{len(entry.arms)} arms x {len(entry.sampling.seeds)} seeds x " \
              f"{entry.task.problems} problems x k={k}"
    checks.append(ReceiptCheck("entry", True, f"evaluation of {_subject_text(entry)}: {figures}"))
    if entry.receipts == "none":
        raise EvaluationRefused("unverified", "the entry is a run on a local model (receipts: "
                                "none): its figures are the evaluator's word, nothing here can "
                                "re-check them")
    try:
        table = decode_receipt_table(content.cat(entry.receipts.table,
                                                 max_bytes=MAX_RECEIPT_TABLE_BYTES))
    except (ReceiptTableError, LedgerError) as exc:
        raise EvaluationRefused("receipt_table", f"receipt table {entry.receipts.table}: {exc}"
                                ) from None
    try:
        check_receipt_table(table, entry)
    except ReceiptTableMismatchError as exc:
        raise EvaluationRefused("missing_generation", f"the receipt table does not list one "
                                f"bundle per generation: {exc}", expected=exc.expected,
                                computed=exc.computed) from None
    report.generations = len(entry.arms) * generations_per_arm(entry)
    checks.append(ReceiptCheck("receipt table", True, f"{report.generations} generations, one "
                               "bundle each"))
    problems = read_problems(content, entry)
    verifier = load_entry_verifier(entry.task.verifier, trusted_verifiers)
    checks.append(ReceiptCheck("task", True, f"{entry.task.problems} problems of dataset "
                               f"{entry.task.dataset}, scored by {entry.task.verifier!r}"))

    registry = None if registry is None else _Registry(registry)
    library_cache: dict = {}
    seen_receipts: dict[str, Generation] = {}
    rewards: dict[tuple[str, int], list[list[float]]] = {}
    bundles_kept: dict[Generation, dict] = {}
    chosen = _choose(entry, sample, sample_seed)
    model_name = objective = None
    receipt_detail = ""
    for generation, bundle_cid in zip(generations(entry), _flat(table, entry), strict=True):
        bundle = _read_bundle(content, bundle_cid, generation)
        try:
            if registry is not None:  # first: a slashed node fails its registration check too
                _check_not_slashed(registry, bundle, generation)
            receipt_checks = verify_receipt_bundle(
                bundle, domain=domain, contract=contract, content=content,
                from_block=from_block, registry=registry, library_cache=library_cache)
        except ReceiptError as exc:
            raise EvaluationRefused("receipt", f"{generation} (bundle {bundle_cid}): receipt "
                                    f"fails ({exc.reason}): {exc}", expected=exc.expected,
                                    computed=exc.computed) from None
        if not receipt_detail:
            receipt_detail = ", ".join(c.name for c in receipt_checks if c.passed)
        receipt = bundle["receipt"]
        rcid = entry_cid(encode_entry(_parse_receipt(receipt)))
        if rcid in seen_receipts:
            raise EvaluationRefused("duplicate_generation", f"{generation}: receipt {rcid} "
                                    f"already stands for {seen_receipts[rcid]}")
        seen_receipts[rcid] = generation
        if receipt["node"] != entry.receipts.node:
            raise EvaluationRefused("other_node", f"{generation}: signed by {receipt['node']}, "
                                    f"the entry names node {entry.receipts.node}",
                                    expected=entry.receipts.node, computed=receipt["node"])
        if receipt["model_digest"] != entry.model_digest:
            raise EvaluationRefused("other_model", f"{generation}: receipt of model "
                                    f"{receipt['model_digest']}", expected=entry.model_digest,
                                    computed=receipt["model_digest"])
        model_name, objective = _check_request(entry, generation, bundle["request"],
                                               problems[generation.problem]["problem"],
                                               model_name, objective)
        _check_library(entry, generation, receipt)
        text = bundle["response"]["text"].strip()
        verdict = verifier({**problems[generation.problem], "response": text})
        rows = rewards.setdefault((generation.arm, generation.seed), [])
        if generation.sample == 0:
            rows.append([])
        rows[-1].append(float(verdict["reward"]))
        if generation in chosen:
            bundles_kept[generation] = bundle
        if on_progress is not None:
            on_progress(1, str(generation))
    checks.append(ReceiptCheck("receipts", True, f"{report.generations} receipts by node "
                               f"{entry.receipts.node}, each passing: {receipt_detail}"))
    checks.append(ReceiptCheck("requests", True, "each generation's request is its problem, "
                               "rollout prompt, sampling and seed; each library its arm's"))
    _check_figures(entry, rewards)
    checks.append(ReceiptCheck("figures", True, f"every per-seed Mean@{k} and Pass@{k} "
                               "recomputed from the signed answers"))
    if sample and model is None:
        checks.append(ReceiptCheck("re-run", None, f"--sample {sample} needs --model"))
    elif sample:
        for generation, bundle in bundles_kept.items():
            try:
                verify_receipt_bundle(bundle, domain=domain, contract=contract, content=content,
                                      from_block=from_block, model=model, tokenizer=tokenizer,
                                      model_dir=model_dir, library_cache=library_cache)
            except ReceiptError as exc:
                raise EvaluationRefused("rerun", f"{generation}: re-run fails ({exc.reason}): "
                                        f"{exc}", expected=exc.expected,
                                        computed=exc.computed) from None
            report.rerun.append(generation)
            if on_progress is not None:
                on_progress(0, f"re-ran {generation}")
        checks.append(ReceiptCheck("re-run", True, f"{len(report.rerun)} generations re-run "
                                   "in full: activations, termination, every token's sampling"))
    else:
        checks.append(ReceiptCheck("re-run", None, "none sampled (--sample N --model DIR)"))
    return report


def _check_not_slashed(registry: Any, bundle: dict, generation: Generation) -> None:
    """``EvaluationRefused`` (slashed) when the NodeRegistry slashed the node for this
    generation's receipt; ``ReceiptError`` for a bundle too malformed to tell."""
    from inference_node.receipts import ReceiptDomain, receipt_hash

    receipt = _parse_receipt(bundle.get("receipt"))
    operator = registry.operator_of_signer(receipt.node)
    if operator is None:
        return  # verify_receipt_bundle refuses it (not_registered)
    digest = receipt_hash(receipt, ReceiptDomain.from_json(bundle.get("domain")))
    challenge = registry.slashed_for(operator, digest)
    if challenge:
        raise EvaluationRefused("slashed", f"{generation}: the node was slashed for this "
                                f"receipt (challenge {challenge} upheld): the generation is "
                                "proven false")


def _subject_text(entry: EvaluationEntry) -> str:
    s = entry.subject
    if s.kind == "library":
        n = len(s.entries)
        return f"library log {s.log_id} at size {s.size} ({n} experience{'s' if n != 1 else ''})"
    return f"adapter {s.entry}"


def _flat(table: Any, entry: EvaluationEntry) -> list[str]:
    return [cid for arm in entry.arms for cid in table.arms[arm]]


def _choose(entry: EvaluationEntry, sample: int, seed: int | None) -> set[Generation]:
    every = generations(entry)
    return set(random.Random(seed).sample(every, min(sample, len(every)))) if sample else set()


def _read_bundle(content: Any, cid: str, generation: Generation) -> dict:
    try:
        bundle = parse_json(content.cat(cid, max_bytes=MAX_BUNDLE_BYTES),
                            max_bytes=MAX_BUNDLE_BYTES, what=f"bundle {cid}")
    except (LedgerError, JSONInputError) as exc:
        raise EvaluationRefused("receipt", f"{generation}: bundle {cid}: {exc}") from None
    if not isinstance(bundle, dict) or bundle.get("v") != 2:
        raise EvaluationRefused("receipt", f"{generation}: bundle {cid} is not a v2 receipt "
                                "bundle")
    return bundle


def _parse_receipt(receipt: Any):
    from inference_node.receipts import parse_receipt

    return parse_receipt(receipt)


def _check_request(entry: EvaluationEntry, generation: Generation, request: dict,
                   problem_text: str, model_name: str | None, objective: str | None
                   ) -> tuple[str, str]:
    """The bundle's normalized request is the one `gym eval` sends for ``generation``; the
    served model's name and the objective, which every generation must share."""
    from inference_node.normalized_request import FORMAT

    messages = request.get("messages")
    system = messages[0].get("content") if isinstance(messages, list) and messages \
        and isinstance(messages[0], dict) else None
    if objective is None and isinstance(system, str) and "sha256:" + hashlib.sha256(
            system.encode()).hexdigest() == entry.task.prompt_digest:
        objective = system
    if model_name is None:
        model_name = request.get("model")
    s = entry.sampling
    expected = {"v": FORMAT, "route": "chat", "model": model_name,
                "messages": [{"role": "system", "content": objective},
                             {"role": "user", "content": problem_text}],
                "max_tokens": s.max_tokens, "temperature": s.temperature, "top_p": s.top_p,
                "seed": request_seed(generation.seed, generation.problem, generation.sample),
                "stop": []}
    if request != expected:
        differs = sorted(key for key in expected.keys() | request.keys()
                         if request.get(key) != expected.get(key))
        raise EvaluationRefused("other_request", f"{generation}: the receipt answers another "
                                f"request (it differs in {', '.join(differs)})",
                                expected={k: expected.get(k) for k in differs},
                                computed={k: request.get(k) for k in differs})
    return model_name, objective


def _check_library(entry: EvaluationEntry, generation: Generation, receipt: dict) -> None:
    library, ids = receipt["library"], receipt["experience_ids"]
    got = (library["log_id"], library["size"], library["root"], list(ids))
    if generation.arm == entry.baseline:
        wanted: tuple = (0, 0, None, [])
        ok = got[0] == 0 and not ids
    else:
        s = entry.subject
        if s.kind != "library":
            raise EvaluationRefused("other_library", f"{generation}: an adapter evaluation's "
                                    "arms are checked by their adapter, which this verifier "
                                    "does not do yet")
        wanted = (s.log_id, s.size, s.root, list(s.entries))
        ok = got == wanted
    if not ok:
        raise EvaluationRefused("other_library", f"{generation}: the receipt's library is not "
                                f"its arm's", expected=wanted, computed=got)


def _check_figures(entry: EvaluationEntry, rewards: dict) -> None:
    k = entry.sampling.k
    for arm, result in entry.arms.items():
        for figures in result.per_seed:
            mean, passed = seed_figures(rewards[(arm, figures.seed)], k)
            for metric, claimed, computed in (("mean_at_k", figures.mean_at_k, mean),
                                              ("pass_at_k", figures.pass_at_k, passed)):
                if claimed != computed:
                    raise EvaluationRefused(
                        "figures", f"arm {arm}, seed {figures.seed}: {metric} is {claimed!r} in "
                        f"the entry, {computed!r} scored from the signed answers",
                        expected=computed, computed=claimed)
