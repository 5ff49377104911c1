"""``gym ledger``, ``gym verify`` and ``gym audit``: the ledger's commands, thin over the library.

Commands take their dependencies from ``ctx.obj``, a ``LedgerRuntime`` that the CLI root
builds from settings. Its members are built on first use, so a command that needs only the
database never opens the content store or the chain, and none of them needs a deployment
until it talks to the chain. Expected failures raise ``LedgerError`` subclasses whose
one-line message names what to run; the root turns them into ``error: ...`` and exit 1.

    gym ledger create alice/math            # local log + createLog on chain (--offline: local)
    gym ledger append alice/math a.json b.jsonl
    gym ledger publish alice/math           # batch manifest, consistency proof, anchor
    gym ledger list
    gym ledger show alice/math [INDEX] [--json]
    gym ledger proof alice/math INDEX [--size N] [--json]
    gym verify proof proof.json [--chain]   # offline unless --chain
    gym verify entry entry.json
    gym audit alice/math | --log-id N       # chain events + content store only
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ledger.audit import AuditReport, audit_log
from ledger.errors import LedgerError, NotFoundError, VerificationError
from ledger.logstore import LogStore
from ledger.proofs import check_anchored_root, proof_document, verify_proof_document
from ledger.publish import append_entries, ensure_chain_log, publish, read_entry_files

if TYPE_CHECKING:
    from ledger.chain import LedgerContract
    from ledger.content import ContentStore

console = Console()
err_console = Console(stderr=True)


@dataclass(frozen=True)
class ChainConfig:
    """Where the ExperienceLedger lives and who signs (read from the deployment)."""

    rpc_url: str  # EVM JSON-RPC endpoint
    address: str  # ExperienceLedger contract
    abi: list[dict]  # its ABI
    private_key: str | None  # publisher key; None: read-only
    chain_id: int | None = None  # recorded in proof documents
    deployment_block: int = 0  # where event scans start


@dataclass
class LedgerRuntime:
    """The dependencies of the ledger commands, each built on first use."""

    database_url: str  # SQLAlchemy URL of the log index
    content_dir: Path  # local content store (used when ipfs_api is unset)
    ipfs_api: str | None = None  # Kubo RPC URL
    chain_config: Callable[[], ChainConfig] | None = None  # reads the deployment when called

    @cached_property
    def store(self) -> LogStore:
        return LogStore(self.database_url)

    @cached_property
    def content(self) -> ContentStore:
        from ledger.content import open_content_store

        return open_content_store(self.ipfs_api, self.content_dir)

    @cached_property
    def chain(self) -> ChainConfig:
        if self.chain_config is None:
            raise LedgerError("no chain is configured: run `gym devnet up`, or set GYM_RPC_URL")
        return self.chain_config()

    @cached_property
    def contract(self) -> LedgerContract:
        from web3 import Web3

        from ledger.chain import LedgerContract

        chain = self.chain
        w3 = Web3(Web3.HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 30}))
        return LedgerContract(w3, chain.address, chain.abi, chain.private_key)


def runtime_of(ctx: typer.Context) -> LedgerRuntime:
    if not isinstance(ctx.obj, LedgerRuntime):
        raise LedgerError("the ledger commands need a LedgerRuntime in ctx.obj (run them via gym)")
    return ctx.obj


def _hex(value: bytes) -> str:
    return "0x" + value.hex()


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LedgerError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise LedgerError(f"{path} is not valid JSON ({exc})") from None


# --- gym ledger -----------------------------------------------------------------------------

app = typer.Typer(help="Keep publisher logs: append entries, anchor checkpoints, make proofs.",
                  no_args_is_help=True)


@app.command()
def create(ctx: typer.Context, name: str,
           offline: Annotated[bool, typer.Option(help="Create the log locally only; the first "
                                                 "publish creates it on chain.")] = False) -> None:
    """Create log NAME locally and, unless --offline, on chain (createLog, Publisher)."""
    rt = runtime_of(ctx)
    try:
        rt.store.get_log(name)
    except NotFoundError:
        pass
    else:
        raise LedgerError(f"log {name!r} already exists: see `gym ledger show {name}`")
    contract = None if offline else rt.contract
    if contract is not None:
        contract.log_count()  # fail on an unreachable chain before creating anything
    rt.store.create_log(name)
    if contract is None:
        console.print(f"created log {name} (local only; `gym ledger publish` creates it on chain)")
        return
    log_id = ensure_chain_log(rt.store, contract, name)
    console.print(f"created log {name}: on-chain log id {log_id}, owner {contract.account.address}")


@app.command()
def append(ctx: typer.Context, log: str,
           files: Annotated[list[Path], typer.Argument(help="JSON entry files, or .jsonl files of "
                                                       "one entry per line.")]) -> None:
    """Validate entries, store them in the content store and append them: all or nothing."""
    rt = runtime_of(ctx)
    rt.store.get_log(log)  # an unknown log fails before any file is read
    entries = read_entry_files(files)
    result = append_entries(rt.store, rt.content, log, entries)
    console.print(f"appended {len(result.cids)} entries to {log}: size {result.old_size} -> "
                  f"{result.size}")
    for index, cid in enumerate(result.cids, start=result.old_size):
        console.print(f"  {index}  {cid}", highlight=False)


@app.command(name="publish")
def publish_command(ctx: typer.Context, log: str) -> None:
    """Anchor every entry appended since the last checkpoint (batch manifest + consistency
    proof), then record the checkpoint."""
    rt = runtime_of(ctx)
    with console.status(f"anchoring {log}"):
        result = publish(rt.store, rt.content, rt.contract, log)
    console.print(f"published {log} (on-chain log {result.log_id}): size {result.old_size} -> "
                  f"{result.size}", highlight=False)
    console.print(f"  root      {_hex(result.root)}", highlight=False)
    console.print(f"  batch     {result.batch_cid}", highlight=False)
    console.print(f"  tx        {result.tx_hash} (block {result.block_number})", highlight=False)
    console.print(f"  proof     {result.proof_length} hashes from size {result.old_size}",
                  highlight=False)


@app.command(name="list")
def list_command(ctx: typer.Context) -> None:
    """List the logs this installation keeps."""
    rt = runtime_of(ctx)
    table = Table("log", "size", "on-chain id", "anchored size", "last anchor tx")
    for log in rt.store.list_logs():
        checkpoints = rt.store.checkpoints(log.name)
        last = checkpoints[-1] if checkpoints else None
        table.add_row(log.name, str(log.size), str(log.chain_log_id or "-"),
                      str(last.size) if last else "-", (last.tx_hash or "-") if last else "-")
    console.print(table)


@app.command()
def show(ctx: typer.Context, log: str,
         index: Annotated[int | None, typer.Argument(help="A leaf to show.")] = None,
         as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Show a log and its checkpoints, or one leaf and its entry."""
    rt = runtime_of(ctx)
    info = rt.store.get_log(log)
    checkpoints = rt.store.checkpoints(log)
    if index is None:
        data = {"log": info.name, "size": info.size, "log_id": info.chain_log_id,
                "root": _hex(rt.store.root(log)),
                "checkpoints": [{"size": c.size, "root": _hex(c.root), "batch_cid": c.batch_cid,
                                 "tx_hash": c.tx_hash, "block_number": c.block_number}
                                for c in checkpoints]}
        if as_json:
            typer.echo(json.dumps(data, indent=2))
            return
        console.print(f"log {info.name}: size {info.size}, on-chain id "
                      f"{info.chain_log_id or '-'}, root {data['root']}", highlight=False)
        table = Table("size", "root", "batch", "tx", title="anchored checkpoints")
        for c in checkpoints:
            table.add_row(str(c.size), _hex(c.root), c.batch_cid or "-", c.tx_hash or "-")
        console.print(table)
        return
    if not 0 <= index < info.size:
        raise LedgerError(f"log {log!r} has {info.size} leaves; index {index} is out of range")
    leaf = rt.store.leaf(log, index)
    anchored = next((c.size for c in checkpoints if c.size > index), None)
    entry = json.loads(rt.content.cat(leaf.cid)) if rt.content.has(leaf.cid) else None
    data = {"log": log, "index": index, "leaf_hash": _hex(leaf.leaf_hash), "entry_cid": leaf.cid,
            "anchored_at_size": anchored, "entry": entry}
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    console.print(f"leaf {index} of {log}", highlight=False)
    console.print(f"  leaf hash  {data['leaf_hash']}\n  entry CID  {leaf.cid}\n  anchored   "
                  f"{'at size ' + str(anchored) if anchored else 'not yet'}", highlight=False)
    console.print_json(data=entry) if entry is not None else console.print(
        "  (entry not in the content store)")


@app.command()
def proof(ctx: typer.Context, log: str, index: int,
          size: Annotated[int | None, typer.Option(help="Tree size (default: the first anchored "
                                                   "checkpoint holding the leaf, else the "
                                                   "current size).")] = None,
          as_json: Annotated[bool, typer.Option("--json", help="Print the proof document.")] = False
          ) -> None:
    """Make a self-contained inclusion proof of leaf INDEX (check it with `gym verify proof`)."""
    rt = runtime_of(ctx)
    anchored = {c.size for c in rt.store.checkpoints(log)}
    doc = proof_document(rt.store, rt.content, log, index, size)
    if doc["anchor"] is not None:
        doc["anchor"].update(chain_id=rt.chain.chain_id, contract=rt.chain.address)
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
        return
    console.print(f"inclusion proof of leaf {index} of {log} at size {doc['size']}"
                  + ("" if doc["size"] in anchored else " (not anchored)"), highlight=False)
    console.print(f"  leaf hash  {doc['leaf_hash']}\n  entry CID  {doc['entry_cid']}\n  root       "
                  f"{doc['root']}", highlight=False)
    for i, h in enumerate(doc["audit_path"]):
        console.print(f"  path[{i}]    {h}", highlight=False)
    if doc["anchor"]:
        console.print(f"  anchored   tx {doc['anchor']['tx_hash']}", highlight=False)


# --- gym verify -----------------------------------------------------------------------------

verify_app = typer.Typer(help="Check one proof or entry, offline where possible.",
                         no_args_is_help=True)


@verify_app.command(name="proof")
def verify_proof(ctx: typer.Context, file: Path,
                 chain: Annotated[bool, typer.Option("--chain", help="Also check on chain that "
                                                     "the root is anchored at that size.")] = False
                 ) -> None:
    """Verify an inclusion proof document from `gym ledger proof --json` (offline)."""
    doc = _read_json(file)
    try:
        result = verify_proof_document(doc)
    except VerificationError as exc:
        detail = (f" (expected {exc.expected}, computed {exc.computed})"
                  if exc.expected is not None else "")
        raise LedgerError(f"{file}: proof does not verify: {exc}{detail}") from None
    if chain:
        check_anchored_root(runtime_of(ctx).contract, result)
    console.print(f"[green]valid[/green]: leaf {result.index} of {result.log} is in the tree of "
                  f"size {result.size} with root {_hex(result.root)}", highlight=False)
    console.print(f"  entry {result.entry_cid}: "
                  + ("bytes checked against CID and leaf hash" if result.entry_checked
                     else "not included, leaf hash taken as given"), highlight=False)
    if chain:
        console.print(f"  anchored on chain: log {result.log_id} at size {result.size}")
    elif result.anchor:
        console.print(f"  claims anchoring tx {result.anchor.get('tx_hash')} (check with --chain)",
                      highlight=False)


@verify_app.command(name="entry")
def verify_entry(file: Path) -> None:
    """Validate an entry file; print its canonical CID and leaf hash."""
    from ledger.entries import entry_cid, entry_leaf_hash

    data = read_entry_files([file])
    if len(data) != 1:
        raise LedgerError(f"{file} holds {len(data)} entries; verify one entry at a time")
    console.print(f"[green]valid entry[/green] ({len(data[0])} canonical bytes)")
    console.print(f"  CID        {entry_cid(data[0])}", highlight=False)
    console.print(f"  leaf hash  {_hex(entry_leaf_hash(data[0]))}", highlight=False)


# --- gym audit ------------------------------------------------------------------------------


def _resolve_log_id(rt: LedgerRuntime, name: str) -> int:
    """The on-chain id of the log created on chain as ``name`` (names are not unique there)."""
    ids = [e.log_id for e in rt.contract.logs_created(rt.chain.deployment_block)
           if e.name == name]
    if not ids:
        raise LedgerError(f"no log named {name!r} was created on chain: list yours with "
                          "`gym ledger list`, or pass --log-id N")
    if len(ids) > 1:
        raise LedgerError(f"{len(ids)} logs are named {name!r} on chain (ids "
                          f"{', '.join(map(str, ids))}): pass --log-id N")
    return ids[0]


def print_audit_report(report: AuditReport) -> None:
    """The report as a line, a checkpoint table and, if any, a table of discrepancies."""
    kind = report.kind.name.lower()
    console.print(f"log {report.log_id} ({kind}, {report.name!r}, owner {report.owner}): "
                  f"size {report.size}, root {_hex(report.root)}", highlight=False)
    table = Table("size", "root", "tx", "block", "ok", title="checkpoints")
    for c in report.checkpoints:
        table.add_row(str(c.size), _hex(c.root)[:18] + "…", c.tx_hash[:18] + "…",
                      str(c.block_number), "yes" if c.ok else "NO")
    console.print(table)
    if report.ok:
        console.print(f"[green]audit clean[/green]: {len(report.checkpoints)} checkpoints, "
                      f"{report.leaves} entries replayed from chain + content store")
        return
    problems = Table("checkpoint", "leaf", "problem", "detail", "expected", "computed",
                     title="discrepancies")
    for d in report.discrepancies:
        problems.add_row("-" if d.checkpoint is None else str(d.checkpoint),
                         "-" if d.leaf is None else str(d.leaf), d.kind, d.message,
                         "" if d.expected is None else str(d.expected),
                         "" if d.computed is None else str(d.computed))
    console.print(problems)
    console.print(f"[red]audit failed[/red]: {len(report.discrepancies)} discrepancies")


def audit(ctx: typer.Context,
          log: Annotated[str | None, typer.Argument(help="Log name as created on chain.")] = None,
          log_id: Annotated[int | None, typer.Option("--log-id", help="On-chain log id.")] = None,
          from_block: Annotated[int | None, typer.Option(help="First block to scan (default: "
                                                         "the deployment block).")] = None
          ) -> None:
    """Replay a log from chain events and the content store alone; exit 1 on any discrepancy."""
    rt = runtime_of(ctx)
    if (log is None) == (log_id is None):
        raise LedgerError("name the log to audit: `gym audit NAME` or `gym audit --log-id N`")
    if log_id is None:
        log_id = _resolve_log_id(rt, log)
    start = rt.chain.deployment_block if from_block is None else from_block
    columns = (TextColumn("replaying log {task.fields[log_id]}"), BarColumn(),
               MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task("audit", total=None, log_id=log_id)
        report = audit_log(rt.contract, rt.content, log_id, from_block=start,
                           progress=lambda done, total: bar.update(task, completed=done,
                                                                   total=total))
    print_audit_report(report)
    if not report.ok:
        raise typer.Exit(1)
