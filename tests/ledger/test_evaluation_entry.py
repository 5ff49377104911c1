"""`evaluation` entries: format rules, canonical bytes, the figures' definitions, generation
positions and the receipt table (ledger/entries.py, ledger/evaluations.py)."""

from __future__ import annotations

import doctest
import itertools
import re

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import entries, evaluations
from ledger.entries import (
    MAX_ENTRY_BYTES,
    MAX_EVALUATION_ARMS,
    MAX_EVALUATION_EXPERIENCES,
    MAX_EVALUATION_SEEDS,
    EvaluationEntry,
    decode_entry,
    encode_entry,
    entry_cid,
)
from ledger.errors import EntryError, VerificationError
from ledger.evaluations import (
    ReceiptTable,
    ReceiptTableError,
    ReceiptTableMismatchError,
    check_receipt_table,
    decode_receipt_table,
    encode_receipt_table,
    generation_index,
    generations_per_arm,
    seed_figures,
)
from trainer import evaluate as trainer_evaluate

CID = [entry_cid(b"%d" % i) for i in range(8)]
DAG_PB_CID = "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi"
DIGEST = "sha256:" + "ab" * 32
NODE = "0x" + "12" * 20


def per_seed(*figures: tuple[float, float], seeds=(0, 1)) -> dict:
    return {"per_seed": [{"seed": s, "mean_at_k": m, "pass_at_k": p}
                         for s, (m, p) in zip(seeds, figures, strict=True)]}


def evaluation(**changes) -> dict:
    doc = {
        "type": "evaluation",
        "v": 1,
        "subject": {"kind": "library", "log_id": 3, "size": 17, "root": "0x" + "cd" * 32,
                    "entries": CID[:2]},
        "baseline": "baseline",
        "task": {"dataset": CID[2], "problems": 3, "verifier": "math", "prompt_digest": DIGEST},
        "model_digest": DIGEST,
        "sampling": {"k": 2, "seeds": [0, 1], "temperature": 0.7, "top_p": 0.95,
                     "max_tokens": 256},
        "arms": {"baseline": per_seed((0.5, 2 / 3), (0.25, 1.0)),
                 "library": per_seed((0.75, 1.0), (1.0, 1.0))},
        "receipts": "none",
    }
    return {**doc, **changes}


def verified(**changes) -> dict:
    return evaluation(**{"subject": {"kind": "adapter", "entry": CID[3]},
                         "receipts": {"node": NODE, "table": DAG_PB_CID}, **changes})


def changed(path: str, value, doc: dict | None = None) -> dict:
    """``doc`` (default ``evaluation()``) with the field at dotted ``path`` set to ``value``."""
    doc = evaluation() if doc is None else doc
    out = dict(doc)
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node[key] = dict(node[key])
        node = node[key]
    node[last] = value
    return out


# --- canonical bytes --------------------------------------------------------------------------


@pytest.mark.parametrize("doc", [evaluation(), verified()], ids=["local-library", "adapter"])
def test_round_trip_is_byte_exact_and_takes_the_fast_path(doc):
    entry = EvaluationEntry(**doc)
    data = encode_entry(entry)
    assert data == rfc8785.dumps(doc)
    assert entries._decode_canonical(data) == entry == decode_entry(data)
    assert type(decode_entry(data)) is EvaluationEntry


def test_a_local_run_says_it_has_no_receipts():
    entry = decode_entry(rfc8785.dumps(evaluation()))
    assert entry.receipts == "none"
    assert b'"receipts":"none"' in encode_entry(entry)
    assert decode_entry(rfc8785.dumps(verified())).receipts.node == NODE


def test_non_canonical_bytes_are_refused():
    data = rfc8785.dumps(evaluation())
    for other in (data.replace(b'"pass_at_k":1,', b'"pass_at_k":1.0,'),
                  data.replace(b'"k":2', b'"k":2,"k":2')):
        with pytest.raises(EntryError):
            decode_entry(other)


def test_the_largest_entry_fits_in_one_block():
    seeds = list(range(MAX_EVALUATION_SEEDS))
    arms = {f"arm-{i}-" + "x" * 24: per_seed(*[(1 / 3, 2 / 3)] * len(seeds), seeds=seeds)
            for i in range(MAX_EVALUATION_ARMS)}
    doc = evaluation(
        subject={"kind": "library", "log_id": 2**53 - 1, "size": 2**53 - 1, "root": "0x" + "cd" * 32,
                 "entries": [entry_cid(b"%d" % i) for i in range(MAX_EVALUATION_EXPERIENCES)]},
        baseline=next(iter(arms)), arms=arms,
        task={"dataset": DAG_PB_CID, "problems": 1, "verifier": "v" * 64, "prompt_digest": DIGEST},
        sampling={"k": 1, "seeds": seeds, "temperature": 1 / 3, "top_p": 1 / 3, "max_tokens": 2**53 - 1},
        receipts={"node": NODE, "table": DAG_PB_CID})
    assert len(encode_entry(EvaluationEntry(**doc))) < MAX_ENTRY_BYTES // 2


# --- field rules ------------------------------------------------------------------------------

TOO_MANY_SEEDS = list(range(MAX_EVALUATION_SEEDS + 1))
NINE_ARMS = {f"a{i}": per_seed((0.5, 0.5), (0.5, 0.5)) for i in range(MAX_EVALUATION_ARMS + 1)}


@pytest.mark.parametrize(
    ("doc", "field", "message"),
    [
        (changed("subject.kind", "model"), "subject.kind", "must be 'library' or 'adapter'"),
        (changed("subject", "library"), "subject", "must be an object whose kind"),
        (changed("subject.log_id", 0), "subject.log_id", "greater than or equal to 1"),
        (changed("subject.root", "0x" + "cd" * 31), "subject.root", "64 lowercase hex"),
        (changed("subject.entries", []), "subject.entries", "at least 1 item"),
        (changed("subject.entries", [CID[0], CID[1], CID[0]]), "subject.entries[2]", "duplicate"),
        (changed("subject.entries", CID[:2], changed("subject.size", 1)), "subject.entries",
         "2 experiences cannot be live in a log of 1 leaves"),
        (changed("subject.entries", [entry_cid(b"%d" % i)
                                     for i in range(MAX_EVALUATION_EXPERIENCES + 1)],
                 changed("subject.size", 5000)), "subject.entries", "at most 1024 items"),
        (changed("subject.entries", [DAG_PB_CID]), "subject.entries[0]", "raw codec"),
        (changed("subject.entries", ["Qm" + "x" * 44]), "subject.entries[0]", "not a CID"),
        (verified(subject={"kind": "adapter", "entry": CID[3], "log_id": 1}), "subject.log_id",
         "unknown field"),
        (verified(subject={"kind": "adapter"}), "subject.entry", "Field required"),
        (changed("baseline", "base"), "baseline", "'base' is not one of the arms"),
        (changed("baseline", "Base line"), "baseline", "should match pattern"),
        (changed("task.dataset", CID[2].upper()), "task.dataset", "lowercase base32"),
        (changed("task.problems", 0), "task.problems", "greater than or equal to 1"),
        (changed("task.problems", 10_001), "task.problems", "less than or equal to 10000"),
        (changed("task.verifier", ""), "task.verifier", "should match pattern"),
        (changed("task.prompt_digest", "sha1:" + "ab" * 20), "task.prompt_digest", "'sha256:'"),
        (changed("model_digest", DIGEST.upper()), "model_digest", "lowercase hex"),
        (changed("sampling.k", 0), "sampling.k", "greater than or equal to 1"),
        (changed("sampling.k", 65), "sampling.k", "less than or equal to 64"),
        (changed("sampling.seeds", []), "sampling.seeds", "at least 1 item"),
        (changed("sampling.seeds", [1, 0]), "sampling.seeds[1]", "once each, increasing"),
        (changed("sampling.seeds", [0, 0]), "sampling.seeds[1]", "once each, increasing"),
        (changed("sampling.seeds", [-1, 0]), "sampling.seeds[0]", "greater than or equal to 0"),
        (changed("sampling.seeds", TOO_MANY_SEEDS), "sampling.seeds", "at most 64 items"),
        (changed("sampling.temperature", -0.1), "sampling.temperature", "greater than or equal"),
        (changed("sampling.top_p", 0), "sampling.top_p", "greater than 0"),
        (changed("sampling.max_tokens", 0), "sampling.max_tokens", "greater than or equal to 1"),
        (changed("arms", {"baseline": per_seed((0.5, 0.5), (0.5, 0.5))}), "arms",
         "at least 2 items"),
        (changed("arms", NINE_ARMS), "arms", "at most 8 items"),
        (changed("arms.library", per_seed((0.5, 0.5), (0.5, 0.5), seeds=(1, 0))),
         "arms.library.per_seed", "lists seeds [1, 0], the sampling's are [0, 1]"),
        (changed("arms.library", per_seed((0.5, 0.5), seeds=(0,))), "arms.library.per_seed",
         "lists seeds [0], the sampling's are [0, 1]"),
        (changed("arms.library", per_seed((1.5, 0.5), (0.5, 0.5))),
         "arms.library.per_seed[0].mean_at_k", "less than or equal to 1"),
        (changed("arms.library", per_seed((0.5, -0.25), (0.5, 0.5))),
         "arms.library.per_seed[0].pass_at_k", "greater than or equal to 0"),
        (changed("arms.library", {"per_seed": [], "mean": 1}), "arms.library.per_seed",
         "at least 1 item"),
        (changed("task.problems", 10_000, changed("sampling.k", 64)), "arms",
         "2560000 generations (arms x seeds x problems x k), the limit is 200000"),
        (changed("receipts", "None"), "receipts", "must be 'none' (a local run) or an object"),
        (changed("receipts", None), "receipts", "must be 'none'"),
        (changed("receipts", {"node": NODE}), "receipts.table", "Field required"),
        (changed("receipts", {"node": NODE[:-2], "table": CID[4]}), "receipts.node",
         "40 lowercase hex"),
        (changed("receipts", {"node": NODE, "table": "bafk"}), "receipts.table", "not a CID"),
        (changed("extra", 1), "extra", "unknown field"),
    ],
)
def test_field_rules(doc, field, message):
    with pytest.raises(EntryError, match=re.escape(message)) as excinfo:
        EvaluationEntry(**doc)
    assert excinfo.value.field == field
    with pytest.raises(EntryError) as decoded:
        decode_entry(rfc8785.dumps(doc))
    assert decoded.value.field == field


# --- figures ----------------------------------------------------------------------------------


def _naive_pass_at_k(n: int, c: int, k: int) -> float:
    """The definition itself: the share of the k-subsets of n samples (c correct) that hold a
    correct one, by enumerating them (a reference for the closed form)."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in subset) for subset in subsets) / len(subsets)


@given(st.integers(1, 6).flatmap(lambda k: st.tuples(st.just(k), st.lists(
    st.lists(st.sampled_from([0.0, 0.5, 1.0]) | st.floats(0, 1), min_size=k, max_size=k),
    min_size=1, max_size=8))))
@settings(max_examples=200, deadline=None)
def test_figures_match_their_definitions(case):
    """The figures the ledger recomputes (and the trainer reports: it imports these) against
    naive references: Mean@k as a plain average, Pass@k by enumerating the k-subsets."""
    k, rewards = case
    mean, passed = seed_figures(rewards, k)
    assert mean == pytest.approx(sum(sum(r) / len(r) for r in rewards) / len(rewards))
    assert passed == pytest.approx(sum(_naive_pass_at_k(len(r), sum(x >= 1.0 for x in r), k)
                                       for r in rewards) / len(rewards))
    assert trainer_evaluate.pass_rate is evaluations.pass_rate  # one definition
    for n, c in itertools.product(range(1, 7), range(7)):
        if c <= n and k <= n:
            assert evaluations.pass_at_k(n, c, k) == pytest.approx(_naive_pass_at_k(n, c, k))


def test_seed_figures_want_k_rewards_per_problem():
    assert seed_figures([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], 3) == (1 / 6, 0.5)
    for rewards in ([], [[1.0, 0.0], [1.0]]):
        with pytest.raises(ValueError, match="need k = 2 rewards"):
            seed_figures(rewards, 2)


# --- generations and the receipt table --------------------------------------------------------


def test_generation_index_is_a_bijection_onto_each_arms_list():
    figures = per_seed((0.5, 0.5), (0.5, 0.5), seeds=(4, 9))
    entry = EvaluationEntry(**verified(
        sampling={"k": 3, "seeds": [4, 9], "temperature": 0.7, "top_p": 1, "max_tokens": 8},
        arms={"baseline": figures, "library": figures}))
    for arm in entry.arms:
        positions = [generation_index(entry, arm, seed, problem, sample)
                     for seed in (4, 9) for problem in range(3) for sample in range(3)]
        assert positions == list(range(generations_per_arm(entry))) == list(range(18))
    assert generation_index(entry, "library", 9, 1, 2) == (1 * 3 + 1) * 3 + 2


@pytest.mark.parametrize(("where", "field"), [
    (("adapter", 0, 0, 0), "arms"), (("library", 2, 0, 0), "sampling.seeds"),
    (("library", 0, 3, 0), "task.problems"), (("library", 0, -1, 0), "task.problems"),
    (("library", 0, 0, 2), "sampling.k"), (("library", 0, 0, True), "sampling.k"),
])
def test_generation_index_refuses_what_the_entry_lacks(where, field):
    with pytest.raises(EntryError) as excinfo:
        generation_index(EvaluationEntry(**evaluation()), *where)
    assert excinfo.value.field == field


def receipt_cids(n: int, salt: str) -> list[str]:
    return [entry_cid(f"{salt}{i}".encode()) for i in range(n)]


def table_for(entry: EvaluationEntry) -> ReceiptTable:
    return ReceiptTable({arm: receipt_cids(generations_per_arm(entry), arm) for arm in entry.arms})


def test_receipt_table_round_trip_and_matches_its_entry():
    entry = EvaluationEntry(**verified())
    table = table_for(entry)
    data = encode_receipt_table(table)
    assert data.startswith(b'{"arms":{"baseline":["bafkrei') and data.endswith(
        b'"]},"type":"evaluation-receipts","v":1}')
    assert decode_receipt_table(data) == table
    check_receipt_table(table, entry)


@pytest.mark.parametrize("name", ["missing-arm", "extra-arm", "one-receipt-short", "one-too-many",
                                  "local-entry"])
def test_receipt_table_that_is_not_the_entrys_is_refused(name):
    entry = EvaluationEntry(**verified())
    arms = dict(table_for(entry).arms)
    if name == "missing-arm":
        del arms["library"]
    elif name == "extra-arm":
        arms["adapter"] = receipt_cids(12, "adapter")
    elif name == "one-receipt-short":
        arms["library"] = arms["library"][:-1]
    elif name == "one-too-many":
        arms["library"] = [*arms["library"], entry_cid(b"more")]
    else:
        entry = EvaluationEntry(**evaluation())
    with pytest.raises(ReceiptTableMismatchError) as excinfo:
        check_receipt_table(ReceiptTable(arms), entry)
    assert isinstance(excinfo.value, VerificationError)


GOOD_TABLE = encode_receipt_table(ReceiptTable({"baseline": receipt_cids(2, "b"),
                                                "library": receipt_cids(2, "l")}))


@pytest.mark.parametrize(("data", "message"), [
    (GOOD_TABLE.replace(receipt_cids(2, "l")[1].encode(), receipt_cids(2, "b")[0].encode()),
     "arms.library\\[1\\]: bundle .* is listed twice"),
    (GOOD_TABLE.replace(receipt_cids(2, "l")[0].encode(), b"Qm" + b"x" * 44),
     "arms.library\\[0\\]: .* is not a content CID"),
    (GOOD_TABLE.replace(b'"library"', b'"Library"'), "not an arm name"),
    (GOOD_TABLE.replace(b'"v":1', b'"v":2'), "not a 'evaluation-receipts' v1"),
    (GOOD_TABLE.replace(b'"v":1', b'"v":true'), "not a 'evaluation-receipts' v1"),
    (GOOD_TABLE.replace(b'"v":1', b'"v":1,"x":0'), "exactly type, v and arms"),
    (GOOD_TABLE.replace(b'"arms":{', b'"arms":{"a":"x",'), "arm -> list"),
    (GOOD_TABLE + b" ", "not the canonical"),
    (GOOD_TABLE.replace(b'"v":1', b'"v": 1'), "not the canonical"),
    (b'{"arms":{"a":[[[]]]},"type":"evaluation-receipts","v":1}', "deeper than 3"),
    (b"\xff", "not UTF-8 JSON"),
    (b'{"arms":{},"type":"evaluation-receipts","v":1}', "1 to 8 arms, got 0"),
])
def test_malformed_receipt_tables_are_refused(data, message):
    with pytest.raises(ReceiptTableError, match=message):
        decode_receipt_table(data)


def test_receipt_table_over_the_generation_limit_is_refused():
    cid = entry_cid(b"x")
    with pytest.raises(ReceiptTableError, match="200001 receipts, the limit is 200000"):
        encode_receipt_table(ReceiptTable({"a": [cid] * 100_000, "b": [cid] * 100_001}))


# --- hostile input ----------------------------------------------------------------------------

VALID = rfc8785.dumps(verified())


@st.composite
def mutated(draw, valid: bytes) -> bytes:
    data = bytearray(valid)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["flip", "insert", "delete"]))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8) | st.sampled_from(
                [b"[", b"{", b'"', b"\\", b",", b":", b"\xff", b"NaN", b"1e400", b"-0", b"null"]))
        else:
            del data[at:at + draw(st.integers(1, 8))]
    return bytes(data)


@given(mutated(VALID))
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_decode_of_a_mutated_evaluation_raises_only_entry_error(data):
    try:
        decode_entry(data)
    except EntryError:
        pass


@given(mutated(GOOD_TABLE))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_decode_of_a_mutated_receipt_table_raises_only_receipt_table_error(data):
    try:
        decode_receipt_table(data)
    except ReceiptTableError:
        pass


def test_module_docstring_example_runs():
    assert doctest.testmod(evaluations).failed == 0
