"""`gym verify proof` says exactly what it checked about the entry: a document without its
entry proves a leaf hash, not a CID, unless the entry's bytes are at hand (--entry, or the
local content store), and then a CID that is not the leaf's is refused."""

from __future__ import annotations

import json

import pytest
from ledger_helpers import experience, ok, one_error_line

LOG = "alice/math"


@pytest.fixture
def proofs(gym_env, tmp_path):
    """Log of three entries; the proof of leaf 1 with and without its entry, and entry files."""
    ok(gym_env.run("ledger", "create", LOG, "--offline"))
    entries = tmp_path / "e.jsonl"
    entries.write_text("\n".join(json.dumps(experience(i)) for i in range(3)) + "\n")
    ok(gym_env.run("ledger", "append", LOG, str(entries)))
    doc = json.loads(ok(gym_env.run("ledger", "proof", LOG, "1", "--json")))
    other = json.loads(ok(gym_env.run("ledger", "proof", LOG, "2", "--json")))
    files = {}
    for name, value in {
        "full": doc,
        "bare": {k: v for k, v in doc.items() if k != "entry"},
        # leaf 1's proof, but naming leaf 2's entry: the path still proves leaf 1's hash
        "forged": {**{k: v for k, v in doc.items() if k != "entry"},
                   "entry_cid": other["entry_cid"]},
        "entry1": doc["entry"],
        "entry2": other["entry"],
    }.items():
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(value))
    elsewhere = {"GYM_DATA_DIR": str(tmp_path / "auditor")}  # no content store at all
    return gym_env, doc, other, files, elsewhere


def test_without_its_entry_a_proof_says_the_cid_was_not_checked(proofs):
    gym, doc, other, files, elsewhere = proofs
    out = ok(gym.run("verify", "proof", str(files["full"]), extra_env=elsewhere))
    assert f"entry {doc['entry_cid']}: bytes in the document checked against the CID" in out

    for name, cid in (("bare", doc["entry_cid"]), ("forged", other["entry_cid"])):
        out = ok(gym.run("verify", "proof", str(files[name]), extra_env=elsewhere))
        assert f"leaf hash {doc['leaf_hash']} is leaf 1 of {LOG}" in out
        assert f"entry CID {cid} NOT checked" in out and "only the leaf hash is proven" in out
        assert f"entry {cid}:" not in out
    assert not (gym.data_dir.parent / "auditor" / "ipfs").exists()  # nothing created


def test_a_cid_that_is_not_the_leafs_is_refused_when_the_entry_is_at_hand(proofs):
    gym, doc, other, files, elsewhere = proofs
    # The publisher's own content store holds leaf 2's entry: the forged CID is caught.
    line = one_error_line(gym.run("verify", "proof", str(files["forged"])))
    assert f"the entry {other['entry_cid']} does not hash to the leaf hash" in line
    assert f"expected {doc['leaf_hash']}" in line
    out = ok(gym.run("verify", "proof", str(files["bare"])))
    assert "bytes from the local content store checked against the CID and the leaf hash" in out

    # An auditor without the store hands the entry over with --entry.
    line = one_error_line(gym.run("verify", "proof", str(files["forged"]), "--entry",
                                  str(files["entry2"]), extra_env=elsewhere))
    assert "does not hash to the leaf hash" in line
    line = one_error_line(gym.run("verify", "proof", str(files["bare"]), "--entry",
                                  str(files["entry2"]), extra_env=elsewhere))
    assert "the entry does not have the entry CID" in line
    out = ok(gym.run("verify", "proof", str(files["bare"]), "--entry", str(files["entry1"]),
                     extra_env=elsewhere))
    assert f"entry {doc['entry_cid']}: bytes from {files['entry1']} checked" in out


def test_a_malformed_entry_cid_is_refused(proofs):
    gym, _, _, files, elsewhere = proofs
    files["bare"].write_text(json.dumps({**json.loads(files["bare"].read_text()),
                                         "entry_cid": "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi"}))
    line = one_error_line(gym.run("verify", "proof", str(files["bare"]), extra_env=elsewhere))
    assert "is not an entry CID" in line


@pytest.mark.anvil
def test_with_chain_the_root_is_checked_and_the_cid_still_is_not(ledger_devnet, tmp_path):
    gym = ledger_devnet.gym
    ok(gym.run("ledger", "create", LOG))
    entries = tmp_path / "e.jsonl"
    entries.write_text("\n".join(json.dumps(experience(i)) for i in range(3)) + "\n")
    ok(gym.run("ledger", "append", LOG, str(entries)))
    ok(gym.run("ledger", "publish", LOG))
    doc = json.loads(ok(gym.run("ledger", "proof", LOG, "1", "--json")))
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({k: v for k, v in doc.items() if k != "entry"}))
    out = ok(gym.run("verify", "proof", str(bare), "--chain",
                     extra_env={"GYM_DATA_DIR": str(tmp_path / "auditor")}))
    assert "anchored on chain: log" in out and "rootAt matches" in out
    assert f"entry CID {doc['entry_cid']} NOT checked" in out
