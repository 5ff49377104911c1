"""Averaging that a hostile minority cannot spoil, inside hivemind's own averagers
(docs/swarm.md "Hostile peers").

    class GradAverager(RobustAveraging, hivemind.optim.grad_averager.GradientAverager): ...
    averager = GradAverager(..., gym=GymRound(run="arith-1", averager="grad",
                                              identity=der, evidence_dir=Path(...)))

hivemind's butterfly all-reduce gives each peer one part of the vector to reduce and trusts it
to return the average, and weighs every part by the weight its sender declares. Here the
round is an **all-gather with signed commitments** instead (`RobustAveraging` replaces
`DecentralizedAverager._run_allreduce_inplace_`, matchmaking stays hivemind's):

1. each member signs a commitment of its update (trainer.swarm.commitments) and serves the
   update with it to the members of its group that ask (`rpc_gym_update`);
2. each member downloads every other member's update, bounded to this round's size, and keeps
   it only if its commitment is the sender's, of this round, and signs exactly these bytes;
3. echo: each member serves the commitments it received (`rpc_gym_echo`) and reads the
   others'; two valid commitments of one sender for one round with different digests prove it
   sent different updates to different members (equivocation): it is banned;
4. the boundary (trainer.swarm.robust) refuses non-finite and out-of-bound updates and bans
   their senders; every member then computes CenteredClip of each tensor over the remaining
   updates, in peer-id order, itself: no member reduces for another, so none can return a
   wrong aggregate, and honest members that kept the same updates hold the same bits.

Declared weights are ignored: every kept update counts once. A LoRA update is small, so each
member sending its whole update to each other member (n - 1 copies instead of the
butterfly's two) costs little at a swarm's group sizes; `benchmarks/bench_swarm.py` measures it.

Bans and their evidence are lines of ``EVIDENCE_DIR/bans.jsonl`` (the commitments, and for a
non-finite update its payload beside them), shared by the peer's gradient and state averagers
and read by the session for run.json: a banned peer's updates and state are never used again.

`RobustAveraging._load_state_from_peers` (a late joiner catching up, the end of the run) does
not follow the highest advertised priority: it downloads from up to ``LOAD_SOURCES`` peers
(banned ones left out, in random order), each bounded to this peer's own state's shapes, takes
a state whose parameters a majority of the sources hold bit for bit, else the coordinate-wise
median of three or more sources, else (two that disagree) the one nearest this peer's own
parameters, or the only one; the hyperparameters are always this peer's own (a source's
learning rate or betas are never loaded). With ``digest=`` it takes only a source whose
parameters have that digest.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator  # noqa: UP035 (hivemind reads typing's hint for a stream)

from hivemind.optim.grad_averager import GradientAverager
from hivemind.optim.state_averager import TrainingStateAverager
from hivemind.p2p import P2PContext
from hivemind.proto import averaging_pb2

from trainer.swarm.commitments import (
    Commitment,
    check_payload,
    decode_commitment,
    decode_payload,
    payload_digest,
    payload_size,
    sign_commitment,
    update_payload,
    verify_commitment,
)
from trainer.swarm.records import SwarmRecordError
from trainer.swarm.robust import aggregate, boundary, coordinate_median, norms

CHUNK = 256 * 1024  # bytes of update per message
MAX_GROUP = 64  # members of one round whose commitments an echo may list
KEEP_ROUNDS = 8  # rounds whose update and echo stay served to members that ask late
LOAD_SOURCES = 5  # peers a state is downloaded from at most
BANS = "bans.jsonl"
CLAIMS_PENDING = "claims_pending.json"  # the host's work claims for its next gradient round
CLAIMS_ROUND = "claims_round.json"
OWN_STATE = "own_state.pickle"  # the host's own state for a state download it asked for  # the other members' commitments of the last gradient round

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GymRound:
    """What a peer's averager needs to take part in robust rounds."""

    run: str
    averager: str  # "grad" or "state"
    identity: bytes  # the peer's libp2p RSA private key (DER): signs its commitments
    evidence_dir: Path  # bans.jsonl and evidence payloads, shared by the peer's averagers
    wait_s: float = 20.0  # a member's update or echo is awaited this long, then left out
    codec: str = "none"  # how updates are sent: none (float32), float16, 8bit
    # the run's last collaborative step: a state claiming a later epoch is refused (loading it,
    # hivemind steps the LR scheduler once per epoch: 10^9 of them held a CI peer for good)
    max_epoch: int | None = None


@dataclass
class _Served:
    """One round as this member serves it."""

    members: frozenset[str] = frozenset()
    commitment: Commitment | None = None
    payload: bytes = b""
    seen: list[str] = field(default_factory=list)  # commitments received (JSON)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    echoed: asyncio.Event = field(default_factory=asyncio.Event)


def write_ban(evidence_dir: Path, line: dict) -> None:
    """Append one ban (``peer_id``, ``reason``, ``evidence``, ...) to ``bans.jsonl``."""
    with open(Path(evidence_dir) / BANS, "a") as out:
        out.write(json.dumps(line, sort_keys=True) + "\n")


def write_atomic(path: Path, text: str) -> None:
    """``text`` to ``path`` through a rename: a reader in another process never sees half."""
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    partial.replace(path)


def read_bans(evidence_dir: Path) -> dict[str, dict]:
    """peer id -> its first ban line (reason, averager, group, evidence) in ``bans.jsonl``."""
    path = Path(evidence_dir) / BANS
    out: dict[str, dict] = {}
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        try:
            item = json.loads(line)
        except ValueError:  # a line being written by the other averager
            continue
        if isinstance(item, dict) and isinstance(item.get("peer_id"), str):
            out.setdefault(item["peer_id"], item)
    return out


class RobustAveraging:
    """Mix in before a hivemind averager class (module docstring); ``gym=GymRound(...)``."""

    _rpc_handlers = None  # hivemind caches rpc_* handlers per class: collect this one's own

    def __init__(self, *args, gym: GymRound, **kwargs) -> None:
        self.gym = gym
        self._gym_rounds: OrderedDict[bytes, _Served] = OrderedDict()
        self._gym_kept: dict[bytes, frozenset[str]] = {}
        self._gym_policy: tuple = (None, None, None, None)  # set by load_state_from_peers
        Path(gym.evidence_dir).mkdir(parents=True, exist_ok=True)
        super().__init__(*args, **kwargs)

    # ------------------------------------------------------------------ the round

    def _gym_me(self) -> str:
        return self.peer_id.to_base58()

    def _gym_served(self, group_id: bytes) -> _Served:
        served = self._gym_rounds.get(group_id)
        if served is None:
            served = self._gym_rounds[group_id] = _Served()
            while len(self._gym_rounds) > KEEP_ROUNDS:
                self._gym_rounds.popitem(last=False)
        return served

    def _gym_prepare(self, tensors: list) -> list:
        """The update this member sends (a test's hostile peer changes it)."""
        return tensors

    def _gym_outgoing(self, served: _Served, requester: str) -> tuple[Commitment, bytes]:
        """What this member sends ``requester`` (a test's equivocating peer changes it)."""
        return served.commitment, served.payload

    async def _run_allreduce_inplace_(self, tensors, group_info, group_id=None, **kwargs):
        group_id = group_info.group_id if group_id is None else group_id
        running = self._running_groups.get(group_id)
        if running is not None and not running.done():
            running.set_result(None)  # no AllReduceRunner: hivemind's aggregate_part is unused
        me = self._gym_me()
        members = [p.to_base58() for p in group_info.peer_ids]
        local = [t.detach().clone().float() for t in tensors]
        payload = update_payload(self._gym_prepare([t.clone() for t in local]), self.gym.codec)
        served = self._gym_served(group_id)
        served.members = frozenset(members)
        served.payload = payload
        served.commitment = sign_commitment(self.gym.identity, me, self.gym.run,
                                            self.gym.averager, group_id, payload,
                                            self._gym_claims())
        served.ready.set()

        others = [p for p in group_info.peer_ids if p != self.peer_id]
        size = payload_size([t.shape for t in local], self.gym.codec)
        fetched = await asyncio.gather(*(self._gym_fetch_update(p, group_id, size)
                                         for p in others), return_exceptions=True)
        received: dict[str, tuple[Commitment, bytes]] = {}
        left_out: dict[str, str] = {}
        for peer, result in zip(others, fetched, strict=True):
            if isinstance(result, BaseException):
                left_out[peer.to_base58()] = _why(result)
            else:
                received[peer.to_base58()] = result
        served.seen = [served.commitment.encode()] + [c.encode() for c, _ in received.values()]
        served.echoed.set()

        echoes = await asyncio.gather(*(self._gym_fetch_echo(p, group_id) for p in others),
                                      return_exceptions=True)
        bans = read_bans(self.gym.evidence_dir)
        known = {me: [served.commitment]}
        for peer, (commitment, _) in received.items():
            known[peer] = [commitment]
        for echo in echoes:
            if isinstance(echo, BaseException):
                continue
            for commitment in echo:
                if commitment.peer_id in served.members and commitment.peer_id != me:
                    kept = known.setdefault(commitment.peer_id, [])
                    if all(c.digest != commitment.digest for c in kept):
                        kept.append(commitment)
        for peer, commitments in known.items():
            if len(commitments) > 1 and peer not in bans:
                self._gym_ban(peer, "equivocation", group_id,
                              {"commitments": [c.encode() for c in commitments[:2]]})
                bans[peer] = {}

        shapes = [t.shape for t in local]
        # this peer's own update as the others decode it: every member averages the same values
        updates = {me: decode_payload(payload, shapes, self.gym.codec)}
        for peer, (commitment, data) in received.items():
            if peer not in bans:
                updates[peer] = decode_payload(data, shapes, self.gym.codec)
        refused = boundary(updates)
        for peer, reason in refused.items():
            if peer == me:  # this peer's own update: left out, never banned by itself
                left_out[me] = reason
                continue
            commitment, data = received[peer]
            evidence = {"commitment": commitment.encode(), "payload": self._gym_keep(commitment,
                                                                                   data),
                        "codec": self.gym.codec, "shapes": [list(shape) for shape in shapes]}
            if reason == "out_of_bound":  # the bound is the round's: every update it was
                # measured against, each with its signed commitment (ban_evidence re-checks)
                signed = {me: (served.commitment, payload), **received}
                evidence["round"] = {p: {"commitment": signed[p][0].encode(),
                                         "payload": self._gym_keep(*signed[p])}
                                     for p in sorted(updates)}
                evidence["norms"] = {p: _finite(n) for p, n in zip(
                    sorted(updates), [max(norms(u)) for _, u in sorted(updates.items())],
                    strict=True)}
            self._gym_ban(peer, reason, group_id, evidence)
        kept = {p: u for p, u in updates.items() if p not in refused}
        if kept:
            for tensor, value in zip(tensors, aggregate(kept), strict=True):
                tensor.copy_(value.to(tensor.dtype))
        self._gym_kept[group_id] = frozenset(kept)
        if self.gym.averager == "grad":  # the members' work claims, for the host to check
            write_atomic(Path(self.gym.evidence_dir) / CLAIMS_ROUND, json.dumps({
                "members": sorted(kept), "commitments": {
                    peer: received[peer][0].encode() for peer in kept if peer in received}}))
        for _ in range(len(self._gym_kept) - KEEP_ROUNDS):
            self._gym_kept.pop(next(iter(self._gym_kept)))
        if left_out:
            log.info("round %s: left out %s", group_id.hex()[:8], left_out)

    async def _aggregate_with_group(self, group_info, min_vector_size, **kwargs):
        """hivemind's gathered data, of the members whose update was kept only (the witness
        credits a round to those)."""
        gathered = await super()._aggregate_with_group(group_info, min_vector_size, **kwargs)
        kept = self._gym_kept.get(group_info.group_id, frozenset())
        gathered = {peer: data for peer, data in gathered.items() if peer.to_base58() in kept}
        counts = sorted(v for v in gathered.values() if type(v) is int)
        if counts and len(counts) == len(gathered):  # the state averager's: each peer's epoch
            # hivemind moves a peer to the largest epoch it gathered: a minority claiming a
            # later one is held to the (lower) median
            median = counts[(len(counts) - 1) // 2]
            gathered = {peer: min(epoch, median) for peer, epoch in gathered.items()}
        return gathered

    def _gym_claims(self) -> tuple:
        """The work claims the host left for this gradient round (none for the state's)."""
        if self.gym.averager != "grad":
            return ()
        try:
            claims = json.loads((Path(self.gym.evidence_dir) / CLAIMS_PENDING).read_text())
        except (FileNotFoundError, ValueError):
            return ()
        return tuple(claims) if isinstance(claims, list) else ()

    def _gym_keep(self, commitment: Commitment, payload: bytes) -> str:
        """Keep ``payload`` (signed by ``commitment``) as evidence; its file name."""
        name = commitment.digest.split(":")[1] + ".update"
        (Path(self.gym.evidence_dir) / name).write_bytes(payload)
        return name

    def _gym_ban(self, peer: str, reason: str, group_id: bytes, evidence: dict) -> None:
        write_ban(self.gym.evidence_dir, {
            "peer_id": peer, "reason": reason, "averager": self.gym.averager,
            "group": group_id.hex(), "by": self._gym_me(), "evidence": evidence})
        log.warning("banned peer %s from run %s: %s", peer, self.gym.run, reason)

    async def _gym_fetch_update(self, peer, group_id: bytes, size: int):
        async def fetch():
            stub = self.get_stub(self._p2p, peer, namespace=self.prefix)
            stream = await stub.rpc_gym_update(averaging_pb2.AveragingData(group_id=group_id))
            commitment, chunks, total = None, [], 0
            async for message in stream:
                if commitment is None:
                    commitment = verify_commitment(
                        decode_commitment(message.metadata), run=self.gym.run,
                        averager=self.gym.averager, group=group_id, peer_id=peer.to_base58())
                    continue
                total += len(message.metadata)
                if total > size:
                    raise SwarmRecordError(f"update of peer {peer}: larger than this round's "
                                           f"{size} bytes")
                chunks.append(message.metadata)
            if commitment is None:
                raise SwarmRecordError(f"peer {peer} sent no update")
            data = b"".join(chunks)
            if len(data) != size:
                raise SwarmRecordError(f"update of peer {peer}: {len(data)} bytes, not {size}")
            check_payload(commitment, data)
            return commitment, data

        return await asyncio.wait_for(fetch(), timeout=self.gym.wait_s)

    async def _gym_fetch_echo(self, peer, group_id: bytes) -> list[Commitment]:
        async def fetch():
            stub = self.get_stub(self._p2p, peer, namespace=self.prefix)
            stream = await stub.rpc_gym_echo(averaging_pb2.AveragingData(group_id=group_id))
            async for message in stream:
                texts = json.loads(message.metadata)
                if not isinstance(texts, list) or len(texts) > MAX_GROUP:
                    raise SwarmRecordError(f"echo of peer {peer}: not a list of commitments")
                out = []
                for text in texts:
                    try:
                        out.append(verify_commitment(
                            decode_commitment(text), run=self.gym.run,
                            averager=self.gym.averager, group=group_id))
                    except SwarmRecordError:
                        continue  # a forged commitment proves nothing against anyone
                return out
            return []

        # a member waits for its slowest update before it echoes
        return await asyncio.wait_for(fetch(), timeout=2 * self.gym.wait_s)

    async def _gym_wait_served(self, group_id: bytes, context, which: str) -> _Served | None:
        """The round ``group_id`` once this member has its ``which`` ready, if the asking peer
        is one of its members; None after ``wait_s`` (the request is answered with nothing)."""
        loop = asyncio.get_event_loop()
        deadline = loop.time() + (2 if which == "echoed" else 1) * self.gym.wait_s
        while group_id not in self._gym_rounds:  # the asker may be ahead of this member
            if loop.time() > deadline:
                return None
            await asyncio.sleep(0.02)
        served = self._gym_rounds[group_id]
        try:
            await asyncio.wait_for(getattr(served, which).wait(),
                                   timeout=max(0.0, deadline - loop.time()))
        except TimeoutError:
            return None
        if context.remote_id.to_base58() not in served.members:
            return None
        return served

    async def rpc_gym_update(self, request: averaging_pb2.AveragingData, context: P2PContext
                             ) -> AsyncIterator[averaging_pb2.DownloadData]:
        """A member of the round asks for this member's update: its commitment, then the
        payload in chunks."""
        served = await self._gym_wait_served(request.group_id, context, "ready")
        if served is None:
            return
        commitment, payload = self._gym_outgoing(served, context.remote_id.to_base58())
        yield averaging_pb2.DownloadData(metadata=commitment.encode().encode())
        for start in range(0, len(payload), CHUNK):
            yield averaging_pb2.DownloadData(metadata=payload[start:start + CHUNK])

    async def rpc_gym_echo(self, request: averaging_pb2.AveragingData, context: P2PContext
                           ) -> AsyncIterator[averaging_pb2.DownloadData]:
        """A member of the round asks for the commitments this member received."""
        served = await self._gym_wait_served(request.group_id, context, "echoed")
        if served is None:
            return
        yield averaging_pb2.DownloadData(metadata=json.dumps(served.seen).encode())

    # ------------------------------------------------------------------ state downloads

    def load_state_from_peers(self, *, peers: list[str] | None = None, digest: str | None = None,
                              finals: dict[str, str] | None = None, **kwargs):
        """hivemind's, through `_load_state_from_peers` below; ``peers``: only these sources,
        ``digest``: only a source whose parameters have it (`parameters_digest`). ``finals``
        (the end of a run, peer -> the digest it published, banned peers included): the
        coordinate-wise median of those peers' states, each taken only with its published
        digest, and this peer's own: peers that see the same finals compute the same bits,
        whatever each banned. This peer's own state (its shapes, its hyperparameters) is read
        here, in the host process, and sent with the request. A gradient averager loads
        nothing (its averaged gradients are reset after a catch-up)."""
        if self.gym.averager == "grad":
            return None
        metadata, tensors = self._gym_own_state()
        parameters = len(getattr(self, "main_parameters", tensors))
        # this peer's own state goes through a file (written by this process for its own
        # averager): the control pipe to the averager's process is non-blocking, and a message
        # larger than its buffer breaks it
        import pickle

        own = (metadata, [tuple(t.shape) for t in tensors],
               [t.detach().float().cpu().numpy() for t in tensors[:parameters]],
               [t.detach().float().cpu().numpy() for t in tensors] if finals is not None
               else None)
        path = Path(self.gym.evidence_dir) / OWN_STATE
        with open(path.with_suffix(".partial"), "wb") as out:
            pickle.dump(own, out)
        path.with_suffix(".partial").replace(path)
        if finals is not None:
            peers = list(finals)
        self._outer_pipe.send(("_gym_set_policy", [peers, digest, finals, True], {}))
        return super().load_state_from_peers(**kwargs)

    def _gym_own_state(self) -> tuple[dict, list]:
        """(metadata, tensors) of this peer's training state as it would serve it, read
        without hivemind's lock and without asking the averager's process for its group bits
        (`get_current_state` does both: a round holding the lock, or a busy averager, would
        hold this call)."""
        optimizer = getattr(self, "optimizer", None)
        if optimizer is None:  # not a training-state averager
            metadata, tensors, _ = self.get_current_state()
            return metadata, list(tensors)
        from hivemind.optim.state_averager import dump_optimizer_state

        with torch_no_grad():
            optimizer_metadata, optimizer_tensors = dump_optimizer_state(optimizer)
            params = [p.detach().cpu() for group in optimizer.param_groups
                      for p in group["params"]]
            extra = [t.detach().cpu() for t in self.extra_tensors]
        return ({"epoch": self.local_epoch, "optimizer_metadata": optimizer_metadata},
                params + extra + list(optimizer_tensors))

    async def _gym_set_policy(self, peers, digest, finals, own) -> None:
        self._gym_policy = (peers, digest, finals, own)

    async def _load_state_from_peers(self, future, timeout=None):
        from hivemind.p2p import PeerID
        from hivemind.utils import ValueWithExpiration

        peers, digest, finals, own = self._gym_policy
        self._gym_policy = (None, None, None, None)
        if own is None:  # not asked through load_state_from_peers above
            future.set_result(None)
            return
        try:
            found = await self.dht.get(f"{self._matchmaking.group_key_manager.prefix}"
                                       ".all_averagers", latest=True, return_future=True)
            bans = read_bans(self.gym.evidence_dir)
            candidates = []
            for raw, info in list((found.value if found is not None and isinstance(
                    found.value, dict) else {}).items())[:1024]:
                if not isinstance(info, ValueWithExpiration) or not isinstance(
                        info.value, (int, float)):
                    continue  # a peer that stopped sharing
                try:
                    peer = PeerID(raw)
                except Exception:  # noqa: BLE001, S112 (a malformed id names no source)
                    continue
                name = peer.to_base58()
                if peer != self.peer_id and (finals is not None or name not in bans) and (
                        peers is None or name in peers):
                    candidates.append(peer)
            random.shuffle(candidates)  # the priority a peer advertises is its own claim
            import pickle

            import torch

            own_metadata, shapes, own_parameters, own_state = pickle.loads(
                (Path(self.gym.evidence_dir) / OWN_STATE).read_bytes())  # this peer's own file
            own_parameters = [torch.from_numpy(a.copy()) for a in own_parameters]
            own_state = None if own_state is None else [torch.from_numpy(a.copy())
                                                        for a in own_state]
            each = min(timeout or 2 * self.gym.wait_s, 2 * self.gym.wait_s)  # a dead source
            sources = candidates if finals is not None else candidates[:LOAD_SOURCES]
            downloads = await self._gym_downloads(sources, shapes, each,
                                                  all_of_them=finals is not None)
            states = [s for s in downloads if not isinstance(s, BaseException) and s is not None]
            if finals is not None:
                count = len(own_parameters)
                states = [s for p, s in zip(sources, downloads, strict=True)
                          if not isinstance(s, BaseException) and s is not None
                          and parameters_digest(s[1][:count]) == finals.get(p.to_base58())]
                chosen = _median_state([*states, (own_metadata.get("epoch", 0), own_state)])
            else:
                chosen = _choose_state(states, own_parameters, digest)
            if chosen is None:
                future.set_result(None)
            else:
                epoch, tensors = chosen
                future.set_result(({**own_metadata, "epoch": epoch}, tensors))
        except BaseException as exc:  # noqa: BLE001 (the caller gets None, as hivemind's)
            log.info("state not loaded: %s", _why(exc))
        finally:
            if not future.done():
                future.set_result(None)

    async def _gym_downloads(self, sources: list, shapes: list[tuple], each: float, *,
                             all_of_them: bool) -> list:
        """Each source's download (or its exception), in order. A catch-up waits for the
        others at most ``wait_s`` once one state arrived: a dead or stalling source does not
        hold a joiner for its whole timeout (CI once saw a late joiner catch up only as the run
        ended). ``all_of_them`` (the end's median) waits for every source: peers that see the
        same states compute the same bits."""
        tasks = [asyncio.ensure_future(self._gym_download(p, shapes, each)) for p in sources]
        pending = set(tasks)
        if not all_of_them:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if any(t.exception() is None and t.result() is not None for t in done):
                    break
            if pending:
                _, pending = await asyncio.wait(pending, timeout=self.gym.wait_s)
            for task in pending:
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return [TimeoutError("still downloading after another source's state arrived")
                if t.cancelled() else (t.exception() or t.result()) for t in tasks]

    async def _gym_download(self, peer, shapes: list[tuple], timeout):
        """(epoch, tensors) downloaded from ``peer``, bounded to ``shapes``; None if it sent
        anything else."""
        import torch
        from hivemind.compression import deserialize_torch_tensor
        from hivemind.utils.streaming import combine_from_streaming

        limit = sum(4 * max(1, _numel(s)) for s in shapes) + 1024 * len(shapes) + 65536

        async def fetch():
            stub = self.get_stub(self._p2p, peer, namespace=self.prefix)
            stream = await stub.rpc_download_state(averaging_pb2.DownloadRequest())
            metadata, parts, tensors, total = None, [], [], 0
            async for message in stream:
                total += message.ByteSize()
                if total > limit:
                    raise SwarmRecordError(f"state of peer {peer}: larger than this run's")
                if message.metadata and metadata is None:
                    metadata = self.serializer.loads(message.metadata)
                if message.tensor_part.dtype and parts:
                    tensors.append(deserialize_torch_tensor(combine_from_streaming(parts)))
                    parts = []
                parts.append(message.tensor_part)
            if parts:
                tensors.append(deserialize_torch_tensor(combine_from_streaming(parts)))
            epoch = metadata.get("epoch") if isinstance(metadata, dict) else None
            if type(epoch) is not int or epoch < 0 or (
                    self.gym.max_epoch is not None and epoch > self.gym.max_epoch):
                return None
            if [tuple(t.shape) for t in tensors] != shapes:
                return None
            tensors = [t.float() for t in tensors]
            if not all(bool(torch.isfinite(t).all()) for t in tensors):
                return None
            return epoch, tensors

        return await asyncio.wait_for(fetch(), timeout=timeout or 2 * self.gym.wait_s)


class GymGradAverager(RobustAveraging, GradientAverager):
    """hivemind's gradient averager, its rounds robust (`RobustAveraging`)."""


class GymStateAverager(RobustAveraging, TrainingStateAverager):
    """hivemind's training-state averager (parameters and Adam's moments), its rounds and its
    state downloads robust (`RobustAveraging`)."""


def parameters_digest(tensors) -> str:
    """sha256 of the parameters as one payload (what `load_state_from_peers(digest=)` checks
    and what peers compare at the end of a run)."""
    return payload_digest(update_payload(tensors))


def _choose_state(states: list[tuple[int, list]], own_parameters: list, digest: str | None):
    """(epoch, tensors) to load from the downloaded ``states`` (see the module docstring)."""
    import torch

    if not states:
        return None
    count = len(own_parameters)
    digests = [parameters_digest(tensors[:count]) for _, tensors in states]
    if digest is not None:
        for (epoch, tensors), held in zip(states, digests, strict=True):
            if held == digest:
                return epoch, tensors
        return None
    for held in dict.fromkeys(digests):
        holders = [s for s, d in zip(states, digests, strict=True) if d == held]
        if 2 * len(holders) > len(states):  # a strict majority of the sources hold it
            return min(holders, key=lambda s: s[0])
    if len(states) >= 3:
        epochs = sorted(epoch for epoch, _ in states)
        tensors = [coordinate_median(torch.stack([s[1][i] for s in states]))
                   for i in range(len(states[0][1]))]
        return epochs[(len(epochs) - 1) // 2], tensors

    def distance(state) -> float:
        return sum(float(torch.linalg.vector_norm((a - b).double()))
                   for a, b in zip(state[1][:count], own_parameters, strict=True))

    # two sources that disagree: nothing tells which is honest, so the one nearest this peer's
    # own parameters (a hostile state is taken only where it moves this peer less than the
    # honest one would); one source: the only one there is
    return min(states, key=distance)


def torch_no_grad():
    import torch

    return torch.no_grad()


def _median_state(states: list[tuple[int, list]]):
    """(epoch, tensors): the coordinate-wise median of ``states`` (the mean of the middle two
    for an even count), the lower median epoch; the same states give the same bits, in any
    order."""
    import torch

    epochs = sorted(epoch if type(epoch) is int else 0 for epoch, _ in states)
    tensors = [coordinate_median(torch.stack([s[1][i] for s in states]))
               for i in range(len(states[0][1]))]
    return epochs[(len(epochs) - 1) // 2], tensors


def _numel(shape) -> int:
    size = 1
    for dim in shape:
        size *= int(dim)
    return size


def _finite(value: float) -> float | str:
    return value if value != float("inf") else "inf"


def _why(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timeout"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
