"""``gym ledger``, ``gym verify`` and ``gym audit``: the ledger's commands, thin over the library.

Commands take their dependencies from ``ctx.obj``, a ``ledger.runtime.LedgerRuntime`` that
the CLI root builds from settings (each member built on first use). Expected failures raise
``LedgerError`` subclasses whose one-line message names what to run; the root turns them into
``error: ...`` and exit 1.

    gym ledger create alice/math            # local log + createLog on chain (--offline: local)
    gym ledger append alice/math a.json b.jsonl
    gym ledger publish alice/math           # batch manifest, consistency proof, anchor
    gym ledger rebind alice/math            # re-create on the configured chain after a reset
    gym ledger list
    gym ledger show alice/math [INDEX] [--json | --entry]   # --entry: the entry's bytes
    gym ledger proof alice/math INDEX [--size N] [--json] [--no-entry]
    gym ledger note-key NAME --output note.key   # Ed25519 key for checkpoint notes
    gym ledger checkpoint alice/math --key note.key [--size N]   # C2SP tlog-checkpoint note
    gym verify proof proof.json [--entry e.json] [--chain]   # offline unless --chain
    gym verify checkpoint note.txt --vkey VKEY [--offline]
    gym verify entry entry.json
    gym audit alice/math | gym/curated | N  # chain events + content store only

``gym audit`` is mounted by the root (``devnet/cli.py``), which also checks a receipt log's
receipts (``inference_node``); ``replay_log`` is its ledger part.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from ledger.errors import LedgerError, NotFoundError, VerificationError
from ledger.runtime import LedgerRuntime, runtime_of
from ledger.tables import CliConsole, print_table

if TYPE_CHECKING:  # web3 loads when a command needs the chain, not for `--help`
    from ledger.audit import AuditReport, EntryHook

console = CliConsole()
err_console = CliConsole(stderr=True)


def _hex(value: bytes) -> str:
    return "0x" + value.hex()


# --- gym ledger -----------------------------------------------------------------------------

app = typer.Typer(help="Keep publisher logs: append entries, anchor checkpoints, make proofs.",
                  no_args_is_help=True)


AccountOption = Annotated[int | None, typer.Option(
    "--account", help="Devnet only: sign with Anvil's public account N (default: "
    "GYM_PUBLISHER_KEY, else on the devnet account 0).")]


def _signing_runtime(ctx: typer.Context, account: int | None) -> LedgerRuntime:
    """The runtime, set to sign with ``--account`` (picked when a transaction is sent)."""
    rt = runtime_of(ctx)
    rt.account = account
    return rt


@app.command()
def create(ctx: typer.Context, name: str,
           offline: Annotated[bool, typer.Option(help="Create the log locally only; the first "
                                                 "publish creates it on chain.")] = False,
           account: AccountOption = None) -> None:
    """Create log NAME locally and, unless --offline, on chain (createLog, Publisher)."""
    from ledger.publish import ensure_chain_log

    rt = _signing_runtime(ctx, account)
    try:
        rt.store.get_log(name)
    except NotFoundError:
        pass
    else:
        raise LedgerError(f"log {name!r} already exists: see `gym ledger show {name}`")
    contract = None if offline else rt.contract
    if contract is not None:
        contract.log_count()  # fail on an unreachable chain before creating anything
        if contract.account is None:  # and without a key (picked now, by the signing rule)
            raise LedgerError("no signing key: set GYM_PUBLISHER_KEY to the log owner's key")
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
    from ledger.publish import append_entries, read_entry_files

    rt = runtime_of(ctx)
    rt.store.get_log(log)  # an unknown log fails before any file is read
    entries = read_entry_files(files)
    result = append_entries(rt.store, rt.content, log, entries)
    console.print(f"appended {len(result.cids)} entries to {log}: size {result.old_size} -> "
                  f"{result.size}")
    for index, cid in enumerate(result.cids, start=result.old_size):
        console.print(f"  {index}  {cid}", highlight=False)


@app.command(name="publish")
def publish_command(ctx: typer.Context, log: str, account: AccountOption = None) -> None:
    """Anchor every entry appended since the last checkpoint (batch manifest + consistency
    proof), then record the checkpoint."""
    from ledger.publish import publish

    rt = _signing_runtime(ctx, account)
    with console.status(f"anchoring {log}"):
        result = publish(rt.store, rt.content, rt.contract, log)
    if result.recovered:
        console.print(f"recovered {log}: checkpoint at size "
                      f"{', '.join(map(str, result.recovered))} was anchored on chain by an "
                      "earlier publish that did not record it; checked against this log and "
                      "recorded", highlight=False)
    if not result.sent:
        console.print(f"nothing more to publish: {log} is anchored at size {result.size} "
                      f"(tx {result.tx_hash}, block {result.block_number})", highlight=False)
        return
    console.print(f"published {log} (on-chain log {result.log_id}): size {result.old_size} -> "
                  f"{result.size}", highlight=False)
    console.print(f"  root      {_hex(result.root)}", highlight=False)
    console.print(f"  batch     {result.batch_cid}", highlight=False)
    console.print(f"  tx        {result.tx_hash} (block {result.block_number})", highlight=False)
    console.print(f"  proof     {result.proof_length} hashes from size {result.old_size}",
                  highlight=False)


@app.command()
def rebind(ctx: typer.Context, name: str, account: AccountOption = None) -> None:
    """Re-create log NAME on the configured chain after its own chain was reset or replaced:
    a new on-chain log, same entries; checkpoints of the old chain are forgotten and the next
    publish anchors every entry."""
    from ledger.publish import rebind_log

    rt = _signing_runtime(ctx, account)
    old = rt.store.get_log(name)
    log_id = rebind_log(rt.store, rt.contract, name)
    console.print(f"re-created log {name} on {rt.store.get_log(name).chain.describe()}: on-chain "
                  f"log id {log_id} (was {old.chain_log_id}); `gym ledger publish {name}` "
                  f"anchors its {old.size} entries", highlight=False)


@app.command(name="list")
def list_command(ctx: typer.Context,
                 as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False
                 ) -> None:
    """List the logs this installation keeps, and the DAO's curated library (on chain, owned
    by the timelock: `gym audit gym/curated` replays it)."""
    rt = runtime_of(ctx)
    rows = []
    for log in rt.store.list_logs():
        checkpoints = rt.store.checkpoints(log.name)
        last = checkpoints[-1] if checkpoints else None
        rows.append({"log": log.name, "kind": "publisher", "size": log.size,
                     "log_id": log.chain_log_id, "anchored_size": last.size if last else None,
                     "last_anchor_tx": last.tx_hash if last else None})
    curated, why = _curated_row(rt)
    if curated is not None:
        rows.append(curated)
    if as_json:
        typer.echo(json.dumps({"logs": rows, "curated_library_not_listed": why}, indent=2))
        return
    table = Table("log", "kind", "size", "on-chain id", "anchored size", "last anchor tx",
                  caption=None if curated is None else
                  f"{curated['log']}: the DAO's curated library, on chain (owner: the timelock "
                  f"{curated['owner']}); replay it with `gym audit {curated['log']}`")
    for row in rows:
        table.add_row(row["log"], row["kind"], str(row["size"]),
                      "-" if row["log_id"] is None else str(row["log_id"]),
                      "-" if row["anchored_size"] is None else str(row["anchored_size"]),
                      row["last_anchor_tx"] or "-")
    print_table(table, console)
    if why is not None:
        err_console.print(f"note: the DAO's curated library is not listed: {why}",
                          highlight=False)


def _curated_row(rt: LedgerRuntime) -> tuple[dict | None, str | None]:
    """The curated library's row of `gym ledger list` (from the chain), or why there is none:
    local logs are listed without a devnet, so a chain that cannot be read is only noted."""
    from ledger.chain import LeafAppendedEvent

    try:
        log_id = rt.chain.curated_log_id
        if log_id is None:
            return None, "the deployment records no curated library"
        state = rt.contract.log_info(log_id)
        last = next((e for e in reversed(rt.contract.curated_events(
            log_id, rt.chain.deployment_block)) if not isinstance(e, LeafAppendedEvent)), None)
    except (LedgerError, OSError, ValueError, RuntimeError) as exc:
        return None, str(exc)
    return {"log": state.name, "kind": "curated", "size": state.size,
            "log_id": log_id, "anchored_size": state.size,
            "last_anchor_tx": last.tx_hash if last else None, "owner": state.owner,
            "root": _hex(state.root)}, None


@app.command()
def show(ctx: typer.Context, log: str,
         index: Annotated[int | None, typer.Argument(help="A leaf to show.")] = None,
         as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
         entry_only: Annotated[bool, typer.Option(
             "--entry", help="With INDEX: print only the entry, its exact canonical bytes (save "
                             "it as entry.json for `gym verify entry` or `gym verify proof "
                             "--entry`).")] = False) -> None:
    """Show a log and its checkpoints, or one leaf and its entry.

    LOG is a log of the local store, or any published log (its name on chain or on-chain id),
    which is then read from the chain and the content endpoint."""
    from ledger.entries import MAX_ENTRY_BYTES, MAX_ENTRY_DEPTH
    from ledger.json_input import parse_json

    rt = runtime_of(ctx)
    if entry_only and (index is None or as_json):
        raise LedgerError("--entry prints one leaf's entry: give INDEX, without --json")
    if rt.store.has_log(log):  # the publisher's cache; any published log is read from chain
        info = rt.store.get_log(log)
        checkpoints = rt.store.checkpoints(log)
        name, size, log_id, root = info.name, info.size, info.chain_log_id, rt.store.root(log)
        chain = info.chain and {"chain_id": info.chain.chain_id,
                                "genesis_hash": info.chain.genesis_hash,
                                "ledger": info.chain.ledger_address}

        def leaf_of(i: int) -> tuple[bytes, str]:
            leaf = rt.store.leaf(log, i)
            return leaf.leaf_hash, leaf.cid
    else:
        published = _published(rt, log)
        checkpoints = published.checkpoints
        name, size, log_id, root = (published.name, published.size, published.log_id,
                                    published.root)
        chain = {"chain_id": rt.contract.w3.eth.chain_id, "genesis_hash": None,
                 "ledger": rt.contract.address}

        def leaf_of(i: int) -> tuple[bytes, str]:
            return published.leaf_hashes[i], published.entry_cids[i]
    if index is None:
        data = {"log": name, "size": size, "log_id": log_id, "chain": chain, "root": _hex(root),
                "checkpoints": [{"size": c.size, "root": _hex(c.root), "batch_cid": c.batch_cid,
                                 "tx_hash": c.tx_hash, "block_number": c.block_number}
                                for c in checkpoints]}
        if as_json:
            typer.echo(json.dumps(data, indent=2))
            return
        console.print(f"log {name}: size {size}, on-chain id {log_id or '-'}, root "
                      f"{data['root']}", highlight=False)
        table = Table("size", "root", "batch", "tx", title="anchored checkpoints")
        for c in checkpoints:
            table.add_row(str(c.size), _hex(c.root), c.batch_cid or "-", c.tx_hash or "-")
        print_table(table, console)
        return
    if not 0 <= index < size:
        raise LedgerError(f"log {log!r} has {size} leaves; index {index} is out of range")
    leaf_hash, cid = leaf_of(index)
    if entry_only:
        try:
            raw = rt.content.cat(cid)
        except NotFoundError as exc:
            raise LedgerError(f"fetching entry {cid} of leaf {index}: {exc}") from None
        typer.echo(raw.decode("utf-8"))
        return
    anchored = next((c.size for c in checkpoints if c.size > index), None)
    try:
        entry, missing = parse_json(rt.content.cat(cid), max_bytes=MAX_ENTRY_BYTES,
                                    max_depth=MAX_ENTRY_DEPTH, what=f"entry {cid}"), None
    except NotFoundError as exc:
        entry, missing = None, f"fetching entry {cid} of leaf {index}: {exc}"
    data = {"log": log, "index": index, "leaf_hash": _hex(leaf_hash), "entry_cid": cid,
            "anchored_at_size": anchored, "entry": entry}
    if missing is not None:
        data["entry_missing"] = missing
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    console.print(f"leaf {index} of {log}", highlight=False)
    console.print(f"  leaf hash  {data['leaf_hash']}\n  entry CID  {cid}\n  anchored   "
                  f"{'at size ' + str(anchored) if anchored else 'not yet'}", highlight=False)
    if entry is not None:
        console.print_json(data=entry)
    else:
        console.print(f"  entry not shown: {missing}", highlight=False)


@app.command()
def proof(ctx: typer.Context, log: str, index: int,
          size: Annotated[int | None, typer.Option(help="Tree size (default: the first anchored "
                                                   "checkpoint holding the leaf, else the "
                                                   "current size).")] = None,
          as_json: Annotated[bool, typer.Option("--json", help="Print the proof document.")] = False,
          no_entry: Annotated[bool, typer.Option(
              "--no-entry", help="Leave the entry out of the document (a bare proof: the "
                                 "verifier then needs the entry, `gym verify proof --entry`)")
          ] = False) -> None:
    """Make a self-contained inclusion proof of leaf INDEX (check it with `gym verify proof`).

    LOG is a log of the local store, or any published log (its name on chain or on-chain id),
    which is then read from the chain and the content endpoint."""
    from ledger.proofs import proof_document, published_proof_document

    rt = runtime_of(ctx)
    if rt.store.has_log(log):  # the publisher's cache; any published log is read from chain
        anchored = {c.size for c in rt.store.checkpoints(log)}
        doc = proof_document(rt.store, None if no_entry else rt.content, log, index, size)
        bound = rt.store.get_log(log).chain
        if doc["anchor"] is not None:  # the chain it was anchored on, not the configured one
            doc["anchor"].update(chain_id=bound.chain_id if bound else rt.chain.chain_id,
                                 contract=bound.ledger_address if bound else rt.chain.address)
    else:
        published = _published(rt, log)
        doc = published_proof_document(published, None if no_entry else rt.content, index,
                                       size, chain_id=rt.contract.w3.eth.chain_id,
                                       contract_address=rt.contract.address)
        anchored = {c.size for c in published.checkpoints}
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


@app.command(name="note-key")
def note_key(
    name: Annotated[str, typer.Argument(help="Key name, e.g. the log's origin host "
                                             "(no spaces, no '+').")],
    output: Annotated[Path, typer.Option(help="File to write the signer key to (mode 0600; "
                                              "never overwritten).")],
) -> None:
    """Make an Ed25519 key for signing checkpoint notes: write the signer key, print the
    verifier key (give it to witnesses and auditors)."""
    from ledger.signed_note import generate_key

    if output.exists():
        raise LedgerError(f"{output} already exists: choose a new file (nothing is overwritten)")
    skey, vkey = generate_key(name)
    output.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(skey + "\n")
    err_console.print(f"signer key written to {output}", highlight=False)  # stdout: the vkey
    typer.echo(vkey)


@app.command()
def checkpoint(
    ctx: typer.Context,
    log: str,
    key: Annotated[Path, typer.Option(help="Signer key file from `gym ledger note-key`.",
                                      exists=True, dir_okay=False)],
    size: Annotated[int | None, typer.Option(help="An anchored checkpoint's size (default: "
                                                  "the newest).")] = None,
    origin: Annotated[str | None, typer.Option(
        help="The note's origin line (default: gym-ledger/<chain id>/<contract>/<log id>, "
             "or gym-ledger/local/<log> for a log not on chain).")] = None,
) -> None:
    """Print an anchored checkpoint as a signed C2SP tlog-checkpoint note (for witnesses)."""
    from ledger.checkpoint_note import CheckpointNote, default_origin, encode_checkpoint
    from ledger.signed_note import NoteSigner, sign_note

    rt = runtime_of(ctx)
    info = rt.store.get_log(log)
    anchored = rt.store.checkpoints(log)
    if not anchored:
        raise LedgerError(f"log {log!r} has no anchored checkpoint: `gym ledger publish {log}`")
    chosen = anchored[-1] if size is None else next((c for c in anchored if c.size == size), None)
    if chosen is None:
        raise LedgerError(f"log {log!r} has no checkpoint anchored at size {size} (anchored: "
                          f"{', '.join(str(c.size) for c in anchored)})")
    signer = NoteSigner(key.read_text(encoding="utf-8").strip())
    if origin is None:
        if info.chain is not None:  # the chain the checkpoints were anchored on
            origin = default_origin(log, info.chain.chain_id, info.chain.ledger_address,
                                    info.chain_log_id)
        else:
            chain = rt.chain if info.chain_log_id is not None else None
            origin = default_origin(log, chain and chain.chain_id, chain and chain.address,
                                    info.chain_log_id)
    text = encode_checkpoint(CheckpointNote(origin, chosen.size, chosen.root))
    typer.echo(sign_note(text, signer), nl=False)


# --- gym verify -----------------------------------------------------------------------------

verify_app = typer.Typer(help="Check one proof or entry, offline where possible.",
                         no_args_is_help=True)


@verify_app.command(name="proof")
def verify_proof(ctx: typer.Context, file: Path,
                 entry: Annotated[Path | None, typer.Option(
                     "--entry", help="The entry file (JSON), for a document that does not carry "
                                     "its entry: checked against the CID and the leaf hash.")] = None,
                 chain: Annotated[bool, typer.Option("--chain", help="Also check on chain that "
                                                     "the root is anchored at that size.")] = False
                 ) -> None:
    """Verify an inclusion proof document from `gym ledger proof --json` (offline).

    The entry's CID is checked only against entry bytes at hand: the document's own entry,
    --entry FILE, or the local content store; otherwise the output says it was not checked.
    """
    from ledger.proofs import (
        check_anchored_root,
        read_proof_file,
        verify_proof_document,
        verify_proof_entry,
    )
    from ledger.publish import read_entry_files

    doc = read_proof_file(file)
    try:
        result = verify_proof_document(doc)
        source = "in the document" if result.entry_checked else None
        if source is None and entry is not None:
            data = read_entry_files([entry])
            if len(data) != 1:
                raise LedgerError(f"{entry} holds {len(data)} entries; give the proof's one entry")
            result, source = verify_proof_entry(result, data[0]), f"from {entry}"
        if source is None:
            rt = runtime_of(ctx)
            if rt.ipfs_api is None and rt.content_dir.is_dir() and rt.content.has(result.entry_cid):
                result = verify_proof_entry(result, rt.content.cat(result.entry_cid))
                source = "from the local content store"
    except VerificationError as exc:
        detail = (f" (expected {exc.expected}, computed {exc.computed})"
                  if exc.expected is not None else "")
        raise LedgerError(f"{file}: proof does not verify: {exc}{detail}") from None
    if chain:
        check_anchored_root(runtime_of(ctx).contract, result)
    console.print(f"[green]valid[/green]: leaf hash {_hex(result.leaf_hash)} is leaf {result.index} "
                  f"of {result.log} in the tree of size {result.size} with root "
                  f"{_hex(result.root)}", highlight=False)
    if result.entry_checked:
        console.print(f"  entry {result.entry_cid}: bytes {source} checked against the CID and "
                      "the leaf hash", highlight=False)
    else:
        console.print(f"  entry CID {result.entry_cid} NOT checked: no entry bytes at hand (the "
                      "document has no entry; give it with --entry FILE), so only the leaf hash "
                      "is proven", highlight=False)
    if chain:
        console.print(f"  anchored on chain: log {result.log_id} at size {result.size} (rootAt "
                      "matches the root)", highlight=False)
    elif result.anchor:
        console.print(f"  claims anchoring tx {result.anchor.get('tx_hash')} (check with --chain)",
                      highlight=False)


@verify_app.command(name="checkpoint")
def verify_checkpoint(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="A signed checkpoint note.", exists=True,
                                         dir_okay=False)],
    vkey: Annotated[list[str], typer.Option(help="A verifier key (repeat for several); at "
                                                 "least one must have signed.")],
    offline: Annotated[bool, typer.Option(help="Skip comparing the root with the one anchored "
                                               "on chain.")] = False,
) -> None:
    """Verify a C2SP checkpoint note: its signatures and, for a gym-ledger origin, that its root
    is the root the ExperienceLedger anchored for that log at that size."""
    from ledger.checkpoint_note import ORIGIN_PREFIX, verify_checkpoint_note
    from ledger.signed_note import NoteVerifier

    checkpoint_, opened = verify_checkpoint_note(file.read_bytes(),
                                                 *(NoteVerifier(k) for k in vkey))
    console.print(f"[green]signed[/green] by {', '.join(s.name for s in opened.verified)}"
                  + (f" ({len(opened.unverified)} other signatures not checked)"
                     if opened.unverified else ""), highlight=False)
    console.print(f"  origin {checkpoint_.origin}\n  size   {checkpoint_.size}\n  root   "
                  f"{_hex(checkpoint_.root)}", highlight=False)
    parts = checkpoint_.origin.split("/")
    if offline or len(parts) != 4 or parts[0] != ORIGIN_PREFIX or parts[1] == "local":
        console.print("  root not compared with the chain"
                      + (" (--offline)" if offline else " (not an on-chain gym-ledger origin)"))
        return
    rt = runtime_of(ctx)
    contract = rt.contract
    chain_id, address, log_id = parts[1], parts[2], parts[3]
    if not (chain_id.isdigit() and log_id.isdigit()) or int(chain_id) != contract.w3.eth.chain_id \
            or address != contract.address.lower():
        raise LedgerError(f"the note's origin {checkpoint_.origin} is not a log of this "
                          f"deployment (chain {contract.w3.eth.chain_id}, ledger "
                          f"{contract.address.lower()})")
    anchored = contract.root_at(int(log_id), checkpoint_.size)
    if anchored != checkpoint_.root:
        raise VerificationError(f"log {log_id} at size {checkpoint_.size}: the note's root is "
                                "not the root anchored on chain", expected=_hex(anchored),
                                computed=_hex(checkpoint_.root))
    console.print(f"  [green]anchored on chain[/green]: rootAt({log_id}, {checkpoint_.size}) "
                  "matches", highlight=False)


@verify_app.command(name="entry")
def verify_entry(file: Path) -> None:
    """Validate an entry file; print its canonical CID and leaf hash."""
    from ledger.entries import entry_cid, entry_leaf_hash
    from ledger.publish import read_entry_files

    data = read_entry_files([file])
    if len(data) != 1:
        raise LedgerError(f"{file} holds {len(data)} entries; verify one entry at a time")
    console.print(f"[green]valid entry[/green] ({len(data[0])} canonical bytes)")
    console.print(f"  CID        {entry_cid(data[0])}", highlight=False)
    console.print(f"  leaf hash  {_hex(entry_leaf_hash(data[0]))}", highlight=False)


# --- gym audit ------------------------------------------------------------------------------


def _published(rt: LedgerRuntime, name: str):
    """Published log ``name`` (or on-chain id) replayed from the chain and the endpoint, with a
    progress bar (``ledger.published``)."""
    from ledger.published import read_published_log

    log_id = _resolve_log_id(rt, name)
    with Progress(TextColumn(f"reading log {log_id} from the chain and the content store"),
                  BarColumn(), MofNCompleteColumn(), console=err_console, transient=True,
                  disable=not err_console.is_terminal) as bar:
        task = bar.add_task("replay", total=None)
        return read_published_log(
            rt.contract, rt.content, log_id, from_block=rt.chain.deployment_block,
            progress=lambda done, total: bar.update(task, completed=done, total=total))


def _resolve_log_id(rt: LedgerRuntime, name: str) -> int:
    """The on-chain id of log ``name`` (``ledger.chain.resolve_log_id``)."""
    from ledger.chain import resolve_log_id

    return resolve_log_id(rt.contract, name, from_block=rt.chain.deployment_block,
                          curated_log_id=rt.chain.curated_log_id)


def replay_log(ctx: typer.Context, log: str | None, log_id: int | None,
               from_block: int | None, on_entry: EntryHook | None = None,
               as_json: bool = False, resume: bool = False,
               receipts: Callable[[], int] = lambda: 0) -> AuditReport:
    """What `gym audit` runs: the log named by ``log`` or ``log_id`` replayed (``audit_log``,
    ``on_entry`` called with every valid entry) with a progress bar, and its report printed.

    A publisher log's replay state is saved under ``<data dir>/audits/`` as it goes
    (``ledger.audit_state``); ``resume`` continues from it. ``receipts`` says how many
    receipts ``on_entry`` has collected: a state with receipts is not resumed, their
    signatures are checked over the whole log."""
    from ledger.audit import audit_log, print_audit_report
    from ledger.audit_state import load_state, save_state

    rt = runtime_of(ctx)
    if (log is None) == (log_id is None):
        raise LedgerError("name the log to audit: `gym audit NAME`, `gym audit N` or "
                          "`gym audit --log-id N`")
    if log_id is None:
        log_id = _resolve_log_id(rt, log)
    start = rt.chain.deployment_block if from_block is None else from_block
    chain_id = rt.contract.w3.eth.chain_id
    state_file = (Path(rt.content_dir).parent / "audits"
                  / f"{chain_id}-{rt.contract.address.lower()}-{log_id}.json")
    saved = load_state(state_file) if resume else None
    if saved is not None and saved.receipts:
        err_console.print(f"log {log_id} holds receipts: their signatures are checked over the "
                          "whole log, so it is replayed from the start", highlight=False)
        saved = None
    elif saved is not None:
        err_console.print(f"resuming the audit of log {log_id} at leaf {saved.leaves} "
                          f"({state_file})", highlight=False)
    elif resume:
        err_console.print(f"no saved audit of log {log_id} ({state_file}): replaying it whole",
                          highlight=False)

    def save(state) -> None:
        state.receipts = receipts()
        save_state(state_file, state)

    columns = (TextColumn("replaying log {task.fields[log_id]}"), BarColumn(),
               MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task("audit", total=None, log_id=log_id)
        try:
            report = audit_log(rt.contract, rt.content, log_id, from_block=start,
                               progress=lambda done, total: bar.update(task, completed=done,
                                                                       total=total),
                               on_entry=on_entry, resume=saved, save=save)
        except KeyboardInterrupt:
            bar.stop()
            err_console.print(f"interrupted: `gym audit {log_id} --resume` continues where the "
                              f"last saved state stopped ({state_file})", highlight=False)
            raise typer.Exit(130) from None
    if not as_json:
        print_audit_report(report, console)
    return report
