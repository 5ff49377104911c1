"""The inference-node step of `gym demo`: serve the curated library, answer, prove, verify.

``demo_node`` runs after the DAO has curated a library on the devnet (``devnet/demo.py`` calls
it as the demo's step 6, under its heading):

1. starts ``gym node serve`` in a subprocess on a free loopback port, following the library log
   (verified from chain + content store), signing with the key the caller gives (``gym demo``:
   a public devnet key that it uses for nothing else, Anvil account 4), and registering that
   key in the NodeRegistry (stake: twice the minimum, ``DEMO_STAKE_GYM``, so that the slash for
   its forged receipt leaves it active) before it serves; it runs the transformers engine,
   since one question does not repay vLLM's start-up (20 to 70 s on a 2-core CPU), where
   ``gym node serve`` by default picks vLLM when it can serve the model;
2. waits until ``/health`` reports the library verified at its on-chain size;
3. asks one question through the official ``openai`` SDK and prints the answer and how many
   experiences were injected (the receipt's ``experience_ids``);
4. waits for the node to anchor its receipt log (every 2 s here), fetches the receipt's
   inclusion proof from the node, and writes the receipt bundle to
   ``<data dir>/receipts/<receipt CID>.json``;
5. runs what ``gym verify receipt BUNDLE --model DIR`` runs on it (signature, digests,
   registration, library root and state, inclusion, anchoring, one prefill against the
   activation commitment) and prints the checks;
6. plays a dishonest node (``inference_node.forgery``): the same request answered with
   fabricated text, committed with a real prefill and signed with the node's key; verification
   refuses it with the failure's name (``sampling``) and a challenger (Anvil account 5) opens a
   challenge against the node in the NodeRegistry with the forged bundle as evidence;
7. stops the node with SIGTERM: it finishes what is in flight, anchors what is pending and
   exits 0.

Any failure raises ``NodeError`` (the demo prints one line and exits 1); the node process is
never left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from contracts.devnet_accounts import devnet_account_key
from inference_node.errors import NodeError, ReceiptError

QUESTION = ("A farmer has 12 apples and buys 3 boxes with 7 apples in each. How many apples "
            "does the farmer have now?")
ANSWER = "33"  # 12 + 3 * 7
MAX_TOKENS = 320  # room for SmolLM2's whole worked answer (64 cut it mid-sentence)
ANCHOR_INTERVAL_S = 2
DEMO_STAKE_GYM = 200  # GYM the demo node stakes: twice the devnet minimum
POLL_S = 2  # the node checks the curated library for new checkpoints this often
CHALLENGER_KEY = devnet_account_key(5)  # a public devnet key: the auditor who challenges


@dataclass(frozen=True)
class DemoOutcome:
    """What the node step leaves: the honest receipt's bundle and the forged one, caught and
    challenged (``inference_node.forgery.Caught``)."""

    bundle: dict
    caught: Any


def _graded(answer: str, finish_reason: str) -> str:
    """Whether the demo's answer is right (``trainer.verifiers.math_verify`` against 33)."""
    from trainer.verifiers import final_answer, math_verify

    verdict = math_verify({"response": answer, "answer": ANSWER})
    cut = " (cut at max_tokens)" if finish_reason == "length" else ""
    if verdict["reward"] == 1.0:
        return f"[green]right[/green]: the answer is {ANSWER}{cut}"
    return (f"[yellow]wrong[/yellow]: the final answer reads {final_answer(answer)!r}, the "
            f"right one is {ANSWER}{cut}")


def _dishonest_node(bundle: dict, receipt: Any, settings: Any, ledger_rt: Any, console: Any, *,
                    registry: str, model_dir: Path, node_key: str,
                    challenger: Callable[[Any, str], Any] | None) -> Any:
    """Step 6 of the module doc: the node forges one answer, the verifier catches it, and a
    challenger opens a challenge against the node with that evidence."""
    from inference_node.forgery import FORGED_TEXT, catch_and_challenge, forge_answer
    from inference_node.receipts import ReceiptDomain
    from inference_node.registry import NodeRegistry
    from inference_node.verify import check_receipt_bundle, library_texts, load_verifier_model

    console.print("[bold]a dishonest node[/bold]: same request, its own answer "
                  f"({FORGED_TEXT!r}), a real prefill commitment, signed with its key")
    with console.status("forging the answer"):
        model, tokenizer = load_verifier_model(model_dir)
        texts = library_texts(receipt, ledger_rt.contract, ledger_rt.content,
                              ledger_rt.chain.deployment_block)
        forged = forge_answer(receipt, bundle, node_key=node_key, model=model,
                              tokenizer=tokenizer, model_dir=model_dir, texts=texts)
    through = (challenger(ledger_rt, registry) if challenger is not None else
               NodeRegistry(ledger_rt.contract.w3, registry, CHALLENGER_KEY,
                            from_block=ledger_rt.chain.deployment_block))
    domain = ReceiptDomain.from_json(bundle["domain"])
    with console.status("verifying the forged receipt (gym verify receipt --model)"):
        caught = catch_and_challenge(
            forged, verify=lambda b: check_receipt_bundle(b, ledger_rt, registry=registry,
                                                          model_dir=model_dir,
                                                          loaded=(model, tokenizer)),
            registry=through, content=ledger_rt.content, domain=domain)
    console.print(f"[red]forged receipt FAILS[/red]: {caught.failure}", highlight=False)
    judge = ("the verifier committee judges it" if challenger is not None
             else "governance judges it: gym gov propose-slash")
    console.print(f"challenge {caught.challenge.id} opened against node operator "
                  f"{caught.challenge.operator} with evidence {caught.challenge.evidence_cid} "
                  f"({judge})", highlight=False)
    return caught


def _experiences(n: int) -> str:
    return f"{n} experience{'' if n == 1 else 's'}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _registry_address(deployment_file: Path) -> str:
    try:
        return json.loads(deployment_file.read_text())["contracts"]["NodeRegistry"]["address"]
    except (OSError, ValueError, KeyError) as exc:
        raise NodeError(f"{deployment_file} names no NodeRegistry ({exc}): run "
                        "`gym devnet up --redeploy`") from None


def gym_env(settings: Any, **extra: str) -> dict[str, str]:
    """The environment of a `gym` subprocess of the demo: its own, with the demo's settings
    spelled out (they may not come from it), and ``extra``."""
    env = {**os.environ, "GYM_DATA_DIR": str(settings.data_dir),
           "GYM_DEPLOYMENT_FILE": str(settings.deployment_file), **extra}
    for name, value in (("GYM_RPC_URL", settings.rpc_url), ("GYM_DB_URL", settings.db_url),
                        ("GYM_IPFS_API", settings.ipfs_api)):
        if value:
            env[name] = value
    return env


def _wait_health(proc: subprocess.Popen, url: str, log_file: Path, until, timeout_s: float,
                 what: str) -> dict:
    deadline = time.monotonic() + timeout_s
    health: dict = {}
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise NodeError(f"the node exited ({proc.returncode}) while {what}:\n"
                            + log_file.read_text(errors="replace")[-2000:])
        with contextlib.suppress(httpx.HTTPError, ValueError):
            health = httpx.get(f"{url}/health", timeout=5).json()
            if until(health):
                return health
        time.sleep(0.5)
    raise NodeError(f"timed out after {timeout_s:.0f} s {what}; last /health: {health}")


@dataclass
class DemoNode:
    """A `gym node serve` the demo started (``running_node``)."""

    url: str  # http://127.0.0.1:PORT
    proc: subprocess.Popen
    log_file: Path
    address: str  # the signing key's address
    registry: str  # the NodeRegistry it registered in
    library_log_id: int
    model: str = ""  # the served model's name


@contextlib.contextmanager
def running_node(settings: Any, ledger_rt: Any, console: Any, *, library_log_id: int,
                 curated: bool, model_dir: str | Path, node_key: str) -> Iterator[DemoNode]:
    """Steps 1-2 and 7 of the module docstring: the node started, registered and serving
    log ``library_log_id`` verified at its on-chain size; on leaving, stopped with SIGTERM
    (graceful: ``NodeError`` unless it exits 0), or killed if the block failed."""
    from eth_account import Account

    address = Account.from_key(node_key).address
    registry = _registry_address(Path(settings.deployment_file))
    expected_size = ledger_rt.contract.log_info(library_log_id).size
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_file = Path(settings.data_dir) / "node-demo.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "devnet.cli", "node", "serve", "--model", str(model_dir),
               "--follow-log", str(library_log_id), "--key-env", "GYM_NODE_KEY", "--register",
               # twice the minimum: the slash for the demo's forged receipt leaves it active,
               # so its receipts still count in the epoch's rewards (docs/rewards.md)
               "--stake", str(DEMO_STAKE_GYM),
               "--port", str(port), "--anchor-interval", str(ANCHOR_INTERVAL_S),
               "--poll", str(POLL_S), "--engine", "transformers"]
    if curated:
        command.append("--curated")
    with open(log_file, "wb") as log:
        proc = subprocess.Popen(command, env=gym_env(settings, GYM_NODE_KEY=node_key,
                                                     GYM_NODE_REGISTRY=registry),
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        with console.status(f"starting `gym node serve` on {url} (node key {address})"):
            health = _wait_health(
                proc, url, log_file, lambda h: (h["library"]["error"] is None
                                                and h["library"]["size"] == expected_size),
                timeout_s=600, what="waiting for the library to verify")
        console.print(f"node {address} registered and serving {health['model']} "
                      f"({health['engine']} engine): library log {library_log_id} verified at "
                      f"size {health['library']['size']}, "
                      f"{_experiences(health['library']['experiences'])} active (log {log_file})",
                      highlight=False)
        yield DemoNode(url, proc, log_file, address, registry, library_log_id, health["model"])
        with console.status("stopping the node (SIGTERM)"):
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=120)
        if code != 0:
            raise NodeError(f"the node exited with {code} on SIGTERM:\n"
                            + log_file.read_text(errors="replace")[-2000:])
        console.print("node stopped gracefully: in-flight requests answered, receipt log "
                      "anchored")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def demo_node(settings: Any, ledger_rt: Any, console: Any, *, library_log_id: int,
              curated: bool, model_dir: str | Path, node_key: str,
              challenger: Callable[[Any, str], Any] | None = None,
              node: DemoNode | None = None) -> DemoOutcome:
    """Serve log ``library_log_id`` with the model in ``model_dir``, ask, verify, stop (see the
    module docstring). ``settings``: the devnet's settings (``data_dir``, ``deployment_file``,
    ``rpc_url``, ``db_url``, ``ipfs_api``); ``ledger_rt``: the ``ledger.runtime.LedgerRuntime``
    built from them; ``node_key``: the node's signing key (hex), holding GYM to stake;
    ``challenger(ledger_rt, registry_address)``: what the forged receipt's challenge is opened
    through (anything with ``operator_of_signer`` and ``challenge``, e.g. the committee's
    ``CommitteeChallenger``); default: the NodeRegistry, from Anvil account 5. ``node``: a
    node ``running_node`` already started (it keeps running; the caller stops it), which is
    first waited for to serve the log at its on-chain size."""
    if node is None:
        with running_node(settings, ledger_rt, console, library_log_id=library_log_id,
                          curated=curated, model_dir=model_dir, node_key=node_key) as started:
            return _ask_and_verify(settings, ledger_rt, console, started, model_dir, node_key,
                                   challenger)
    expected_size = ledger_rt.contract.log_info(library_log_id).size
    with console.status(f"waiting for the node to serve library log {library_log_id} at size "
                        f"{expected_size}"):
        health = _wait_health(node.proc, node.url, node.log_file,
                              lambda h: (h["library"]["error"] is None
                                         and h["library"]["size"] == expected_size),
                              timeout_s=120, what="waiting for the new library to verify")
    console.print(f"the node follows the curated library: size {health['library']['size']}, "
                  f"{_experiences(health['library']['experiences'])} active", highlight=False)
    return _ask_and_verify(settings, ledger_rt, console, node, model_dir, node_key, challenger)


def _ask_and_verify(settings: Any, ledger_rt: Any, console: Any, node: DemoNode,
                    model_dir: str | Path, key: str,
                    challenger: Callable[[Any, str], Any] | None) -> DemoOutcome:
    """Steps 3-6 of the module docstring."""
    from openai import OpenAI

    from inference_node.receipts import ReceiptDomain, bundle_json, parse_receipt
    from inference_node.verify import check_receipt_bundle, checks_table
    from ledger.tables import print_table

    url, proc, log_file, registry = node.url, node.proc, node.log_file, node.registry
    client = OpenAI(base_url=f"{url}/v1", api_key="demo", max_retries=0, timeout=600)
    request = {"model": node.model, "temperature": 0, "seed": 0, "max_tokens": MAX_TOKENS,
               "messages": [{"role": "user", "content": QUESTION}]}
    with console.status("asking through the openai SDK"):
        reply = client.chat.completions.create(**request)
    extra = reply.model_extra or {}
    if "receipt" not in extra:
        raise NodeError("the answer came without a receipt")
    receipt, evidence = parse_receipt(extra["receipt"]), extra["receipt_evidence"]
    answer = reply.choices[0].message.content
    console.print(f"[bold]Q:[/] {QUESTION}\n[bold]A:[/] {answer}")
    console.print(_graded(answer, reply.choices[0].finish_reason), highlight=False)
    console.print(f"injected {_experiences(len(receipt.experience_ids))}; receipt "
                  f"{evidence['receipt_cid']} signed by {receipt.node}", highlight=False)

    with console.status("waiting for the node to anchor its receipt log"):
        _wait_health(proc, url, log_file, lambda h: h["receipts"]["log"]["pending"] == 0,
                     timeout_s=120, what="waiting for the receipt log to be anchored")
    proof = httpx.get(f"{url}/v1/receipts/{evidence['receipt_cid']}/proof", timeout=30)
    if proof.status_code != 200:
        raise NodeError(f"the node has no proof for its receipt: {proof.text}")
    bundle = bundle_json(receipt, ReceiptDomain.from_json(evidence["domain"]), route="chat",
                         request=request, text=reply.choices[0].message.content,
                         completion_token_ids=evidence["completion_token_ids"],
                         inclusion=proof.json())
    bundle_file = Path(settings.data_dir) / "receipts" / f"{evidence['receipt_cid']}.json"
    bundle_file.parent.mkdir(parents=True, exist_ok=True)
    bundle_file.write_text(json.dumps(bundle, indent=1))
    console.print(f"wrote the receipt bundle to {bundle_file}", highlight=False)

    with console.status("verifying the receipt (gym verify receipt --model)"):
        try:
            checks = check_receipt_bundle(bundle, ledger_rt, registry=registry,
                                          model_dir=Path(model_dir))
        except ReceiptError as exc:
            raise NodeError(f"the demo receipt FAILS verification ({exc.reason}): "
                            f"{exc}") from None
    print_table(checks_table(checks, f"gym verify receipt {bundle_file.name} --model "
                                     f"{Path(model_dir).name}"), console)
    console.print("[green]receipt verified[/green]")
    caught = _dishonest_node(bundle, receipt, settings, ledger_rt, console,
                             registry=registry, model_dir=Path(model_dir), node_key=key,
                             challenger=challenger)
    return DemoOutcome(bundle, caught)
