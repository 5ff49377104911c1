"""Reward epochs at scale (issue 48, "Must show"): compute time and memory, attest and claim gas.

Computing an epoch of 100,000 receipts against reading them alone, and the gas of `attest` and
`claim` on the RewardDistributor against Uniswap's MerkleDistributor.

On a fresh `gym devnet up` (``fresh_devnet``), all in reward epoch 0: two authors publish four
experiences each and the DAO curates them (``curate_on_devnet``); two nodes (300 and 100 GYM)
register with their receipt logs; ``--receipts`` receipts, half per node, each naming two
curated experiences (every other one also an uncurated one), are appended to the logs and
anchored in ``--checkpoints`` checkpoints per node; the chain is mined past the epoch's end.
Each node signs one receipt per template with ``sign_receipt``; the others vary its seed in
the canonical bytes, so their signatures do not verify: the reward computation does not check
receipt signatures (an audit does), only that a receipt decodes and which experiences it names.

1. compute, each in a child process that reads the devnet itself, timed after its imports,
   with its peak RSS (VmHWM, as bench_endpoint_holds reads it; ru_maxrss would count this
   process's RSS at the fork) and what the work added to the RSS it had before; ``--repeat``
   (3) runs of each, interleaved, the fastest reported (the machine may be shared):
   - baseline "read + decode": the same checkpoints' manifests (``fetch_batch``) and every
     receipt's bytes read (``content.cat``) and decoded (``decode_entry``), nothing kept;
   - ``compute_epoch`` (``committee.rewards.epochs``): the facts, the table and its bytes;
   - with ``--cli`` (the default) also `gym rewards compute 0` as a process (wall time from
     its start, VmHWM read while it runs), which must write the same bytes.
   Content is read from the devnet's local store (``<data dir>/ipfs``), as the `gym` commands
   on the devnet read it; through an HTTP endpoint each read costs a request more.

2. gas, execution (docs/design.md "4.4 Gas": total minus the intrinsic 21,000 and the EIP-2028
   calldata; "-" where the EIP-7623 floor was charged) and total, of real transactions:
   - ``attest_epoch`` of epoch 0's computed table by ``--verifiers`` (16) registered
     verifiers, ceil(2n/3) of them signing;
   - ``claim_line`` on tables of ``--accounts`` accounts (1,000 and 100,000: the proof's depth
     matters), each an epoch of its own whose facts are that many nodes of equal stake in the
     availability pool (``compute_table`` on synthetic facts), attested as epoch 0 is: an
     account's first claim when it holds no GYM, when it holds some, when it also delegated
     its votes (a checkpoint of GymToken's), and a holder's claim of a second epoch (its
     claimed-epochs word already written);
   - baseline: Uniswap's MerkleDistributor (``@uniswap/merkle-distributor`` 1.0.1, its
     compiled ``build/MerkleDistributor.json``) over the same (account, amount) values, leaf
     ``keccak256(abi.encodePacked(index, account, amount))``, sorted-pair proofs, funded with
     GYM (the same token transfer: the ratio is the distributors' own difference) and, as
     Uniswap deployed it, with its ``TestERC20``. Its claimed bitmap packs 256 indices a word:
     the same kinds of claim, the first three each the first of its word, the fourth a holder
     whose word an earlier claim wrote.

Why a GPL-3.0 package is a dev dependency: ``@uniswap/merkle-distributor`` (GPL-3.0 by its
repository; package.json devDependencies, exact version) is here only for this baseline. Its
compiled bytecode is read from node_modules and deployed on the benchmark's own throwaway
devnet; nothing of it is imported, linked or shipped by Gym Ledger at run time.

Usage: ``.venv/bin/python benchmarks/bench_rewards.py`` (the issue's figures: 100,000
receipts, 16 verifiers, tables of 1,000 and 100,000 accounts; 5 to 10 minutes on 2 cores,
mostly appending the receipts and the compute runs, then a few more removing the devnet's
~200,000 files); ``--quick`` for a smoke run (2,000 receipts, 4 verifiers, a table of 1,000
accounts, about a minute). Prints a table per part and the ratios; stops with a message when
a measurement disagrees with itself (the CLI's bytes, a claim's amount).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))  # the tests' devnet committee helpers

UNISWAP = ROOT / "node_modules" / "@uniswap" / "merkle-distributor" / "build"
GYM = ROOT / ".venv" / "bin" / "gym"
SEED = 987_654_321  # the seed of each signed template receipt, replaced per receipt
EXPERIENCES_PER_AUTHOR = 4


@dataclass
class Settings:
    receipts: int  # receipts in epoch 0, half per node
    checkpoints: int  # anchored checkpoints per node receipt log
    verifiers: int  # registered committee verifiers; ceil(2n/3) sign each root
    accounts: tuple[int, ...]  # sizes of the claim tables, one epoch each
    cli: bool  # also time `gym rewards compute` as a process
    repeat: int  # runs of each compute measurement, interleaved; the fastest is reported


# ----------------------------------------------------------------------------- part 1: compute


def measure_child(what: str, state: Path) -> dict:
    """Run this script as ``--measure what`` over the devnet in ``state``: its JSON line."""
    done = subprocess.run([sys.executable, __file__, "--measure", what, "--state", str(state)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"--measure {what} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def child_main(what: str, state_file: Path) -> None:
    """In the child: build the clients, then time ``what`` alone; print one JSON line."""
    from web3 import Web3

    from committee.client import VerifierCommittee
    from committee.rewards.distributor import RewardDistributor
    from committee.rewards.epochs import compute_epoch
    from committee.rewards.facts import Sources, window_of
    from contracts import load_artifact
    from inference_node.registry import NodeRegistry
    from ledger.batches import fetch_batch
    from ledger.blockstore import LocalBlockStore
    from ledger.chain import LedgerContract
    from ledger.entries import MAX_ENTRY_BYTES, ReceiptEntry, decode_entry

    state = json.loads(state_file.read_text())
    w3 = Web3(Web3.HTTPProvider(state["rpc_url"], request_kwargs={"timeout": 60}))
    start_block = state["deployment_block"]
    sources = Sources(
        ledger=LedgerContract(w3, state["ledger"], load_artifact("ExperienceLedger").abi),
        registry=NodeRegistry(w3, state["registry"], from_block=start_block),
        committee=VerifierCommittee(w3, state["committee"], from_block=start_block),
        content=LocalBlockStore(state["content_dir"]), curated_log_id=state["curated_log_id"],
        from_block=start_block)
    distributor = RewardDistributor(w3, state["distributor"])
    rss_before = peak_rss_kib()
    start = time.perf_counter()
    if what == "read":
        window = window_of(distributor, state["epoch"])
        receipts = 0
        for args in sources.registry.registered(to_block=window.last_block):
            for event in sources.ledger.anchored(int(args["receiptLogId"]), start_block,
                                                 window.last_block):
                if event.block_number < window.first_block:
                    continue
                for cid in fetch_batch(sources.content, event.batch_cid).entries:
                    entry = decode_entry(sources.content.cat(cid, max_bytes=MAX_ENTRY_BYTES))
                    receipts += isinstance(entry, ReceiptEntry)
        out = {"receipts": receipts}
    else:
        table, data = compute_epoch(sources, distributor, state["epoch"])
        Path(state["table_file"]).write_bytes(data)
        out = {"accounts": len(table.accounts), "bytes": len(data),
               "uses": sum(line["uses"] for line in table.sources["data"])}
    seconds = time.perf_counter() - start
    print(json.dumps({**out, "seconds": seconds, "rss_before_kib": rss_before,
                      "rss_peak_kib": peak_rss_kib()}))


def peak_rss_kib(pid: int | str = "self") -> int | None:
    """VmHWM of process ``pid``: its peak RSS since its exec (ru_maxrss would also count the
    parent's RSS at the fork: Linux carries it over exec); None once it has exited."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return next((int(line.split()[1]) for line in status.splitlines()
                 if line.startswith("VmHWM:")), None)


def time_cli(env: dict, out: Path) -> dict:
    """`gym rewards compute 0 --out FILE`: wall seconds and its peak RSS (VmHWM, read every
    20 ms while it runs)."""
    log = out.with_suffix(".log")
    with log.open("wb") as stderr:
        start = time.perf_counter()
        proc = subprocess.Popen([str(GYM), "rewards", "compute", "0", "--out", str(out)],
                                env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, peak_rss_kib(proc.pid) or 0)
            time.sleep(0.02)
        seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"gym rewards compute failed:\n{log.read_text()[-3000:]}")
    return {"seconds": seconds, "rss_peak_kib": peak}


# ----------------------------------------------------------------------------- the devnet epoch


class World:
    """The devnet's clients, and helpers to fund and send."""

    def __init__(self, workdir: Path, deployment) -> None:
        from web3 import Web3

        from contracts import load_artifact
        from ledger.blockstore import LocalBlockStore
        from ledger.logstore import LogStore

        self.workdir, self.deployment = workdir, deployment
        self.w3 = Web3(Web3.HTTPProvider(deployment.rpc_url, request_kwargs={"timeout": 120}))
        self.token = self.w3.eth.contract(address=deployment.contracts["GymToken"].address,
                                          abi=load_artifact("GymToken").abi)
        self.store = LogStore(f"sqlite:///{workdir / 'parties.sqlite'}")
        self.content = LocalBlockStore(workdir / "data" / "ipfs")  # what `gym` reads here

    @staticmethod
    def address(key: str) -> str:
        from eth_account import Account

        return Account.from_key(key).address

    def ledger(self, key: str | None = None):
        from contracts import load_artifact
        from ledger.chain import LedgerContract

        return LedgerContract(self.w3, self.deployment.contracts["ExperienceLedger"].address,
                              load_artifact("ExperienceLedger").abi, key)

    @staticmethod
    def key(name: str) -> str:
        """The key of ``name`` (derived from it)."""
        from eth_utils import keccak

        return "0x" + keccak(f"bench rewards {name}".encode()).hex()

    def fresh_key(self, name: str, gym_from: str | None = None, amount: int = 0) -> str:
        """``key(name)``, with ether (and ``amount`` GYM from ``gym_from``)."""
        from gym_helpers import send

        key = self.key(name)
        self.w3.provider.make_request("anvil_setBalance", [self.address(key), hex(10**20)])
        if amount:
            send(self.w3, self.token.functions.transfer(self.address(key), amount), gym_from)
        return key

    def mine_past(self, block: int) -> None:
        head = self.w3.eth.block_number
        if head <= block:
            self.w3.provider.make_request("anvil_mine", [hex(block - head + 1)])


def curate_experiences(world: World) -> list[str]:
    """Two authors' logs of four experiences each, curated by the DAO; their entry CIDs."""
    from contracts import load_artifact
    from contracts.devnet_accounts import ANVIL_DEV_KEYS
    from governance.client import GovernanceClient
    from governance.devnet_curation import curate_on_devnet
    from ledger.entries import ExperienceEntry, Provenance, encode_entry, entry_cid
    from ledger.publish import append_entries, ensure_chain_log, publish

    d = world.deployment
    client = GovernanceClient(
        world.w3, d.contracts["GymGovernor"].address, load_artifact("GymGovernor").abi,
        world.token.address, load_artifact("GymToken").abi, world.ledger(ANVIL_DEV_KEYS[0]),
        d.contracts["TimelockController"].address, load_artifact("TimelockController").abi,
        curated_log_id=d.curated_log_id, private_key=ANVIL_DEV_KEYS[0],
        from_block=d.deployment_block)
    cids = []
    for author in range(2):
        key, name = world.fresh_key(f"author {author}"), f"author-{author}"
        entries = [encode_entry(ExperienceEntry(
            text=f"Author {author}, rule {i}: check the units before the last step.",
            domain="math", op="add",
            provenance=Provenance(method="tfgrpo", base_model="SmolLM2-135M-Instruct", step=i)))
            for i in range(EXPERIENCES_PER_AUTHOR)]
        world.store.create_log(name)
        ensure_chain_log(world.store, world.ledger(key), name)
        append_entries(world.store, world.content, name, entries)
        publish(world.store, world.content, world.ledger(key), name)
        done = curate_on_devnet(client, world.store, world.content, name,
                                list(range(len(entries))), f"author {author}'s rules",
                                voting_period=d.governance.voting_period,
                                timelock_delay=d.governance.timelock_min_delay)
        if not done.executed:
            raise SystemExit(f"the curation of {name} was not executed")
        cids += [entry_cid(data) for data in entries]
    return cids


def receipt_templates(world: World, signer: str, experiences: list[str]) -> list[bytes]:
    """One signed receipt per template (each names two curated experiences, every other one
    also an uncurated one), canonical bytes with ``SEED`` as its seed."""
    from inference_node.receipts import ReceiptDomain, build_receipt, library_ref, sign_receipt
    from ledger.entries import encode_entry
    from ledger.multiformats import raw_cid

    domain = ReceiptDomain(world.w3.eth.chain_id,
                           world.deployment.contracts["ExperienceLedger"].address)
    library = library_ref(str(world.deployment.curated_log_id), len(experiences), "")
    uncurated = str(raw_cid(b"an experience never curated"))  # counts for nobody
    out = []
    for t, first in enumerate(experiences):
        names = [first, experiences[(t + 1) % len(experiences)]] + ([uncurated] if t % 2 else [])
        unsigned = build_receipt(
            node=world.address(signer), model_digest="sha256:" + "ab" * 32, library=library,
            experience_ids=names, request_json={"messages": [{"role": "user", "content": "q"}]},
            text="a", completion_token_ids=[1, 2], prompt_tokens=3, temperature=0.0, top_p=1.0,
            max_tokens=4, seed=SEED, activation_commitment="toploc1:1:32:AA==",
            at=1_700_000_000)
        data = encode_entry(sign_receipt(unsigned, signer, domain))
        if data.count(b"%d" % SEED) != 1:
            raise SystemExit("the template's seed is not unique in its bytes")
        out.append(data)
    return out


def node_epoch(world: World, settings: Settings, experiences: list[str]) -> dict[str, float]:
    """Nodes A and B registered with receipt logs holding ``settings.receipts`` receipts,
    anchored in ``settings.checkpoints`` checkpoints each; seconds per stage."""
    from committee_world import SIGNER_KEY
    from eth_utils import keccak
    from gym_helpers import send

    from contracts import load_artifact
    from contracts.devnet_accounts import ANVIL_DEV_KEYS
    from contracts.gym_token import GYM as UNIT
    from ledger.entries import decode_entry
    from ledger.publish import append_entries, ensure_chain_log, publish

    registry = world.w3.eth.contract(address=world.deployment.contracts["NodeRegistry"].address,
                                     abi=load_artifact("NodeRegistry").abi)
    operator_b = world.fresh_key("operator B", ANVIL_DEV_KEYS[1], 200 * UNIT)
    nodes = (("A", ANVIL_DEV_KEYS[4], SIGNER_KEY, 300 * UNIT),
             ("B", operator_b, world.fresh_key("signer B"), 100 * UNIT))
    stages = {"build receipts": 0.0, "append (content + log)": 0.0, "anchor": 0.0}
    for n, (name, operator, signer, stake) in enumerate(nodes):
        log = f"node-{name}-receipts"
        world.store.create_log(log)
        log_id = ensure_chain_log(world.store, world.ledger(operator), log)
        send(world.w3, world.token.functions.approve(registry.address, stake), operator)
        send(world.w3, registry.functions.register(world.address(signer), keccak(b"model"),
                                                   "http://127.0.0.1:9", stake, log_id), operator)
        templates = receipt_templates(world, signer, experiences)
        decode_entry(templates[0].replace(b"%d" % SEED, b"1"))  # a varied receipt decodes
        count = settings.receipts // 2 + (settings.receipts % 2 if n == 0 else 0)
        for c in range(settings.checkpoints):
            first, end = count * c // settings.checkpoints, count * (c + 1) // settings.checkpoints
            start = time.perf_counter()
            batch = [templates[i % len(templates)].replace(b"%d" % SEED, b"%d" % i)
                     for i in range(first, end)]
            stages["build receipts"] += time.perf_counter() - start
            start = time.perf_counter()
            append_entries(world.store, world.content, log, batch)
            stages["append (content + log)"] += time.perf_counter() - start
            start = time.perf_counter()
            publish(world.store, world.content, world.ledger(operator), log)
            stages["anchor"] += time.perf_counter() - start
    return stages


def part_compute(world: World, settings: Settings, env: dict) -> tuple[dict, bytes]:
    """Set up epoch 0, compute it; the rows, and the table's bytes."""
    from committee.rewards.distributor import RewardDistributor

    d = world.deployment
    distributor = RewardDistributor(world.w3, d.contracts["RewardDistributor"].address)
    first, last = distributor.epoch_bounds(0)
    start = time.perf_counter()
    experiences = curate_experiences(world)
    curated_s = time.perf_counter() - start
    stages = node_epoch(world, settings, experiences)
    if world.w3.eth.block_number > last:
        raise SystemExit(f"the setup ran past epoch 0 (blocks {first}-{last})")
    world.mine_past(last)
    print(f"epoch 0 (blocks {first}-{last}): {len(experiences)} experiences curated in "
          f"{curated_s:.1f} s; {settings.receipts:,} receipts: "
          + ", ".join(f"{what} {s:.1f} s" for what, s in stages.items()))
    print("  (one receipt per template is signed with sign_receipt, the others vary its seed: "
          "the reward computation does not check receipt signatures)")

    state = world.workdir / "bench-state.json"
    state.write_text(json.dumps({
        "rpc_url": d.rpc_url, "deployment_block": d.deployment_block, "epoch": 0,
        "ledger": d.contracts["ExperienceLedger"].address,
        "registry": d.contracts["NodeRegistry"].address,
        "committee": d.contracts["VerifierCommittee"].address,
        "distributor": distributor.address, "curated_log_id": d.curated_log_id,
        "content_dir": str(world.content.root), "table_file": str(world.workdir / "table.json")}))
    runs: dict[str, list[dict]] = {}
    out = world.workdir / "cli-table.json"
    for _ in range(settings.repeat):  # interleaved: a noisy neighbour slows all alike
        runs.setdefault("read + decode (baseline)", []).append(measure_child("read", state))
        runs.setdefault("compute_epoch", []).append(measure_child("compute", state))
        if settings.cli:
            runs.setdefault("gym rewards compute (process)", []).append(time_cli(env, out))
    data = (world.workdir / "table.json").read_bytes()
    if settings.cli and out.read_bytes() != data:
        raise SystemExit("`gym rewards compute` wrote other bytes than compute_epoch")
    rows = {}
    for what, measured in runs.items():  # the fastest run, the slowest time, the peak RSS
        fastest = min(measured, key=lambda r: r["seconds"])
        rows[what] = {**fastest, "slowest": max(r["seconds"] for r in measured),
                      "rss_peak_kib": max(r["rss_peak_kib"] for r in measured)}
    return rows, data


# ----------------------------------------------------------------------------- part 2: gas


def execution_gas(w3, receipt) -> tuple[int | None, int]:
    """(execution gas or None where the EIP-7623 floor was charged, total gas)."""
    data = bytes(w3.eth.get_transaction(receipt["transactionHash"])["input"])
    zeros = data.count(0)
    tokens = zeros + 4 * (len(data) - zeros)
    total = receipt["gasUsed"]
    if total == 21_000 + 10 * tokens:
        return None, total
    return total - 21_000 - 4 * tokens, total


def last_receipt(w3):
    """The receipt of the newest block's last transaction (Anvil mines one per block)."""
    return w3.eth.get_transaction_receipt(w3.eth.get_block("latest")["transactions"][-1])


class Committee:
    """``n`` registered verifiers (slots 0..n-1) that sign reward roots."""

    def __init__(self, world: World, n: int) -> None:
        from committee_world import BLS, VERIFIER_KEYS, more_verifiers, register_verifiers

        from committee.client import VerifierCommittee
        from committee.rewards.distributor import RewardDistributor
        from contracts.devnet_accounts import ANVIL_DEV_KEYS

        cw = register_verifiers(world.deployment)
        self.members = list(zip(VERIFIER_KEYS, BLS, strict=True)) + more_verifiers(cw, n - 3)
        self.client = VerifierCommittee(world.w3, cw.address,
                                        from_block=world.deployment.deployment_block)
        self.distributor = RewardDistributor(
            world.w3, world.deployment.contracts["RewardDistributor"].address, ANVIL_DEV_KEYS[0])
        self.w3 = world.w3

    def attest(self, epoch: int, root: bytes, total: int, cid: str) -> tuple[int | None, int]:
        """Two thirds of the verifiers sign; ``attest_epoch`` posts it; its gas."""
        from committee.rewards.attestation import RootClaim, SignedRoot
        from committee.rewards.epochs import attest_epoch

        claim = RootClaim(epoch, root, total, cid)
        quorum = math.ceil(2 * len(self.members) / 3)
        signed = [SignedRoot.create(sk, claim, chain_id=self.distributor.chain_id,
                                    distributor=self.distributor.address, verifier_index=i,
                                    verifier=self.w3.eth.account.from_key(key).address)
                  for i, (key, sk) in enumerate(self.members[:quorum])]
        attest_epoch(self.distributor, self.client, epoch, signed)
        return execution_gas(self.w3, last_receipt(self.w3))


def claim_table(committee: Committee, epoch: int, size: int, named: list[str]):
    """Ended epoch ``epoch``'s table: ``size`` accounts (``named`` among them) paid by the
    availability pool, all of equal stake (each a node whose one audited checkpoint passed,
    in a report it published as a verifier too)."""
    from eth_utils import keccak, to_checksum_address

    from committee.rewards.facts import window_of
    from committee.rewards.table import AuditReport, EpochFacts, compute_table

    accounts = list(named) + [to_checksum_address(keccak(b"bench rewards account %d" % i)[12:])
                              for i in range(size - len(named))]
    reports = tuple(AuditReport(a, f"report-{i}", a, i + 1, 1, 1, True)
                    for i, a in enumerate(accounts))
    return compute_table(EpochFacts(window=window_of(committee.distributor, epoch),
                                    stakes=dict.fromkeys(accounts, 1), audits=reports))


def uniswap_tree(values: list[tuple[str, int]]) -> tuple[bytes, Callable[[int], list[bytes]]]:
    """Uniswap's BalanceTree over ``values`` (index = position): its root and the proof of an
    index. Leaves sorted, pairs hashed sorted, an odd node carried up unhashed."""
    from eth_abi.packed import encode_packed
    from eth_utils import keccak

    leaves = [keccak(encode_packed(["uint256", "address", "uint256"], [i, account, amount]))
              for i, (account, amount) in enumerate(values)]
    order = sorted(range(len(leaves)), key=lambda i: leaves[i])
    position = {index: p for p, index in enumerate(order)}
    layers = [[leaves[i] for i in order]]
    while len(layers[-1]) > 1:
        below = layers[-1]
        layers.append([keccak(b"".join(sorted(below[i:i + 2]))) if i + 1 < len(below)
                       else below[i] for i in range(0, len(below), 2)])

    def proof(index: int) -> list[bytes]:
        out, p = [], position[index]
        for layer in layers[:-1]:
            sibling = p ^ 1
            if sibling < len(layer):
                out.append(layer[sibling])
            p //= 2
        return out

    return layers[-1][0], proof


def deploy(world: World, artifact: Path, *args):
    from gym_helpers import send

    from contracts.devnet_accounts import ANVIL_DEV_KEYS

    built = json.loads(artifact.read_text())
    factory = world.w3.eth.contract(abi=built["abi"], bytecode=built["bytecode"])
    receipt = send(world.w3, factory.constructor(*args), ANVIL_DEV_KEYS[0])
    return world.w3.eth.contract(address=receipt["contractAddress"], abi=built["abi"])


KINDS = ("no GYM, first claim", "holder, first claim", "delegated holder, first claim",
         "holder, word already written")


def part_gas(world: World, settings: Settings, table_bytes: bytes) -> tuple[list, list]:
    """Attest epoch 0's table; claims on tables of each size on both distributors."""
    from gym_helpers import send

    from committee.rewards.epochs import claim_line
    from committee.rewards.table import decode_table, encode_table
    from contracts.devnet_accounts import ANVIL_DEV_KEYS
    from contracts.gym_token import GYM as UNIT
    from governance.devnet_time import advance_time

    w3, funder = world.w3, ANVIL_DEV_KEYS[1]
    start = time.perf_counter()
    committee = Committee(world, settings.verifiers)
    table0 = decode_table(table_bytes)
    cid0 = world.content.add_file(table_bytes, pin=True)
    signing = f"{math.ceil(2 * settings.verifiers / 3)}/{settings.verifiers} signing"
    attests = [(f"attest epoch 0 ({len(table0.accounts)} accounts), {signing}",
                *committee.attest(0, table0.root, table0.total(), cid0))]
    print(f"{settings.verifiers} verifiers registered and epoch 0 attested in "
          f"{time.perf_counter() - start:.1f} s")

    def holder(name: str, *, delegated: bool = False) -> str:
        key = world.fresh_key(name, funder, 1 * UNIT)
        if delegated:
            send(w3, world.token.functions.delegate(world.address(key)), key)
        return world.address(key)

    # an account of epoch 0's table (an author: the nodes earn nothing there, no audit
    # reports) holds GYM without delegating and claims epoch 0 first: in every table after
    # it, its claimed-epochs word is already written
    again = min(table0.accounts)
    if not world.token.functions.balanceOf(again).call():
        send(w3, world.token.functions.transfer(again, 1 * UNIT), funder)
    world.mine_past(committee.distributor.epoch_bounds(len(settings.accounts))[1])
    tables = []
    for n, size in enumerate(settings.accounts):
        epoch = n + 1
        rd = {"new": world.address(world.key(f"rd new {size}")),
              "first": holder(f"rd holder {size}"),
              "delegated": holder(f"rd delegated {size}", delegated=True), "again": again}
        uni = {"new": world.address(world.key(f"uni new {size}")),
               "first": holder(f"uni holder {size}"),
               "delegated": holder(f"uni delegated {size}", delegated=True),
               "again": holder(f"uni holder again {size}")}
        tables.append((size, epoch, claim_table(committee, epoch, size,
                                                [*rd.values(), *uni.values()]), rd, uni))
    for size, epoch, table, _, _ in tables:
        cid = world.content.add_file(encode_table(table), pin=True)
        attests.append((f"attest epoch {epoch} ({size:,} accounts)",
                        *committee.attest(epoch, table.root, table.total(), cid)))
    advance_time(w3, committee.distributor.value("appealWindow") + 1)

    rows = []  # (accounts, kind, contract, proof length, execution, total)
    trees = {}  # epoch -> its table's tree, for the proofs' lengths

    def claim(table, kind: str, account: str) -> None:
        before = world.token.functions.balanceOf(account).call()
        amount = claim_line(committee.distributor, table, account)
        if world.token.functions.balanceOf(account).call() - before != amount:
            raise SystemExit(f"the claim of {account} in epoch {table.epoch} paid another "
                             f"amount than {amount}")
        rows.append((len(table.accounts), kind, "RewardDistributor",
                     len(trees.setdefault(table.epoch, table.tree()).proof(account)),
                     *execution_gas(w3, last_receipt(w3))))

    claim(table0, KINDS[1], again)
    for _, _, table, rd, _ in tables:
        for kind, role in zip(KINDS, ("new", "first", "delegated", "again"), strict=True):
            claim(table, kind, rd[role])

    for size, _, table, _, uni in tables:
        # Uniswap's index is the claimed bitmap's bit: the first three claims each open a
        # word of their own, the fourth shares the first one's
        values = dict(table.values())
        order = {uni["new"]: 0, uni["again"]: 1, uni["first"]: 256, uni["delegated"]: 512}
        rest = iter(a for a in values if a not in order)
        accounts = [next(rest) if i not in order.values() else None for i in range(len(values))]
        for account, index in order.items():
            accounts[index] = account
        leaves = [(account, values[account]) for account in accounts]
        root, proof_of = uniswap_tree(leaves)
        total = sum(values.values())
        gym_dist = deploy(world, UNISWAP / "MerkleDistributor.json", world.token.address, root)
        send(w3, world.token.functions.transfer(gym_dist.address, total), funder)
        erc20 = deploy(world, UNISWAP / "TestERC20.json", "Test", "TST", 0)
        erc_dist = deploy(world, UNISWAP / "MerkleDistributor.json", erc20.address, root)
        send(w3, erc20.functions.setBalance(erc_dist.address, total), ANVIL_DEV_KEYS[0])
        for account in (uni["first"], uni["again"]):
            send(w3, erc20.functions.setBalance(account, UNIT), ANVIL_DEV_KEYS[0])
        for contract, label, kinds in ((gym_dist, "Uniswap MerkleDistributor (GYM)", KINDS),
                                       (erc_dist, "Uniswap MerkleDistributor (TestERC20)",
                                        (KINDS[0], KINDS[1], KINDS[3]))):
            for kind in kinds:
                account = uni[{KINDS[0]: "new", KINDS[1]: "first", KINDS[2]: "delegated",
                               KINDS[3]: "again"}[kind]]
                proof = proof_of(order[account])
                send(w3, contract.functions.claim(order[account], account, values[account],
                                                  proof), ANVIL_DEV_KEYS[0])
                rows.append((size, kind, label, len(proof),
                             *execution_gas(w3, last_receipt(w3))))
    return attests, rows


# ----------------------------------------------------------------------------- report


def report_compute(rows: dict, receipts: int, repeat: int) -> None:
    def added(r: dict) -> float | None:  # MiB the work added to the RSS after imports
        return (r["rss_peak_kib"] - r["rss_before_kib"]) / 1024 if "rss_before_kib" in r else None

    print(f"\ncompute: epoch 0, {receipts:,} receipts; seconds: the fastest of {repeat} "
          "(slowest); peak RSS: VmHWM; added: above the RSS after imports")
    print(f"{'what':<32} {'seconds':>8} {'slowest':>8} {'receipts/s':>11} {'peak RSS MiB':>13} "
          f"{'added MiB':>10}")
    for what, r in rows.items():
        print(f"{what:<32} {r['seconds']:>8.1f} {r['slowest']:>8.1f} "
              f"{receipts / r['seconds']:>11,.0f} {r['rss_peak_kib'] / 1024:>13.0f} "
              + ("-" if added(r) is None else f"{added(r):.0f}").rjust(10))
    base, table = rows["read + decode (baseline)"], rows["compute_epoch"]
    print(f"compute_epoch / read + decode: time {table['seconds'] / base['seconds']:.2f}x, "
          f"added memory {added(table):.0f} MiB / {added(base):.0f} MiB; the table: "
          f"{table['accounts']} accounts, {table['uses']:,} counted uses, {table['bytes']:,} "
          f"bytes; {base['receipts']:,} receipts decoded")


def report_gas(attests: list, rows: list) -> None:
    def gas(value: int | None) -> str:
        return "-" if value is None else f"{value:,}"

    print("\ngas (execution: total - 21,000 - EIP-2028 calldata)")
    for what, execution, total in attests:
        print(f"  {what:<52} execution {gas(execution):>9}  total {total:>9,}")
    uniswap = {(size, kind, contract): (e, t) for size, kind, contract, _, e, t in rows
               if contract.startswith("Uniswap")}

    def ratio(size: int, kind: str, execution: int | None, total: int, token: str) -> str:
        base = uniswap.get((size, kind, f"Uniswap MerkleDistributor ({token})"))
        if not base or execution is None or base[0] is None:
            return ""
        return f"{execution / base[0]:.2f} ({total / base[1]:.2f})"

    print(f"\n{'accounts':>9} {'claim':<31} {'contract':<38} {'proof':>5} {'execution':>10} "
          f"{'total':>8} {'x Uni (GYM)':>12} {'x Uni (TestERC20)':>18}")
    for size, kind, contract, proof, execution, total in rows:
        mine = contract == "RewardDistributor"
        print(f"{size:>9,} {kind:<31} {contract:<38} {proof:>5} {gas(execution):>10} "
              f"{total:>8,} {ratio(size, kind, execution, total, 'GYM') if mine else '':>12} "
              f"{ratio(size, kind, execution, total, 'TestERC20') if mine else '':>18}")
    print("x Uni: execution (total) gas over Uniswap's MerkleDistributor's for the same kind of "
          "claim on a tree of as many accounts, paying GYM (the same token transfer) or its "
          "TestERC20")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--receipts", type=int, default=100_000,
                        help="receipts in the epoch, half per node")
    parser.add_argument("--checkpoints", type=int, default=4,
                        help="anchored checkpoints per node's receipt log")
    parser.add_argument("--verifiers", type=int, default=16,
                        help="registered verifiers (3 to 33); two thirds sign each root")
    parser.add_argument("--accounts", type=lambda s: tuple(int(x) for x in s.split(",")),
                        default=(1_000, 100_000), help="sizes of the claim tables, e.g. "
                        "1000,100000")
    parser.add_argument("--cli", action=argparse.BooleanOptionalAction, default=True,
                        help="also time `gym rewards compute` as a process")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each compute measurement (the fastest is reported)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2,000 receipts, 4 "
                        "verifiers, one table of 1,000 accounts, each compute run once")
    parser.add_argument("--measure", choices=("read", "compute"), help=argparse.SUPPRESS)
    parser.add_argument("--state", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        child_main(args.measure, args.state)
        return 0
    if args.quick:
        args.receipts, args.verifiers, args.accounts, args.repeat = 2_000, 4, (1_000,), 1
    if not 3 <= args.verifiers <= 33:
        parser.error("--verifiers: 3 to 33")
    if min(args.accounts) < 600:  # the Uniswap claims use bitmap bits 0, 1, 256 and 512
        parser.error("--accounts: at least 600 each")
    settings = Settings(args.receipts, args.checkpoints, args.verifiers, args.accounts, args.cli,
                        max(1, args.repeat))
    sys.stdout.reconfigure(line_buffering=True)  # progress as it happens, also into a file
    print(f"load average at the start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")

    from fresh_devnet import fresh_devnet

    start = time.perf_counter()
    with fresh_devnet("bench-rewards-") as (workdir, deployment):
        env = {k: v for k, v in os.environ.items() if not k.startswith("GYM_")}
        env.update(GYM_DATA_DIR=str(workdir / "data"), GYM_DEPLOYMENT_FILE=str(workdir / "d.json"))
        world = World(workdir, deployment)
        compute_rows, table_bytes = part_compute(world, settings, env)
        report_compute(compute_rows, settings.receipts, settings.repeat)
        attests, claims = part_gas(world, settings, table_bytes)
        report_gas(attests, claims)
        world.store.engine.dispose()
        print(f"\nwhole run {time.perf_counter() - start:.0f} s on {os.cpu_count()} CPUs; load "
              f"average at the end {os.getloadavg()[0]:.2f}; removing the devnet's files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
