"""Publishing a Training-Free GRPO run: entries with provenance, anchored, folding back to the
trainer's final library; a run whose operations do not fold back is refused."""

from __future__ import annotations

import json

import pytest
from gym_helpers import kubo_cid
from tfgrpo_fakes import EchoStage, ReceiptPolicy, ScriptedStage

from ledger import LocalBlockStore, LogStore, decode_entry, fold_library
from ledger.audit import audit_log
from trainer.data import generate_problems, write_jsonl
from trainer.publish import (
    PublishedRun,
    PublishRunError,
    build_run_entries,
    check_fold,
    model_digest,
    publish_run_dir,
)
from trainer.tfgrpo_config import ModelConfig, TFGRPOConfig
from trainer.tfgrpo_trainer import TFGRPOTrainer


@pytest.fixture
def finished_run(tmp_path, tiny_backend, tiny_model_dir, monkeypatch):
    """A real run (tiny policy, echo stage) with adds, updates and deletes in its history."""
    monkeypatch.chdir(tmp_path)  # dataset paths in the config are relative to the run's cwd
    problems = generate_problems(6, seed=6)
    config = TFGRPOConfig(
        train_path=str(write_jsonl(problems, tmp_path / "train.jsonl")),
        eval_path=str(write_jsonl(problems[:2], tmp_path / "heldout.jsonl")),
        output_dir=str(tmp_path / "run"), epochs=2, batch_size=2, group_size=3, seed=11,
        max_new_tokens=16, stage_max_new_tokens=24,
        verifier="python:tfgrpo_fakes:length_parity", domain="parity",
        policy=ModelConfig(model=str(tiny_model_dir)))
    trainer = TFGRPOTrainer(config, policy=tiny_backend, stage=EchoStage())
    trainer.train()
    assert {op["op"] for op in trainer.history} >= {"add", "delete"}
    return tmp_path / "run", trainer


def test_entries_carry_provenance_and_fold_to_the_final_library(finished_run, tmp_path,
                                                                 tiny_model_dir):
    run_dir, trainer = finished_run
    content = LocalBlockStore(tmp_path / "ipfs")
    entries = build_run_entries(run_dir, content)
    run = decode_entry(entries.run)
    assert run.type == "run" and run.config["seed"] == 11
    assert run.dataset_digests[0].startswith("sha256:")
    assert run.metrics["operations_applied"] == len(trainer.history)
    assert "library" in run.artifacts and any(k.startswith("snapshot/") for k in run.artifacts)
    assert json.loads(content.cat(run.artifacts["library"]))["operations"] == trainer.history
    assert len(entries.experiences) == len(trainer.history)
    for record, data in zip(trainer.history, entries.experiences, strict=True):
        entry = decode_entry(data)
        assert (entry.op, entry.provenance.step, entry.provenance.epoch) == (
            record["op"], record["step"], record["epoch"])
        assert entry.provenance.base_model_digest == model_digest(tiny_model_dir)
        assert entry.provenance.receipts is None and b"receipts" not in data
        assert entry.domain == "parity"  # the config's, never a fixed "math"
        if record["op"] != "add":
            assert entry.target == entries.experience_ids[record["target"]]
    check_fold(entries)
    assert entries.final_library == [e.text for e in trainer.library]
    overridden = build_run_entries(run_dir, content, domain="other")  # gym train publish --domain
    assert {decode_entry(d).domain for d in overridden.experiences} == {"other"}
    # every rollout is kept beside the report, with its reward and the verifier's reasoning
    kept = [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines()]
    assert len(kept) == trainer.config.epochs * 6 * trainer.config.group_size
    assert {(r["global_step"], r["query"], r["rollout"]) for r in kept} == {
        (g, q, j) for g in range(6) for q in range(2) for j in range(3)}
    assert all(r["reward"] in (0.0, 1.0) and r["problem"] for r in kept)


def test_experiences_cite_the_receipts_of_their_rollouts(tmp_path, tiny_model_dir, monkeypatch):
    """A policy that gives receipts: each experience's provenance names its group's receipts
    (at most 64); the entries of a run without receipts have no such field (finished_run)."""
    monkeypatch.chdir(tmp_path)
    problems = generate_problems(2, seed=3)
    config = TFGRPOConfig(
        train_path=str(write_jsonl(problems, tmp_path / "train.jsonl")),
        eval_path=str(tmp_path / "train.jsonl"),
        output_dir=str(tmp_path / "run"), epochs=1, batch_size=2, group_size=5,
        policy=ModelConfig(model=str(tiny_model_dir)))
    cid = lambda query, j: kubo_cid(f"receipt {query} {j}".encode())
    stage = ScriptedStage({p["problem"]: '{"operations": [{"op": "ADD", "text": "Name it."}]}'
                           for p in problems})
    policy = ReceiptPolicy({p["problem"]: p["answer"] for p in problems}, cid)
    TFGRPOTrainer(config, policy=policy, stage=stage).train()
    content = LocalBlockStore(tmp_path / "ipfs")
    (entry,) = map(decode_entry, build_run_entries(tmp_path / "run", content).experiences)
    assert entry.provenance.receipts == [cid(problems[0]["problem"], j) for j in (0, 1, 3, 4)]

    library_path = tmp_path / "run" / "library.json"
    library = json.loads(library_path.read_text())
    library["operations"][0]["receipts"] = [cid("many", j) for j in range(70)]
    library_path.write_text(json.dumps(library))
    (entry,) = map(decode_entry, build_run_entries(tmp_path / "run", content).experiences)
    assert entry.provenance.receipts == [cid("many", j) for j in range(64)]


def test_a_library_that_does_not_fold_back_is_refused(finished_run, tmp_path):
    run_dir, _ = finished_run
    library = json.loads((run_dir / "library.json").read_text())
    library["experiences"][0]["text"] = "an experience the operations never produced"
    (run_dir / "library.json").write_text(json.dumps(library))
    entries = build_run_entries(run_dir, LocalBlockStore(tmp_path / "ipfs"))
    with pytest.raises(PublishRunError, match="differ from the trainer's final library"):
        check_fold(entries)


def test_a_directory_that_is_no_run_is_refused(tmp_path):
    with pytest.raises(PublishRunError, match="holds neither run.json .* nor run_report.json"):
        publish_run_dir(tmp_path, None, None, None, "alice/tfgrpo")


@pytest.mark.anvil
def test_publish_anchors_and_the_log_folds_back(finished_run, tmp_path, ledger_devnet):
    run_dir, trainer = finished_run
    store = LogStore(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    content = LocalBlockStore(tmp_path / "ipfs")
    contract = ledger_devnet.contract()
    published = publish_run_dir(run_dir, store, content, contract, "alice/tfgrpo")
    assert isinstance(published, PublishedRun)  # run_report.json: a Training-Free GRPO run

    log = store.get_log("alice/tfgrpo")
    assert log.size == published.size == 1 + len(trainer.history)
    assert contract.log_info(log.chain_log_id).size == log.size
    leaves = [(leaf.cid, decode_entry(content.cat(leaf.cid))) for leaf in store.leaves(log.name)]
    assert leaves[0][0] == published.run_cid
    folded = fold_library(leaves)  # the whole log, as any node replaying it would
    assert list(folded.values()) == [e.text for e in trainer.library]
    report = audit_log(contract, content, log.chain_log_id,
                       from_block=ledger_devnet.deployment_block)
    assert report.ok, report.discrepancies


@pytest.mark.anvil
def test_gym_train_publish_prints_each_entry_and_the_next_command(finished_run, ledger_devnet):
    """`gym train publish` (and `gym train tfgrpo --publish`) print every appended entry's kind,
    leaf index and CID, and a command to look at the run entry."""
    import re

    run_dir, trainer = finished_run
    gym = ledger_devnet.gym
    result = gym.run("train", "publish", str(run_dir), "alice/tfgrpo")
    assert result.returncode == 0, result.stderr
    printed = re.findall(r"^(run|experience) entry +(bafkrei[a-z2-7]+) \(leaf (\d+)\)$",
                         result.stdout, re.MULTILINE)
    assert [(kind, int(index)) for kind, _, index in printed] == [("run", 0)] + [
        ("experience", i) for i in range(1, 1 + len(trainer.history))]
    for kind, cid, index in printed[:2]:
        shown = gym.run("ledger", "show", "alice/tfgrpo", index, "--json")
        leaf = json.loads(shown.stdout)
        assert leaf["entry_cid"] == cid and leaf["entry"]["type"] == kind
    assert "next: gym ledger show alice/tfgrpo 0" in result.stdout
