"""Work checks (trainer.swarm.work): a real TRL trainer on the tiny model trains its assigned
rows; each local step's gradient sketch is re-computed from the parameters it was taken at and
the rows assigned to it, through the trainer's own collator, loss and clipping, within the
tolerance across thread counts and micro-batch splits (the margins are printed); a forged
sketch, other rows, or no forward pass at all fail."""

from __future__ import annotations

import json

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
    finally:
        at_parameters(trainer, seen[-1][0])
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


def test_a_failed_check_bans_with_evidence_anyone_can_re_check(trained, identities, tmp_path):
    from trainer.swarm.ban_evidence import check_ban, local_reader
    from trainer.swarm.commitments import sign_commitment, update_payload
    from trainer.swarm.gather import CLAIMS_ROUND, parameters_digest, read_bans
    from trainer.swarm.work_checks import WorkChecks

    trainer, config, seen = trained
    batch = config.training.batch_size * config.training.grad_accumulation
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    (_, der, peer), (_, der2, peer2) = identities[:2]
    work = WorkChecks(run=RUN, peer_id="QmChecker", trainer=trainer, params=params,
                      evidence_dir=tmp_path, seed=config.training.seed,
                      micro_batch=config.training.batch_size, local_batch=batch, check_steps=1)
    rows = rows_of_step(len(trainer.train_dataset), config.training.seed, peer, 5, batch)
    honest = make_claim(5, batch, recompute(trainer, rows, 2), parameters_digest(params), RUN,
                        peer)
    forged = make_claim(5, batch, [g * 1.01 for g in recompute(trainer, rows, 2)],
                        parameters_digest(params), RUN, peer)

    def round_of(epoch, claim):
        commitment = sign_commitment(der, peer, RUN, "grad", bytes([epoch]),
                                     update_payload([torch.ones(2)]), (claim.to_json(),))
        (tmp_path / CLAIMS_ROUND).write_text(json.dumps({
            "members": [peer, peer2], "commitments": {peer: commitment.encode()}}))
        work.check_round(epoch, frozenset([peer, peer2]))
        return work.take(epoch)[peer]

    assert round_of(1, honest) == {"claimed": batch, "checked": 1, "passed": 1,
                                   "tolerance": TOLERANCE}
    assert read_bans(tmp_path) == {}
    assert round_of(2, forged)["passed"] == 0
    line = read_bans(tmp_path)[peer]
    check = check_ban(line, local_reader(tmp_path))
    assert (check.reason, check.proven) == ("work_check", False)  # the re-computation is the
    assert "off by 0.01" in check.detail  # banner's figure; everything else is proven
    evidence = line["evidence"]
    kept = (tmp_path / evidence["parameters_payload"]).read_bytes()
    assert kept == update_payload(params)  # what a committee re-computes the step at
    for change, message in (
            ({"claimed": [x * 2 for x in evidence["claimed"]]}, "not the one its commitment"),
            ({"recomputed": evidence["claimed"]}, "within the tolerance"),
            ({"rows": list(reversed(evidence["rows"]))}, "not the rows assigned"),
            ({"step": 6}, "claims no step 6"),
            ({"commitment": sign_commitment(der2, peer2, RUN, "grad", bytes([2]),
                                            update_payload([torch.ones(2)])).encode()},
             "another peer")):
        with pytest.raises(SwarmRecordError, match=message):
            check_ban({**line, "evidence": {**evidence, **change}}, local_reader(tmp_path))
    (tmp_path / evidence["parameters_payload"]).write_bytes(b"\0" * len(kept))
    with pytest.raises(SwarmRecordError, match="not the parameters claimed at"):
        check_ban(line, local_reader(tmp_path))
