"""Reward distribution trees: OpenZeppelin's ``StandardMerkleTree`` over ``(address, uint256)``.

The tree, its proofs and its JSON dump are those of the npm package ``@openzeppelin/merkle-tree``
1.0.8 (``StandardMerkleTree.of(values, ["address", "uint256"])`` with its default
``sortLeaves: true``), bit for bit, so a claim checks on chain with OpenZeppelin's
``MerkleProof.verify`` and anyone can recompute the root from the published table alone
(docs/design.md §3.14):

- leaf: ``keccak256(keccak256(abi.encode(account, amount)))`` (``bytes.concat`` of one hash:
  the double hash keeps a 64-byte leaf from passing for an inner node);
- inner node: ``keccak256`` of its two children, the smaller first (sorted pairs, so a proof
  carries no left/right flags);
- layout: one array of ``2n - 1`` nodes, root at 0, node ``i``'s children at ``2i + 1`` and
  ``2i + 2``; the leaves, sorted by hash ascending, fill the end of the array from its last
  slot backwards (the smallest hash is ``tree[2n - 2]``);
- a proof is the siblings from the leaf up, root excluded;
- the dump is ``{"format": "standard-v1", "leafEncoding": ["address", "uint256"],
  "tree": [hex, ...], "values": [{"value": [account, amount], "treeIndex": i}, ...]}``, values
  in input order, amounts as decimal strings.

Where this module is stricter than the npm package: a distribution has one line per account
(a second line for an account is refused, not summed), the table is not empty, at most
``MAX_VALUES`` lines; accounts are spelt ``0x`` + 40 lowercase hex in ``values`` and the dump
(the ledger's spelling, docs/design.md §3; EIP-55 input is accepted and its checksum checked);
and ``load`` accepts a dump only when its tree is exactly the one its values build, so the
root commits to the published table and nothing else (the npm ``load`` also accepts trees
with leaves no value names, or built with ``sortLeaves: false``).

>>> tree = RewardTree.of([("0x" + "11" * 20, 5 * 10**18), ("0x" + "22" * 20, 2500)])
>>> proof = tree.proof("0x" + "22" * 20)
>>> verify_proof(tree.root, "0x" + "22" * 20, 2500, proof)
True
>>> verify_proof(tree.root, "0x" + "22" * 20, 2501, proof)
False
>>> RewardTree.load(tree.dump()) == tree
True
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eth_hash.auto import keccak  # what eth_utils.keccak calls, without its type dispatch

from ledger.errors import VerificationError
from ledger.json_input import JSONInputError, parse_json

FORMAT = "standard-v1"
LEAF_ENCODING = ("address", "uint256")
MAX_VALUES = 1 << 20
# A compact dump takes under 300 bytes a value (its entry and two tree nodes); 512 a value
# leaves room for JSON.stringify(dump, null, 2).
MAX_DUMP_BYTES = 512 * MAX_VALUES
MAX_PROOF_LENGTH = 64  # deeper than a tree of MAX_VALUES leaves; bounds verify_proof's work
MAX_AMOUNT = (1 << 256) - 1

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")
_DECIMAL = re.compile(r"[0-9]{1,78}")
_NODE_HEX = re.compile(r"0x[0-9a-f]{64}")  # as the npm package writes a node
_ANY_CASE_NODE_HEX = re.compile(r"0x[0-9a-fA-F]{64}")  # as it reads one
_BIT_IF_HIGH_NIBBLE = bytes(0x20 if chr(b) in "89abcdef" else 0 for b in range(256))
_BIT_IF_LETTER = bytes(0x20 if chr(b) in "abcdef" else 0 for b in range(256))
_DUMP_MEMBERS = ("format", "leafEncoding", "tree", "values")
_ADDRESS_PAD = bytes(12)  # abi.encode left-pads an address to 32 bytes
_EMPTY_KECCAK = bytes.fromhex("c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470")


def _reused_state_keccak() -> Callable[[bytes], bytes]:
    """keccak256 on one reused C state of pycryptodome (eth_hash's backend), else eth_hash's.

    Why: eth_hash builds a pycryptodome hash object per call, about 8 µs of which the
    permutation is well under one; a tree of n values takes 3n hashes, so this is what makes
    100,000 values build in under a second of CPU instead of two. The state is not safe to share
    between threads (``_keccak`` keeps one a thread). The functions are pycryptodome's own
    C interface (``keccak_init``/``reset``/``absorb``/``digest``, unchanged since 3.4); if
    they are missing, or answer wrongly for the empty string, eth_hash's keccak is used.
    """
    try:
        from Crypto.Hash.keccak import _raw_keccak_lib as lib
        from Crypto.Util._raw_api import SmartPointer, VoidPointer, backend, ffi
    except ImportError:
        return keccak
    if backend != "cffi":
        return keccak
    pointer = VoidPointer()
    if lib.keccak_init(pointer.address_of(), 64, 24):  # capacity 64 bytes: keccak256
        return keccak
    owner = SmartPointer(pointer.get(), lib.keccak_destroy)  # frees the state with the closure
    state, out = owner.get(), ffi.new("uint8_t[]", 32)
    digest = ffi.buffer(out)
    reset, absorb, squeeze = lib.keccak_reset, lib.keccak_absorb, lib.keccak_digest

    def keccak256(data: bytes) -> bytes:
        reset(state)
        absorb(state, data, len(data))
        squeeze(state, out, 32, 0x01)  # 0x01: Keccak's padding, not SHA-3's 0x06
        return digest[:]

    keccak256.owner = owner  # type: ignore[attr-defined]
    return keccak256 if keccak256(b"") == _EMPTY_KECCAK else keccak


_thread = threading.local()


def _keccak() -> Callable[[bytes], bytes]:
    """This thread's fast keccak256 (``_reused_state_keccak``)."""
    try:
        return _thread.keccak
    except AttributeError:
        _thread.keccak = _reused_state_keccak()
        return _thread.keccak


class MerkleDistributionError(VerificationError):
    """A reward table, tree dump or proof is malformed, or a dump's tree is not its values'.

    ``expected`` and ``computed`` hold the two values that disagree when there are two."""


def _show(value: object) -> str:
    """A short rendering of a hostile value for a message (never the repr of a huge list)."""
    if isinstance(value, str):
        return repr(value[:70]) + ("..." if len(value) > 70 else "")
    if isinstance(value, int) and value.bit_length() > 300:  # repr refuses past 4300 digits
        return f"an integer of {value.bit_length()} bits"
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)[:90]
    return f"a {type(value).__name__}"


def _account(account: object, where: str) -> str:
    """``account`` spelt ``0x`` + 40 lowercase hex; mixed case must be its EIP-55 checksum."""
    if not isinstance(account, str) or not _ADDRESS.fullmatch(account):
        raise MerkleDistributionError(f"{where}: {_show(account)} is not an address (0x + 40 hex)")
    lower = "0x" + account[2:].lower()
    if account != lower and account != _checksummed(lower):
        raise MerkleDistributionError(f"{where}: {account} fails its EIP-55 checksum")
    return lower


def _checksummed(lower: str) -> str:
    """EIP-55: a letter is upper-cased where the keccak of the lowercase hex has a nibble >= 8.

    Done on all 40 characters at once as one integer: upper-casing an ASCII letter clears its
    0x20 bit, so the spelling is the lowercase bytes XOR (0x20 where a letter meets a high
    nibble); twice as fast as a per-character join, which a 100,000-line EIP-55 table feels."""
    text = lower[2:].encode("ascii")
    high = _keccak()(text).hex()[:40].encode("ascii").translate(_BIT_IF_HIGH_NIBBLE)
    flip = int.from_bytes(high, "big") & int.from_bytes(text.translate(_BIT_IF_LETTER), "big")
    return "0x" + (int.from_bytes(text, "big") ^ flip).to_bytes(40, "big").decode("ascii")


def _amount(amount: object, where: str) -> int:
    if type(amount) is not int or not 0 <= amount <= MAX_AMOUNT:
        raise MerkleDistributionError(f"{where}: amount {_show(amount)} is not a uint256")
    return amount


def _leaf(lower_account: str, amount: int, keccak: Callable[[bytes], bytes]) -> bytes:
    return keccak(keccak(_ADDRESS_PAD + bytes.fromhex(lower_account[2:])
                         + amount.to_bytes(32, "big")))


def leaf_hash(account: str, amount: int) -> bytes:
    """The leaf of ``(account, amount)``: keccak256(keccak256(abi.encode(account, amount))).

    ``account`` is ``0x`` + 40 hex, lowercase or EIP-55; ``0 <= amount < 2**256``. Raises
    ``MerkleDistributionError`` otherwise."""
    return _leaf(_account(account, "account"), _amount(amount, "amount"), _keccak())


def _node(value: object) -> bytes:
    """A 32-byte node given as bytes or as ``0x`` + 64 hex (either case, as the npm package)."""
    if isinstance(value, (bytes, bytearray)) and len(value) == 32:
        return bytes(value)
    if isinstance(value, str) and _ANY_CASE_NODE_HEX.fullmatch(value):
        return bytes.fromhex(value[2:])
    raise MerkleDistributionError(f"{_show(value)} is not a 32-byte hash")


def root_from_proof(leaf: bytes, proof: Sequence[bytes | str]) -> bytes:
    """The root ``proof`` leads to from ``leaf`` (the npm package's ``processProof``): each
    element is hashed with the running node, the smaller of the two first.

    Raises ``MerkleDistributionError`` on a leaf or element that is not 32 bytes (or its hex)
    and on a proof longer than ``MAX_PROOF_LENGTH``."""
    if not isinstance(proof, (list, tuple)):
        raise MerkleDistributionError(f"a proof is a list of hashes, not {type(proof).__name__}")
    if len(proof) > MAX_PROOF_LENGTH:
        raise MerkleDistributionError(
            f"a proof of {len(proof)} hashes is longer than {MAX_PROOF_LENGTH}")
    node, keccak = _node(leaf), _keccak()
    for element in proof:
        sibling = _node(element)
        node = keccak(node + sibling if node < sibling else sibling + node)
    return node


def verify_proof(root: bytes | str, account: str, amount: int,
                 proof: Sequence[bytes | str]) -> bool:
    """Whether ``proof`` shows ``(account, amount)`` under ``root`` (OpenZeppelin's
    ``MerkleProof.verify`` of the standard leaf). Never raises: a malformed root, account,
    amount or proof element is ``False``."""
    try:
        return root_from_proof(leaf_hash(account, amount), proof) == _node(root)
    except MerkleDistributionError:
        return False


def _build(accounts: list[str], amounts: list[int]) -> tuple[bytes, dict[str, int]]:
    """The tree array (32 bytes a node, concatenated) and each account's index in it."""
    n, keccak = len(accounts), _keccak()
    leaves = [_leaf(a, x, keccak) for a, x in zip(accounts, amounts)]
    # Python's sort is stable like JavaScript's; no two leaves are equal (one line an account).
    order = sorted(range(n), key=leaves.__getitem__)
    last = 2 * n - 2
    tree_index = {accounts[k]: last - j for j, k in enumerate(order)}
    if len(tree_index) < n:
        first = {}
        for k, a in enumerate(accounts):
            if a in first:
                raise MerkleDistributionError(
                    f"values[{k}]: account {a} is already values[{first[a]}]: "
                    "a distribution has one line per account")
            first[a] = k
    tree: list[bytes] = [b""] * (n - 1) + [leaves[k] for k in reversed(order)]
    for i in range(n - 2, -1, -1):
        left, right = tree[2 * i + 1], tree[2 * i + 2]
        tree[i] = keccak(left + right if left < right else right + left)
    return b"".join(tree), tree_index


def _check_size(n: int) -> None:
    if n == 0:
        raise MerkleDistributionError("a distribution has at least one value")
    if n > MAX_VALUES:
        raise MerkleDistributionError(f"{n} values: a distribution has at most {MAX_VALUES}")


@dataclass(frozen=True, repr=False)
class RewardTree:
    """A reward distribution's tree. Build it with ``of`` (a table) or ``load`` (a dump).

    ``values`` are the table's ``(account, amount)`` lines in input order, accounts in
    lowercase hex."""

    values: tuple[tuple[str, int], ...]
    _nodes: bytes  # the npm package's tree array, 32 bytes a node
    _tree_index: dict[str, int] = field(compare=False)  # account -> its leaf's index

    @classmethod
    def of(cls, values: Iterable[tuple[str, int]]) -> RewardTree:
        """The tree of ``values``, ``(account, amount)`` lines: accounts ``0x`` + 40 hex
        (lowercase or EIP-55), each once; ``0 <= amount < 2**256``; 1 to ``MAX_VALUES`` lines.
        Raises ``MerkleDistributionError`` naming the first line that breaks a rule."""
        accounts: list[str] = []
        amounts: list[int] = []
        for k, line in enumerate(values):
            if k == MAX_VALUES:
                raise MerkleDistributionError(
                    f"more than {MAX_VALUES} values: a distribution has at most {MAX_VALUES}")
            if not isinstance(line, (tuple, list)) or len(line) != 2:
                raise MerkleDistributionError(
                    f"values[{k}]: {_show(line)} is not an (account, amount) pair")
            accounts.append(_account(line[0], f"values[{k}]"))
            amounts.append(_amount(line[1], f"values[{k}]"))
        _check_size(len(accounts))
        nodes, tree_index = _build(accounts, amounts)
        return cls(tuple(zip(accounts, amounts)), nodes, tree_index)

    @property
    def root(self) -> bytes:
        """The 32-byte root (``tree[0]``)."""
        return self._nodes[:32]

    @property
    def root_hex(self) -> str:
        """The root as ``0x`` + 64 lowercase hex, as the npm package's ``root``."""
        return "0x" + self._nodes[:32].hex()

    def proof(self, account: str) -> list[bytes]:
        """The proof of ``account``'s line: sibling hashes from its leaf up, root excluded
        (the npm package's ``getProof``). Raises ``MerkleDistributionError`` for an account
        the distribution does not hold."""
        lower = _account(account, "account")
        index = self._tree_index.get(lower)
        if index is None:
            raise MerkleDistributionError(f"account {lower} is not in the distribution")
        nodes, proof = self._nodes, []
        while index > 0:
            sibling = index + 1 if index % 2 else index - 1
            proof.append(nodes[32 * sibling:32 * sibling + 32])
            index = (index - 1) // 2
        return proof

    def dump(self) -> dict[str, Any]:
        """The npm package's ``StandardMerkleTree.dump()`` (``standard-v1``), keys in its order,
        so ``json.dumps(tree.dump(), separators=(",", ":"))`` is its ``JSON.stringify``."""
        hexed = self._nodes.hex()
        tree_index = self._tree_index
        return {
            "format": FORMAT,
            "leafEncoding": list(LEAF_ENCODING),
            "tree": ["0x" + hexed[i:i + 64] for i in range(0, len(hexed), 64)],
            "values": [{"value": [account, str(amount)], "treeIndex": tree_index[account]}
                       for account, amount in self.values],
        }

    @classmethod
    def load(cls, data: Mapping[str, Any]) -> RewardTree:
        """The tree a ``standard-v1`` dump holds, from anyone: refused with one
        ``MerkleDistributionError`` unless it has exactly the dump's four members, the
        ``["address", "uint256"]`` encoding, 1 to ``MAX_VALUES`` values (account, decimal
        amount string) and ``2n - 1`` lowercase hex nodes, and its tree and every
        ``treeIndex`` are the ones its values build. Sizes are checked before any hashing."""
        if not isinstance(data, Mapping):
            raise MerkleDistributionError(
                f"a tree dump is a JSON object, not {type(data).__name__}")
        if missing := [m for m in _DUMP_MEMBERS if m not in data]:
            raise MerkleDistributionError(f"a tree dump has no {missing[0]!r}")
        if len(data) != len(_DUMP_MEMBERS):
            unknown = next(m for m in data if m not in _DUMP_MEMBERS)
            raise MerkleDistributionError(f"a tree dump has no member {_show(unknown)}")
        if data["format"] != FORMAT:
            raise MerkleDistributionError(f"format {_show(data['format'])} is not {FORMAT!r}")
        if data["leafEncoding"] != list(LEAF_ENCODING):
            raise MerkleDistributionError(
                f"leafEncoding {_show(data['leafEncoding'])} is not {list(LEAF_ENCODING)}")
        values, tree = data["values"], data["tree"]
        if not isinstance(values, list) or not isinstance(tree, list):
            raise MerkleDistributionError("a tree dump's tree and values are lists")
        _check_size(len(values))
        if len(tree) != 2 * len(values) - 1:
            raise MerkleDistributionError(
                f"a tree of {len(values)} values has {2 * len(values) - 1} nodes, not {len(tree)}")
        for i, node in enumerate(tree):
            if not isinstance(node, str) or not _NODE_HEX.fullmatch(node):
                raise MerkleDistributionError(
                    f"tree[{i}]: {_show(node)} is not 0x + 64 lowercase hex")
        accounts: list[str] = []
        amounts: list[int] = []
        claimed: list[object] = []
        for k, entry in enumerate(values):
            if (not isinstance(entry, dict) or set(entry) != {"value", "treeIndex"}
                    or not isinstance(entry["value"], list) or len(entry["value"]) != 2):
                raise MerkleDistributionError(
                    f"values[{k}]: {_show(entry)} is not {{value: [account, amount], treeIndex}}")
            account, amount = entry["value"]
            accounts.append(_account(account, f"values[{k}]"))
            if not isinstance(amount, str) or not _DECIMAL.fullmatch(amount):
                raise MerkleDistributionError(
                    f"values[{k}]: amount {_show(amount)} is not a decimal string")
            amounts.append(_amount(int(amount), f"values[{k}]"))
            claimed.append(entry["treeIndex"])
        nodes, tree_index = _build(accounts, amounts)
        hexed = nodes.hex()
        for i, node in enumerate(tree):
            if node[2:] != hexed[64 * i:64 * i + 64]:
                computed = "0x" + hexed[64 * i:64 * i + 64]
                raise MerkleDistributionError(
                    f"tree[{i}] is {node}, the values build {computed}"
                    + (" (the root)" if i == 0 else ""), expected=computed, computed=node)
        for k, account in enumerate(accounts):
            index = claimed[k]
            if type(index) is not int or index != tree_index[account]:
                raise MerkleDistributionError(
                    f"values[{k}].treeIndex is {_show(index)}, "
                    f"its leaf is tree[{tree_index[account]}]",
                    expected=tree_index[account], computed=index)
        return cls(tuple(zip(accounts, amounts)), nodes, tree_index)

    @classmethod
    def load_json(cls, data: bytes | str, *, max_bytes: int = MAX_DUMP_BYTES) -> RewardTree:
        """``load`` of a dump's JSON text, parsed with ``parse_json``'s limits (``max_bytes``,
        depth 4); a refusal of the JSON is a ``MerkleDistributionError`` too."""
        try:
            parsed = parse_json(data, max_bytes=max_bytes, max_depth=4, what="tree dump")
        except JSONInputError as exc:
            raise MerkleDistributionError(str(exc)) from exc
        return cls.load(parsed)

    def __repr__(self) -> str:
        return f"RewardTree(root={self.root_hex}, values={len(self.values)})"
