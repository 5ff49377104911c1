"""Work checks (trainer.swarm.work): a real TRL trainer on the tiny model trains its assigned
rows; each local step's gradient sketch is re-computed from the parameters it was taken at and
the rows assigned to it, through the trainer's own collator, loss and clipping, within the
tolerance across thread counts and micro-batch splits (the margins are printed); a forged
sketch, other rows, or no forward pass at all fail."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from tiny_sft import write_sft_config

from trainer.swarm.records import SwarmRecordError
from trainer.swarm.work import (
    SKETCH,
    TOLERANCE,
    AssignedRows,
    decode_claims,
    difference,
    make_claim,
    recompute,
    rows_of_step,
    sketch,
)

RUN, PEER, STEPS = "arith", "QmPeerUnderCheck", 4


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny SFT trainer (batch 2, gradient accumulation 2) that trained STEPS local steps
    on its assignment; each step's parameters and clipped gradient, as its optimizer saw them."""
    from transformers import TrainerCallback

    from trainer.gradient.config import load_config
    from trainer.gradient.train import build_trainer, resolve_base_model

    tmp = tmp_path_factory.mktemp("work")
    path = write_sft_config(tmp, STEPS, output_dir=tmp / "run")
    text = path.read_text().replace("batch_size: 2,", "batch_size: 2, grad_accumulation: 2,")
    path.write_text(text.replace("logging_steps: 1}", "logging_steps: 1, learning_rate: 0.01}"))
    config = load_config(path, method="sft")
    run_dir = tmp / "run"
    run_dir.mkdir()
    base = resolve_base_model(config, run_dir)
    seen: list[tuple[list, list]] = []

    class Capture(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            params = [p for p in model.parameters() if p.requires_grad]
            seen.append(([p.detach().clone() for p in params],
                         [None if p.grad is None else p.grad.detach().clone() for p in params]))

    trainer = build_trainer(config, base, run_dir, callbacks=[Capture()])
    rows = len(trainer.train_dataset)
    trainer._get_train_sampler = lambda *_a, **_k: AssignedRows(rows, config.training.seed, PEER)
    trainer.train()
    assert len(seen) == STEPS
    return trainer, config, seen


def at_parameters(trainer, values):
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    with torch.no_grad():
        for p, v in zip(params, values, strict=True):
            p.copy_(v)


def test_the_assignment_is_a_stream_of_permutations_of_the_rows():
    rows = [rows_of_step(16, 5, PEER, k, 4) for k in range(8)]
    flat = [row for step in rows for row in step]
    assert sorted(flat[:16]) == list(range(16))  # the first pass: each row once
    assert sorted(flat[16:]) == list(range(16))
    assert rows[:4] != rows[4:8]  # the next pass in another order
    assert rows_of_step(16, 5, "QmOther", 0, 4) != rows[0]  # another peer, another stream
    sampler = AssignedRows(16, 5, PEER)
    stream = iter(sampler)
    assert [next(stream) for _ in range(32)] == flat
    assert len(sampler) == 16 * 10**6


def test_each_step_re_computes_within_the_tolerance_and_forgeries_fail(trained, capsys):
    trainer, config, seen = trained
    batch = config.training.batch_size * config.training.grad_accumulation
    rows_total = len(trainer.train_dataset)
    margins = []
    threads_before = torch.get_num_threads()
    try:
        for step, (params, gradients) in enumerate(seen):
            claimed = sketch(gradients, RUN, PEER, step)
            at_parameters(trainer, params)
            rows = rows_of_step(rows_total, config.training.seed, PEER, step, batch)
            for threads in (1, 2):
                for micro in (config.training.batch_size, 1, batch):
                    torch.set_num_threads(threads)
                    again = sketch(recompute(trainer, rows, micro), RUN, PEER, step)
                    margins.append(difference(claimed, again))
                    assert margins[-1] <= TOLERANCE, (step, threads, micro, margins[-1])
            torch.set_num_threads(2)
            # other rows than assigned (the next step's), or a made-up sketch: refused
            other = rows_of_step(rows_total, config.training.seed, PEER, step + 1, batch)
            wrong = sketch(recompute(trainer, other, 2), RUN, PEER, step)
            assert difference(claimed, wrong) > 100 * TOLERANCE
            assert difference(tuple(x * 1.01 for x in claimed), claimed) > TOLERANCE
            # no forward pass: no gradient, a zero sketch
            assert difference(sketch([None] * len(gradients), RUN, PEER, step),
                              claimed) == pytest.approx(1.0)
    finally:  # what this worker's next tests run with is left as it was
        at_parameters(trainer, seen[-1][0])
        torch.set_num_threads(threads_before)
    with capsys.disabled():
        print(f"\nwork checks: {len(margins)} re-computations (threads 1 and 2, micro-batches "
              f"1, 2, 4), largest difference {max(margins):.2e} of the tolerance {TOLERANCE:.0e}"
              f" ({max(margins) / TOLERANCE:.1%} of it)")


def test_claims_round_trip_and_a_malformed_one_is_one_clear_error(trained):
    _, _, seen = trained
    claim = make_claim(3, 4, seen[0][1], "sha256:" + "ab" * 32, RUN, PEER)
    assert len(claim.sketch) == SKETCH
    assert decode_claims(json.loads(json.dumps([claim.to_json()])), 4) == [claim]
    for bad, message in (
            ([claim.to_json(), claim.to_json()], "a new integer"),
            ([{**claim.to_json(), "samples": 5}], "from 0 to 4"),
            ([{**claim.to_json(), "sketch": [1.0]}], "8 finite numbers"),
            ([{**claim.to_json(), "sketch": [float("nan")] * 8}], "8 finite numbers"),
            ([{**claim.to_json(), "parameters": "x"}], "sha256"),
            ([{"step": 1}], "step, samples"), ("x", "a list")):
        with pytest.raises(SwarmRecordError, match=message):
            decode_claims(bad, 4)


@pytest.fixture(scope="module")
def work_ban(trained, identities, tmp_path_factory):
    """A checker's `WorkChecks` re-computing a peer's honest claim (passed) and then a forged
    one (its gradient x 1.01: banned, evidence in ``evidence_dir``); ``framed``: the ban a lying
    checker would write of the honest claim (a made-up re-computed sketch); ``published``: the
    run's config as its run entry carries it."""
    from trainer.gradient.train import resolve_base_model
    from trainer.provenance import file_digest
    from trainer.swarm.commitments import sign_commitment, update_payload
    from trainer.swarm.gather import CLAIMS_ROUND, parameters_digest, read_bans
    from trainer.swarm.work_checks import WorkChecks

    trainer, config, _ = trained
    tmp = tmp_path_factory.mktemp("ban")
    batch = config.training.batch_size * config.training.grad_accumulation
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    (_, der, peer), (_, _, peer2) = identities[:2]
    work = WorkChecks(run=RUN, peer_id="QmChecker", trainer=trainer, params=params,
                      evidence_dir=tmp, seed=config.training.seed,
                      micro_batch=config.training.batch_size, local_batch=batch, check_steps=1)
    rows = rows_of_step(len(trainer.train_dataset), config.training.seed, peer, 5, batch)
    gradients = recompute(trainer, rows, 2)
    honest = make_claim(5, batch, gradients, parameters_digest(params), RUN, peer)
    forged = make_claim(5, batch, [g * 1.01 for g in gradients], parameters_digest(params),
                        RUN, peer)

    def commit(epoch, claim):
        return sign_commitment(der, peer, RUN, "grad", bytes([epoch]),
                               update_payload([torch.ones(2)]), (claim.to_json(),)).encode()

    def round_of(epoch, claim):
        (tmp / CLAIMS_ROUND).write_text(json.dumps({
            "members": [peer, peer2], "commitments": {peer: commit(epoch, claim)}}))
        work.check_round(epoch, frozenset([peer, peer2]))
        return work.take(epoch)[peer]

    passed = round_of(1, honest)
    assert read_bans(tmp) == {}
    failed = round_of(2, forged)
    line = read_bans(tmp)[peer]
    framed = {**line, "evidence": {**line["evidence"], "commitment": commit(2, honest),
                                   "claimed": list(honest.sketch),
                                   "recomputed": [x * 1.5 for x in honest.sketch]}}
    base = resolve_base_model(config, Path(config.output_dir))
    published = {**config.to_dict(), "base_model": {"name": base.name,
                                                    "weights_digest": base.weights_digest}}
    return {"line": line, "framed": framed, "dir": tmp, "passed": passed, "failed": failed,
            "params": update_payload(params), "peer": peer, "identities": identities,
            "published": published, "digests": [file_digest(config.dataset.path)],
            "base": base, "dataset": Path(config.dataset.path)}


def test_a_failed_check_bans_with_evidence_anyone_can_re_check(trained, work_ban, tmp_path):
    from trainer.swarm.ban_evidence import check_ban, local_reader
    from trainer.swarm.commitments import sign_commitment, update_payload
    from trainer.swarm.recheck import recheck_work, work_trainer

    _, config, _ = trained
    batch = config.training.batch_size * config.training.grad_accumulation
    assert work_ban["passed"] == {"claimed": batch, "checked": 1, "passed": 1,
                                  "tolerance": TOLERANCE}
    assert work_ban["failed"]["passed"] == 0
    line, evidence = work_ban["line"], work_ban["line"]["evidence"]
    shutil.copytree(work_ban["dir"], tmp_path, dirs_exist_ok=True)  # this test changes files
    read = local_reader(tmp_path)
    check = check_ban(line, read)
    assert (check.reason, check.proven) == ("work_check", False)  # the re-computation is the
    assert "off by 0.01" in check.detail  # banner's figure; everything else is proven
    kept = (tmp_path / evidence["parameters_payload"]).read_bytes()
    assert kept == work_ban["params"]  # what a committee re-computes the step at
    _, (_, der2, peer2) = work_ban["identities"][:2]
    for change, message in (
            ({"claimed": [x * 2 for x in evidence["claimed"]]}, "not the one its commitment"),
            ({"recomputed": evidence["claimed"]}, "within the tolerance"),
            ({"rows": list(reversed(evidence["rows"]))}, "not the rows assigned"),
            ({"step": 6}, "claims no step 6"),
            ({"commitment": sign_commitment(der2, peer2, RUN, "grad", bytes([2]),
                                            update_payload([torch.ones(2)])).encode()},
             "another peer")):
        with pytest.raises(SwarmRecordError, match=message):
            check_ban({**line, "evidence": {**evidence, **change}}, read)

    # re-computed by someone else: the run's trainer rebuilt from its published config on
    # local copies of its dataset and base weights (as `gym audit --recompute` does)
    published, digests, base = work_ban["published"], work_ban["digests"], work_ban["base"]
    fresh = work_trainer(published, digests, dataset=work_ban["dataset"], model=base.path,
                         scratch=tmp_path / "auditor")
    again = recheck_work(line, read, fresh)
    assert again.upheld and 0.005 < again.difference < 0.02, again
    # a checker that lied about an honest claim (its "re-computed" sketch made up) is found out
    assert check_ban(work_ban["framed"], read).reason == "work_check"  # looks failed
    cleared = recheck_work(work_ban["framed"], read, fresh)
    assert not cleared.upheld and cleared.difference <= TOLERANCE, cleared
    print(f"\nre-computed by a fresh trainer: the forged claim is off by {again.difference:.4f}, "
          f"the honest one by {cleared.difference:.2e} (tolerance {TOLERANCE})")
    for wrong, sums, message in (
            (published, ["sha256:" + "1" * 64], "not the run's dataset"),
            ({**published, "base_model": {"weights_digest": "sha256:" + "0" * 64}}, digests,
             "not the run's")):
        with pytest.raises(SwarmRecordError, match=message):
            work_trainer(wrong, sums, dataset=work_ban["dataset"], model=base.path,
                         scratch=tmp_path / "auditor2")
    (tmp_path / evidence["parameters_payload"]).write_bytes(b"\0" * len(kept))
    with pytest.raises(SwarmRecordError, match="not the parameters claimed at"):
        check_ban(line, read)


def published_run(tmp_path: Path, work_ban: dict, banned: list, refused: list = ()) -> Path:
    """A swarm run's directory as `gym adapter publish` takes it: its base weights, the ban
    evidence of ``work_ban``, ``banned`` and ``refused`` in run.hardware.swarm."""
    run_dir = tmp_path / "run"
    shutil.copytree(work_ban["base"].path, run_dir / "base")
    shutil.copytree(work_ban["dir"], run_dir / "swarm_evidence")
    (run_dir / "adapter").mkdir()
    (run_dir / "adapter" / "adapter_config.json").write_text('{"r": 4}')
    swarm = {"run": RUN, "peer_id": "QmChecker", "local_steps": 0, "banned": banned,
             "refused": list(refused)}
    (run_dir / "run.json").write_text(json.dumps({
        "method": "sft", "base_model": work_ban["published"]["base_model"],
        "adapter_dir": "adapter", "adapter": {"dataset_digest": work_ban["digests"][0]},
        "run": {"config": work_ban["published"], "code_version": "test", "packages": {},
                "hardware": {"swarm": swarm}, "dataset_digests": work_ban["digests"],
                "metrics": {}}}))
    return run_dir


def test_gym_audit_re_computes_a_published_work_check_ban(ledger_devnet, work_ban, tmp_path):
    """Published with its run (`gym adapter publish`), a work-check ban is re-checked by
    `gym audit` from the chain and the endpoint; with --recompute the step is re-computed with
    the base weights the run published: the true ban is proven, the framed one fails the audit."""
    run_dir = published_run(tmp_path, work_ban, [work_ban["line"], work_ban["framed"]])
    gym = ledger_devnet.gym
    published = gym.run("adapter", "publish", str(run_dir), "alice/work")
    assert published.returncode == 0, published.stderr
    plain = gym.run("audit", "alice/work")  # both bans' evidence holds up to the re-computation
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "2 bans re-checked from the published evidence (0 proven by it, 2 resting on the " \
           "banning peer's re-computation)" in plain.stdout, plain.stdout
    again = gym.run("audit", "alice/work", "--recompute", str(work_ban["dataset"]))
    assert again.returncode == 1, again.stdout + again.stderr
    out = " ".join(again.stdout.split())
    assert f"banned {work_ban['peer']} (work_check): its signed claim of step 5 is off by 0.01" \
           in out and "from the step re-computed here" in out, out
    assert "is not proven by its evidence: re-computed here, its claim of step 5 is off by 0, " \
           "within the tolerance" in out, out
    wrong = gym.run("audit", "alice/work", "--recompute", str(run_dir / "run.json"))
    assert wrong.returncode == 1 and "not the run's dataset" in " ".join(wrong.stdout.split())


def test_a_staked_volunteer_that_failed_a_work_check_is_slashed_by_the_committee(
        ledger_devnet, work_ban, tmp_path):
    """The volunteer stakes (`gym swarm register`); the run that banned it keeps its signed
    record; a challenger opens a committee challenge of that record with the run as evidence
    (`gym verifier challenge-work`); each verifier re-computes the step from the published run
    and its own copy of the dataset (the judge `gym verifier serve --swarm-data` runs), upholds,
    and the settlement slashes the stake. A ban a lying checker made up is rejected."""
    import committee_world
    from eth_account import Account

    from committee import SignedVerdict
    from committee.aggregator import Aggregator
    from committee.client import ChallengeState
    from committee.judge import UPHELD_OUTCOME
    from committee.service import evidence_judge
    from committee.work_judge import judge_work, work_evidence
    from contracts.devnet_accounts import ANVIL_DEV_KEYS
    from devnet.deploy import Deployment
    from devnet.runtime import ledger_runtime
    from devnet.settings import GymSettings
    from governance.devnet_time import advance_time
    from inference_node.registry import NodeRegistry
    from ledger.contributions import contribution_digest
    from ledger.entries import entry_cid
    from trainer.swarm.audit import recomputer
    from trainer.swarm.peer import settings_digest
    from trainer.swarm.records import Contribution, Round, sign_contribution
    gym = ledger_devnet.gym
    volunteer = Account.from_key(ANVIL_DEV_KEYS[4])  # holds GYM to stake
    work_digest = settings_digest(
        work_ban["published"], work_ban["base"].weights_digest, work_ban["digests"][0])
    record = sign_contribution(Contribution(
        run=RUN, config_digest=work_digest, peer_id=work_ban["peer"],
        contributor=volunteer.address.lower(), samples=8, steps=2, epoch=2,
        rounds=(Round(2, 4),)), volunteer.key)
    refused = [{"peer_id": work_ban["peer"], "reason": "banned from the run: work_check",
                "record": record.to_json()}]
    run_dir = published_run(tmp_path, work_ban, [work_ban["line"]], refused)
    assert gym.run("adapter", "publish", str(run_dir), "alice/slash").returncode == 0
    run_cid = json.loads(gym.run("ledger", "show", "alice/slash", "0", "--json").stdout)[
        "entry_cid"]

    staked = gym.run("swarm", "register", "--account", "4", "--stake", "150")
    assert staked.returncode == 0, staked.stderr
    assert f"registered volunteer {volunteer.address}" in staked.stdout, staked.stdout
    deployment = Deployment.load(gym.deployment_file)
    world = committee_world.register_verifiers(deployment)
    opened = gym.run("verifier", "challenge-work", run_cid, work_ban["peer"], "--account", "5")
    assert opened.returncode == 0, opened.stdout + opened.stderr
    challenge_id = int(opened.stdout.split()[-1])
    digest = contribution_digest(record)
    assert f"record 0x{digest.hex()}" in " ".join(opened.stderr.split()), opened.stderr

    rt = ledger_runtime(GymSettings(data_dir=gym.data_dir, deployment_file=gym.deployment_file))
    committee = world.client()
    (event,) = committee.opened(challengeId=challenge_id)
    judge = evidence_judge(rt.content, check=None, recheck=recomputer(
        work_ban["dataset"], None, tmp_path / "verifier", rt.content))
    judgement = judge(event)
    assert (judgement.outcome, judgement.reason) == (UPHELD_OUTCOME, "work_check"), judgement
    registry = NodeRegistry(rt.contract.w3, deployment.contracts["NodeRegistry"].address)
    before = registry.node_of(volunteer.address).stake
    aggregator = Aggregator(world.client(ANVIL_DEV_KEYS[0]), report=lambda line: None)
    for index, bls in enumerate(committee_world.BLS):
        aggregator.submit(SignedVerdict.create(
            bls, judgement.verdict(challenge_id, digest), chain_id=committee.chain_id,
            committee=committee.address, verifier_index=index,
            verifier=Account.from_key(committee_world.VERIFIER_KEYS[index]).address).to_bytes())
    aggregator.tick()
    assert committee.challenge(challenge_id).status == ChallengeState.SETTLED
    advance_time(rt.contract.w3, committee.appeal_window() + 1)
    aggregator.tick()
    assert committee.challenge(challenge_id).status == ChallengeState.FINALIZED
    slash = deployment.governance.node_slash
    assert registry.node_of(volunteer.address).stake == before - min(slash, before)

    # refusals that need no re-computation, and a verifier without the dataset abstains
    for evidence, outcome, words in (
            (b"{}", "rejected", "malformed evidence"),
            (work_evidence(run_cid, "QmSomeoneElse"), "rejected", "bans no peer"),
            (work_evidence(entry_cid(b"{}"), work_ban["peer"]), "rejected", "the run entry"),
            (work_evidence(run_cid, work_ban["peer"]), "abstain", "--swarm-data")):
        judged = judge_work(evidence, digest, content=rt.content, recheck=None)
        assert judged.outcome == outcome and words in judged.detail, (evidence, judged)

    # a checker that made its figure up: the honest claim re-computes within the tolerance
    framed_dir = published_run(tmp_path / "framed", work_ban, [work_ban["framed"]], refused)
    assert gym.run("adapter", "publish", str(framed_dir), "alice/framed").returncode == 0
    framed_cid = json.loads(gym.run("ledger", "show", "alice/framed", "0", "--json").stdout)[
        "entry_cid"]
    rejected = judge_work(work_evidence(framed_cid, work_ban["peer"]), digest, content=rt.content,
                          recheck=recomputer(work_ban["dataset"], None, tmp_path / "v2",
                                             rt.content))
    assert rejected.outcome == "rejected" and "within the tolerance" in rejected.detail
    # nor is a record whose signed settings are not the published run's (another dataset, base
    # or config than the volunteer trained on could make an honest claim look false)
    unbound = sign_contribution(Contribution(
        run=RUN, config_digest="sha256:" + "ab" * 32, peer_id=work_ban["peer"],
        contributor=volunteer.address.lower(), samples=8, steps=2, epoch=2,
        rounds=(Round(2, 4),)), volunteer.key)
    other = published_run(tmp_path / "other", work_ban, [work_ban["line"]],
                          [{**refused[0], "record": unbound.to_json()}])
    assert gym.run("adapter", "publish", str(other), "alice/other").returncode == 0
    other_cid = json.loads(gym.run("ledger", "show", "alice/other", "0", "--json").stdout)[
        "entry_cid"]
    refusal = judge_work(work_evidence(other_cid, work_ban["peer"]), contribution_digest(unbound),
                         content=rt.content, recheck=recomputer(
                             work_ban["dataset"], None, tmp_path / "v3", rt.content))
    assert refusal.outcome == "rejected" and "not the published run's" in refusal.detail, refusal
