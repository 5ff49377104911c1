"""One peer of a volunteer training run: `gym train sft|grpo CONFIG --swarm RUN`.

    session = SwarmSession(config, SwarmOptions(run="arith-1", initial_peers=[...]), key)
    result = train(config, callbacks=[...], swarm=session)  # trainer.gradient.train

The peers share no coordinator: a hivemind DHT (libp2p, its daemon ships in hivemind's wheel)
finds them, and `hivemind.Optimizer` averages their gradients. `SwarmSession` is what `train`
calls around TRL's training loop:

- `attach(trainer, base)`: start the DHT (print ``swarm peer: MADDR ...``, what joiners pass
  to ``--initial-peers``), publish this peer's `PeerSpec` and refuse to join a run whose peers
  train something else (one line naming the field), wait for ``--min-peers``, then replace the
  trainer's optimizer with a recording `hivemind.Optimizer`: each peer accumulates gradients
  until the peers together processed ``target_batch_size`` samples, then they average them in
  one all-reduce and take the same optimizer step (one collaborative step, hivemind's epoch),
  and average parameters and Adam's moments, so a round lost to a dead peer heals at the next.
  With ``local_steps`` H > 0 (DiLoCo-style) each peer steps its own AdamW every local batch
  instead, and the collaborative step averages parameters and Adam's moments only (an outer
  step of plain averaging: DiLoCo's outer SGD at learning rate 1 without momentum); the
  default target is then H local batches times ``min_peers``, about H local steps a peer.
  The learning rate follows the collaborative step. Each peer shuffles the data with its own
  seed (the run's seed and its peer id), so the peers train on different orders of the rows.
  A peer that joins late, or falls behind, downloads the current state from the others first.
- the trainer stops when the collaborative step reaches the run's ``max_steps``; every peer
  stops at the same step with the same weights.
- `finish(trainer)`: sign and publish the final `Contribution` record, stay reachable until the
  live peers finished too (a straggler can still download the state) or ``linger_s`` passed,
  check every peer's latest record against what this peer saw (`trainer.swarm.witness`), and
  return ``run.hardware.swarm`` for run.json: the run, this peer, its rounds, the contributors
  with their shares and the records refused.

Records are republished every ``RECORD_INTERVAL_S`` seconds of training, so a peer that dies
leaves its last one behind (the DHT keeps copies on other peers for ``RECORD_TTL_S``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Self

from ledger.canonical_json import canonical_bytes
from trainer.errors import TrainerError
from trainer.swarm.records import (
    SWARM_RECORDS,
    Contribution,
    PeerSpec,
    Round,
    SwarmRecordError,
    check_run_id,
    decode_spec,
    sign_binding,
    sign_contribution,
    spec_difference,
)
from trainer.swarm.witness import RoundSeen, Witness, judge_records

RECORD_INTERVAL_S = 5.0
RECORD_TTL_S = 24 * 3600.0
COMPRESSIONS = ("none", "float16", "8bit")
MAX_DHT_RECORDS = 1024  # peer records read from the DHT at once; more are ignored
MAX_BANNED_SHOWN = 64  # peer ids a peer lists as banned in its DHT value
EVIDENCE_DIR = "swarm_evidence"  # in the run dir: bans.jsonl and the payloads they cite
CONVERGE_GRACE_S = 10.0  # at the end, how long the majority waits for a peer that differs


class SwarmError(TrainerError, RuntimeError):
    """A swarm peer cannot join or finish the run; the message says why in one line."""


@dataclass(frozen=True)
class SwarmOptions:
    run: str  # the run's name: every DHT key of the run starts with it
    initial_peers: tuple[str, ...] = ()  # multiaddrs of peers already in the run
    target_batch_size: int | None = None  # samples per collaborative step; None: see `target`
    local_steps: int = 0  # 0: average gradients every step; H: local steps, average parameters
    min_peers: int = 1  # hold the first step until this many peers joined
    host_maddrs: tuple[str, ...] = ("/ip4/0.0.0.0/tcp/0",)
    announce_maddrs: tuple[str, ...] = ()
    matchmaking_time: float = 5.0  # seconds to gather a group for a round
    averaging_timeout: float = 60.0  # a round that takes longer is dropped
    compression: str = "none"  # of averaged gradients and parameters: none, float16, 8bit
    linger_s: float = 60.0  # at the end, wait at most this long for the other live peers
    join_timeout_s: float = 600.0  # --min-peers waits at most this long
    check_steps: int = 1  # claimed local steps of each other member re-computed per round


def config_digest(config, base_digest: str, dataset_digest: str) -> str:
    """sha256 over the run's training settings and the digests of its base weights and dataset
    (`settings_digest` of the config): what every peer's spec and signed records name, so a
    record binds the work it claims to what re-computing it takes."""
    return settings_digest(config.to_dict(), base_digest, dataset_digest)


def settings_digest(data: dict, base_digest: str, dataset_digest: str) -> str:
    """`config_digest` of a config as a dict (a published run entry's ``config``, whose
    ``base_model`` is left out): the config without what may differ between machines (output
    dir, dataset and model paths: their digests are in instead, device), as RFC 8785 JSON."""
    data = {k: v for k, v in data.items() if k not in ("output_dir", "model", "base_model")}
    data["dataset"] = {k: v for k, v in (data.get("dataset") or {}).items() if k != "path"}
    data["training"] = {k: v for k, v in (data.get("training") or {}).items() if k != "device"}
    data["base_digest"], data["dataset_digest"] = base_digest, dataset_digest
    # RFC 8785: the same bytes from the config in memory (epochs 1.0) and from a published run
    # entry (canonical JSON, where it reads back as 1)
    return "sha256:" + hashlib.sha256(canonical_bytes(data)).hexdigest()


def _peers_key(run: str) -> str:
    return f"{run}_gym_peers"


@dataclass
class _Local:
    """What this peer did: its samples and steps, and the rounds it averaged in."""

    samples: int = 0
    steps: int = 0
    pending: int = 0  # samples of the forwards since the last optimizer step
    averaging_s: float = 0.0  # seconds spent in collaborative steps (matchmaking, all-reduce)
    rounds: list[Round] = field(default_factory=list)


class SwarmSession:
    """One peer's part in a swarm run (module docstring)."""

    def __init__(self, config, options: SwarmOptions, key: str, console=None) -> None:
        from eth_account import Account

        check_run_id(options.run)
        if options.compression not in COMPRESSIONS:
            raise SwarmError(f"--compression is one of {', '.join(COMPRESSIONS)}")
        if config.training.max_steps is None:
            raise SwarmError("a swarm run counts collaborative steps: set training.max_steps "
                             "or --max-steps")
        self.config, self.options, self.key = config, options, key
        self.address = Account.from_key(key).address.lower()
        self.console = console
        self.max_steps = config.training.max_steps
        t = config.training
        self.batch_per_step = t.batch_size * t.grad_accumulation
        if options.local_steps < 0:
            raise SwarmError("--local-steps is 0 (average gradients) or more")
        self.target = options.target_batch_size or (
            options.local_steps * self.batch_per_step * options.min_peers if options.local_steps
            else 4 * self.batch_per_step)
        self.config_digest = None  # config_digest, once the base weights are known (join)
        self.local = _Local()
        self.dht = self.optimizer = self.spec = None
        self.witness = Witness(options.run, self.config_digest, self.batch_per_step, self.target)
        self._subkey = None
        self._last_record = 0.0
        self._final_digest = None  # set once training ended: the weights this peer holds
        self._heartbeat = self._hook = None
        self._stop_signal: int | None = None  # SIGINT or SIGTERM received: stop at once
        self.work = None  # trainer.swarm.work_checks.WorkChecks, once the optimizer is made
        self._old_handlers: dict[int, Any] = {}

    # ------------------------------------------------------------------ joining

    def start(self) -> list[str]:
        """Start this peer's DHT node under a new libp2p identity (kept in the run directory:
        its key signs the spec's binding); its visible multiaddrs."""
        from pathlib import Path

        from hivemind.dht.crypto import RSASignatureValidator
        from hivemind.p2p import P2P
        from hivemind.proto import crypto_pb2

        self._handle_stop_signals()
        identity = Path(self.config.output_dir) / ".swarm" / "identity.key"
        identity.parent.mkdir(parents=True, exist_ok=True)
        evidence = self.evidence_dir()
        if evidence.is_dir():  # an earlier run's bans are not this run's
            shutil.rmtree(evidence)
        identity.unlink(missing_ok=True)
        P2P.generate_identity(str(identity))  # mode 0400
        self._identity_der = crypto_pb2.PrivateKey.FromString(identity.read_bytes()).data
        validator = RSASignatureValidator()  # the process's key, as hivemind's tracker uses
        self._subkey = validator.local_public_key
        self.dht = _start_dht(
            "cannot join the swarm", initial_peers=list(self.options.initial_peers),
            host_maddrs=list(self.options.host_maddrs),
            announce_maddrs=list(self.options.announce_maddrs) or None,
            record_validators=[validator], identity_path=str(identity),
            check_if_identity_free=False)  # new: nobody else holds it
        maddrs = [str(m) for m in self.dht.get_visible_maddrs()]
        if self.console is not None:
            self.console.print("swarm peer: " + " ".join(maddrs), highlight=False, soft_wrap=True)
        return maddrs

    def evidence_dir(self):
        """Where this peer's averagers write the peers they banned and the evidence
        (trainer.swarm.gather), beside run.json."""
        from pathlib import Path

        return Path(self.config.output_dir) / EVIDENCE_DIR

    def gym_round(self, averager: str):
        """What this peer's ``averager`` ("grad" or "state") needs for robust rounds."""
        from trainer.swarm.gather import GymRound

        return GymRound(run=self.options.run, averager=averager, identity=self._identity_der,
                        evidence_dir=self.evidence_dir(),
                        wait_s=max(5.0, min(30.0, self.options.averaging_timeout / 4)),
                        codec=self.options.compression, max_epoch=self.max_steps)

    def banned(self) -> dict[str, dict]:
        """peer id -> the ban line (reason, evidence) of each peer this peer's averagers banned."""
        from trainer.swarm.gather import read_bans

        return read_bans(self.evidence_dir())

    def _records(self) -> dict[bytes, dict]:
        """The run's peer records in the DHT: subkey -> {"spec", "contribution", ...}, each
        with the owner key (``_owner``, hex) it was stored under and its store time."""
        from hivemind.utils import get_dht_time

        found = self.dht.get(_peers_key(self.options.run), latest=True)
        if found is None or not isinstance(found.value, dict):
            return {}
        out = {}
        for subkey, item in list(found.value.items())[:MAX_DHT_RECORDS]:
            value = getattr(item, "value", None)
            if isinstance(value, dict):
                value = {**value, "_stored": getattr(item, "expiration_time", 0) - RECORD_TTL_S,
                         "_now": get_dht_time(), "_owner": _owner(subkey)}
                out[subkey] = value
        return out

    def _peer_specs(self) -> dict[str, PeerSpec]:
        specs = {}
        for value in self._records().values():
            spec = _owned_spec(value)  # a malformed or copied spec is no peer of the run
            if spec is not None and spec.run == self.options.run:
                specs[spec.peer_id] = spec
        return specs

    def _publish(self, record: Contribution | None = None) -> None:
        from hivemind.utils import get_dht_time

        value = {"spec": self.spec.to_json()}
        if record is not None:
            value["contribution"] = record.to_json()
        if self._final_digest is not None:
            value["final_weights"] = self._final_digest
        banned = sorted(self.banned())[:MAX_BANNED_SHOWN]
        if banned:
            value["banned"] = banned
        self.dht.store(_peers_key(self.options.run), subkey=self._subkey, value=value,
                       expiration_time=get_dht_time() + RECORD_TTL_S)

    def join(self, base, maddrs: list[str]) -> None:
        """Publish this peer's spec; refuse a run that trains something else; wait for
        ``min_peers``."""
        from trainer.provenance import file_digest

        dataset = file_digest(self.config.dataset.path)
        self.config_digest = config_digest(self.config, base.weights_digest, dataset)
        self.witness.config_digest = self.config_digest
        self.spec = PeerSpec(
            run=self.options.run, peer_id=str(self.dht.peer_id), address=self.address,
            method=self.config.method, base_model=base.name, base_digest=base.weights_digest,
            dataset_digest=dataset, config_digest=self.config_digest, target_batch_size=self.target,
            local_steps=self.options.local_steps, max_steps=self.max_steps, maddrs=tuple(maddrs[:8]))
        owner = _owner(self._subkey)
        key, binding = sign_binding(self._identity_der, self.options.run, self.address, owner)
        self.spec = replace(self.spec, libp2p_key=key, dht_owner=owner, binding=binding)
        self.witness.me = self.spec.peer_id
        self.witness.unchecked = self.options.local_steps > 0
        deadline = time.monotonic() + self.options.join_timeout_s
        shown = None
        while True:
            specs = self._peer_specs()
            for peer_id, spec in specs.items():
                if peer_id != self.spec.peer_id:
                    difference = spec_difference(self.spec, spec)
                    if difference is not None:
                        raise SwarmError(f"run {self.options.run}: {difference}; this peer "
                                         "cannot join it")
            self._publish(self._record())
            joined = len({peer_id for peer_id, spec in specs.items()
                          if spec_difference(self.spec, spec) is None} | {self.spec.peer_id})
            if joined >= self.options.min_peers:
                return
            if time.monotonic() > deadline:
                raise SwarmError(f"run {self.options.run}: {joined} of --min-peers "
                                 f"{self.options.min_peers} peers joined in "
                                 f"{self.options.join_timeout_s:.0f} s")
            if self.console is not None and joined != shown:
                shown = joined
                self.console.print(f"swarm {self.options.run}: {joined} of "
                                   f"{self.options.min_peers} peers joined, waiting",
                                   highlight=False)
            self.sleep(1.0)

    def _handle_stop_signals(self) -> None:
        """Ctrl-C and SIGTERM stop this peer at once, and `close` then stops hivemind's child
        processes (its DHT node, averagers and p2pd outlive a default SIGTERM; a
        KeyboardInterrupt raised inside hivemind's calls could be lost: the flag is checked
        again at every wait). A forked child keeps the default behaviour; an ignored signal
        stays ignored."""
        import os
        import signal

        if threading.current_thread() is not threading.main_thread():
            return
        pid = os.getpid()

        def stop(signum, _frame) -> None:
            if os.getpid() != pid:  # a hivemind child forked after this was installed
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
                return
            self._stop_signal = signum
            raise KeyboardInterrupt

        for signum in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup, a background job
                self._old_handlers[signum] = signal.signal(signum, stop)

    def sleep(self, seconds: float) -> None:
        """Wait, unless a stop signal came (then KeyboardInterrupt)."""
        if self._stop_signal is None:
            time.sleep(seconds)
        if self._stop_signal is not None:
            raise KeyboardInterrupt

    # ------------------------------------------------------------------ training

    def attach(self, trainer, base) -> None:
        """Join the run and put hivemind's optimizer into ``trainer`` (see the module docs)."""
        maddrs = self.start()
        self.join(base, maddrs)
        peer_seed = int.from_bytes(hashlib.sha256(self.spec.peer_id.encode()).digest()[:4], "big")
        trainer.args.data_seed = (self.config.training.seed + peer_seed) % 2**31
        trainer.args.max_steps = 10**9  # the callback stops at the run's collaborative step
        from trainer.swarm.work import AssignedRows

        rows = len(trainer.train_dataset)
        seed = self.config.training.seed
        trainer._get_train_sampler = lambda *_a, **_k: AssignedRows(rows, seed,
                                                                   self.spec.peer_id)
        self.optimizer = self._make_optimizer(trainer)
        trainer.optimizer = self.optimizer
        trainer.lr_scheduler = _SwarmSchedule(self.optimizer)
        self._hook = trainer.model.register_forward_pre_hook(self._count_samples,
                                                             with_kwargs=True)
        trainer.add_callback(_swarm_callback(self))
        stop = threading.Event()
        self._heartbeat = (stop, threading.Thread(target=self._beat, args=(stop,), daemon=True))
        self._heartbeat[1].start()

    def _count_samples(self, _module, args, kwargs) -> None:
        import torch

        if self.work is not None and self.work.checking:
            return
        ids = kwargs.get("input_ids", args[0] if args else None)
        if torch.is_grad_enabled() and isinstance(ids, torch.Tensor) and ids.dim() >= 1:
            self.local.pending += int(ids.shape[0])

    def _make_optimizer(self, trainer):
        from functools import partial

        import torch
        from hivemind import compression
        from transformers import get_scheduler

        from trainer.swarm.gather import GymGradAverager
        from trainer.swarm.work_checks import WorkChecks

        t = self.config.training
        params = [p for p in trainer.model.parameters() if p.requires_grad]
        self.work = WorkChecks(
            run=self.options.run, peer_id=self.spec.peer_id, trainer=trainer, params=params,
            evidence_dir=self.evidence_dir(), seed=t.seed, micro_batch=t.batch_size,
            local_batch=self.batch_per_step, check_steps=self.options.check_steps,
            enabled=not self.options.local_steps)
        codec = {"none": compression.NoCompression, "float16": compression.Float16Compression,
                 "8bit": compression.Uniform8BitQuantization}[self.options.compression]()
        return _optimizer_class()(
            session=self, dht=self.dht, run_id=self.options.run, target_batch_size=self.target,
            batch_size_per_step=self.batch_per_step, params=params,
            optimizer=lambda ps: torch.optim.AdamW(ps, lr=t.learning_rate,
                                                   weight_decay=trainer.args.weight_decay),
            scheduler=lambda opt: get_scheduler(t.lr_scheduler, opt,
                                                num_warmup_steps=t.warmup_steps,
                                                num_training_steps=self.max_steps),
            matchmaking_time=self.options.matchmaking_time,
            # with local steps a peer that finds no group trains on: a parameter round waits
            # for its group at most three matchmaking times
            averaging_timeout=min(self.options.averaging_timeout,
                                  3 * self.options.matchmaking_time)
            if self.options.local_steps else self.options.averaging_timeout,
            allreduce_timeout=self.options.averaging_timeout,
            # hivemind waits 600 s for a state download, then retries: a LoRA state is a few
            # MB, and a download that has not finished in two round times has stalled
            load_state_timeout=max(60.0, 2 * self.options.averaging_timeout),
            use_local_updates=self.options.local_steps > 0,
            grad_averager_factory=None if self.options.local_steps else partial(
                GymGradAverager, gym=self.gym_round("grad")),
            delay_state_averaging=False, average_opt_statistics=("exp_avg", "exp_avg_sq"),
            grad_compression=codec, state_averaging_compression=codec)

    def _round_done(self, epoch: int, members: frozenset[str] | None, mine: int,
                    announced: dict[str, int]) -> None:
        """The optimizer finished collaborative step ``epoch``."""
        self.witness.epoch = max(self.witness.epoch, epoch)
        if members is not None and self.spec.peer_id in members:
            self.witness.rounds[epoch] = RoundSeen(epoch, members, announced,
                                                   self.work.take(epoch))
            if mine > 0:
                self.local.rounds.append(Round(epoch, mine))

    def _record(self) -> Contribution:
        epoch = self.optimizer.local_epoch if self.optimizer is not None else 0
        record = Contribution(
            run=self.options.run, config_digest=self.config_digest,
            peer_id=self.spec.peer_id, contributor=self.address, samples=self.local.samples,
            steps=self.local.steps, epoch=epoch, rounds=tuple(self.local.rounds[-4096:]))
        return sign_contribution(record, self.key)

    def maybe_publish_record(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_record >= RECORD_INTERVAL_S:
            self._last_record = now
            self._publish(self._record())

    def _beat(self, stop) -> None:
        """Republish the record every ``RECORD_INTERVAL_S`` even while a round blocks the
        training loop: a record older than three intervals is a dead peer's."""
        while not stop.wait(RECORD_INTERVAL_S):
            try:
                self.maybe_publish_record(force=True)
            except Exception:  # a DHT hiccup: the next beat retries
                logging.getLogger(__name__).debug("record not republished", exc_info=True)

    # ------------------------------------------------------------------ the end

    def finish(self, trainer) -> dict[str, Any]:
        """Publish the final record, wait for the live peers, check every record; the
        ``run.hardware.swarm`` section."""
        self.maybe_publish_record(force=True)
        self._linger()
        final, converged = self._converge(trainer.model)
        # the run reached at least the step this peer holds (a step it caught up to by
        # loading the others' state ended no round of its own)
        self.witness.epoch = max(self.witness.epoch, self.optimizer.local_epoch)
        banned = self.banned()
        self.witness.banned = {peer: line.get("reason", "") for peer, line in banned.items()}
        contributors, refused, accepted = judge_records(list(self._records().values()),
                                                        self.witness)
        write_accepted_records(self.config.output_dir, contributors, accepted)
        return {
            "run": self.options.run, "peer_id": self.spec.peer_id, "address": self.address,
            "target_batch_size": self.target, "local_steps": self.options.local_steps,
            "collaborative_steps": self.optimizer.local_epoch,
            "compression": self.options.compression, "final_weights_digest": final,
            "converged": converged,
            "local": {"samples": self.local.samples, "steps": self.local.steps,
                      "rounds": len(self.local.rounds),
                      "first_round": self.local.rounds[0].epoch if self.local.rounds else None,
                      "averaging_s": round(self.local.averaging_s, 3)},
            "contributors": contributors, "refused": refused,
            "banned": [{"peer_id": peer, "reason": line.get("reason"),
                        "averager": line.get("averager"), "group": line.get("group"),
                        "evidence": line.get("evidence")} for peer, line in banned.items()]}

    def _live(self) -> dict[str, dict]:
        """The run's peers whose record was republished within three intervals, by peer id:
        values beside a valid spec, stored under the owner key it binds (values from the DHT
        are anyone's: each field is checked, and a copy of a peer's spec speaks for nobody)."""
        live: dict[str, dict] = {}
        for value in self._records().values():
            spec = _owned_spec(value)
            if spec is not None and value["_now"] - value["_stored"] < 3 * RECORD_INTERVAL_S:
                live[spec.peer_id] = value
        return live

    def _linger(self) -> None:
        """Stay reachable until every live peer reached the last step (or ``linger_s``)."""
        deadline = time.monotonic() + self.options.linger_s
        while time.monotonic() < deadline:
            waiting = [peer for peer, value in self._live().items()
                       if _record_epoch(value) < self.max_steps]
            if not waiting:
                return
            self.sleep(1.0)

    def _converge(self, model) -> tuple[str, bool]:
        """End the live peers on the weights a majority of them hold, never on one peer's say:
        each publishes the digest of its parameters (`parameters_digest`); a digest held by a
        strict majority of the live, unbanned peers that finished is the run's, and a peer that
        holds another downloads it from the holders, taking only a state with that digest
        (its own hyperparameters kept). With no majority (the peers' last groups split, or
        they banned different peers) each loads the coordinate-wise median of every live
        finished peer's published state and its own (`load_state_from_peers(finals=)`), the
        same bits for peers that see the same digests, and they compare again. A majority holder stays until every live peer holds the digest,
        or ``CONVERGE_GRACE_S`` after every live peer finished (a peer that keeps another
        digest is not waited for). (weights digest of the model, whether the live peers
        agreed)"""
        from collections import Counter

        from trainer.gradient.ranks import weights_digest
        from trainer.swarm.gather import parameters_digest

        averager = self.optimizer.state_averager
        deadline = time.monotonic() + self.options.linger_s
        agreed_since = None
        while True:
            mine = parameters_digest(averager.main_parameters)
            self._final_digest = mine
            self.maybe_publish_record(force=True)
            bans = self.banned()
            everyone = {peer: value for peer, value in self._live().items()
                        if peer not in bans}
            finished = {peer: value["final_weights"] for peer, value in everyone.items()
                        if isinstance(value.get("final_weights"), str)}
            finished[self.spec.peer_id] = mine
            all_finished = everyone.keys() <= finished.keys()
            digest, held = Counter(finished.values()).most_common(1)[0]
            if 2 * held > len(finished):  # a strict majority holds ``digest``
                if mine == digest:
                    if all_finished and all(d == digest for d in finished.values()):
                        return weights_digest(model), True
                    if all_finished:
                        agreed_since = agreed_since or time.monotonic()
                        if time.monotonic() - agreed_since > CONVERGE_GRACE_S:
                            return weights_digest(model), True
                else:
                    holders = [peer for peer, d in finished.items() if d == digest]
                    self._load_final(averager, peers=holders, digest=digest)
            elif all_finished and len(finished) > 1:
                # no majority: every live peer that finished, banned or not (peers may differ in
                # whom they banned), serves the state it published; the coordinate-wise median
                # of them all and this peer's own is the same bits for every peer that sees the
                # same digests, and a minority's states cannot pull it far
                finals = {peer: value["final_weights"] for peer, value in self._live().items()
                          if isinstance(value.get("final_weights"), str)
                          and peer != self.spec.peer_id}
                self._load_final(averager, finals=finals)
            if time.monotonic() > deadline:
                mine = parameters_digest(averager.main_parameters)
                return weights_digest(model), sum(d == mine for d in finished.values()) * 2 > \
                    len(finished)
            self.sleep(1.0)

    def _load_final(self, averager, **policy) -> None:
        """One try at the end's download (``load_state_from_peers``); a try that outlasts the
        averaging timeout (a loaded machine: a test run once saw one end the run with
        TimeoutError) is tried again by the caller's loop until its deadline."""
        try:
            averager.load_state_from_peers(timeout=self.options.averaging_timeout, **policy)
        except TimeoutError:
            logging.getLogger(__name__).info("the end's state download took over %s s; trying "
                                             "again", self.options.averaging_timeout)

    def close(self) -> None:
        import signal

        for signum, handler in self._old_handlers.items():
            signal.signal(signum, handler)
        if self._hook is not None:
            self._hook.remove()
        if self._heartbeat is not None:
            self._heartbeat[0].set()
            self._heartbeat[1].join(timeout=30)
        if self.optimizer is not None:
            self.optimizer.shutdown()
        if self.dht is not None:
            self.dht.shutdown()
        from pathlib import Path

        (Path(self.config.output_dir) / ".swarm" / "identity.key").unlink(missing_ok=True)


def write_accepted_records(output_dir, contributors: list[dict], accepted: list) -> None:
    """DIR/swarm_records.json: each accepted record as its peer signed it, with what the
    witness credited; publishing appends each as a ``contribution`` entry."""
    from pathlib import Path

    from trainer.swarm.work import TOLERANCE

    rows = [{"record": verdict.record.to_json(), "credited_samples": row["samples"],
             "credited_rounds": row["rounds"], "share": row["share"],
             **({"checks": {"checked": row["checked"], "passed": row["passed"],
                            "tolerance": TOLERANCE}} if row.get("checked") else {})}
            for row, verdict in zip(contributors, accepted, strict=True)]
    path = Path(output_dir) / SWARM_RECORDS
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"records": rows}, indent=1) + "\n")


class _SwarmSchedule:
    """What the HF trainer holds as its scheduler: hivemind steps the real one once per
    collaborative step, so the trainer's per-local-step call does nothing."""

    def __init__(self, optimizer) -> None:
        self.optimizer = optimizer

    def step(self) -> None:
        pass

    def get_last_lr(self) -> list[float]:
        scheduler = self.optimizer.state_averager.scheduler
        if scheduler is not None:
            return scheduler.get_last_lr()
        return [g["lr"] for g in self.optimizer.opt.param_groups]

    def state_dict(self) -> dict:
        return {}


def _optimizer_class():
    """`hivemind.Optimizer` that tells its session each local step's samples and each finished
    round (its group and the samples the peers announced for it)."""
    import hivemind
    from hivemind.p2p import PeerID

    class RecordingOptimizer(hivemind.Optimizer):
        def __init__(self, *, session: SwarmSession, **kwargs) -> None:
            self.session = session
            self._group = None
            super().__init__(**kwargs)

        def step(self, closure=None, batch_size=None, grad_scaler=None):
            local = self.session.local
            samples = local.pending  # the forwards that ran: a step without one earns nothing
            local.pending = 0
            self.session.work.claim(samples)
            local.samples += samples
            local.steps += 1
            # hivemind divides by the samples it accumulated: a step without a forward counts
            # one there (its progress estimate), and nothing in this peer's records or claims
            return super().step(closure, batch_size=max(samples, 1), grad_scaler=grad_scaler)

        def _make_state_averager(self, **kwargs):
            """hivemind's state averager, robust (trainer.swarm.gather), with hivemind's
            settings for it."""
            from trainer.swarm.gather import GymStateAverager

            return GymStateAverager(
                gym=self.session.gym_round("state"), dht=self.dht,
                prefix=f"{self.run_id}_state_averager", min_matchmaking_time=self.matchmaking_time,
                allreduce_timeout=self.allreduce_timeout, shutdown_timeout=self.shutdown_timeout,
                offload_optimizer=self.offload_optimizer, custom_gradients=self.offload_optimizer,
                status_loglevel=self.status_loglevel, next_chunk_timeout=self.next_chunk_timeout,
                client_mode=self.client_mode, auxiliary=self.auxiliary, start=True, **kwargs)

        def _announced(self, epoch: int) -> dict[str, int]:
            found = self.dht.get(f"{self.run_id}_progress", latest=True)
            out: dict[str, int] = {}
            items = found.value.items() if found is not None and isinstance(found.value, dict) \
                else ()
            for _subkey, item in list(items)[:MAX_DHT_RECORDS]:
                value = getattr(item, "value", None)
                if not isinstance(value, dict) or value.get("epoch") != epoch:
                    continue
                samples = value.get("samples_accumulated")
                peer = _peer_name(PeerID, value.get("peer_id"))
                if peer is not None and type(samples) is int and samples >= 0:
                    out[peer] = max(out.get(peer, 0), samples)
            return out

        def _update_global_epoch(self, grad_scaler) -> None:
            before = self.local_epoch
            announced = self._announced(before)
            self._group = None
            if self.use_local_updates:  # the round that shares the work averages parameters
                mine = self.tracker.local_progress.samples_accumulated
                control = self._schedule_state_round()
            else:  # ... or gradients (its group: _average_gradients_and_load_into_optimizer)
                mine, control = self.grad_averager.local_samples_accumulated, None
            started = time.perf_counter()
            self.session.work.send()
            try:
                super()._update_global_epoch(grad_scaler)
            finally:
                self.session.work.sent()
            if self.use_local_updates and control is None and self.local_epoch > before \
                    and self.session.options.min_peers > 1:
                control = self._lone_state_round()
            self.session.local.averaging_s += time.perf_counter() - started
            if control is not None:
                self._group = _members(control)
            if self.local_epoch > before:
                self.session._round_done(self.local_epoch, self._group, mine, announced)

        def _schedule_state_round(self):
            """Begin matchmaking for this step's parameter round (as hivemind pre-schedules
            one), so that its group can be read once it ran; None when no round will run."""
            if self.tracker.global_progress.num_peers <= 1 or \
                    self.state_averager.averaging_in_progress:
                return None
            control = self.scheduled_state
            if control is None or control.triggered or control.done():
                control = self.scheduled_state = self.state_averager.schedule_step(
                    gather=max(self.local_epoch + 1, self.tracker.global_epoch),
                    timeout=self.averaging_timeout)
            return control

        def _lone_state_round(self):
            """A peer that saw nobody else at this step still waits up to the matchmaking time
            for a group to average parameters with (hivemind skips the round), as a lone peer's
            gradient round does: peers expected by --min-peers that start a moment apart meet
            at the first steps instead of one running the whole run alone."""
            if self.state_averager.averaging_in_progress:
                return None
            wait = 2 * self.matchmaking_time  # no group by then: train on alone
            control = self.state_averager.schedule_step(gather=self.local_epoch, timeout=wait)
            self.state_averager.step(averaging_round=True, averaging_control=control,
                                     delay_averaging=False, averaging_opts={"timeout": wait})
            return control

        def _average_gradients_and_load_into_optimizer(self, control) -> None:
            super()._average_gradients_and_load_into_optimizer(control)
            self._group = _members(control)
            # the parameters are still the ones every member computed this step at
            self.session.work.check_round(self.local_epoch + 1, self._group)

    return RecordingOptimizer


def _members(control) -> frozenset[str] | None:
    """The peer ids of a finished averaging round's group; None when it did not run or
    failed."""
    if control is None or not control.done():
        return None
    try:
        return frozenset(p.to_base58() for p in control.result())
    except BaseException:  # noqa: BLE001 (the round failed: no group to record)
        return None


def _owner(subkey) -> str | None:
    """The hex of a DHT value's owner subkey (hivemind's RSA owner key), None if not bytes."""
    return subkey.hex() if isinstance(subkey, bytes) else None


def _owned_spec(value) -> PeerSpec | None:
    """The valid spec beside a DHT value when it binds the owner key the value was stored
    under (``_owner``); else None."""
    if not isinstance(value, dict):
        return None
    try:
        spec = decode_spec(value.get("spec"))
    except SwarmRecordError:
        return None
    return spec if value.get("_owner") == spec.dht_owner else None


def _record_epoch(value: dict) -> int:
    """The step a peer's DHT value says it reached (0 when the value does not say it well)."""
    record = value.get("contribution")
    epoch = record.get("epoch") if isinstance(record, dict) else None
    return epoch if type(epoch) is int else 0


def _count_or_zero(value) -> int:
    return value if type(value) is int and value >= 0 else 0


def _peer_name(peer_id_type, raw) -> str | None:
    """The base58 name of a libp2p peer id given as bytes, else None (a malformed
    announcement counts for nobody)."""
    try:
        return peer_id_type(raw).to_base58() if isinstance(raw, bytes) else None
    except Exception:  # noqa: BLE001 (multihash decoding raises several kinds)
        return None


def _swarm_callback(session: SwarmSession):
    """Stops the trainer at the run's last collaborative step, republishes the record, and
    shows the run's progress on the session's console: collaborative steps, peers, the swarm's
    samples for the current step, this peer's samples per second, and the ETA of the run."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from transformers import TrainerCallback

    class SwarmCallback(TrainerCallback):
        progress = task = None
        shown = 0  # the last collaborative step printed

        def on_train_begin(self, args, state, control, **kwargs):
            if session.console is not None:
                self.progress = Progress(
                    TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=session.console)
                self.progress.start()
                self.task = self.progress.add_task(f"swarm {session.options.run}",
                                                   total=session.max_steps)
            self.started = time.monotonic()

        def on_step_end(self, args, state, control, **kwargs):
            session.sleep(0)  # a stop signal lost inside hivemind's step stops the run here
            optimizer = session.optimizer
            session.maybe_publish_record()
            if optimizer.local_epoch >= session.max_steps:
                control.should_training_stop = True
            step = min(optimizer.local_epoch, session.max_steps)
            if step > self.shown and session.console is not None:
                self.shown = step
                seen = session.witness.rounds.get(step)
                if seen is not None:
                    averaged = f"averaged by {len(seen.members)} peers"
                elif session.witness.epoch >= step:
                    averaged = "not averaged: no other peer in time"
                else:
                    averaged = "caught up: state loaded from the peers"
                session.console.print(f"swarm {session.options.run}: step {step}/"
                                      f"{session.max_steps} ({averaged})", highlight=False)
            if self.progress is not None:
                swarm = optimizer.tracker.global_progress
                rate = session.local.samples / max(time.monotonic() - self.started, 1e-9)
                self.progress.update(
                    self.task, completed=min(optimizer.local_epoch, session.max_steps),
                    description=f"swarm {session.options.run}: {swarm.num_peers} peers, "
                                f"{swarm.samples_accumulated}/{session.target} samples, "
                                f"you {rate:.1f}/s")

        def on_train_end(self, args, state, control, **kwargs):
            if self.progress is not None:
                self.progress.update(self.task, completed=session.optimizer.local_epoch)
                self.progress.stop()
                self.progress = None

    return SwarmCallback()



def _start_dht(failure: str, **options):
    """A started hivemind DHT node; `SwarmError` ``failure: <hivemind's last line>`` when it
    cannot start (a bad multiaddr, an unreachable initial peer, a daemon that died)."""
    import hivemind

    logging.getLogger("hivemind").setLevel(logging.ERROR)  # rounds it retries are no news
    try:
        return hivemind.DHT(start=True, **options)
    except Exception as exc:  # noqa: BLE001 (hivemind: P2PDaemonError, ValueError, ...)
        detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise SwarmError(f"{failure}: {detail}") from None


class SwarmWatcher:
    """A DHT client of run ``run`` (joined through ``initial_peers``; trains nothing, serves
    nothing) that reads the run's peers as often as asked: `rows`. A context manager."""

    def __init__(self, run: str, initial_peers: list[str]) -> None:
        from hivemind.dht.crypto import RSASignatureValidator

        self.run = check_run_id(run)
        self.dht = _start_dht("cannot reach the swarm", initial_peers=list(initial_peers),
                              client_mode=True,
                              record_validators=[RSASignatureValidator()])  # strips signatures

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.dht.shutdown()

    def rows(self) -> list[dict]:
        """For each valid spec of the run: its peer id, address, the step and samples of its
        latest record, its samples per second from the run's progress records, the seconds
        since it last republished, and how many of the run's other peers banned it. Sorted by
        step, then samples (largest first)."""
        from hivemind.utils import get_dht_time

        found = self.dht.get(_peers_key(self.run), latest=True)
        progress = self.dht.get(f"{self.run}_progress", latest=True)
        return _peer_rows(found, progress, get_dht_time())


def _peer_rows(found, progress, now: float) -> list[dict]:
    """`SwarmWatcher.rows` of the DHT's values (anyone's: each field is checked)."""
    from hivemind.p2p import PeerID

    rates = {}
    for item in list(progress.value.values())[:MAX_DHT_RECORDS] if progress and isinstance(
            progress.value, dict) else ():
        value = getattr(item, "value", None)
        if isinstance(value, dict):
            peer = _peer_name(PeerID, value.get("peer_id"))
            rate = value.get("samples_per_second")
            if peer is not None and isinstance(rate, float):
                rates[peer] = rate
    rows = []
    banned_by: dict[str, set[str]] = {}  # peer id -> the peers that banned it
    for subkey, item in list(found.value.items())[:MAX_DHT_RECORDS] if found and isinstance(
            found.value, dict) else ():
        value = getattr(item, "value", None)
        value = {**value, "_owner": _owner(subkey)} if isinstance(value, dict) else None
        spec = _owned_spec(value)
        if spec is None:
            continue
        listed = value.get("banned")
        for peer in listed[:MAX_BANNED_SHOWN] if isinstance(listed, list) else ():
            if isinstance(peer, str) and peer != spec.peer_id:
                banned_by.setdefault(peer, set()).add(spec.peer_id)
        record = value.get("contribution") if isinstance(value.get("contribution"), dict) else {}
        seen = now - (getattr(item, "expiration_time", now) - RECORD_TTL_S)
        rows.append({"peer_id": spec.peer_id, "address": spec.address,
                     "step": _record_epoch(value), "max_steps": spec.max_steps,
                     "samples": _count_or_zero(record.get("samples")),
                     "samples_per_s": rates.get(spec.peer_id),
                     "seen_s_ago": max(0.0, seen),
                     "state": "done" if "final_weights" in value else (
                         "training" if seen < 3 * RECORD_INTERVAL_S else "silent")})
    latest: dict[str, dict] = {}  # one row a peer: its most recently republished value
    for row in rows:
        if row["peer_id"] not in latest or row["seen_s_ago"] < latest[row["peer_id"]][
                "seen_s_ago"]:
            latest[row["peer_id"]] = row
    for row in latest.values():  # banned by live peers of the run, not by anyone's say
        row["banned_by"] = len(banned_by.get(row["peer_id"], set()) & latest.keys())
    return sorted(latest.values(), key=lambda r: (-r["step"], -r["samples"]))
