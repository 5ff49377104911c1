"""``gym node``: run an inference node (thin over `inference_node.server`).

    gym node serve --model DIR [--library LIB.json | --follow-log LOG_ID [--curated]]
                   [--key-env GYM_NODE_KEY | --keystore FILE --password-env VAR] [--offline]
                   [--host H] [--port P] [--max-queue N]
    gym verify receipt BUNDLE.json [--model DIR] [--offline]

Mount with ``app.add_typer(inference_node.cli.app, name="node")`` and
``verify_app.command("receipt")(inference_node.cli.verify_receipt)``. Both take the chain and
content store from ``ctx.obj`` (a ``ledger.cli.LedgerRuntime``) when they need them.

Keys: the node's signing key is read from the environment variable named by ``--key-env`` (hex)
or from an encrypted JSON keystore (``--keystore``, password from ``--password-env``); neither is
ever printed or logged. With a key, receipts are bound to the deployment's ExperienceLedger
(EIP-712 domain) and the node's receipt log is anchored there; ``--offline`` signs unbound
receipts and keeps the receipt log local.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

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
        try:
            return "0x" + bytes(Account.decrypt(json.loads(keystore.read_text()), password)).hex()
        except (OSError, ValueError) as exc:  # never echo the password or the key
            raise typer.BadParameter(f"cannot decrypt {keystore}: {type(exc).__name__}",
                                     param_hint="--keystore") from None
    return None


def _runtime(ctx: typer.Context, why: str):
    """The ``LedgerRuntime`` the CLI root put in ``ctx.obj`` (chain, content store, log index)."""
    if ctx.obj is None:
        raise typer.BadParameter(f"{why} needs the chain configuration: run it as `gym ...`")
    return ctx.obj


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
    max_queue: Annotated[int, typer.Option(help="Waiting requests before answering 429.")] = 64,
    max_batch: Annotated[int, typer.Option(help="Requests decoded together.")] = 8,
    served_model_name: Annotated[str | None, typer.Option(
        help="Model id in /v1/models; default: the model directory's name.")] = None,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 …; default: cuda "
                                                    "when available.")] = None,
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
) -> None:
    """Serve /v1/models, /v1/chat/completions, /v1/completions, /health and /metrics.

    The library comes from --library (a static file) or --follow-log (verified sync). With a
    key, every non-streaming answer carries a signed receipt, appended to the node's receipt
    log and anchored every --anchor-interval seconds. Not yet here: registration in the
    NodeRegistry and the vLLM engine.
    """
    import uvicorn

    from inference_node.engine import TransformersEngine
    from inference_node.library import StaticLibrarySource
    from inference_node.receipt_log import ReceiptLog
    from inference_node.receipts import ReceiptDomain, ReceiptSigner, model_digest
    from inference_node.server import create_app
    from inference_node.settings import NodeSettings
    from inference_node.sync import ChainLibrarySource
    from ledger.chain import LogKind

    settings = NodeSettings(served_model_name=served_model_name, max_queue=max_queue,
                            host=host, port=port)
    if library and follow_log is not None:
        raise typer.BadParameter("give --library or --follow-log, not both")
    key = _load_key(key_env, keystore, password_env)
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
    with console.status(f"loading {model}"):
        engine = TransformersEngine.from_pretrained(model, device=device, max_batch=max_batch,
                                                    prefix_reuse=not no_prefix_reuse)
    signer = receipts_log = None
    if key is not None:
        rt = _runtime(ctx, "signing receipts")
        contract = None if offline else rt.contract
        domain = (ReceiptDomain() if contract is None
                  else ReceiptDomain(contract.w3.eth.chain_id, contract.address.lower()))
        signer = ReceiptSigner(key, domain, engine.model, model_digest(model))
        receipts_log = ReceiptLog(rt.store, rt.content, contract,
                         receipt_log or f"node/{signer.address}/receipts",
                         interval_s=anchor_interval)
        console.print(f"signing receipts as [bold]{signer.address}[/] (chain "
                      f"{domain.chain_id}), receipt log {receipts_log.name!r}")
    snapshot = source.current()
    console.print(f"serving [bold]{settings.served_model_name or engine.model_name}[/] on "
                  f"http://{host}:{port}/v1 with {len(snapshot.experiences)} experiences "
                  f"(library {snapshot.version})")
    app_ = create_app(engine, source, settings, receipts=signer, receipt_log=receipts_log)
    uvicorn.run(app_, host=host, port=port, log_level="info")


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
    """Check a receipt: signature, request/response digests, library root and state, log
    inclusion and anchoring, and with --model the activation commitment."""
    from inference_node.receipts import ReceiptDomain, ReceiptError, verify_receipt_bundle

    try:
        bundle = json.loads(bundle_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        console.print(f"[red]error:[/] cannot read {bundle_file}: {exc}")
        raise typer.Exit(1) from None
    kwargs: dict = {}
    if not offline:
        rt = _runtime(ctx, "checking a receipt against the chain (else --offline)")
        contract = rt.contract
        kwargs = {"contract": contract, "content": rt.content,
                  "from_block": rt.chain.deployment_block,
                  "domain": ReceiptDomain(contract.w3.eth.chain_id, contract.address.lower())}
    if model is not None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        with console.status(f"loading {model}"):
            kwargs.update(model=AutoModelForCausalLM.from_pretrained(model),
                          tokenizer=AutoTokenizer.from_pretrained(model), model_dir=model)
    try:
        checks = verify_receipt_bundle(bundle, **kwargs)
    except ReceiptError as exc:
        console.print(f"[red]receipt FAILS[/] ({exc.reason}): {exc}", highlight=False)
        if exc.expected is not None:
            console.print(f"  expected {exc.expected}\n  computed {exc.computed}",
                          highlight=False)
        raise typer.Exit(1) from None
    table = Table("check", "result", "detail", title=f"receipt {bundle_file.name}")
    for check in checks:
        result = {True: "[green]ok[/]", None: "[yellow]skipped[/]"}[check.passed]
        table.add_row(check.name, result, check.detail)
    Console().print(table)
