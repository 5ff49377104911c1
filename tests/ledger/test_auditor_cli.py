"""The auditor's first hour through the real `gym` binary: full hashes in pipes, `--json` on
every table, `gym audit gym/curated`, and messages that say where missing content was looked
for. Output is captured (a pipe), with COLUMNS=80 so that a table cut to the width would show.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from ledger_helpers import ok, one_error_line

from devnet.runtime import governance_runtime, ledger_runtime
from devnet.settings import GymSettings

pytestmark = pytest.mark.anvil

SAMPLES = Path(__file__).resolve().parents[2] / "devnet" / "samples" / "experiences.jsonl"
LOG = "alice/math"
NARROW = {"COLUMNS": "80"}
HASH = re.compile(r"0x[0-9a-f]{64}")


def line_with(out: str, *values: str) -> str:
    """The one output line holding every value in full (a table row not cut or wrapped)."""
    lines = [line for line in out.splitlines() if all(v in line for v in values)]
    assert len(lines) == 1, out
    return lines[0]


@pytest.fixture
def published(ledger_devnet):
    gym = ledger_devnet.gym
    ok(gym.run("ledger", "create", LOG))
    ok(gym.run("ledger", "append", LOG, str(SAMPLES)))
    ok(gym.run("ledger", "publish", LOG))
    return gym, json.loads(ok(gym.run("ledger", "show", LOG, "--json")))


def _tables_in_a_pipe_print_full_hashes_one_row_a_line(published):
    gym, shown = published
    cp = shown["checkpoints"][0]
    root, tx, batch = cp["root"], cp["tx_hash"], cp["batch_cid"]
    assert HASH.fullmatch(root) and HASH.fullmatch(tx)

    out = ok(gym.run("ledger", "list", extra_env=NARROW))
    assert "…" not in out
    cells = [cell.strip() for cell in line_with(out, LOG, tx).split("│")]
    assert cells[1:7] == [LOG, "publisher", "5", "2", "5", tx]
    curated = [cell.strip() for cell in line_with(out, "│ gym/curated ").split("│")]
    assert curated[1:7] == ["gym/curated", "curated", "0", "1", "0", "-"]  # id 1: the manifest's
    assert "replay it with `gym audit gym/curated`" in out

    out = ok(gym.run("ledger", "show", LOG, extra_env=NARROW))
    line_with(out, root, batch, tx)
    out = ok(gym.run("audit", LOG, extra_env=NARROW))
    line_with(out, root, tx, "yes")
    line_with(out, "owner 0x", f"size 5, root {root}")  # a plain line is not wrapped either
    assert "audit clean: 1 checkpoints, 5 entries" in out and "…" not in out
    out = ok(gym.run("devnet", "status", extra_env=NARROW))
    line_with(out, "ExperienceLedger", ledger_address(gym))


def ledger_address(gym) -> str:
    return json.loads(gym.deployment_file.read_text())["contracts"]["ExperienceLedger"]["address"]


def _every_table_command_has_json(published):
    gym, shown = published
    tx = shown["checkpoints"][0]["tx_hash"]

    listed = json.loads(ok(gym.run("ledger", "list", "--json")))
    by_name = {row["log"]: row for row in listed["logs"]}
    assert by_name[LOG]["last_anchor_tx"] == tx and by_name[LOG]["kind"] == "publisher"
    assert by_name["gym/curated"]["kind"] == "curated" and by_name["gym/curated"]["log_id"] == 1
    assert listed["curated_library_not_listed"] is None

    audit = json.loads(ok(gym.run("audit", LOG, "--json")))
    assert audit["ok"] and audit["checkpoints"][0]["tx_hash"] == tx
    assert audit["checkpoints"][0]["root"] == shown["checkpoints"][0]["root"]
    assert audit["leaves_replayed"] == 5 and audit["receipts"] is None

    status = json.loads(ok(gym.run("devnet", "status", "--json")))
    assert status["healthy"] and status["contracts"]["ExperienceLedger"] == ledger_address(gym)
    assert status["curated_log_id"] == 1
    up = json.loads(ok(gym.run("devnet", "up", "--json")))
    assert up["deployed"] is False and up["contracts"] == status["contracts"]

    assert json.loads(ok(gym.run("gov", "list", "--json")))["proposals"] == []
    assert json.loads(ok(gym.run("node", "list", "--json")))["nodes"] == []


def _audit_takes_an_on_chain_id_and_names_what_it_needs(published):
    gym, _ = published
    assert "audit clean: 1 checkpoints, 5 entries" in ok(gym.run("audit", "2"))
    line = one_error_line(gym.run("audit", "bob/none"))
    assert "no log named 'bob/none'" in line and "`gym audit N`" in line


def _readme_auditor_files(published, tmp_path):
    """The files the README's auditor section uses, made by the commands it names."""
    gym, _ = published
    proof, bare, entry = tmp_path / "proof.json", tmp_path / "bare.json", tmp_path / "entry.json"
    proof.write_text(ok(gym.run("ledger", "proof", LOG, "0", "--json")))
    bare.write_text(ok(gym.run("ledger", "proof", LOG, "0", "--json", "--no-entry")))
    entry.write_text(ok(gym.run("ledger", "show", LOG, "0", "--entry")))
    doc = json.loads(proof.read_text())
    assert "entry" in doc and "entry" not in json.loads(bare.read_text())

    assert "bytes in the document checked" in ok(gym.run("verify", "proof", str(proof)))
    out = ok(gym.run("verify", "proof", str(bare), "--entry", str(entry)))
    assert f"entry {doc['entry_cid']}: bytes from {entry} checked against the CID" in out
    out = ok(gym.run("verify", "entry", str(entry)))
    assert f"CID        {doc['entry_cid']}" in out and doc["leaf_hash"] in out
    line = one_error_line(gym.run("ledger", "show", LOG, "--entry"))
    assert "--entry prints one leaf's entry: give INDEX" in line

    key = tmp_path / "note.key"
    vkey = ok(gym.run("ledger", "note-key", "alice.example", "--output", str(key))).strip()
    assert vkey.startswith("alice.example+") and "\n" not in vkey  # stdout: the key alone
    note = tmp_path / "checkpoint.txt"
    note.write_text(ok(gym.run("ledger", "checkpoint", LOG, "--key", str(key))))
    out = ok(gym.run("verify", "checkpoint", str(note), "--vkey", vkey))
    assert "anchored on chain: rootAt(2, 5) matches" in out


def _missing_content_says_what_where_and_how(published, tmp_path):
    gym, _ = published
    empty = tmp_path / "auditor"  # an auditor's own, empty, data directory
    result = gym.run("audit", LOG, "--json", extra_env={"GYM_DATA_DIR": str(empty)})
    assert result.returncode == 1
    found = json.loads(result.stdout)["discrepancies"][0]
    assert found["kind"] == "batch-missing" and found["checkpoint"] == 5
    message = found["message"]
    assert message.startswith("fetching batch manifest bafkrei") and "of checkpoint 5" in message
    assert f"is not in the local content store ({empty / 'ipfs'})" in message
    assert "GYM_IPFS_API is unset" in message and "gym ipfs serve" in message

    shutil.rmtree(gym.data_dir / "ipfs" / "blocks")
    (gym.data_dir / "ipfs" / "blocks").mkdir()
    out = ok(gym.run("ledger", "show", LOG, "0"))
    assert "entry not shown: fetching entry bafkrei" in out and "GYM_IPFS_API" in out
    line = one_error_line(gym.run("ledger", "show", LOG, "0", "--entry"))
    assert "fetching entry" in line and "local content store" in line


def test_tables_json_and_audit_by_id(published):
    """One devnet for the read-only checks (each devnet and publish costs half a minute)."""
    _tables_in_a_pipe_print_full_hashes_one_row_a_line(published)
    _every_table_command_has_json(published)
    _audit_takes_an_on_chain_id_and_names_what_it_needs(published)


def test_readme_files_then_missing_content(published, tmp_path):
    _readme_auditor_files(published, tmp_path)
    _missing_content_says_what_where_and_how(published, tmp_path)  # empties the store: last


def test_audit_gym_curated_before_and_after_a_curation(published, monkeypatch):
    from governance.devnet_curation import curate_on_devnet

    gym, _ = published
    out = ok(gym.run("audit", "gym/curated"))
    assert "log 1 (curated, 'gym/curated'" in out and "audit clean: 0 checkpoints" in out

    for name, value in gym.env.items():
        if name.startswith("GYM_"):
            monkeypatch.setenv(name, value)
    settings = GymSettings()
    gov = governance_runtime(settings, ledger_runtime(settings))
    done = curate_on_devnet(gov.client(), gov.ledger.store, gov.ledger.content, LOG, [0, 2],
                            "curate two rules", voting_period=300, timelock_delay=60)
    assert done.library.size == 2

    out = ok(gym.run("audit", "gym/curated", extra_env=NARROW))
    assert "audit clean: 1 checkpoints, 2 entries" in out
    line_with(out, "0x" + done.library.root.hex(), "yes")
    report = json.loads(ok(gym.run("audit", "1", "--json")))
    assert report["name"] == "gym/curated" and report["kind"] == "curated" and report["ok"]
    listed = {r["log"]: r for r in json.loads(ok(gym.run("ledger", "list", "--json")))["logs"]}
    curated = listed["gym/curated"]
    assert curated["size"] == 2 and curated["root"] == "0x" + done.library.root.hex()
    assert HASH.fullmatch(curated["last_anchor_tx"])
    out = ok(gym.run("ledger", "list", extra_env=NARROW))
    line_with(out, "gym/curated", curated["last_anchor_tx"])
    proposals = json.loads(ok(gym.run("gov", "list", "--json")))["proposals"]
    assert [p["state"] for p in proposals] == ["Executed"]
    line_with(ok(gym.run("gov", "list", extra_env=NARROW)), "Curate 2 entries from alice/math",
              "Executed", "curate 2 leaves")
