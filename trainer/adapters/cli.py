"""``gym adapter publish|fetch|merge|compress``: thin commands over ``trainer.adapters``.

    gym adapter publish runs/sft-smollm2 alice/adapters       # run + adapter entries, anchored
    gym adapter fetch bafkrei... adapters/sft [--log alice/adapters --index 1 | --proof p.json]
    gym adapter merge adapters/sft --base MODEL_DIR --output merged/sft [--force]
    gym adapter compress adapters/sft --base MODEL_DIR --bits 1 --output deltas/sft-1bit \\
        [--group-size G] [--eval-dataset FILE] [--publish alice/adapters]

Expected failures raise ``AdapterError`` subclasses (or the ledger's errors); the root prints
them as one line and exits 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from ledger.tables import CliConsole, print_table
from trainer._json import read_json_file
from trainer.adapters.errors import AdapterError

app = typer.Typer(help="PEFT adapters on the ledger: publish, fetch and verify, merge, compress.",
                  no_args_is_help=True)
console = CliConsole()
err_console = CliConsole(stderr=True)

BaseOption = Annotated[str, typer.Option(
    "--base", help="Base model directory ('' = the SmolLM2-135M-Instruct default).")]
ForceOption = Annotated[bool, typer.Option(
    help="Use --base even when its weights digest differs from the adapter entry's.")]


@app.callback()
def adapter() -> None:
    """PEFT adapters on the ledger: publish, fetch and verify, merge, compress."""


def _quiet_loading() -> None:
    """No per-shard "Loading weights" bars from transformers: the command shows its own."""
    from transformers.utils import logging

    logging.disable_progress_bar()


def _base_dir(base: str) -> Path:
    from trainer.backends import default_model_dir

    return Path(base) if base else default_model_dir()


@app.command()
def publish(
    ctx: typer.Context,
    run_dir: Annotated[Path, typer.Argument(help="Output directory of a `gym train sft|dpo|"
                                            "grpo|gspo` run (adapter/ + run.json).",
                                            exists=True, file_okay=False)],
    log: Annotated[str, typer.Argument(help="Ledger log to append to (created if new).")],
) -> None:
    """Store the adapter's files, append a `run` and an `adapter` entry, anchor the log."""
    from ledger.runtime import runtime_of
    from trainer.reports import publish_and_show

    publish_and_show(console, runtime_of(ctx), run_dir, log)


@app.command()
def fetch(
    ctx: typer.Context,
    cid: Annotated[str, typer.Argument(help="CID of the adapter entry (bafkrei...).")],
    directory: Annotated[Path, typer.Argument(help="New directory to write the adapter to.")],
    log: Annotated[str | None, typer.Option(help="Also prove the entry is leaf --index of this "
                                            "local log, anchored on chain.")] = None,
    index: Annotated[int | None, typer.Option(help="Leaf index of the entry in --log.")] = None,
    proof: Annotated[Path | None, typer.Option(
        help="Also check this inclusion proof document (`gym ledger proof --json`) against the "
             "root anchored on chain.", exists=True, dir_okay=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was fetched as JSON.")
                       ] = False,
) -> None:
    """Fetch an adapter by its entry CID; verify every file's size and CID, then write it.

    Files are written to a temporary directory and renamed into place only when all of them
    verified; on any mismatch nothing is written and the command fails.
    """
    from ledger.proofs import proof_from_options
    from ledger.runtime import runtime_of
    from trainer.adapters.fetch import fetch_adapter, fetch_adapter_entry
    from trainer.reports import files_table

    rt = runtime_of(ctx)
    doc = proof_from_options(rt.store, rt.content, log=log, index=index, proof_file=proof)
    contract = rt.contract if doc is not None else None
    _, entry = fetch_adapter_entry(rt.content, cid)
    columns = (TextColumn("fetching {task.description}"), BarColumn(), DownloadColumn(),
               TransferSpeedColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err_console if as_json else console, transient=True) as bar:
        task = bar.add_task(cid[:16] + "…", total=sum(f.size for f in entry.files))
        fetched = fetch_adapter(rt.content, cid, directory, proof=doc, contract=contract,
                                on_bytes=lambda n: bar.advance(task, n))
    if as_json:
        import json

        p = fetched.inclusion
        typer.echo(json.dumps({
            "entry_cid": cid, "directory": str(fetched.directory),
            "method": fetched.entry.method, "base_model": fetched.entry.base_model.name,
            "weights_digest": fetched.entry.base_model.weights_digest,
            "run_cid": fetched.entry.run_cid,
            "files": [{"path": f.path, "bytes": f.size, "cid": f.cid}
                      for f in fetched.entry.files],
            "inclusion": None if p is None else {"log": p.log, "log_id": p.log_id,
                                                 "index": p.index, "size": p.size,
                                                 "root": "0x" + p.root.hex()}}, indent=2))
        return
    print_table(files_table(cid, fetched.entry.files), console)
    console.print(f"[green]verified[/green]: {len(fetched.entry.files)} files re-add to their "
                  f"CIDs; written to {fetched.directory} with adapter_entry.json")
    console.print(f"  method {fetched.entry.method}, base {fetched.entry.base_model.name} "
                  f"({fetched.entry.base_model.weights_digest}), run {fetched.entry.run_cid}",
                  highlight=False)
    if fetched.inclusion is not None:
        p = fetched.inclusion
        console.print(f"  in log {p.log!r} (on-chain id {p.log_id}) as leaf {p.index}; root at "
                      f"size {p.size} matches the one anchored on chain", highlight=False)


@app.command()
def merge(
    adapter_dir: Annotated[Path, typer.Argument(
        help="PEFT adapter directory, or a delta directory from `gym adapter compress`.",
        exists=True, file_okay=False)],
    output: Annotated[Path, typer.Option(help="New directory for the merged model.")],
    base: BaseOption = "",
    force: ForceOption = False,
) -> None:
    """Fold the adapter into the base weights (PEFT merge_and_unload) and save the model.

    Checks the base's weights digest against adapter_entry.json when the adapter has one. A
    compressed delta directory (delta_config.json) is decompressed and added to the base,
    checked against the base digest its config names.
    """
    from trainer.adapters.merge import merge_adapter

    _quiet_loading()
    base_dir = _base_dir(base)
    with console.status(f"merging {adapter_dir} into {base_dir}"):
        if (adapter_dir / "delta_config.json").is_file():
            from trainer.adapters.compress import merge_delta

            result = merge_delta(adapter_dir, base_dir, output, force=force)
        else:
            result = merge_adapter(adapter_dir, base_dir, output, force=force)
    if result.base.forced:
        console.print(f"[yellow]warning[/yellow]: merged into a base whose digest "
                      f"{result.base.digest} is not the recorded {result.base.expected}",
                      highlight=False)
    elif result.base.expected:
        console.print(f"base weights digest matches the one recorded ({result.base.digest})",
                      highlight=False)
    console.print(f"merged model ({result.tensors} tensors, safetensors) written to "
                  f"{result.output}", highlight=False)


@app.command()
def compress(
    ctx: typer.Context,
    adapter_dir: Annotated[Path, typer.Argument(help="PEFT adapter directory.", exists=True,
                                                file_okay=False)],
    bits: Annotated[int, typer.Option(min=1, max=8, help="Bits per delta element: 1 = sign "
                                      "and group scale (BitDelta), 2-8 = symmetric integers.")],
    output: Annotated[Path, typer.Option(help="New directory for delta.safetensors and "
                                         "delta_config.json.")],
    base: BaseOption = "",
    group_size: Annotated[int, typer.Option(min=0, help="Input columns per scale (0: one "
                                            "scale per output row).")] = 0,
    eval_dataset: Annotated[Path | None, typer.Option(
        help="Held-out JSONL for perplexity (default: trainer/data/arith_heldout.jsonl).",
        exists=True, dir_okay=False)] = None,
    eval_limit: Annotated[int, typer.Option(help="Use only the first N rows (0 = all).")] = 0,
    evaluate: Annotated[bool, typer.Option("--eval/--no-eval",
                                           help="Measure perplexity.")] = True,
    force: ForceOption = False,
    publish: Annotated[str | None, typer.Option(
        help="Also publish the delta to this log as an `adapter` entry (method bitdelta-BITS) "
             "linking the source adapter's run; needs adapter_entry.json.")] = None,
) -> None:
    """Store the adapter's weight delta (merged - base) in BITS bits per element.

    Reports the compression ratio against the dense delta (fp32 and bf16) and the LoRA
    adapter, and the perplexity of base, merged and base + compressed delta on held-out text.
    """
    from trainer.adapters.compress import CONFIG_FILE, DELTA_FILE, compress_adapter
    from trainer.adapters.fetch import read_adapter_entry
    from trainer.adapters.perplexity import load_eval_texts

    _quiet_loading()
    base_dir = _base_dir(base)
    if publish:
        from ledger.runtime import runtime_of

        source = read_adapter_entry(adapter_dir)
        if source is None:
            raise AdapterError(f"--publish needs {adapter_dir}/adapter_entry.json (the adapter "
                               "as `gym adapter fetch` writes it): the delta's entry links its run")
        rt = runtime_of(ctx)
        rt.contract.log_count()  # an unreachable chain fails before the work, not after
    texts = load_eval_texts(eval_dataset, eval_limit) if evaluate else None
    with console.status("compressing") as status:
        report = compress_adapter(adapter_dir, base_dir, output, bits=bits,
                                  group_size=group_size, eval_texts=texts, force=force,
                                  on_stage=status.update)
    table = Table("measure", "value", title=f"{bits}-bit delta of {adapter_dir}")
    table.add_row("tensors / elements", f"{report.tensors} / {report.numel:,}")
    table.add_row("dense delta fp32 / bf16", f"{report.dense_fp32_bytes:,} / "
                                             f"{report.dense_bf16_bytes:,} bytes")
    table.add_row("delta.safetensors", f"{report.file_bytes:,} bytes "
                                       f"(payload {report.payload_bytes:,})")
    table.add_row("ratio vs fp32 / bf16", f"{report.ratio_fp32:.2f}x / {report.ratio_bf16:.2f}x")
    table.add_row("LoRA adapter weights", f"{report.adapter_bytes:,} bytes "
                                          f"(delta is {1 / report.ratio_vs_adapter:.2f}x that)")
    table.add_row("relative error ||dW - dW'|| / ||dW||", f"{report.relative_error:.4f}")
    for name, value in report.perplexity.items():
        table.add_row(f"perplexity: {name}", f"{value:.4f}")
    print_table(table, console)
    console.print(f"written to {report.output}", highlight=False)
    if publish:
        from trainer.adapters.publish import publish_derived_adapter

        source_cid, source_entry = source
        config = read_json_file(output / CONFIG_FILE)
        if config["base_model"]["weights_digest"] != source_entry.base_model.weights_digest:
            raise AdapterError("not publishing: the delta was made against another base than "
                               f"the adapter entry {source_cid} names (--force was used)")
        with console.status(f"publishing to {publish}"):
            published = publish_derived_adapter(
                [output / DELTA_FILE, output / CONFIG_FILE], method=f"bitdelta-{bits}",
                config=config, metrics=report.metrics(), source=source_entry, store=rt.store,
                content=rt.content, contract=rt.contract, log_name=publish)
        console.print(f"published delta entry {published.entry_cid} (leaf {published.index}) "
                      f"to {publish}, anchored at size {published.size}; run "
                      f"{source_entry.run_cid}", highlight=False)
