"""Hostile JSON at the ledger's edges: deeply nested documents given to the real `gym` in its
own process (a crash would show as exit code -11/139), and a property-based fuzz of entry
decoding and of the append input path."""

from __future__ import annotations

import json
from pathlib import Path

import ledger_helpers
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import ExperienceEntry, Provenance, decode_entry, encode_entry
from ledger.errors import EntryError
from ledger.publish import entry_from_json, read_entry_files

VALID = encode_entry(ExperienceEntry(
    text="Check the units before comparing magnitudes.", domain="math", op="add",
    provenance=Provenance(method="tfgrpo", base_model="SmolLM2-135M-Instruct", step=3)))
DEPTH = 100_000  # ~200 KB of brackets: far past any C stack at one frame a level


def deep(prefix: bytes = b"", suffix: bytes = b"") -> bytes:
    return prefix + b"[" * DEPTH + b"]" * DEPTH + suffix


def one_error_line(result) -> str:
    return ledger_helpers.one_error_line(result, codes=(1, 2))


@pytest.fixture
def hostile(tmp_path) -> dict[str, Path]:
    files = {
        "array": deep(),
        "entry": deep(b'{"type":"run","v":1,"config":', b"}"),
        "proof": deep(b'{"type":"inclusion-proof","v":1,"entry":', b"}"),
        "jsonl": VALID + b"\n" + deep() + b"\n",
    }
    paths = {}
    for name, data in files.items():
        assert len(data) >= 200_000
        paths[name] = tmp_path / (f"{name}.jsonl" if name == "jsonl" else f"{name}.json")
        paths[name].write_bytes(data)
    return paths


def test_append_refuses_deep_entries_in_one_line(gym_env, hostile):
    assert gym_env.run("ledger", "create", "alice/math", "--offline").returncode == 0
    for name in ("array", "entry", "jsonl"):
        line = one_error_line(gym_env.run("ledger", "append", "alice/math", str(hostile[name])))
        assert "nests deeper than 64 levels" in line, line
        assert name != "jsonl" or "jsonl.jsonl:2: " in line
    shown = json.loads(gym_env.run("ledger", "show", "alice/math", "--json").stdout)
    assert shown["size"] == 0


def test_verify_entry_and_proof_refuse_deep_documents_in_one_line(gym_env, hostile):
    for name in ("array", "entry"):
        line = one_error_line(gym_env.run("verify", "entry", str(hostile[name])))
        assert "nests deeper than 64 levels" in line
    for name in ("array", "proof"):
        line = one_error_line(gym_env.run("verify", "proof", str(hostile[name])))
        assert "proof document nests deeper than 66 levels" in line


@pytest.mark.anvil
def test_audit_reports_deep_manifests_and_entries_without_crashing(ledger_devnet):
    """A log whose anchored batch manifest, and one whose entry, is a deeply nested document:
    the audit reports each as a discrepancy and exits 1."""
    from ledger import LocalBlockStore
    from ledger.batches import BatchManifest, store_batch
    from ledger.chain import LogKind
    from ledger.rfc9162 import leaf_hash

    content = LocalBlockStore(ledger_devnet.gym.data_dir / "ipfs")
    contract = ledger_devnet.contract()
    bomb = deep(b'{"type":"batch","v":1,"entries":', b"}")
    bomb_cid = content.add_file(bomb)

    manifest_log, _ = contract.create_log("mallory/manifest", LogKind.PUBLISHER)
    contract.anchor(manifest_log, 1, leaf_hash(b"x"), bomb_cid, [])
    entry_log, _ = contract.create_log("mallory/entry", LogKind.PUBLISHER)
    contract.anchor(entry_log, 1, leaf_hash(bomb),
                    store_batch(content, BatchManifest("mallory/entry", entry_log, 0, 1,
                                                       [bomb_cid])), [])

    for log_id, problem in ((manifest_log, "batch-invalid"), (entry_log, "entry-invalid")):
        result = ledger_devnet.gym.run("audit", "--log-id", str(log_id),
                                       extra_env={"COLUMNS": "400"})
        assert result.returncode == 1, (result.returncode, result.stderr[-2000:])
        assert "Traceback" not in result.stdout + result.stderr
        assert problem in result.stdout and "nests deeper than" in result.stdout
        assert "audit failed" in result.stdout


# --- fuzz -----------------------------------------------------------------------------------


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["type", "v", "text", "op", "domain", "provenance",
                                       "target", "config", "x"]) | st.text(max_size=6),
                      children, max_size=6),
    max_leaves=40,
)


@st.composite
def mutated_entries(draw) -> bytes:
    """A valid entry with bytes flipped, inserted, cut out, or wrapped in nesting."""
    data = bytearray(VALID)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "nest", "duplicate"]))
        at = draw(st.integers(0, len(data)))
        if kind == "flip" and data:
            at = min(at, len(data) - 1)
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8) | st.sampled_from(
                [b"[", b"{", b'"', b"\\", b",", b":", b"\xff", b"NaN", b"1e400"]))
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 8))]
        elif kind == "nest":
            depth = draw(st.integers(1, 3000))
            data[at:at] = b"[" * depth + b"]" * depth
        else:
            data[1:1] = b'"op":"delete",'
    return bytes(data)


def only_entry_errors(call, data) -> None:
    try:
        call(data)
    except EntryError:
        pass


@given(st.binary(max_size=400) | mutated_entries())
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_decode_entry_raises_only_entry_error(data):
    only_entry_errors(decode_entry, data)


@given(json_values)
@settings(max_examples=400, deadline=None)
def test_entry_from_any_json_value_raises_only_entry_error(value):
    only_entry_errors(entry_from_json, value)


@given(st.binary(max_size=400) | mutated_entries(), st.sampled_from(["e.json", "e.jsonl"]))
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_append_input_path_raises_only_entry_error(tmp_path, data, name):
    path = tmp_path / name
    path.write_bytes(data)
    only_entry_errors(read_entry_files, [path])
