"""`gym ledger`, `gym verify` and `gym audit` end to end through the real `gym` binary."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from devnet.settings import ANVIL_DEV_KEYS
from ledger import LogStore
from ledger.batches import BatchManifest, store_batch
from ledger.blockstore import LocalBlockStore

pytestmark = pytest.mark.anvil

SAMPLES = Path(__file__).resolve().parents[2] / "devnet" / "samples" / "experiences.jsonl"
LOG = "alice/math"
LOG_ID = 2  # its on-chain id: `gym devnet up` gives id 1 to the DAO's curated library


def experience(step: int, **changes) -> dict:
    entry = {"type": "experience", "v": 1, "op": "add", "domain": "math",
             "text": f"Rule {step}: draw a diagram before you compute.",
             "provenance": {"method": "tfgrpo", "base_model": "SmolLM2-135M-Instruct",
                            "step": step}}
    entry.update(changes)
    return entry


def ok(result) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def one_error_line(result) -> str:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def state(gym) -> dict:
    return json.loads(ok(gym.run("ledger", "show", LOG, "--json")))


@pytest.fixture
def gym(ledger_devnet, tmp_path):
    gym = ledger_devnet.gym
    out = ok(gym.run("ledger", "create", LOG))
    assert f"created log {LOG}: on-chain log id {LOG_ID}" in out
    return gym


def test_create_append_publish_proof_verify_audit(gym, tmp_path):
    single = tmp_path / "one.json"
    single.write_text(json.dumps(experience(9, target=None), indent=2))  # null: absent
    out = ok(gym.run("ledger", "append", LOG, str(SAMPLES), str(single)))
    assert "appended 6 entries to alice/math: size 0 -> 6" in out
    assert out.count("bafkrei") == 6

    out = ok(gym.run("ledger", "publish", LOG))
    assert "size 0 -> 6" in out and "tx        0x" in out and "root      0x" in out
    two = tmp_path / "two.jsonl"
    two.write_text("\n".join(json.dumps(experience(i)) for i in (10, 11)) + "\n")
    ok(gym.run("ledger", "append", LOG, str(two)))
    out = ok(gym.run("ledger", "publish", LOG))
    assert "size 6 -> 8" in out and "proof     " in out

    listed = ok(gym.run("ledger", "list"))
    assert LOG in listed and "8" in listed
    shown = state(gym)
    assert [c["size"] for c in shown["checkpoints"]] == [6, 8] and shown["log_id"] == LOG_ID
    leaf = json.loads(ok(gym.run("ledger", "show", LOG, "3", "--json")))
    assert leaf["anchored_at_size"] == 6 and leaf["entry"]["domain"] == "code"

    doc = json.loads(ok(gym.run("ledger", "proof", LOG, "3", "--json")))
    assert (doc["index"], doc["size"], doc["log_id"]) == (3, 6, LOG_ID)
    assert doc["anchor"]["tx_hash"] == shown["checkpoints"][0]["tx_hash"]
    assert doc["anchor"]["chain_id"] == 31337 and doc["entry"]["domain"] == "code"
    proof_file = tmp_path / "proof.json"
    proof_file.write_text(json.dumps(doc))
    out = ok(gym.run("verify", "proof", str(proof_file)))
    assert "valid" in out and "bytes in the document checked against the CID and the leaf hash" in out
    assert f"anchored on chain: log {LOG_ID} at size 6" in ok(
        gym.run("verify", "proof", str(proof_file), "--chain"))
    at_8 = json.loads(ok(gym.run("ledger", "proof", LOG, "3", "--size", "8", "--json")))
    assert at_8["size"] == 8 and at_8["root"] == shown["checkpoints"][1]["root"]

    out = ok(gym.run("verify", "entry", str(single)))
    assert "valid entry" in out and "bafkrei" in out and "leaf hash  0x" in out

    out = ok(gym.run("audit", LOG))
    assert "audit clean: 2 checkpoints, 8 entries" in out
    assert "audit clean" in ok(gym.run("audit", "--log-id", str(LOG_ID)))


@pytest.mark.parametrize(("name", "content", "message"), [
    ("malformed.json", '{"type": "experience", "v": 1,', "malformed.json: not valid JSON"),
    ("oversize.json", json.dumps({"type": "run", "v": 1, "config": {"blob": "x" * 270_000},
                                  "code_version": "abc", "packages": {}, "hardware": {},
                                  "dataset_digests": [], "metrics": {}}),
     "the limit is 262144"),
    ("unknown-type.json", json.dumps(experience(1, type="recipe")), "unknown entry type 'recipe'"),
    ("unknown-version.json", json.dumps(experience(1, v=2)), "unknown version 2 of 'experience'"),
    ("bad-field.json", json.dumps(experience(1, op="rename")), "op:"),
    ("bad-line.jsonl", json.dumps(experience(1)) + "\n" + json.dumps(experience(2, v=7)) + "\n",
     "bad-line.jsonl:2: v: unknown version 7"),
])
def test_bad_entries_append_nothing(gym, tmp_path, name, content, message):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(experience(0)))
    bad = tmp_path / name
    bad.write_text(content)
    line = one_error_line(gym.run("ledger", "append", LOG, str(good), str(bad)))
    assert message in line
    assert state(gym)["size"] == 0
    pins = gym.data_dir / "ipfs" / "pins"
    assert not pins.exists() or not list(pins.iterdir())  # nothing stored either


def test_forged_or_truncated_proofs_are_refused(gym, tmp_path):
    good = tmp_path / "e.jsonl"
    good.write_text("\n".join(json.dumps(experience(i)) for i in range(5)))
    ok(gym.run("ledger", "append", LOG, str(good)))
    ok(gym.run("ledger", "publish", LOG))
    doc = json.loads(ok(gym.run("ledger", "proof", LOG, "2", "--json")))

    def refused(mutated, expected: str) -> None:
        path = tmp_path / "proof.json"
        path.write_text(mutated if isinstance(mutated, str) else json.dumps(mutated))
        assert expected in one_error_line(gym.run("verify", "proof", str(path)))

    flipped = doc["audit_path"][0][:-1] + ("0" if doc["audit_path"][0][-1] != "0" else "1")
    refused({**doc, "audit_path": [flipped, *doc["audit_path"][1:]]},
            "inclusion proof leads to a different root")
    refused({**doc, "audit_path": doc["audit_path"][:-1]}, "proof has 2 hashes, expected 3")
    refused({**doc, "index": 3}, "leads to a different root")
    refused({**doc, "size": 4}, "proof has 3 hashes, expected 2")
    refused({**doc, "entry": {**doc["entry"], "text": "forged"}},
            "the entry does not have the entry CID")
    refused({k: v for k, v in doc.items() if k != "root"}, "lacks 'root'")
    refused(json.dumps(doc)[:-40], "proof document is not JSON")
    refused({**doc, "root": "0x1234"}, "root must be '0x' and 64 hex digits")

    # Offline, a path only binds (index, size) as far as the root is trusted: this one also
    # "proves" leaf 2 under the same root at size 6. The chain knows no such checkpoint.
    path = tmp_path / "proof.json"
    path.write_text(json.dumps({**doc, "size": 6}))
    ok(gym.run("verify", "proof", str(path)))
    assert f"ExperienceLedgerUnknownCheckpoint(logId={LOG_ID}, size=6)" in one_error_line(
        gym.run("verify", "proof", str(path), "--chain"))


def test_wrong_owner_cannot_publish_and_nothing_is_recorded(gym, tmp_path):
    entries = tmp_path / "e.json"
    entries.write_text(json.dumps(experience(1)))
    ok(gym.run("ledger", "append", LOG, str(entries)))
    other = ANVIL_DEV_KEYS[1]
    line = one_error_line(gym.run("ledger", "publish", LOG, extra_env={"GYM_PUBLISHER_KEY": other}))
    assert f"ExperienceLedgerNotLogOwner(logId={LOG_ID}, caller=0x70997970C51812dc3A010C7d01b50e0d17dc79C8" in line
    assert "GYM_PUBLISHER_KEY" in line
    assert state(gym)["checkpoints"] == []


def test_nothing_new_and_stale_checkpoint_are_refused(gym, ledger_devnet, tmp_path):
    assert "has no entries appended since it was created" in one_error_line(
        gym.run("ledger", "publish", LOG))
    entries = tmp_path / "e.jsonl"
    entries.write_text("\n".join(json.dumps(experience(i)) for i in range(4)))
    ok(gym.run("ledger", "append", LOG, str(entries)))
    ok(gym.run("ledger", "publish", LOG))
    assert "no entries appended since its checkpoint at size 4" in one_error_line(
        gym.run("ledger", "publish", LOG))

    # Another installation with the owner's key anchors size 6 of the same history.
    copy = tmp_path / "other"
    shutil.copytree(gym.data_dir, copy, ignore=shutil.ignore_patterns("anvil*"))
    more = tmp_path / "more.jsonl"
    more.write_text("\n".join(json.dumps(experience(i)) for i in range(4, 6)))
    ok(gym.run("ledger", "append", LOG, str(more), extra_env={"GYM_DATA_DIR": str(copy)}))
    ok(gym.run("ledger", "publish", LOG, extra_env={"GYM_DATA_DIR": str(copy)}))

    # This one appends other entries: the chain's size 6 is not its tree.
    others = tmp_path / "others.jsonl"
    others.write_text("\n".join(json.dumps(experience(i)) for i in range(40, 42)))
    ok(gym.run("ledger", "append", LOG, str(others)))
    line = one_error_line(gym.run("ledger", "publish", LOG))
    assert "anchored on chain at size 6 with a root that is not this log's root" in line
    assert "the last checkpoint recorded here is size 4" in line
    assert "someone else anchored it" in line
    assert [c["size"] for c in state(gym)["checkpoints"]] == [4]
    # Its content store holds the second batch; this one lacks it, and the audit says so.
    assert "batch-missing" in gym.run("audit", LOG).stdout
    assert "audit clean: 2 checkpoints, 6 entries" in ok(
        gym.run("audit", LOG, extra_env={"GYM_DATA_DIR": str(copy)}))


def test_audit_reports_a_lying_manifest_and_exits_1(gym, ledger_devnet, tmp_path):
    entries = tmp_path / "e.jsonl"
    entries.write_text("\n".join(json.dumps(experience(i)) for i in range(3)))
    ok(gym.run("ledger", "append", LOG, str(entries)))
    store = LogStore(f"sqlite:///{gym.data_dir / 'ledger.sqlite'}")
    content = LocalBlockStore(gym.data_dir / "ipfs")
    cids = [leaf.cid for leaf in store.leaves(LOG)]
    lie = store_batch(content, BatchManifest(LOG, LOG_ID, 0, 3, [cids[2], cids[1], cids[0]]))
    ledger_devnet.contract().anchor(LOG_ID, 3, store.root(LOG, 3), lie, [])
    store.engine.dispose()
    result = gym.run("audit", LOG)
    assert result.returncode == 1
    assert "root-mismatch" in result.stdout and "audit failed: 1 discrepancies" in result.stdout


def test_audit_needs_a_log_and_names_unknown_ones(gym):
    assert "gym audit NAME" in one_error_line(gym.run("audit"))
    assert "no log named 'bob/none' was created on chain" in one_error_line(
        gym.run("audit", "bob/none"))
    assert "UnknownLog" in one_error_line(gym.run("audit", "--log-id", "9"))


def test_unknown_log_and_missing_deployment_are_one_line(gym, tmp_path):
    entry = tmp_path / "e.json"
    entry.write_text(json.dumps(experience(1)))
    assert "gym ledger create bob/none" in one_error_line(
        gym.run("ledger", "append", "bob/none", str(entry)))
    assert "already exists" in one_error_line(gym.run("ledger", "create", LOG))
    missing = {"GYM_DEPLOYMENT_FILE": str(tmp_path / "nope.json")}
    assert "gym devnet up" in one_error_line(gym.run("ledger", "create", "bob/x", extra_env=missing))
    assert "bob/x" not in ok(gym.run("ledger", "list"))


def test_checkpoint_notes_for_witnesses(gym, tmp_path):
    """`gym ledger note-key` + `checkpoint` give a signed C2SP checkpoint note of an anchored
    checkpoint; `gym verify checkpoint` checks its signature and its root against rootAt."""
    from ledger.checkpoint_note import decode_checkpoint, encode_checkpoint
    from ledger.signed_note import NoteSigner, sign_note

    ok(gym.run("ledger", "append", LOG, str(SAMPLES)))
    line = one_error_line(gym.run("ledger", "checkpoint", LOG, "--key", str(SAMPLES)))
    assert "has no anchored checkpoint" in line
    ok(gym.run("ledger", "publish", LOG))
    key = tmp_path / "keys" / "note.key"
    vkey = ok(gym.run("ledger", "note-key", "alice.example", "--output", str(key))
              ).strip().splitlines()[-1]
    assert vkey.startswith("alice.example+") and oct(key.stat().st_mode)[-3:] == "600"
    assert "already exists" in one_error_line(
        gym.run("ledger", "note-key", "alice.example", "--output", str(key)))

    note = ok(gym.run("ledger", "checkpoint", LOG, "--key", str(key)))
    checkpoint = decode_checkpoint(note.split("\n\n")[0] + "\n")
    root = bytes.fromhex(state(gym)["checkpoints"][0]["root"][2:])
    assert checkpoint.origin.startswith("gym-ledger/31337/0x") and checkpoint.origin.endswith(
        f"/{LOG_ID}")
    assert (checkpoint.size, checkpoint.root) == (5, root)
    good = tmp_path / "note.txt"
    good.write_text(note)
    out = ok(gym.run("verify", "checkpoint", str(good), "--vkey", vkey))
    assert "signed by alice.example" in out and "anchored on chain" in out

    # Signed by the right key but with another root: the chain says no.
    forged = checkpoint.__class__(checkpoint.origin, checkpoint.size, b"\x01" * 32)
    signer = NoteSigner(key.read_text().strip())
    bad = tmp_path / "forged.txt"
    bad.write_text(sign_note(encode_checkpoint(forged), signer))
    line = one_error_line(gym.run("verify", "checkpoint", str(bad), "--vkey", vkey))
    assert "not the root anchored on chain" in line
    other = ok(gym.run("ledger", "note-key", "mallory", "--output", str(tmp_path / "m.key"))
               ).strip().splitlines()[-1]
    assert "no verifiable signatures" in one_error_line(
        gym.run("verify", "checkpoint", str(good), "--vkey", other))
    offline = ok(gym.run("verify", "checkpoint", str(bad), "--vkey", vkey, "--offline"))
    assert "root not compared with the chain (--offline)" in offline
