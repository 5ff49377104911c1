"""Steps 6 and 7 of `gym demo`: the DAO measures what it is asked to curate, and votes by it.

6. ``measure``: every candidate library (a published log) is evaluated through the demo's
   registered node before the vote, on the DAO's small benchmark (``FARM_TASK``: four
   questions about the Gym farm, the ``exact`` verifier, k = 2 samples, seeds 0 and 1, 32
   tokens). The baseline arm asks with ``X-Gym-Library: none``, each candidate's arm with its
   log's id (``inference_node.library_choice``): one run, the baseline's generations shared
   by every candidate's entry. Each candidate gets an ``evaluation`` entry (its arm against
   the baseline, every generation's receipt bundle on the content endpoint;
   ``trainer.evaluation_publish``), anchored on the evaluator's log, and checked as
   `gym verify evaluation` checks it (``inference_node.evaluation_check``, no re-run).
7. ``decide``: each candidate is proposed with its evaluation as evidence
   (`gym gov propose-curation --evidence`), and the voters vote by it: for when the library
   helps beyond its spread (``ledger.evaluations.Effect.verdict``), else against, with the
   figures as their reason. A proposal voted down says so in one line with its figures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from devnet.errors import DevnetError
from devnet.settings import DEVNET_DIR

FARM_TASK = DEVNET_DIR / "samples" / "farm_task.jsonl"
FARM_RULES = DEVNET_DIR / "samples" / "farm_rules.jsonl"  # what a farmer knows, one experience
OBJECTIVE = "Answer the question in one short line."
VERIFIER = "exact"
K, SEEDS, TEMPERATURE, TOP_P, MAX_TOKENS = 2, (0, 1), 0.7, 0.95, 32
WAIT_S = 120.0  # for the node to anchor the receipts


@dataclass(frozen=True)
class Measured:
    """A candidate library and the evaluation that measured it."""

    name: str  # how the demo calls it
    log: str  # the publisher log (local name)
    log_id: int
    evaluation: str  # the evaluation entry's CID
    entry: Any  # its EvaluationEntry

    @property
    def effect(self) -> Any:
        from ledger.evaluations import effect

        return effect(self.entry)


def publish_farm_rules(rt: Any, console: Console) -> str:
    """A second candidate: one experience a farmer wrote, published to its own log."""
    from ledger.publish import append_entries, publish, read_entry_files

    name = f"demo/farm-rules-{time.strftime('%Y%m%d-%H%M%S')}"
    rt.store.create_log(name)
    append_entries(rt.store, rt.content, name, read_entry_files([FARM_RULES]))
    published = publish(rt.store, rt.content, rt.contract, name)
    console.print(f"published {name}: 1 experience, size {published.size}", highlight=False)
    return name


def measure(rt: Any, console: Console, node_url: str, model: str,
            candidates: dict[str, str]) -> list[Measured]:
    """Step 6 (module docstring): ``candidates`` maps a name to a published log of ``rt``'s
    store; one evaluation entry each, anchored on ``demo/evaluations-<stamp>``."""
    from ledger.chain import resolve_log_id
    from ledger.evaluations import effect
    from trainer import evaluation_publish as ep
    from trainer.backends import OpenAIBackend
    from trainer.data import load_problems
    from trainer.evaluate import evaluate_arms
    from trainer.reports import step_progress
    from trainer.verifiers import load_verifier

    problems = load_problems(FARM_TASK)
    log_ids = {name: resolve_log_id(rt.contract, log, from_block=rt.chain.deployment_block)
               for name, log in candidates.items()}

    def backend(library: str) -> OpenAIBackend:
        return OpenAIBackend(f"{node_url}/v1", model, max_concurrency=8,
                             headers={ep.LIBRARY_HEADER: library})

    arms = {"baseline": (backend("none"), [])}
    arms.update({name: (backend(str(log_id)), []) for name, log_id in log_ids.items()})
    total = len(arms) * len(SEEDS) * len(problems) * K
    evidence: dict = {}
    with step_progress(console) as bar:
        task = bar.add_task(f"evaluating through the node: {len(arms)} arms x {len(SEEDS)} "
                            f"seeds x {len(problems)} problems x k={K}", total=total)
        results = evaluate_arms(arms, problems, load_verifier(VERIFIER), k=K, seeds=SEEDS,
                                temperature=TEMPERATURE, top_p=TOP_P, max_new_tokens=MAX_TOKENS,
                                on_progress=lambda n, label: bar.update(task, advance=n),
                                agent_objective=OBJECTIVE, receipts=evidence)

    def flat(arm: str) -> list:
        return [e for seed in SEEDS for row in evidence[(arm, seed)] for e in row]

    with console.status("waiting for the node to anchor the receipts, fetching their bundles"):
        baseline = ep.fetch_bundles(node_url, flat("baseline"), wait_s=WAIT_S)
        bundles = {name: ep.fetch_bundles(node_url, flat(name), wait_s=WAIT_S)
                   for name in candidates}
    log = f"demo/evaluations-{time.strftime('%Y%m%d-%H%M%S')}"
    measured = []
    for name, log_name in candidates.items():
        with console.status(f"storing the {name} evaluation's receipt bundles on the "
                            "content endpoint"):
            published = ep.publish_from_node(
                rt, log, {"baseline": baseline, "library": bundles[name]},
                {**results, "arms": ["baseline", "library"], "library": results[name]},
                dataset=FARM_TASK, problems=len(problems), verifier=VERIFIER,
                agent_objective=OBJECTIVE, k=K, seeds=list(SEEDS), max_tokens=MAX_TOKENS)
        measured.append(Measured(name, log_name, log_ids[name], published.cid, published.entry))
        console.print(f"{name} (log {log_name}): evaluation {published.cid}, leaf "
                      f"{published.leaf} of {log}", highlight=False)
        console.print(f"  {effect(published.entry).summary(K)}", highlight=False)
    return measured


def check(rt: Any, console: Console, measured: list[Measured], registry: str) -> None:
    """What `gym verify evaluation CID` checks, for each (no re-run)."""
    from inference_node.evaluation_check import EvaluationRefused, verify_evaluation
    from inference_node.receipts import ReceiptDomain
    from inference_node.registry import NodeRegistry

    contract = rt.contract
    registry_client = NodeRegistry(contract.w3, registry, from_block=rt.chain.deployment_block)
    for m in measured:
        try:
            with console.status(f"gym verify evaluation {m.evaluation}"):
                report = verify_evaluation(
                    m.evaluation, content=rt.content, contract=contract,
                    registry=registry_client,
                    domain=ReceiptDomain(contract.w3.eth.chain_id, contract.address.lower()),
                    from_block=rt.chain.deployment_block)
        except EvaluationRefused as exc:
            raise DevnetError(f"the {m.name} evaluation FAILS ({exc.reason}): {exc}") from None
        console.print(f"[green]verified[/green] {m.name}: {report.generations} receipts "
                      "(signature, registration, library, inclusion), every request and "
                      f"figure; re-run any: gym verify evaluation {m.evaluation} --sample 4 "
                      "--model MODEL_DIR", highlight=False)


def decide(gov: Any, console: Console, measured: list[Measured], params: Any,
           indices_of: Any, descriptions: dict[str, str]) -> list[Any]:
    """Step 7 (module docstring): one proposal per candidate, with its evidence; the voters'
    support follows the measured verdict. ``indices_of(log)``: the leaves to curate."""
    from governance.devnet_curation import curate_on_devnet

    client = gov.client()
    done = []
    for m in measured:
        e = m.effect
        support = "for" if e.verdict == "helps" else "against"
        figures = e.summary(m.entry.sampling.k)
        result = curate_on_devnet(
            client, gov.ledger.store, gov.ledger.content, m.log, indices_of(m.log),
            descriptions[m.name], voting_period=params.voting_period,
            timelock_delay=params.timelock_min_delay, evidence=[m.evaluation],
            support=support, reason=f"measured: {figures}")
        number = client.proposal_ids().index(result.proposal_id) + 1  # as `gym gov list`
        if result.executed:
            console.print(f"[green]passed on its evidence[/green]: proposal {number}"
                          f" ({m.name}): {figures}; executed, curated library size "
                          f"{result.library.size}", highlight=False)
            if result.library.root != result.leaves_root:
                raise DevnetError("the curated library's on-chain root is not the RFC 9162 "
                                  "root of its leaves")
        else:
            console.print(f"[red]voted down on its evidence[/red]: proposal {number} "
                          f"({m.name}): {figures}", highlight=False)
        done.append(result)
    return done
