"""``gym train tfgrpo`` and ``gym eval``: thin commands over the trainer and the evaluator.

    gym train tfgrpo trainer/configs/tfgrpo_smollm2.yaml [--limit N] [--epochs N] [--resume]
                     [--output DIR] [--publish LOG]
    gym train publish runs/tfgrpo-smollm2 LOG
    gym eval --library runs/tfgrpo-smollm2/library.json \\
             --dataset trainer/data/arith_heldout.jsonl -k 4 --seeds 3 [--model DIR] [--limit N]
    gym eval --adapter runs/sft-smollm2/adapter --dataset trainer/data/arith_heldout.jsonl
    gym eval --library library.json --dataset held.jsonl --base-url http://127.0.0.1:8000/v1 \\
             --model SmolLM2-135M-Instruct [--api-key-env OPENAI_API_KEY]
    gym eval --config trainer/configs/tfgrpo_reverse.yaml --library LIB --show 2 --output e.json

The root CLI mounts `train_app` as `gym train` and `eval_library` as `gym eval`. Expected
failures (a bad config, a snapshot from another config, a missing or malformed dataset, an
unknown verifier) raise `ConfigError`, `ResumeError`, `DatasetError` or `VerifierError`, all
`TrainerError`s, and are raised before any model loads where they can be; the root turns them
into one line. Progress (spinners, bars) goes to stderr, results to stdout.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ledger.tables import CliConsole, print_table
from trainer._json import read_json_file

train_app = typer.Typer(help="Train: LoRA adapters (sft, dpo, grpo, gspo through TRL + PEFT) "
                        "or a Training-Free GRPO experience library.", no_args_is_help=True)
console = CliConsole()
progress_console = Console(stderr=True)  # spinners and progress bars: stdout keeps the results


@train_app.callback()
def train_group() -> None:
    """Train: LoRA adapters (sft, dpo, grpo, gspo through TRL + PEFT) or a Training-Free GRPO
    experience library."""


@train_app.command("tfgrpo")
def train_tfgrpo(
    ctx: typer.Context,
    config_path: Annotated[Path, typer.Argument(help="TFGRPOConfig YAML file.", exists=True,
                                                dir_okay=False)],
    resume: Annotated[bool, typer.Option(help="Continue from the last snapshot.")] = False,
    output: Annotated[Path | None, typer.Option(help="Override the config's output_dir.")] = None,
    publish: Annotated[str | None, typer.Option(
        help="Then publish the run to this ledger log (created if new) and anchor it.")] = None,
    limit: Annotated[int | None, typer.Option(
        min=1, help="Train on the first N problems only (overrides max_train_problems); "
                    "steps per epoch = N / batch_size.")] = None,
    epochs: Annotated[int | None, typer.Option(
        min=1, help="Override the config's epochs.")] = None,
) -> None:
    """Learn an experience library with Training-Free GRPO; writes snapshots and a run report.

    Relative paths inside the config (train_path, eval_path, a local model) are read relative
    to the config file; output_dir relative to the working directory. A quick run:
    --limit 4 (one step of batch_size 4). With --publish LOG the run becomes ledger entries
    (one `run`, one `experience` per applied operation), appended to LOG and anchored on the
    chain of the devnet deployment.
    """
    from trainer.data import load_problems
    from trainer.errors import TrainerError
    from trainer.tfgrpo_config import ConfigError, TFGRPOConfig

    config = TFGRPOConfig.from_yaml(config_path, output_dir=str(output) if output else None,
                                    max_train_problems=limit, epochs=epochs)
    # Every input before any model: the problems parse, the ledger answers.
    try:
        load_problems(config.train_path, config.max_train_problems)
    except TrainerError as exc:
        raise ConfigError(f"{config_path}: train_path: {exc}") from None
    if publish:
        from ledger.runtime import runtime_of

        runtime_of(ctx).contract.log_count()
    from trainer.gradient.progress import quiet_library_output
    from trainer.tfgrpo_trainer import TFGRPOTrainer

    quiet_library_output()
    with progress_console.status("loading models"):
        trainer = TFGRPOTrainer(config)
    total = config.epochs * trainer.steps_per_epoch
    from trainer.reports import step_progress

    with step_progress(progress_console) as bar:
        task = bar.add_task(f"tfgrpo steps ({len(trainer.problems)} problems, G = "
                            f"{config.group_size})", total=total)

        generated = 0

        def count(n: int) -> None:  # every batch of completions, rollouts and stage calls alike
            nonlocal generated
            generated += n
            bar.update(task, description=f"tfgrpo steps: {generated} completions")

        def advance(row: dict) -> None:
            bar.update(task, completed=row["global_step"] + 1,
                       description=f"epoch {row['epoch']} step {row['step']}: "
                                   f"library {row['library_size']}, {generated} completions")

        for backend in {id(b): b for b in (trainer.policy, trainer.stage)}.values():
            if hasattr(backend, "on_rows"):
                backend.on_rows = count
        report_path = trainer.train(resume=resume, on_step_end=advance)
    report = read_json_file(report_path)
    table = Table(title="Training-Free GRPO")
    table.add_column("counter")
    table.add_column("count", justify="right")
    for name, count in report["counters"].items():
        table.add_row(name, str(count))
    print_table(table, console)
    console.print(f"library: {report['library']} ({report['library_size']} experiences)")
    console.print(f"run report: {report_path}")
    if publish:
        _publish(ctx, report_path.parent, publish)


@train_app.command("publish")
def publish_command(
    ctx: typer.Context,
    run_dir: Annotated[Path, typer.Argument(help="Output directory of a finished run.",
                                            exists=True, file_okay=False)],
    log: Annotated[str, typer.Argument(help="Ledger log to append to (created if new).")],
    domain: Annotated[str | None, typer.Option(
        help="Domain recorded in each experience entry (default: the run config's `domain`).")
    ] = None,
) -> None:
    """Publish a finished run, anchored: a Training-Free GRPO run as run + experience entries,
    a `gym train sft|dpo|grpo|gspo` run as run + adapter entries."""
    _publish(ctx, run_dir, log, domain)


def _publish(ctx: typer.Context, run_dir: Path, log: str, domain: str | None = None) -> None:
    from ledger.runtime import runtime_of
    from trainer.reports import publish_and_show

    publish_and_show(console, runtime_of(ctx), run_dir, log, domain=domain)


def eval_library(
    ctx: typer.Context,
    dataset: Annotated[Path | None, typer.Option(
        help="Held-out problems (JSONL with problem, answer); default: --config's eval_path.",
        exists=True, dir_okay=False)] = None,
    config: Annotated[Path | None, typer.Option(
        help="A `gym train tfgrpo` config: its agent_objective is the prompt, its verifier and "
             "eval_path the defaults (without it: the math prompt and verifier).",
        exists=True, dir_okay=False)] = None,
    library: Annotated[Path | None, typer.Option(
        help="library.json written by `gym train tfgrpo`: adds the 'library' arm.",
        exists=True, dir_okay=False)] = None,
    adapter: Annotated[Path | None, typer.Option(
        help="PEFT adapter directory (or a merged model from `gym adapter merge`) over --model: "
             "adds the 'adapter' arm (and 'adapter+library' with --library).",
        exists=True, file_okay=False)] = None,
    k: Annotated[int, typer.Option("-k", help="Samples per problem.")] = 4,
    seeds: Annotated[int, typer.Option(help="Evaluation seeds 0..N-1.")] = 3,
    model: Annotated[str, typer.Option(
        help="Local model dir ('' = SmolLM2 default); with --base-url, the served model's name."
    )] = "",
    base_url: Annotated[str, typer.Option(
        help="An OpenAI-compatible endpoint (e.g. `gym node serve`'s .../v1) instead of a local "
             "model: the baseline and library arms run there.")] = "",
    api_key_env: Annotated[str, typer.Option(
        help="With --base-url: the environment variable holding the API key (may be unset).")
    ] = "OPENAI_API_KEY",
    verifier: Annotated[str | None, typer.Option(
        help="math | exact | python:module:function (default: --config's, else math)")] = None,
    objective: Annotated[str | None, typer.Option(
        help="The rollout objective (system prompt) every arm is asked under; default: "
             "--config's agent_objective, else the math solver's.")] = None,
    limit: Annotated[int, typer.Option(help="Use only the first N problems (0 = all).")] = 0,
    temperature: Annotated[float, typer.Option(help="Sampling temperature.")] = 0.7,
    max_new_tokens: Annotated[int, typer.Option(help="Completion length cap.")] = 256,
    batch_size: Annotated[int, typer.Option(
        help="Rows per forward batch (with --base-url: concurrent requests).")] = 16,
    output: Annotated[Path | None, typer.Option(
        help="Also write the results as JSON, and every completion with its reward beside it "
             "(OUTPUT with .completions.jsonl).")] = None,
    show: Annotated[int, typer.Option(
        min=0, help="Print the first N completions with their reward and what the verifier "
                    "read in them.")] = 0,
    library_log: Annotated[str | None, typer.Option(
        help="A published log (name or on-chain id) as the 'library' arm, instead of "
             "--library: with --base-url the node prompts with it (X-Gym-Library), verified "
             "from chain + content store, and every receipt binds it; locally its texts are "
             "read from the chain and the content endpoint.")] = None,
    publish: Annotated[str | None, typer.Option(
        help="Append the evaluation as an `evaluation` entry to this log and anchor it "
             "(needs --library-log; with --base-url every generation's receipt bundle goes "
             "to the content endpoint: `gym verify evaluation CID` re-checks it).")] = None,
    wait: Annotated[float, typer.Option(
        min=0, help="With --publish --base-url: seconds to wait for the node to anchor the "
                    "receipts (it anchors every --anchor-interval).")] = 180.0,
) -> None:
    """Mean@k and Pass@k of the base model against a library and/or an adapter.

    Every arm answers the same problems with the same sampling seeds: 'baseline' (base model),
    'library' (base + experiences in the prompt), 'adapter' (base + PEFT adapter),
    'adapter+library'. Give --library, --adapter or both. With --base-url --model NAME the arms
    run on that endpoint (an adapter needs a local model, so not with --adapter).
    """
    from trainer.backends import (
        OpenAIBackend,
        TransformersBackend,
        adapter_backend,
        default_model_dir,
    )
    from trainer.data import load_problems
    from trainer.errors import TrainerError
    from trainer.evaluate import evaluate_arms, load_library
    from trainer.verifiers import load_verifier

    if library is None and adapter is None and library_log is None:
        raise TrainerError("nothing to compare: give --library, --library-log, --adapter or "
                           "both")
    if library is not None and library_log is not None:
        raise TrainerError("give --library (a file) or --library-log (a published log), not "
                           "both")
    if publish is not None and (library_log is None or adapter is not None):
        raise TrainerError("--publish evaluates a published library: give --library-log (and "
                           "no --adapter)")
    agent_objective = None
    if config is not None:
        from trainer.tfgrpo_config import TFGRPOConfig

        task = TFGRPOConfig.from_yaml(config)
        agent_objective = task.agent_objective
        verifier = verifier or task.verifier
        dataset = dataset or Path(task.eval_path)
        if not dataset.is_file():
            raise TrainerError(f"{config}: eval_path {dataset} is not a file")
    verifier = verifier or "math"
    if objective is not None:
        if not objective.strip():
            raise TrainerError("--objective is empty")
        agent_objective = objective
    if dataset is None:
        raise TrainerError("which problems? give --dataset, or --config with an eval_path")
    if base_url and adapter:
        raise TrainerError("--adapter needs a local model: it cannot be combined with --base-url")
    if base_url and not model:
        raise TrainerError("--base-url needs --model NAME (the model's name on that endpoint)")
    if limit < 0 or k < 1 or seeds < 1 or max_new_tokens < 1 or batch_size < 1:
        raise TrainerError("--limit must be >= 0; -k, --seeds, --max-new-tokens and "
                           "--batch-size >= 1")
    if publish is not None and dataset.suffix != ".jsonl":
        raise TrainerError(f"{dataset}: --publish needs a JSONL dataset (what `gym verify "
                           "evaluation` reads back from its CID)")
    problems = load_problems(dataset, limit)
    try:
        experiences = load_library(library) if library else []
    except (ValueError, KeyError, TypeError) as exc:
        raise TrainerError(f"{library}: not a library.json of `gym train tfgrpo` "
                           f"({exc})") from None
    load_verifier(verifier)
    rt = log_id = subject = None
    if library_log is not None:
        from ledger.chain import resolve_log_id
        from ledger.runtime import runtime_of
        from trainer.evaluation_publish import LIBRARY_HEADER, library_texts
        from trainer.tfgrpo_prompts import Experience

        rt = runtime_of(ctx)
        log_id = resolve_log_id(rt.contract, library_log, from_block=rt.chain.deployment_block)
        if not base_url:
            with progress_console.status(f"reading log {log_id} from chain + content endpoint"):
                subject, live = library_texts(rt, log_id)
            experiences = [Experience(cid, text) for cid, text in live]
    node_library = None
    if base_url:
        backend = OpenAIBackend(base_url, model, os.environ.get(api_key_env),
                                max_concurrency=batch_size,
                                headers=None if log_id is None else {LIBRARY_HEADER: "none"})
        if log_id is not None:
            node_library = OpenAIBackend(base_url, model, os.environ.get(api_key_env),
                                         max_concurrency=batch_size,
                                         headers={LIBRARY_HEADER: str(log_id)})
    else:
        from trainer.gradient.progress import quiet_library_output

        quiet_library_output()
        with progress_console.status("loading model"):
            backend = TransformersBackend(model or None, batch_size=batch_size)
    arms = {"baseline": (backend, [])}
    if node_library is not None:  # the node injects the log's experiences
        arms["library"] = (node_library, [])
    elif library or library_log:
        arms["library"] = (backend, experiences)
    if adapter:
        if (adapter / "adapter_config.json").is_file():
            from trainer.adapters.merge import check_base_model

            check = check_base_model(adapter, model or default_model_dir(), force=True)
            if check.forced:
                console.print(f"[yellow]warning[/yellow]: the base model's weights digest "
                              f"{check.digest} is not the one the adapter entry names "
                              f"({check.expected})", highlight=False)
        with progress_console.status("loading adapter"):
            tuned = adapter_backend(adapter, model or None, batch_size=batch_size)
        arms["adapter"] = (tuned, [])
        if library:
            arms["adapter+library"] = (tuned, experiences)
    from trainer.reports import step_progress

    with step_progress(progress_console) as bar:
        task = bar.add_task(f"eval: {len(arms)} arms x {seeds} seeds x {len(problems)} problems "
                            f"x k={k} generations", total=len(arms) * seeds * len(problems) * k)

        def advance(n: int, label: str) -> None:
            bar.update(task, advance=n, description=f"eval {label}")

        completions: list[dict] = []
        evidence: dict = {}
        results = evaluate_arms(arms, problems, load_verifier(verifier), k=k,
                                seeds=tuple(range(seeds)), temperature=temperature,
                                max_new_tokens=max_new_tokens, on_progress=advance,
                                agent_objective=agent_objective, completions=completions,
                                receipts=evidence)
    from trainer.tfgrpo_config import MATH_AGENT_OBJECTIVE

    results.update(verifier=verifier, agent_objective=agent_objective or MATH_AGENT_OBJECTIVE)
    if adapter:
        results["adapter_dir"] = str(adapter)
    if base_url:
        results.update(base_url=base_url, model=model)
    what = ", ".join(filter(None, [f"library of {len(experiences)}" if library else "",
                                   f"library log {log_id}" if log_id is not None else "",
                                   f"adapter {adapter}" if adapter else ""]))
    table = Table(title=f"{len(problems)} problems, k={k}, seeds={seeds}, {what}")
    for column in ("arm", "metric", "mean", "std", "min", "max"):
        table.add_column(column, justify="left" if column in ("arm", "metric") else "right")
    for arm in arms:
        for metric in ("mean_at_k", "pass_at_k"):
            s = results[arm][metric]
            table.add_row(arm, metric.replace("_at_k", f"@{k}"),
                          *(f"{s[x]:.3f}" for x in ("mean", "std", "min", "max")))
    print_table(table, console)
    for record in completions[:show]:
        console.print(f"[{record['arm']}, seed {record['seed']}, problem "
                      f"{record['problem_index']}, sample {record['sample']}] reward "
                      f"{record['reward']:g}: {record['reasoning']}", highlight=False, markup=False)
        text = record["response"].strip()
        console.print("  " + (text[:400] + " …" if len(text) > 400 else text).replace(
            "\n", "\n  "), highlight=False, markup=False)
    if output:
        output.write_text(json.dumps(results, indent=1))
        console.print(f"results: {output}")
        kept = output.with_suffix(".completions.jsonl")
        kept.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in completions),
                        encoding="utf-8")
        console.print(f"completions: {kept} ({len(completions)})")
    if publish is not None:
        _publish_evaluation(rt, publish, dataset=dataset, problems=len(problems),
                            verifier=verifier, agent_objective=results["agent_objective"],
                            k=k, seeds=list(range(seeds)), max_tokens=max_new_tokens,
                            results=results, evidence=evidence, base_url=base_url,
                            subject=subject, local_model=None if base_url else (model or None),
                            wait=wait)


def _publish_evaluation(rt, log: str, *, dataset: Path, problems: int, verifier: str,
                        agent_objective: str, k: int, seeds: list[int], max_tokens: int,
                        results: dict, evidence: dict, base_url: str, subject: dict | None,
                        local_model: str | None, wait: float) -> None:
    """`gym eval --publish`: through a node, the bundles and table stored, the entry appended
    and anchored (``trainer.evaluation_publish``); locally, an entry without receipts."""
    from ledger.evaluations import effect
    from trainer import evaluation_publish as ep
    from trainer.reports import step_progress

    task = {"dataset": dataset, "problems": problems, "verifier": verifier,
            "agent_objective": agent_objective, "k": k, "seeds": seeds,
            "max_tokens": max_tokens}
    if base_url:
        bundles: dict[str, list] = {}
        total = len(results["arms"]) * len(seeds) * problems * k
        with step_progress(progress_console) as bar:
            job = bar.add_task("fetching the receipt bundles from the node", total=total)
            for arm in results["arms"]:
                flat = [e for seed in seeds for row in evidence[(arm, seed)] for e in row]
                bundles[arm] = ep.fetch_bundles(
                    base_url, flat, wait_s=wait,
                    on_fetched=lambda n: bar.update(job, advance=n),
                    on_wait=lambda cid: bar.update(
                        job, description="waiting for the node to anchor its receipt log"))
        with progress_console.status(f"storing {total} receipt bundles on the content "
                                     f"endpoint, appending the evaluation to {log}"):
            published = ep.publish_from_node(rt, log, bundles, results, **task)
    else:
        from ledger.entries import weights_digest
        from trainer.backends import default_model_dir

        entry = ep.build_entry(
            subject=subject, baseline="baseline",
            dataset_cid=rt.content.add_file(dataset.read_bytes(), pin=True),
            problems=problems, verifier=verifier, agent_objective=agent_objective,
            model_digest=weights_digest(local_model or default_model_dir()), k=k, seeds=seeds,
            temperature=results["temperature"], top_p=results["top_p"], max_tokens=max_tokens,
            results=results, receipts="none")
        with progress_console.status(f"appending the evaluation to {log} and anchoring it"):
            cid, leaf = ep.append_and_anchor(rt, log, entry)
        published = ep.PublishedEvaluation(cid, leaf, entry, None)
    console.print(f"evaluation entry {published.cid}: leaf {published.leaf} of {log}, anchored",
                  highlight=False)
    console.print("  " + effect(published.entry).summary(k), highlight=False)
    if published.table is None:
        console.print("  receipts: none (a local model): unverified evidence", highlight=False)
    else:
        console.print(f"  receipt table {published.table}; check it: gym verify evaluation "
                      f"{published.cid}", highlight=False)


def main() -> None:  # `python -m trainer.cli train ...` until the root CLI mounts these
    root = typer.Typer(no_args_is_help=True, add_completion=False)
    root.add_typer(train_app, name="train")
    root.command("eval")(eval_library)
    root()


if __name__ == "__main__":
    main()
