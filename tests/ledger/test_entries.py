"""Tests of ledger.entries: canonical bytes, validation rules, CIDs and the library fold."""

from __future__ import annotations

import base64
import doctest
import hashlib
import json

import pytest
import rfc8785
from gym_helpers import kubo_cid

from ledger import entries
from ledger.entries import (
    ENTRY_TYPES,
    MAX_AUDIT_LEAVES,
    MAX_ENTRY_BYTES,
    AdapterEntry,
    AuditEntry,
    ExperienceEntry,
    ReceiptEntry,
    RunEntry,
    decode_entry,
    encode_entry,
    entry_cid,
    entry_leaf_hash,
    fold_library,
)
from ledger.errors import EntryError, LedgerError
from ledger.multiformats import CID, DAG_PB, RAW

CID_A = kubo_cid(b"a")
CID_B = kubo_cid(b"b")
DIGEST = "sha256:" + "ab" * 32


def experience(**changes) -> dict:
    doc = {
        "type": "experience",
        "v": 1,
        "text": "When a problem mentions rates, write the units next to every number.",
        "domain": "math",
        "op": "add",
        "provenance": {"run_cid": CID_A, "method": "tfgrpo", "base_model": "smollm2", "step": 4},
    }
    return {**doc, **changes}


def adapter(**changes) -> dict:
    doc = {
        "type": "adapter",
        "v": 1,
        "base_model": {"name": "HuggingFaceTB/SmolLM2-135M-Instruct", "weights_digest": DIGEST},
        "method": "sft",
        "files": [
            {"path": "adapter_config.json", "cid": CID_A, "size": 1},
            {"path": "weights/adapter_model.safetensors", "cid": CID_B, "size": 1},
        ],
        "config": {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"], "x": None},
        "dataset_digest": DIGEST,
        "metrics": {"eval_loss": 1.25, "steps": 100},
        "run_cid": CID_A,
    }
    return {**doc, **changes}


def run(**changes) -> dict:
    doc = {
        "type": "run",
        "v": 1,
        "config": {"lr": 1e-4, "epochs": 2, "nested": {"a": [1, 2.5, "x", True, None]}},
        "code_version": "3f2c1e0",
        "packages": {"torch": "2.13.0", "trl": "0.24.0"},
        "hardware": {"gpu": "H100", "count": 1},
        "dataset_digests": [DIGEST],
        "metrics": {"reward": [0.1, 0.25, 0.5], "final_accuracy": 0.5, "steps": 30},
    }
    return {**doc, **changes}


def receipt(**changes) -> dict:
    doc = {
        "type": "receipt",
        "v": 1,
        "node": "0x" + "12" * 20,
        "model_digest": DIGEST,
        "adapter_cid": CID_B,
        "library": {"log_id": 3, "size": 17, "root": "0x" + "cd" * 32},
        "experience_ids": [CID_A, CID_B],
        "request_digest": DIGEST,
        "response_digest": DIGEST,
        "sampling": {"temperature": 0.7, "top_p": 0.95, "max_tokens": 256, "seed": 42},
        "tokens": {"prompt": 120, "completion": 80},
        "time": 1_760_000_000,
        "activation_commitment": "q83vEjRWeJA=",
        "signature": "0x" + "ef" * 65,
    }
    return {**doc, **changes}


def audit(**changes) -> dict:
    doc = {"type": "audit", "v": 1, "node": "0x" + "11" * 20, "log_id": 3, "from_size": 10,
           "size": 50, "rate_bps": 500, "leaves": [12, 31, 49],
           "outcomes": ["verified", "not retained", "abstained"]}
    doc.update(changes)
    return doc


FACTORIES = {"experience": experience, "adapter": adapter, "run": run, "receipt": receipt,
             "audit": audit}
MODELS = {
    "audit": AuditEntry,
    "experience": ExperienceEntry,
    "adapter": AdapterEntry,
    "run": RunEntry,
    "receipt": ReceiptEntry,
}


def canonical(doc: dict) -> bytes:
    return rfc8785.dumps(doc)


def build(doc: dict):
    return MODELS[doc["type"]](**doc)


# --- canonical bytes --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_round_trip_is_byte_exact(kind):
    doc = FACTORIES[kind]()
    entry = build(doc)
    data = encode_entry(entry)
    assert data == canonical(doc)
    decoded = decode_entry(data)
    assert type(decoded) is MODELS[kind]
    assert decoded == entry
    assert encode_entry(decoded) == data


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_key_order_does_not_change_the_bytes(kind):
    doc = FACTORIES[kind]()

    def reverse(obj):
        if isinstance(obj, dict):
            return {k: reverse(obj[k]) for k in reversed(list(obj))}
        return obj

    assert encode_entry(build(reverse(doc))) == encode_entry(build(doc))


def test_absent_optional_fields_are_left_out_not_null():
    doc = receipt()
    del doc["signature"], doc["adapter_cid"]
    data = encode_entry(build(doc))
    assert b"signature" not in data and b"adapter_cid" not in data and b"null" not in data
    assert decode_entry(data).signature is None


def test_provenance_receipts_are_optional_and_round_trip():
    without = experience()
    data = encode_entry(build(without))
    assert b"receipts" not in data and b"null" not in data
    assert data == rfc8785.dumps(without)  # the field's arrival changed no existing CID
    cited = experience(provenance={**without["provenance"], "receipts": [CID_B, CID_A]})
    data = encode_entry(build(cited))
    assert decode_entry(data).provenance.receipts == [CID_B, CID_A]  # order kept
    assert encode_entry(decode_entry(data)) == data
    assert entry_cid(data) != entry_cid(encode_entry(build(without)))


def test_nulls_inside_free_form_objects_are_kept():
    data = encode_entry(build(adapter()))
    assert json.loads(data)["config"]["x"] is None
    assert decode_entry(data).config["x"] is None


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(experience()).encode(),  # whitespace, insertion order
        json.dumps(experience(), sort_keys=True).encode(),  # spaces after ':' and ','
        canonical(experience()).replace(b'"domain":"math"', b'"domain":"\\u006dath"'),
        canonical(experience()) + b"\n",
        canonical(experience(target=None)),  # explicit null for an absent optional
        canonical(receipt()).replace(b'"top_p":0.95', b'"top_p":0.950'),
        canonical(receipt()).replace(b'"temperature":0.7', b'"temperature":7e-1'),
    ],
)
def test_non_canonical_bytes_are_rejected(text):
    assert json.loads(text)  # it is valid JSON of a valid entry ...
    with pytest.raises(EntryError, match="not the canonical RFC 8785 encoding"):
        decode_entry(text)  # ... but not in the one spelling that has the entry's CID


def test_duplicate_members_are_refused_before_anything_else():
    """I-JSON (RFC 7493 §2.3): two readers must not see two documents in one entry."""
    with pytest.raises(EntryError, match="member 'v' appears twice in one object"):
        decode_entry(canonical(experience()).replace(b'"v":1', b'"v":1,"v":1'))


def test_deeply_nested_bytes_are_refused_without_recursing():
    deep = b'{"type":"run","v":1,"config":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(EntryError, match="nests deeper than 64 levels"):
        decode_entry(deep)


def test_size_limit_is_256_kib_of_canonical_bytes():
    overhead = len(encode_entry(build(run(config={"pad": ""}))))
    at_limit = build(run(config={"pad": "x" * (MAX_ENTRY_BYTES - overhead)}))
    data = encode_entry(at_limit)
    assert len(data) == MAX_ENTRY_BYTES == 262144
    assert decode_entry(data) == at_limit
    over = build(run(config={"pad": "x" * (MAX_ENTRY_BYTES - overhead + 1)}))
    with pytest.raises(EntryError, match="262145 bytes, the limit is 262144"):
        encode_entry(over)
    with pytest.raises(EntryError, match="the limit is 262144"):
        decode_entry(data[:-2] + b'x"}')  # checked before parsing


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        (b'{"type":"experiment","v":1}', "type", "known types: adapter, audit, contribution, evaluation, experience, receipt, run"),
        (b'{"v":1}', "type", "unknown entry type None"),
        (b'{"type":1,"v":1}', "type", "unknown entry type 1"),
        (b'{"type":"run","v":2}', "v", "unknown version 2 of 'run' entries; known versions: 1"),
        (b'{"type":"run","v":"1"}', "v", "unknown version '1'"),
        (b'{"type":"run","v":true}', "v", "unknown version True"),
        (b'{"type":"run"}', "v", "unknown version None"),
        (b"[1,2]", None, "an entry is a JSON object, got list"),
        (b'{"type":', None, "not UTF-8 JSON"),
        (b'{"type":"run\xff"}', None, "not UTF-8 JSON"),
        (b'{"type":"run","v":1,"x":NaN}', None, "NaN is not JSON"),
    ],
)
def test_malformed_or_unknown_entries_are_rejected(data, field, message):
    with pytest.raises(EntryError, match=message) as excinfo:
        decode_entry(data)
    assert excinfo.value.field == field


def test_the_fast_path_accepts_exactly_what_the_checked_path_accepts():
    """`decode_entry` tries `_decode_canonical` first and falls back on `_decode_checked`: the
    fast path must give the same entry for what a ledger holds and accept nothing else."""
    accepted = [encode_entry(build(FACTORIES[kind]())) for kind in sorted(FACTORIES)]
    for data in accepted:
        assert entries._decode_canonical(data) == entries._decode_checked(data)
        assert entries._decode_canonical(data) is not None  # the fast path took it
    # brackets inside strings count: past 64 the checked path decides, and accepts
    many = encode_entry(build(experience(text="[" * 40 + " {" * 25 + " ok")))
    assert entries._decode_canonical(many) is None and decode_entry(many).text.endswith("ok")
    base = canonical(experience())
    refused = [
        base.replace(b'"v":1', b'"v":1,"v":1'),  # a duplicate that the last value would hide
        base.replace(b'"domain":"math"', b'"domain":"math","domain":"math"'),
        base.replace(b'"v":1', b'"v":true'), base.replace(b'"v":1', b'"v":1.0'),
        base.replace(b'"type":"experience"', b'"type":["experience"]'),
        base[:-1] + b',"x":NaN}', base + b" ", b"[" + base + b"]", base.replace(b"math", b"\u006dath"),
        json.dumps(experience()).encode(), canonical(experience(target=None)),
        canonical(receipt()).replace(b'"top_p":0.95', b'"top_p":0.950'),
        b'{"type":"run","v":1,"config":' + b"[" * 70 + b"]" * 70 + b"}",
        base.replace(b"math", b"m\ud800th"),
    ]
    for data in refused:
        assert entries._decode_canonical(data) is None, data
        with pytest.raises(EntryError):
            decode_entry(data)


def test_decode_wants_bytes():
    with pytest.raises(EntryError, match="must be bytes, got str"):
        decode_entry(canonical(run()).decode())


def test_known_types_table():
    assert {kind: sorted(v) for kind, v in ENTRY_TYPES.items()} == {
        "adapter": [1],
        "audit": [1],
        "contribution": [1],
        "evaluation": [1],
        "experience": [1],
        "receipt": [1, 2],
        "run": [1],
    }


def test_numbers_outside_rfc8785_are_rejected():
    with pytest.raises(EntryError, match="not representable in RFC 8785"):
        encode_entry(build(run(config={"big": 2**60})))
    with pytest.raises(EntryError, match="metrics.loss"):
        build(run(metrics={"loss": float("nan")}))


# --- validation rules -------------------------------------------------------------------------

PROV = {"method": "tfgrpo", "base_model": "smollm2", "step": 0}
WORDS_64 = " ".join(["word"] * 64)


@pytest.mark.parametrize(
    ("doc", "field", "message"),
    [
        (experience(text=WORDS_64 + " more"), "text", "at most 64 words, got 65"),
        (experience(text=""), "text", "must not be blank for op 'add'"),
        (experience(text=" \n\t"), "text", "must not be blank"),
        (
            experience(op="update", target=CID_A, text=""),
            "text",
            "must not be blank for op 'update'",
        ),
        (experience(op="delete", target=CID_A, text=WORDS_64 + " x"), "text", "at most 64 words"),
        (experience(op="add", target=CID_A), "target", "must be absent for op 'add'"),
        (experience(op="update"), "target", "is required for op 'update'"),
        (experience(op="delete", text=""), "target", "is required for op 'delete'"),
        (experience(op="remove"), "op", "'add', 'update' or 'delete'"),
        (
            experience(op="update", target="QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG"),
            "target",
            "sha2-256 CIDv1 spelt in lowercase base32",  # a CIDv0
        ),
        (
            experience(op="update", target=CID_A.upper()),
            "target",
            "sha2-256 CIDv1 spelt in lowercase base32",
        ),
        (
            experience(op="update", target="b" + CID_A[1:].upper()),
            "target",
            "sha2-256 CIDv1 spelt in lowercase base32",
        ),
        (
            experience(op="update", target="f01551220" + "ab" * 32),
            "target",
            "sha2-256 CIDv1 spelt in lowercase base32",
        ),
        (experience(op="update", target=CID_A[:-1]), "target", "not a CID"),
        (experience(op="update", target=CID_A[:-8]), "target", "not a CID"),
        (experience(op="update", target=CID_A + "aa"), "target", "not a CID"),
        (
            experience(op="update", target=str(CID.for_block(DAG_PB, b"node"))),
            "target",
            "raw codec",
        ),
        (experience(domain=""), "domain", "at least 1 character"),
        (experience(domain=3), "domain", "valid string"),
        (experience(provenance={**PROV, "step": -1}), "provenance.step", "greater than or equal"),
        (experience(provenance={**PROV, "step": "3"}), "provenance.step", "valid integer"),
        (experience(provenance={**PROV, "step": True}), "provenance.step", "valid integer"),
        (experience(provenance={**PROV, "step": 1.0}), "provenance.step", "valid integer"),
        (experience(provenance={**PROV, "method": ""}), "provenance.method", "at least 1"),
        (experience(provenance={**PROV, "run_cid": "bafy"}), "provenance.run_cid", "not a CID"),
        (experience(provenance={**PROV, "seed": 1}), "provenance.seed", "unknown field"),
        (experience(provenance={**PROV, "receipts": []}), "provenance.receipts", "at least 1"),
        (experience(provenance={**PROV, "receipts": [CID_A] * 65}), "provenance.receipts",
         "at most 64"),
        (experience(provenance={**PROV, "receipts": ["bafy"]}), "provenance.receipts[0]",
         "not a CID"),
        (experience(provenance={**PROV, "receipts": CID_A}), "provenance.receipts",
         "valid list"),
        (experience(provenance={"method": "m", "step": 1}), "provenance.base_model", "required"),
        (experience(extra=1), "extra", "unknown field"),
        (adapter(files=[]), "files", "at least 1 item"),
        (adapter(files=[{"path": "/abs", "cid": CID_A, "size": 1}]), "files[0].path", "relative"),
        (adapter(files=[{"path": "a/../b", "cid": CID_A, "size": 1}]), "files[0].path", "'..'"),
        (adapter(files=[{"path": "a//b", "cid": CID_A, "size": 1}]), "files[0].path", "empty"),
        (adapter(files=[{"path": "a", "cid": CID_A, "size": -1}]), "files[0].size", "greater"),
        (adapter(files=[{"path": "a", "cid": "x", "size": 1}]), "files[0].cid", "not a CID"),
        (
            adapter(files=[{"path": "a", "cid": CID_A, "size": 1}] * 2),
            "files[1].path",
            "duplicate path 'a'",
        ),
        (
            adapter(base_model={"name": "m", "weights_digest": "sha256:" + "AB" * 32}),
            "base_model.weights_digest",
            "64 lowercase hex digits",
        ),
        (adapter(dataset_digest="sha512:" + "ab" * 32), "dataset_digest", "'sha256:'"),
        (adapter(dataset_digest=DIGEST + "0"), "dataset_digest", "64 lowercase hex"),
        (adapter(metrics={"loss": "low"}), "metrics.loss", "valid number"),
        (adapter(metrics={"loss": True}), "metrics.loss", "valid number"),
        (adapter(run_cid=None), "run_cid", "valid string"),
        (run(packages={"torch": 2}), "packages.torch", "valid string"),
        (run(metrics={"curve": [1, "x"]}), "metrics.curve", "number or a list of numbers"),
        (run(metrics={"curve": {"a": 1}}), "metrics.curve", "number or a list of numbers"),
        (run(dataset_digests=["0x" + "ab" * 32]), "dataset_digests[0]", "'sha256:'"),
        (run(code_version=""), "code_version", "at least 1"),
        (receipt(node="0x" + "AB" * 20), "node", "40 lowercase hex"),
        (receipt(node="0x" + "ab" * 19), "node", "40 lowercase hex"),
        (receipt(library={"log_id": 1, "size": 2, "root": "ab" * 32}), "library.root", "'0x'"),
        (
            receipt(library={"log_id": -1, "size": 2, "root": "0x" + "ab" * 32}),
            "library.log_id",
            "greater",
        ),
        (receipt(experience_ids=[CID_A, "nope"]), "experience_ids[1]", "not a CID"),
        (receipt(adapter_cid=str(CID.for_block(DAG_PB, b"node"))), "adapter_cid", "raw codec"),
        (
            receipt(sampling={"temperature": -0.1, "top_p": 1, "max_tokens": 1, "seed": 0}),
            "sampling.temperature",
            "greater than or equal to 0",
        ),
        (
            receipt(sampling={"temperature": 0, "top_p": 0, "max_tokens": 1, "seed": 0}),
            "sampling.top_p",
            "greater than 0",
        ),
        (
            receipt(sampling={"temperature": 0, "top_p": 1.5, "max_tokens": 1, "seed": 0}),
            "sampling.top_p",
            "less than or equal to 1",
        ),
        (
            receipt(sampling={"temperature": 0, "top_p": 1, "max_tokens": 0, "seed": 0}),
            "sampling.max_tokens",
            "greater than or equal to 1",
        ),
        (
            receipt(sampling={"temperature": 0, "top_p": 1, "max_tokens": 1}),
            "sampling.seed",
            "required",
        ),
        (receipt(tokens={"prompt": 1, "completion": -2}), "tokens.completion", "greater"),
        (receipt(time=1.5), "time", "valid integer"),
        (receipt(activation_commitment=""), "activation_commitment", "at least 1"),
        (receipt(signature="0x" + "ef" * 64), "signature", "130 lowercase hex"),
    ],
)
def test_field_rules(doc, field, message):
    with pytest.raises(EntryError, match=message) as excinfo:
        build(doc)
    assert excinfo.value.field == field
    assert str(excinfo.value).startswith(f"{field}: ")
    # The same rule holds when the bytes come from outside.
    with pytest.raises(EntryError, match=message) as excinfo:
        decode_entry(json.dumps(doc).encode())
    assert excinfo.value.field == field


@pytest.mark.parametrize(
    ("doc", "field", "message"),
    [
        (audit(from_size=50), "from_size", "from_size must be below size"),
        (audit(outcomes=["verified"]), "outcomes", "one outcome per leaf"),
        (audit(leaves=[12, 12, 49]), "leaves[1]", "increasing"),
        (audit(leaves=[9, 31, 49]), "leaves[0]", "within"),
        (audit(leaves=[12, 31, 50]), "leaves[2]", "within"),
        (audit(outcomes=["verified", "fine", "abstained"]), "outcomes[1]", "Input should be"),
        (audit(rate_bps=0), "rate_bps", "greater than or equal to 1"),
        (audit(rate_bps=10_001), "rate_bps", "less than or equal to 10000"),
        (audit(log_id=0), "log_id", "greater than or equal to 1"),
        (audit(node="0x" + "AB" * 20), "node", "lowercase hex"),
        (audit(leaves=list(range(MAX_AUDIT_LEAVES + 1)), size=10**6, from_size=0,
               outcomes=["verified"] * (MAX_AUDIT_LEAVES + 1)), "leaves", "at most 8192"),
    ],
)
def test_audit_field_rules(doc, field, message):
    test_field_rules(doc, field, message)




def test_valid_edge_cases_are_accepted():
    build(experience(text=WORDS_64))
    build(experience(op="delete", target=CID_A, text=""))
    build(experience(op="update", target=CID_A, text="new text", provenance=PROV))
    build(receipt(sampling={"temperature": 0, "top_p": 1, "max_tokens": 1, "seed": 0}))
    build(run(metrics={}, dataset_digests=[]))
    big_file = b"\x07" * (300 * 1024)  # two chunks: a dag-pb UnixFS CID, as Kubo gives
    big_cid = kubo_cid(big_file)
    assert big_cid.startswith("bafybei")
    build(adapter(files=[{"path": "w.bin", "cid": big_cid, "size": len(big_file)}]))


def test_entry_error_is_a_ledger_error_and_a_value_error():
    with pytest.raises(LedgerError):
        build(experience(op="nope"))
    with pytest.raises(ValueError, match="op"):
        build(experience(op="nope"))


def test_several_problems_are_counted():
    with pytest.raises(EntryError, match=r"\(and 1 more problem\)"):
        build(experience(domain="", op="nope"))


# --- CID and leaf hash ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_entry_cid_is_what_kubo_gives(kind):
    data = encode_entry(build(FACTORIES[kind]()))
    cid = entry_cid(data)
    assert cid == kubo_cid(data)
    assert cid.startswith("bafkrei")
    parsed = CID.parse(cid)
    assert (parsed.version, parsed.codec, parsed.digest) == (1, RAW, hashlib.sha256(data).digest())


def test_entry_cid_of_a_full_size_entry_is_still_one_raw_block():
    overhead = len(encode_entry(build(run(config={"pad": ""}))))
    data = encode_entry(build(run(config={"pad": "y" * (MAX_ENTRY_BYTES - overhead)})))
    assert len(data) == MAX_ENTRY_BYTES
    assert entry_cid(data) == kubo_cid(data)


def test_entry_cid_binary_layout():
    digest = hashlib.sha256(b"hello").digest()
    cid = entry_cid(b"hello")
    assert cid == "bafkreibm6jg3ux5qumhcn2b3flc3tyu6dmlb4xa7u5bf44yegnrjhc4yeq"
    body = cid[1:].upper()
    assert base64.b32decode(body + "=" * (-len(body) % 8)) == b"\x01\x55\x12\x20" + digest


def test_cid_has_one_spelling():
    # 36 bytes take 58 base32 digits whose last 2 bits are padding: flipping them would
    # decode to the same bytes, but the CID would have two spellings.
    alphabet = "abcdefghijklmnopqrstuvwxyz234567"
    twin = CID_A[:-1] + alphabet[alphabet.index(CID_A[-1]) ^ 1]
    assert twin != CID_A and CID.parse(twin) == CID.parse(CID_A)
    with pytest.raises(EntryError, match="spelt in lowercase base32") as excinfo:
        build(experience(op="delete", text="", target=twin))
    assert excinfo.value.field == "target"


def test_leaf_hash():
    data = encode_entry(build(experience()))
    assert entry_leaf_hash(data) == hashlib.sha256(b"\x00" + data).digest()


# --- library fold -----------------------------------------------------------------------------


def _op(op: str, text: str = "", target: str | None = None) -> tuple[str, ExperienceEntry]:
    doc = experience(op=op, text=text)
    if target:
        doc["target"] = target
    entry = build(doc)
    return entry_cid(encode_entry(entry)), entry


def test_fold_add_update_delete():
    a_id, a = _op("add", "alpha")
    b_id, b = _op("add", "beta")
    c_id, c = _op("add", "gamma")
    log = [
        (a_id, a),
        (b_id, b),
        _op("update", "alpha two", a_id),
        (c_id, c),
        _op("delete", "", b_id),
    ]
    assert fold_library(log) == {a_id: "alpha two", c_id: "gamma"}
    assert list(fold_library(log)) == [a_id, c_id]  # order of the adds
    assert fold_library(log[:2]) == {a_id: "alpha", b_id: "beta"}
    assert fold_library([]) == {}


def test_fold_skips_other_entry_types():
    a_id, a = _op("add", "alpha")
    run_entry = build(run())
    log = [(entry_cid(encode_entry(run_entry)), run_entry), (a_id, a)]
    assert fold_library(log) == {a_id: "alpha"}


def test_fold_rejects_unknown_target():
    a_id, a = _op("add", "alpha")
    with pytest.raises(EntryError, match="leaf 1: update of experience .* was never added") as e:
        fold_library([(a_id, a), _op("update", "x", CID_B)])
    assert e.value.field == "target"
    with pytest.raises(EntryError, match="leaf 0: delete of experience"):
        fold_library([_op("delete", "", a_id), (a_id, a)])  # the target comes too late


def test_fold_rejects_ops_on_deleted_experiences():
    a_id, a = _op("add", "alpha")
    gone = [(a_id, a), _op("delete", "obsolete", a_id)]
    with pytest.raises(EntryError, match="leaf 2: update .* which was deleted"):
        fold_library([*gone, _op("update", "back", a_id)])
    with pytest.raises(EntryError, match="leaf 2: delete .* which was deleted"):
        fold_library([*gone, _op("delete", "", a_id)])
    with pytest.raises(EntryError, match="leaf 2: experience .* was already added") as e:
        fold_library([*gone, (a_id, a)])  # the same bytes cannot resurrect it
    assert e.value.field == "op"


def test_module_docstring_example_runs():
    result = doctest.testmod(entries, raise_on_error=False)
    assert result.attempted > 0 and result.failed == 0


def test_receipt_v2_names_its_sampler_and_ending():
    doc = receipt(v=2, sampler="gym-sampler/1", finish_reason="stop")
    decoded = decode_entry(rfc8785.dumps(doc))
    assert (decoded.v, decoded.sampler, decoded.finish_reason) == (2, "gym-sampler/1", "stop")
    for changes in ({"sampler": "other/1"}, {"finish_reason": "tool_calls"}, {"sampler": None}):
        bad = {k: v for k, v in {**doc, **changes}.items() if v is not None}
        with pytest.raises(EntryError):
            decode_entry(rfc8785.dumps(bad))
    with pytest.raises(EntryError):  # a v1 receipt has neither field
        decode_entry(rfc8785.dumps({**receipt(), "sampler": "gym-sampler/1"}))
