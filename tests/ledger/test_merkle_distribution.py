"""Tests of ledger.merkle_distribution against @openzeppelin/merkle-tree itself and a reference.

The oracle is the npm package ``@openzeppelin/merkle-tree`` 1.0.8 (package.json), run by node
through ``merkle_oracle.mjs``: its root, every proof and its dump must equal ours for several
sizes, and each side's ``load`` must accept the other's dump. ``oz_reference`` below is the
npm package's ``StandardMerkleTree.of`` transcribed line by line with eth_abi and
eth_utils.keccak (no code shared with the module), for where node is missing and for
property-based tests. Hostile dumps are named mutations of a valid one.
"""

from __future__ import annotations

import copy
import doctest
import json
import random
import shutil
import subprocess
from pathlib import Path

import eth_abi
import pytest
from eth_utils import keccak, to_checksum_address
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import merkle_distribution
from ledger.errors import LedgerError
from ledger.merkle_distribution import (
    MAX_VALUES,
    MerkleDistributionError,
    RewardTree,
    leaf_hash,
    root_from_proof,
    verify_proof,
)

REPO = Path(__file__).resolve().parents[2]
ORACLE = Path(__file__).with_name("merkle_oracle.mjs")
OZ_PACKAGE = REPO / "node_modules" / "@openzeppelin" / "merkle-tree" / "package.json"
MAX_UINT256 = 2**256 - 1


def oz_reference(values: list[tuple[str, int]]) -> tuple[list[bytes], list[int]]:
    """The tree array and each value's treeIndex, as MerkleTreeImpl.prepare and makeMerkleTree
    compute them (dist/merkletree.js, dist/core.js, dist/hashes.js)."""
    hashed = [(keccak(keccak(eth_abi.encode(["address", "uint256"], [a, x]))), k)
              for k, (a, x) in enumerate(values)]
    hashed.sort(key=lambda item: item[0])  # stable, as Array.prototype.sort
    tree: list[bytes] = [b""] * (2 * len(hashed) - 1)
    for i, (h, _) in enumerate(hashed):
        tree[len(tree) - 1 - i] = h
    for i in range(len(tree) - 1 - len(hashed), -1, -1):
        tree[i] = keccak(b"".join(sorted([tree[2 * i + 1], tree[2 * i + 2]])))
    tree_index = {k: len(tree) - 1 - i for i, (_, k) in enumerate(hashed)}
    return tree, [tree_index[k] for k in range(len(values))]


def random_table(rng: random.Random, size: int) -> list[tuple[str, int]]:
    """``size`` lines of distinct random accounts, half EIP-55 and half lowercase, with
    amounts of every width, 0 and 2**256 - 1 among them."""
    accounts = {"0x" + rng.randbytes(20).hex() for _ in range(size)}
    while len(accounts) < size:
        accounts.add("0x" + rng.randbytes(20).hex())
    lines = []
    for k, account in enumerate(sorted(accounts, key=lambda _: rng.random())):
        amount = [0, MAX_UINT256, rng.getrandbits(rng.randint(1, 256))][k % 3 if k < 3 else 2]
        lines.append((to_checksum_address(account) if k % 2 else account, amount))
    return lines


def test_module_docstring_example_runs():
    result = doctest.testmod(merkle_distribution, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


# --- the oracle: @openzeppelin/merkle-tree 1.0.8 run by node ------------------------------------


def run_oracle(cases: list[dict]) -> list[dict]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the @openzeppelin/merkle-tree oracle runs on node")
    assert OZ_PACKAGE.exists(), "node_modules lacks @openzeppelin/merkle-tree: run `npm ci`"
    assert json.loads(OZ_PACKAGE.read_text())["version"] == "1.0.8"
    ran = subprocess.run([node, str(ORACLE)], input=json.dumps({"cases": cases}),
                         capture_output=True, text=True, timeout=300, cwd=REPO, check=False)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)["cases"]


def test_root_proofs_and_dump_equal_openzeppelin_merkle_tree():
    rng = random.Random(20260)
    tables = [random_table(rng, size) for size in (1, 2, 3, 7, 64, 1000)]
    tables[-1][-2:] = [("0x" + "00" * 20, 7), ("0x" + "ff" * 20, MAX_UINT256)]
    trees = [RewardTree.of(table) for table in tables]
    cases = [{"values": [value["value"] for value in tree.dump()["values"]],
              "respelt": [[account, str(amount)] for account, amount in table],
              "dump": tree.dump()}
             for table, tree in zip(tables, trees)]
    for table, tree, oz in zip(tables, trees, run_oracle(cases)):
        assert oz["root"] == tree.root_hex
        assert oz["proofs"] == [["0x" + h.hex() for h in tree.proof(account)]
                                for account, _ in table]
        assert oz["dump"] == json.dumps(tree.dump(), separators=(",", ":"))
        assert "load_error" not in oz and oz["loaded_root"] == tree.root_hex
        # The npm package keeps its input's spelling (EIP-55 here); the tree is the same and
        # our load takes its dump.
        assert oz["respelt_root"] == tree.root_hex
        assert RewardTree.load(oz["respelt_dump"]) == tree
        assert all(verify_proof(oz["root"], account, amount, proof)
                   for (account, amount), proof in zip(table, oz["proofs"]))


# --- the reference transcription, without node ----------------------------------------------------


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 7, 8, 9, 31, 64, 100])
def test_tree_and_tree_indices_equal_the_transcribed_reference(size):
    table = random_table(random.Random(size), size)
    tree = RewardTree.of(table)
    nodes, tree_index = oz_reference(table)
    dump = tree.dump()
    assert dump["tree"] == ["0x" + h.hex() for h in nodes]
    assert [v["treeIndex"] for v in dump["values"]] == tree_index
    assert tree.root == nodes[0]
    assert [v["value"] for v in dump["values"]] == [[a.lower(), str(x)] for a, x in table]
    assert tree.values == tuple((a.lower(), x) for a, x in table)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.binary(min_size=20, max_size=20),
                          st.integers(min_value=0, max_value=MAX_UINT256)),
                min_size=1, max_size=40, unique_by=lambda line: line[0]))
def test_any_table_builds_the_reference_tree_and_every_proof_verifies(lines):
    table = [("0x" + account.hex(), amount) for account, amount in lines]
    tree = RewardTree.of(table)
    nodes, _ = oz_reference(table)
    assert tree.root == nodes[0]
    assert RewardTree.load(tree.dump()) == tree
    for account, amount in table:
        proof = tree.proof(account)
        assert root_from_proof(leaf_hash(account, amount), proof) == tree.root
        assert verify_proof(tree.root, account, amount, proof)


def test_leaf_is_the_double_keccak_of_abi_encode_in_either_spelling():
    account, amount = "0x" + "ab" * 20, 10**18
    expected = keccak(keccak(eth_abi.encode(["address", "uint256"], [account, amount])))
    assert leaf_hash(account, amount) == expected
    assert leaf_hash(to_checksum_address(account), amount) == expected


def test_eip55_accounts_are_checked_as_eth_utils_spells_them():
    rng = random.Random(55)
    for _ in range(300):
        lower = "0x" + rng.randbytes(20).hex()
        checksummed = to_checksum_address(lower)
        assert leaf_hash(checksummed, 1) == leaf_hash(lower, 1)
        letters = [i for i, c in enumerate(checksummed) if c in "abcdefABCDEF"]
        if letters:
            i = rng.choice(letters)
            typo = checksummed[:i] + checksummed[i].swapcase() + checksummed[i + 1:]
            if typo != lower:
                with pytest.raises(MerkleDistributionError, match="EIP-55 checksum"):
                    leaf_hash(typo, 1)


def test_the_reused_state_keccak_is_keccak256():
    fast = merkle_distribution._keccak()
    assert fast is not merkle_distribution.keccak, "pycryptodome's C keccak was not found"
    rng = random.Random(7)
    for size in [0, 1, 31, 32, 64, 135, 136, 137, 272, 1000]:  # around the 136-byte rate
        data = rng.randbytes(size)
        assert fast(data) == keccak(data)


def test_trees_built_on_several_threads_at_once_are_right():
    """Each thread hashes on its own C state (the reused state is not thread-safe)."""
    from concurrent.futures import ThreadPoolExecutor

    tables = [random_table(random.Random(seed), 300) for seed in range(8)]
    with ThreadPoolExecutor(4) as pool:
        roots = list(pool.map(lambda table: RewardTree.of(table).root, tables))
    assert roots == [oz_reference(table)[0][0] for table in tables]


def test_single_value_tree_is_its_leaf_with_an_empty_proof():
    tree = RewardTree.of([("0x" + "11" * 20, 1)])
    assert tree.root == leaf_hash("0x" + "11" * 20, 1)
    assert tree.proof("0x" + "11" * 20) == []
    assert tree.dump()["tree"] == [tree.root_hex] and tree.dump()["values"][0]["treeIndex"] == 0


# --- building refuses bad tables --------------------------------------------------------------

ACCOUNT = "0x" + "5a" * 20
CHECKSUMMED = to_checksum_address("0x" + "5a" * 19 + "c3")


@pytest.mark.parametrize("table, message", [
    ([], "at least one value"),
    ([(ACCOUNT, 1), ("0x" + "6b" * 20, 2), (ACCOUNT, 3)],
     r"values\[2\]: account 0x5a.* is already values\[0\]: a distribution has one line per"),
    ([(CHECKSUMMED, 1), (CHECKSUMMED.lower(), 1)], "one line per account"),
    ([(ACCOUNT, -1)], r"values\[0\]: amount -1 is not a uint256"),
    ([(ACCOUNT, 2**256)], "not a uint256"),
    ([(ACCOUNT, 10**5000)], "amount an integer of 16610 bits is not a uint256"),
    ([(ACCOUNT, True)], "not a uint256"),
    ([(ACCOUNT, 1.0)], "not a uint256"),
    ([(ACCOUNT, "1")], "not a uint256"),
    ([(ACCOUNT[:-1], 1)], "not an address"),
    ([(ACCOUNT[2:] + "00", 1)], "not an address"),
    ([(ACCOUNT.encode(), 1)], "not an address"),
    ([(CHECKSUMMED.swapcase().replace("0X", "0x"), 1)], "fails its EIP-55 checksum"),
    ([(ACCOUNT, 1, 2)], "not an .account, amount. pair"),
    ([ACCOUNT], "not an .account, amount. pair"),
])
def test_of_refuses_a_bad_table_with_one_error(table, message):
    with pytest.raises(MerkleDistributionError, match=message) as raised:
        RewardTree.of(table)
    assert isinstance(raised.value, LedgerError)


def test_of_refuses_more_than_max_values(monkeypatch):
    monkeypatch.setattr(merkle_distribution, "MAX_VALUES", 3)
    RewardTree.of(random_table(random.Random(1), 3))
    with pytest.raises(MerkleDistributionError, match="more than 3 values"):
        RewardTree.of(random_table(random.Random(1), 4))


def test_proof_of_an_account_not_in_the_distribution_is_refused():
    tree = RewardTree.of([(ACCOUNT, 1), (CHECKSUMMED, 2)])
    assert tree.proof(CHECKSUMMED) == tree.proof(CHECKSUMMED.lower())
    with pytest.raises(MerkleDistributionError, match="not in the distribution"):
        tree.proof("0x" + "00" * 20)


# --- hostile dumps ------------------------------------------------------------------------------


def valid_dump() -> dict:
    return RewardTree.of(random_table(random.Random(5), 6)).dump()


def swap_tree_indices(dump):
    a, b = dump["values"][0], dump["values"][1]
    a["treeIndex"], b["treeIndex"] = b["treeIndex"], a["treeIndex"]


def flip(hex_node: str) -> str:
    return hex_node[:-1] + ("0" if hex_node[-1] != "0" else "1")


def index_of(dump):
    return dump["values"][0]["treeIndex"]


def drop_a_line(dump):
    """The tree of seven lines published with six: the root commits to a hidden line (the npm
    package's load accepts this)."""
    seven = RewardTree.of(random_table(random.Random(5), 7)).dump()
    dump["tree"], dump["values"] = seven["tree"], seven["values"][:-1]


MUTATIONS = {
    "not-an-object": (lambda d: [d], "a JSON object, not list"),
    "format-wrong": (lambda d: d.update(format="standard-v2"), "format 'standard-v2' is not"),
    "format-missing": (lambda d: d.pop("format"), "has no 'format'"),
    "member-unknown": (lambda d: d.update(root=d["tree"][0]), "has no member 'root'"),
    "leafEncoding-wrong": (lambda d: d.update(leafEncoding=["address", "uint"]), "leafEncoding"),
    "leafEncoding-string": (lambda d: d.update(leafEncoding="address,uint256"), "leafEncoding"),
    "root-changed": (lambda d: d["tree"].__setitem__(0, flip(d["tree"][0])),
                     r"tree\[0\] is 0x.*, the values build 0x.* \(the root\)"),
    "node-changed": (lambda d: d["tree"].__setitem__(4, flip(d["tree"][4])),
                     r"tree\[4\] is 0x"),
    "node-uppercase-hex": (lambda d: d["tree"].__setitem__(1, "0x" + d["tree"][1][2:].upper()),
                           r"tree\[1\]: .* is not 0x \+ 64 lowercase hex"),
    "node-non-hex": (lambda d: d["tree"].__setitem__(2, "0x" + "zz" * 32), "not 0x \\+ 64"),
    "node-unprefixed": (lambda d: d["tree"].__setitem__(2, d["tree"][2][2:] + "00"),
                        "not 0x \\+ 64"),
    "node-not-a-string": (lambda d: d["tree"].__setitem__(2, 5), r"tree\[2\]: 5 is not"),
    "tree-one-short": (lambda d: d["tree"].pop(), "6 values has 11 nodes, not 10"),
    "tree-not-a-list": (lambda d: d.update(tree="0x00"), "tree and values are lists"),
    "line-dropped": (drop_a_line, "6 values has 11 nodes, not 13"),
    "treeIndex-swapped": (swap_tree_indices, r"values\[0\]\.treeIndex is \d+, its leaf is"),
    "treeIndex-string": (lambda d: d["values"][0].update(treeIndex=str(index_of(d))),
                         r"values\[0\]\.treeIndex is '\d+'"),
    "treeIndex-float": (lambda d: d["values"][0].update(treeIndex=float(index_of(d))),
                        r"values\[0\]\.treeIndex is \d+\.0"),
    "treeIndex-missing": (lambda d: d["values"][0].pop("treeIndex"), r"values\[0\]: a dict is not"),
    "amount-changed": (lambda d: d["values"][3]["value"].__setitem__(
        1, str(int(d["values"][3]["value"][1]) + 1)), r"tree\[\d+\] is 0x"),
    "amount-number": (lambda d: d["values"][0]["value"].__setitem__(1, 0), "not a decimal string"),
    "amount-hex": (lambda d: d["values"][0]["value"].__setitem__(1, "0x10"), "not a decimal"),
    "amount-negative": (lambda d: d["values"][0]["value"].__setitem__(1, "-1"), "not a decimal"),
    "amount-spaced": (lambda d: d["values"][0]["value"].__setitem__(1, " 1"), "not a decimal"),
    "amount-underscored": (lambda d: d["values"][0]["value"].__setitem__(1, "1_0"), "decimal"),
    "amount-arabic-digits": (lambda d: d["values"][0]["value"].__setitem__(1, "١٢"), "decimal"),
    "amount-2**256": (lambda d: d["values"][0]["value"].__setitem__(1, str(2**256)),
                      "not a uint256"),
    "amount-79-digits": (lambda d: d["values"][0]["value"].__setitem__(1, "1" * 79), "decimal"),
    "account-bad-checksum": (lambda d: d["values"][1]["value"].__setitem__(
        0, "0x" + d["values"][1]["value"][0][2:].upper()), "EIP-55 checksum"),
    "account-short": (lambda d: d["values"][1]["value"].__setitem__(0, "0x1234"),
                      r"values\[1\]: '0x1234' is not an address"),
    "account-duplicate": (lambda d: d["values"][1]["value"].__setitem__(
        0, d["values"][0]["value"][0]), "one line per account"),
    "value-not-a-pair": (lambda d: d["values"][0]["value"].pop(), r"values\[0\]: a dict is not"),
    "value-extra-member": (lambda d: d["values"][0].update(proof=[]), r"values\[0\]: a dict"),
    "values-empty": (lambda d: d.update(values=[], tree=[]), "at least one value"),
    "values-huge": (lambda d: d.update(values=d["values"][:1] * (MAX_VALUES + 1)),
                    f"{MAX_VALUES + 1} values: a distribution has at most {MAX_VALUES}"),
    "tree-huge": (lambda d: d.update(tree=d["tree"][:1] * (1 << 22)),
                  "has 11 nodes, not 4194304"),
}


@pytest.mark.parametrize("name", MUTATIONS)
def test_load_refuses_a_hostile_dump_with_one_error(name):
    mutate, message = MUTATIONS[name]
    dump = valid_dump()
    RewardTree.load(copy.deepcopy(dump))  # the dump before the mutation loads
    replaced = mutate(dump)
    with pytest.raises(MerkleDistributionError, match=message) as raised:
        RewardTree.load(replaced if isinstance(replaced, list) else dump)
    assert isinstance(raised.value, LedgerError) and isinstance(raised.value, ValueError)


def test_a_tree_mismatch_carries_both_values():
    dump = valid_dump()
    root = dump["tree"][0]
    dump["tree"][0] = flip(root)
    with pytest.raises(MerkleDistributionError) as raised:
        RewardTree.load(dump)
    assert (raised.value.expected, raised.value.computed) == (root, flip(root))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**260)
    | st.text(max_size=70) | st.sampled_from(["0x" + "00" * 32, "0x" + "ab" * 20, "1", "0"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                 max_size=3),
    max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_replaced_part_of_a_dump_is_refused_with_the_one_error_or_harmless(data):
    dump = valid_dump()
    original = RewardTree.load(copy.deepcopy(dump))
    parent, key = dump, None
    while True:  # walk down to a random part, then replace it
        keys = list(parent) if isinstance(parent, dict) else list(range(len(parent)))
        key = data.draw(st.sampled_from(keys))
        child = parent[key]
        if not isinstance(child, (dict, list)) or data.draw(st.booleans()):
            break
        parent = child
    parent[key] = data.draw(JSON_VALUES)
    try:
        loaded = RewardTree.load(dump)
    except MerkleDistributionError:
        return
    assert loaded == original


def test_load_json_parses_with_limits():
    tree = RewardTree.of(random_table(random.Random(3), 5))
    text = json.dumps(tree.dump(), indent=2)
    assert RewardTree.load_json(text) == tree
    assert RewardTree.load_json(text.encode()) == tree
    with pytest.raises(MerkleDistributionError, match="is 1.* bytes, the limit is 1000"):
        RewardTree.load_json(text, max_bytes=1000)
    with pytest.raises(MerkleDistributionError, match="deeper than 4"):
        RewardTree.load_json('{"values": [[[[[]]]]]}')
    with pytest.raises(MerkleDistributionError, match="not JSON"):
        RewardTree.load_json("{'format': 'standard-v1'}")
    with pytest.raises(MerkleDistributionError, match="appears twice"):
        RewardTree.load_json(text.replace('"format": "standard-v1"',
                                          '"format": "standard-v1", "format": "standard-v1"'))


def test_compact_and_indented_dumps_of_max_values_fit_the_byte_limit():
    widest = {"value": ["0x" + "ab" * 20, str(MAX_UINT256)], "treeIndex": 2 * MAX_VALUES - 2}
    per_value = (len(json.dumps(widest, indent=2)) + 4 * 3  # nested two more levels
                 + 2 * len(json.dumps("0x" + "00" * 32)) + 2 * (4 + 2))
    assert per_value * MAX_VALUES < merkle_distribution.MAX_DUMP_BYTES


# --- verify_proof -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def claim():
    table = random_table(random.Random(11), 9)
    tree = RewardTree.of(table)
    account, amount = table[4]
    return tree, account, amount, tree.proof(account), table


def test_a_valid_claim_verifies_with_bytes_or_hex(claim):
    tree, account, amount, proof, _ = claim
    assert verify_proof(tree.root, account, amount, proof)
    assert verify_proof(tree.root_hex, account.lower(), amount, ["0x" + h.hex() for h in proof])
    assert verify_proof(tree.root_hex.upper().replace("0X", "0x"), account, amount,
                        tuple("0x" + h.hex().upper() for h in proof))


def test_verify_proof_is_false_on_a_changed_claim(claim):
    tree, account, amount, proof, table = claim
    other_account, other_amount = table[5]
    assert not verify_proof(tree.root, account, amount + 1, proof)
    assert not verify_proof(tree.root, account, 0, proof)
    assert not verify_proof(tree.root, other_account, amount, proof)
    assert not verify_proof(tree.root, other_account, other_amount, proof)  # someone else's line
    assert not verify_proof(tree.root, account, amount, proof[:-1])
    assert not verify_proof(tree.root, account, amount, [])
    assert not verify_proof(tree.root, account, amount, proof + [proof[0]])
    assert not verify_proof(tree.root, account, amount, proof[::-1])
    assert not verify_proof(leaf_hash(account, amount), account, amount, proof)


@pytest.mark.parametrize("bad", [
    "proof-None", "proof-string", "proof-dict", "element-None", "element-int", "element-short",
    "element-long", "element-non-hex", "element-spaced", "element-unprefixed", "element-list",
    "proof-too-long",
    "root-None", "root-short", "root-non-hex", "account-bad", "account-None",
    "amount-negative", "amount-bool", "amount-too-big", "amount-string",
])
def test_verify_proof_is_false_and_never_raises_on_malformed_input(claim, bad):
    tree, account, amount, proof, _ = claim
    args = {"root": tree.root, "account": account, "amount": amount, "proof": list(proof)}
    what, _, how = bad.partition("-")
    replacement = {
        "proof-None": None, "proof-string": "0x" + proof[0].hex(), "proof-dict": {0: proof[0]},
        "proof-too-long": proof * 30, "root-None": None, "root-short": tree.root[:31],
        "root-non-hex": "0x" + "gg" * 32, "account-bad": account[:-2],
        "account-None": None, "amount-negative": -1, "amount-bool": True,
        "amount-too-big": 2**256 + amount, "amount-string": str(amount),
    }
    elements = {"None": None, "int": 7, "short": proof[0][:31], "long": proof[0] + b"\x00",
                "non-hex": "0x" + "zz" * 32, "spaced": "0x" + proof[0][:31].hex() + "  ",
                "unprefixed": proof[0].hex() + "00",
                "list": list(proof[0])}
    if what == "element":
        args["proof"][1] = elements[how]
    else:
        args[what] = replacement[bad]
    assert verify_proof(**args) is False
