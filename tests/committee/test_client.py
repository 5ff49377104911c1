"""The committee's Python client and aggregator against the deployed VerifierCommittee on a real
Anvil: three verifiers register with BLS keys, a challenger bonds a challenge, signed verdicts
go through the aggregator's checks, one aggregate settles, the appeal window passes, the
aggregator finalizes and claims; token balances move as docs/committee.md says."""

from __future__ import annotations

import json

import pytest
from committee_world import (
    BLS,
    CHALLENGER_KEY,
    OPERATOR_KEY,
    VERIFIER_KEYS,
    VERIFIER_STAKE,
    committee_world,
    more_verifiers,
)
from eth_account import Account

from committee import REJECTED, UPHELD, SecretKey, SignedVerdict, Verdict, g1_to_ints, reason_bytes
from committee.aggregator import Aggregator, PoolError
from committee.client import ChallengeState
from contracts import load_artifact
from contracts.devnet_accounts import ANVIL_DEV_KEYS
from contracts.gym_token import GYM
from devnet.deploy import Deployment
from ledger.evm import ContractRevertError

pytestmark = pytest.mark.anvil


def _balance(token, key_or_address: str) -> int:
    address = (key_or_address if len(key_or_address) == 42
               else Account.from_key(key_or_address).address)
    return token.functions.balanceOf(address).call()


@pytest.fixture
def world(ledger_devnet):
    """Three verifiers (slots 0-2, ``BLS`` keys), a registered node, and its NodeRegistry."""
    deployment = Deployment.load(ledger_devnet.gym.deployment_file)
    cw = committee_world(deployment)
    registry = cw.w3.eth.contract(address=deployment.contracts["NodeRegistry"].address,
                                  abi=load_artifact("NodeRegistry").abi)
    return cw.w3, cw.token, registry, cw.client, cw


def _signed(client, index: int, verdict: Verdict, sk: SecretKey | None = None,
            claimed_index: int | None = None) -> bytes:
    """Verifier ``index``'s signature on ``verdict`` (with ``sk`` instead of its key, or
    claiming slot ``claimed_index``), as it travels to the aggregator."""
    committee = client()
    return SignedVerdict.create(
        sk or BLS[index], verdict, chain_id=committee.chain_id, committee=committee.address,
        verifier_index=index if claimed_index is None else claimed_index,
        verifier=Account.from_key(VERIFIER_KEYS[index]).address).to_bytes()


def test_register_settle_finalize_claim_upheld(world):
    w3, token, registry, client, cw = world
    reader = client()
    assert [reader.index_of(Account.from_key(k).address) for k in VERIFIER_KEYS] == [0, 1, 2]
    slots = reader.slots()
    assert [s.active for s in slots] == [True] * 3 and g1_to_ints(slots[1].pk1) == g1_to_ints(BLS[1].pk1())
    assert reader.active_stake() == 3 * VERIFIER_STAKE
    with pytest.raises(ContractRevertError, match="CommitteeAlreadyRegistered"):
        client(VERIFIER_KEYS[0]).register(SecretKey.from_seed("another"), VERIFIER_STAKE)

    challenger_before = _balance(token, CHALLENGER_KEY)
    challenge_id, digest = cw.open(1)
    info = reader.challenge(challenge_id, with_evidence=True)
    assert info.status == ChallengeState.OPEN and info.receipt_hash == digest
    assert info.evidence_cid == "bafy1" and info.bond == 10 * GYM

    aggregator = Aggregator(client(ANVIL_DEV_KEYS[0]), report=lambda line: None)
    upheld = Verdict(challenge_id, digest, UPHELD, reason_bytes("sampling"))
    # refused before anything is held: wrong receipt, wrong key, wrong slot, junk
    with pytest.raises(PoolError, match="names receipt"):
        aggregator.submit(_signed(client, 0, Verdict(challenge_id, bytes(32), UPHELD,
                                                     reason_bytes("sampling"))))
    with pytest.raises(PoolError, match="does not verify"):
        aggregator.submit(_signed(client, 0, upheld, sk=SecretKey.from_seed("rogue")))
    with pytest.raises(PoolError, match="no active verifier"):
        aggregator.submit(_signed(client, 0, upheld, claimed_index=5))
    with pytest.raises(PoolError, match="no active verifier"):
        aggregator.submit(_signed(client, 0, upheld, claimed_index=1))
    with pytest.raises(PoolError, match="no committee challenge"):
        aggregator.submit(_signed(client, 0, Verdict(99, digest, UPHELD,
                                                     reason_bytes("sampling"))))
    with pytest.raises(PoolError):
        aggregator.submit(b"{" * 5000)

    assert aggregator.submit(_signed(client, 0, upheld))["status"] == "accepted"
    assert aggregator.submit(_signed(client, 0, upheld))["status"] == "duplicate"
    aggregator.tick()  # one third: no quorum
    assert reader.challenge(challenge_id).status == ChallengeState.OPEN
    # verifier 2 leaves after the opening: the set the challenge opened with still counts it
    opening = reader.opening_set(challenge_id)
    client(VERIFIER_KEYS[2]).deregister()
    assert reader.active_set().active_bitmap == 0b011
    assert opening.active_bitmap == 0b111 and opening.active_stake == 3 * VERIFIER_STAKE
    assert reader.opening_set(challenge_id) == opening  # from its SetUpdated event
    aggregator.submit(_signed(client, 2, upheld))
    aggregator.tick()  # two thirds: settled
    settled = reader.challenge(challenge_id)
    assert settled.status == ChallengeState.SETTLED and settled.verdict == UPHELD
    assert settled.signers == [0, 2]
    with pytest.raises(PoolError, match="not open"):
        aggregator.submit(_signed(client, 1, upheld))

    node_before = registry.functions.nodeOf(Account.from_key(OPERATOR_KEY).address).call()[4]
    aggregator.tick()  # the appeal window is still open: nothing happens
    assert reader.challenge(challenge_id).status == ChallengeState.SETTLED
    from governance.devnet_time import advance_time

    advance_time(w3, reader.appeal_window() + 1)
    signers_before = [_balance(token, VERIFIER_KEYS[i]) for i in (0, 2)]
    aggregator.tick()  # finalize, then claim for both signers
    final = reader.challenge(challenge_id)
    assert final.status == ChallengeState.FINALIZED
    node_after = registry.functions.nodeOf(Account.from_key(OPERATOR_KEY).address).call()[4]
    slash = 50 * GYM
    assert node_before - node_after == slash
    share = slash * 2_000 // 10_000
    assert _balance(token, CHALLENGER_KEY) == challenger_before + share  # bond back + share
    per_signer = (slash - share) // 2
    assert final.reward_share == per_signer
    assert [_balance(token, VERIFIER_KEYS[i]) for i in (0, 2)] == [
        b + per_signer for b in signers_before]
    assert final.claimed_bitmap == final.signer_bitmap


def test_a_rejected_challenge_forfeits_the_bond_and_no_quorum_settles_nothing(world):
    w3, token, _, client, cw = world
    reader = client()
    aggregator = Aggregator(client(ANVIL_DEV_KEYS[0]), report=lambda line: None)
    challenger_before = _balance(token, CHALLENGER_KEY)
    first, digest1 = cw.open(1)
    second, digest2 = cw.open(2)
    rejected = Verdict(first, digest1, REJECTED)
    for index in (0, 1):
        aggregator.submit(_signed(client, index, rejected))
    # the verifiers split on the second: no message reaches two thirds
    aggregator.submit(_signed(client, 0, Verdict(second, digest2, REJECTED)))
    aggregator.submit(_signed(client, 1, Verdict(second, digest2, UPHELD,
                                                 reason_bytes("activations"))))
    aggregator.tick()
    assert reader.challenge(first).status == ChallengeState.SETTLED
    assert reader.challenge(second).status == ChallengeState.OPEN
    from governance.devnet_time import advance_time

    advance_time(w3, reader.appeal_window() + 1)
    before = [_balance(token, key) for key in VERIFIER_KEYS]
    aggregator.tick()
    assert reader.challenge(first).status == ChallengeState.FINALIZED
    assert _balance(token, CHALLENGER_KEY) == challenger_before - 2 * 10 * GYM  # two bonds out
    gained = [_balance(token, key) - b for key, b in zip(VERIFIER_KEYS, before)]
    assert gained == [5 * GYM, 5 * GYM, 0]  # the forfeited bond, split between the signers


def test_a_receipt_is_judged_once_but_a_rejected_challenge_leaves_it_open(world):
    """One open or upheld committee challenge per receipt (issue: "a second challenge of the
    same receipt"); a rejected one does not protect a receipt from the next, honest, one."""
    w3, _, _, client, cw = world
    reader = client()
    first, digest = cw.open(1)
    with pytest.raises(ContractRevertError, match="CommitteeReceiptChallenged") as refused:
        cw.open(1)
    assert refused.value.values["challengeId"] == first
    assert reader.contract.functions.challengeOfReceipt(digest).call() == first
    cw.settle(first, digest, verdict=REJECTED, reason="")
    from governance.devnet_time import advance_time

    advance_time(w3, reader.appeal_window() + 1)
    client(ANVIL_DEV_KEYS[0]).finalize(first)
    second, _ = cw.open(1)  # rejected and final: the receipt may be challenged again
    cw.settle(second, digest)  # upheld: sampling
    advance_time(w3, reader.appeal_window() + 1)
    client(ANVIL_DEV_KEYS[0]).finalize(second)
    with pytest.raises(ContractRevertError, match="CommitteeReceiptChallenged") as refused:
        cw.open(1)  # slashed once for it, never again
    assert refused.value.values["challengeId"] == second


def _serve(aggregator, **kwargs):
    import threading

    from committee.aggregator import make_http_server

    server = make_http_server(aggregator, "127.0.0.1", 0, **kwargs)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def _post(url: str, body: bytes, key: str | None):
    import httpx

    from committee.verdict_auth import HEADER, sign_post

    headers = {} if key is None else {HEADER: sign_post(Account.from_key(key), body)}
    return httpx.post(f"{url}/v1/verdicts", content=body, headers=headers, timeout=30)


def test_the_aggregators_http_endpoint_bounds_and_answers(world):
    import httpx

    _, _, _, client, cw = world
    challenge_id, digest = cw.open(1)
    aggregator = Aggregator(client(ANVIL_DEV_KEYS[0]), report=lambda line: None)
    server, url = _serve(aggregator)
    try:
        post = lambda body, key=VERIFIER_KEYS[1]: _post(url, body, key)
        assert post(b"x" * 5000).status_code == 413
        junk = post(b'{"type": "gym-signed-verdict"}')  # names no verifier to authenticate
        assert junk.status_code == 401 and "error" in junk.json()
        signed = json.loads(_signed(client, 1, Verdict(challenge_id, digest, UPHELD,
                                                       reason_bytes("sampling"))))
        signed["sigma"] = "junk"  # the poster's own, but malformed: 400
        assert post(json.dumps(signed).encode()).status_code == 400
        upheld = Verdict(challenge_id, digest, UPHELD, reason_bytes("sampling"))
        assert post(_signed(client, 0, Verdict(7, digest, UPHELD, reason_bytes("x"))),
                    VERIFIER_KEYS[0]).status_code == 404
        # the post is the verifier's own: unsigned, or signed by anyone else, it is refused
        unsigned = post(_signed(client, 1, upheld), None)
        assert unsigned.status_code == 401 and "X-Gym-Verifier-Auth" in unsigned.json()["error"]
        assert post(_signed(client, 1, upheld), VERIFIER_KEYS[2]).status_code == 401
        ok = post(_signed(client, 1, upheld))
        assert ok.status_code == 200 and ok.json() == {
            "status": "accepted", "challenge_id": challenge_id, "verifier_index": 1}
        assert post(_signed(client, 1, upheld)).json()["status"] == "duplicate"
        assert httpx.get(f"{url}/health").json() == {"status": "ok", "pending": [challenge_id]}
        assert httpx.get(f"{url}/nope").status_code == 404
    finally:
        server.shutdown()


def test_an_outsider_flooding_junk_verdicts_spends_no_pairing_and_honest_ones_count(world):
    """The Purpose's outsider: well-formed verdicts naming a registered verifier, a junk BLS
    signature, posted without that verifier's key. Each is refused (401) before the chain is
    read or a pairing checked, while the verifiers' own verdicts are accepted and settle."""
    import threading

    _, _, _, client, cw = world
    challenge_id, digest = cw.open(1)
    aggregator = Aggregator(client(ANVIL_DEV_KEYS[0]), report=lambda line: None)
    pairings = []
    real_add = aggregator.pool.add

    def counting_add(data, *, poster=None):
        try:
            return real_add(data, poster=poster)
        finally:
            pairings.append(poster)

    aggregator.pool.add = counting_add
    server, url = _serve(aggregator)
    upheld = Verdict(challenge_id, digest, UPHELD, reason_bytes("sampling"))
    junk = _signed(client, 1, upheld, sk=SecretKey.from_seed("not verifier 1"))
    outsider = "0x" + "5a" * 32  # no stake, no registration: anyone
    answers: list[int] = []
    try:
        def flood():
            for _ in range(25):
                answers.append(_post(url, junk, outsider).status_code)

        flooders = [threading.Thread(target=flood) for _ in range(4)]
        for thread in flooders:
            thread.start()
        honest = [_post(url, _signed(client, i, upheld), VERIFIER_KEYS[i]) for i in (0, 2)]
        for thread in flooders:
            thread.join()
    finally:
        server.shutdown()
    assert answers == [401] * 100
    assert [r.status_code for r in honest] == [200, 200]
    # only the two honest posts reached the pool (its chain reads and pairing checks)
    assert len(pairings) == 2 and None not in pairings
    aggregator.tick()
    assert client().challenge(challenge_id).status == ChallengeState.SETTLED


def test_stalled_connections_are_closed_and_do_not_block_verdicts(world):
    """Connections that announce a body and send 10 bytes: each is closed after the read
    timeout, and a verdict posted meanwhile is answered."""
    import socket
    import time

    _, _, _, client, cw = world
    challenge_id, digest = cw.open(1)
    aggregator = Aggregator(client(ANVIL_DEV_KEYS[0]), report=lambda line: None)
    server, url = _serve(aggregator, read_timeout_s=1.0)
    port = server.server_address[1]
    stalled = []
    try:
        for _ in range(30):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sock.sendall(b"POST /v1/verdicts HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
                         b"0123456789")
            stalled.append(sock)
        upheld = Verdict(challenge_id, digest, UPHELD, reason_bytes("sampling"))
        assert _post(url, _signed(client, 0, upheld), VERIFIER_KEYS[0]).status_code == 200
        started = time.monotonic()
        for sock in stalled:  # the server closes each: recv sees the end of the stream
            assert sock.recv(100) == b""
        assert time.monotonic() - started < 20  # 1 s timeouts, not the client's 30 s
    finally:
        for sock in stalled:
            sock.close()
        server.shutdown()


@pytest.mark.parametrize(("verifiers", "wait_s"), [(5, 5.0), (16, 0.0)])
def test_verifiers_delivering_at_once_are_all_counted(world, tmp_path, verifiers, wait_s):
    """The Purpose's lost verdicts: five (and sixteen) registered verifiers post at the same
    moment to an aggregator that runs two real pairing checks at a time. With five, posts wait
    their turn (``check_wait_s``); with sixteen and no waiting, fourteen are answered 429 and
    each verifier sends again after the Retry-After. Either way every verdict is counted and
    the challenge settles with all of them (before, 429 was final: three of five were lost)."""
    import threading
    import time
    from functools import partial

    from committee.judge import Judgement
    from committee.service import VerifierService, post_verdict

    _, _, _, client, cw = world
    members = list(zip(VERIFIER_KEYS, BLS, strict=True)) + more_verifiers(cw, verifiers - 3)
    challenge_id, _ = cw.open(1)
    aggregator = Aggregator(client(ANVIL_DEV_KEYS[0]), finalize=False, report=lambda line: None)
    server, url = _serve(aggregator, check_wait_s=wait_s)
    reports: list[str] = []
    services = []
    for i, (key, sk) in enumerate(members):
        verifier = client(key)
        services.append(VerifierService(
            verifier, sk, judge_challenge=lambda opened: Judgement("upheld", "sampling", ""),
            send=partial(post_verdict, url, account=verifier.account),
            state_file=tmp_path / f"state-{i}.json", report=reports.append))
    try:
        start = threading.Barrier(len(services))

        def first_tick(service):
            start.wait()
            service.tick()

        threads = [threading.Thread(target=first_tick, args=(s,)) for s in services]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if wait_s == 0:
            assert sum("429" in line and "again in 1 s" in line for line in reports) >= \
                verifiers // 2, reports
        for _ in range(60):
            if all(s.decisions[challenge_id].delivered for s in services):
                break
            time.sleep(1.1)
            for service in services:
                service.tick()
    finally:
        server.shutdown()
    assert all(s.decisions[challenge_id].delivered for s in services)
    assert not any("refused" in line for line in reports), reports
    aggregator.tick()
    settled = client().challenge(challenge_id)
    assert settled.status == ChallengeState.SETTLED
    assert settled.signers == list(range(verifiers))


def test_the_verifier_service_signs_delivers_retries_and_remembers(world, tmp_path):
    from committee.judge import Judgement
    from committee.service import VerifierService

    _, _, _, client, cw = world
    challenge_id, _ = cw.open(1)
    aggregator = Aggregator(client(ANVIL_DEV_KEYS[0]), report=lambda line: None)
    judged: list[int] = []
    outcomes = iter([Judgement("abstain", "", "content store unreachable"),
                     Judgement("upheld", "sampling", "token 0")])

    def judge_challenge(opened):
        judged.append(opened.challenge_id)
        return next(outcomes)

    attempts: list[int] = []

    def send(signed):
        attempts.append(signed.verdict.challenge_id)
        if len(attempts) == 1:
            raise OSError("aggregator down")
        return aggregator.submit(signed.to_bytes())

    state = tmp_path / "state.json"
    service = VerifierService(client(VERIFIER_KEYS[0]), BLS[0], judge_challenge=judge_challenge,
                              send=send, state_file=state, report=lambda line: None)
    assert service.identity() == (0, Account.from_key(VERIFIER_KEYS[0]).address)
    service.tick()  # abstains: nothing signed
    assert judged == [challenge_id] and attempts == []
    service.tick()  # judged again: upheld and signed, the first delivery fails
    assert judged == [challenge_id] * 2 and attempts == [challenge_id]
    assert not service.decisions[challenge_id].delivered
    # a restart: the decision comes back from the state file and is delivered, not re-judged
    again = VerifierService(client(VERIFIER_KEYS[0]), BLS[0], judge_challenge=judge_challenge,
                            send=send, state_file=state, report=lambda line: None)
    again.tick()
    assert judged == [challenge_id] * 2 and attempts == [challenge_id] * 2
    assert again.decisions[challenge_id].delivered
    held = aggregator.pool.signatures(challenge_id)
    message = (UPHELD, reason_bytes("sampling"))
    assert list(held) == [message] and list(held[message]) == [0]
    # another key than the registered one is refused before anything is signed
    with pytest.raises(Exception, match="another BLS key"):
        VerifierService(client(VERIFIER_KEYS[0]), BLS[1], judge_challenge=judge_challenge,
                        send=send).identity()


def test_a_verifier_that_joined_after_the_opening_does_not_judge_it(world):
    """The verifiers of a challenge's opening judge it: a newcomer's service closes it without
    running the (costly) receipt verification, and judges the next one."""
    from gym_helpers import send

    from committee.judge import Judgement
    from committee.service import VerifierService
    from contracts.devnet_accounts import devnet_account_key

    w3, token, _, client, cw = world
    first, _ = cw.open(1)
    newcomer = devnet_account_key(3)
    send(w3, token.functions.transfer(Account.from_key(newcomer).address, 150 * GYM),
         ANVIL_DEV_KEYS[0])
    sk = SecretKey.from_seed("a newcomer")
    assert client(newcomer).register(sk, VERIFIER_STAKE) == 3
    judged: list[int] = []

    def judge_challenge(opened):
        judged.append(opened.challenge_id)
        return Judgement("upheld", "sampling", "token 0")

    service = VerifierService(client(newcomer), sk, judge_challenge=judge_challenge,
                              send=lambda signed: {"status": "accepted"}, report=lambda line: None)
    service.tick()
    assert judged == [] and service.decisions[first].outcome == "closed"
    second, _ = cw.open(2)
    service.tick()
    assert judged == [second] and service.decisions[second].signed is not None


def test_a_bls_key_file_is_private_never_overwritten_and_checked(tmp_path):
    from committee import keyfile
    from committee.bls import BLSError

    path = tmp_path / "v" / "bls-key.json"
    sk, created = keyfile.load_or_create(path)
    assert created and path.stat().st_mode & 0o777 == 0o600
    assert keyfile.load_or_create(path) == (sk, False)
    with pytest.raises(FileExistsError):
        keyfile.create(path)
    doc = json.loads(path.read_text())
    doc["pk1"] = ["0x1", "0x2"]
    path.write_text(json.dumps(doc))
    with pytest.raises(BLSError, match="pk1 is not the public key"):
        keyfile.load(path)
    path.write_text("[]")
    with pytest.raises(BLSError, match="not a gym-bls-key"):
        keyfile.load(path)


def test_a_challenge_nobody_settles_expires_and_returns_the_bond(world):
    w3, token, _, client, cw = world
    reader = client()
    aggregator = Aggregator(client(ANVIL_DEV_KEYS[0]), report=lambda line: None)
    before = _balance(token, CHALLENGER_KEY)
    challenge_id, digest = cw.open(1)
    info = reader.challenge(challenge_id)
    assert info.opened_at > 0 and _balance(token, CHALLENGER_KEY) == before - info.bond
    # one verifier of three signs: no quorum; the others abstain (send nothing)
    aggregator.submit(_signed(client, 0, Verdict(challenge_id, digest, REJECTED)))
    aggregator.tick()
    with pytest.raises(ContractRevertError, match="CommitteeNotExpired"):
        client(ANVIL_DEV_KEYS[0]).expire(challenge_id)
    from governance.devnet_time import advance_time

    advance_time(w3, reader.settlement_timeout() + 1)
    aggregator.tick()
    assert reader.challenge(challenge_id).status == ChallengeState.EXPIRED
    assert _balance(token, CHALLENGER_KEY) == before  # the whole bond back
    assert aggregator.pool.pending() == []


def test_a_judgement_cut_short_is_recorded_first_and_never_loops(world, tmp_path):
    """The Purpose's verifier that never judged the next challenge: whatever ends the process
    mid-judgement (a crash, a kill, SIGTERM), the state file already says which challenge it
    was judging; a restart tries it again at most MAX_JUDGING_ATTEMPTS times, then moves on,
    and the other challenges are judged meanwhile."""
    import json as _json

    from committee.judge import Judgement
    from committee.service import JUDGING, MAX_JUDGING_ATTEMPTS, VerifierService

    class Killed(BaseException):
        """What the process sees of a kill: nothing after it runs."""

    _, _, _, client, cw = world
    stalling, _ = cw.open(1)
    ordinary, _ = cw.open(2)
    state = tmp_path / "state.json"
    seen_in_state: list[str] = []

    def judge_challenge(opened):
        if opened.challenge_id == stalling:
            recorded = _json.loads(state.read_text())["decisions"][str(stalling)]
            seen_in_state.append(recorded["outcome"])
            raise Killed
        return Judgement("rejected", "", "the receipt verifies")

    def restart():
        return VerifierService(client(VERIFIER_KEYS[0]), BLS[0], judge_challenge=judge_challenge,
                               send=lambda signed: {"status": "accepted"}, state_file=state,
                               report=lambda line: None)

    for _ in range(MAX_JUDGING_ATTEMPTS):
        with pytest.raises(Killed):
            restart().tick()
    assert seen_in_state == [JUDGING] * MAX_JUDGING_ATTEMPTS
    service = restart()
    service.tick()  # gives up on the stalling one, judges the ordinary one
    assert service.decisions[stalling].outcome == "closed"
    assert "cut short 3 times" in service.decisions[stalling].detail
    assert service.decisions[ordinary].outcome == "rejected"
    assert service.decisions[ordinary].delivered
    assert len(seen_in_state) == MAX_JUDGING_ATTEMPTS  # not judged again


def test_a_stop_ends_the_tick_between_challenges(world, tmp_path):
    import threading

    from committee.judge import Judgement
    from committee.service import VerifierService

    _, _, _, client, cw = world
    first, _ = cw.open(1)
    second, _ = cw.open(2)
    stop = threading.Event()
    judged: list[int] = []

    def judge_challenge(opened):
        judged.append(opened.challenge_id)
        stop.set()  # SIGTERM arrives while the first is judged
        return Judgement("rejected", "", "")

    state = tmp_path / "state.json"
    service = VerifierService(client(VERIFIER_KEYS[0]), BLS[0], judge_challenge=judge_challenge,
                              send=lambda signed: {"status": "accepted"}, state_file=state,
                              report=lambda line: None, stop=stop)
    service.tick()
    assert judged == [first]
    # the next start reads the rest again: the cursor did not move past the second
    again = VerifierService(client(VERIFIER_KEYS[0]), BLS[0], judge_challenge=judge_challenge,
                            send=lambda signed: {"status": "accepted"}, state_file=state,
                            report=lambda line: None)
    again.tick()
    assert judged == [first, second]


def test_two_aggregators_side_by_side_settle_once_and_one_down_stalls_nothing(world, tmp_path):
    """Liveness hinges on no one aggregator: each verifier sends to two (``Fanout``); while
    the second is down the first settles, the verdicts wait for the second only until the
    challenge closes; then both tick at once on a new challenge: one settles, the other sees
    it settled, both finalize and claim without a failure reported."""
    import threading
    from functools import partial

    from committee.judge import Judgement
    from committee.service import Fanout, VerifierService, post_verdict
    from governance.devnet_time import advance_time

    w3, _, _, client, cw = world
    reports: list[str] = []
    first_agg = Aggregator(client(ANVIL_DEV_KEYS[0]), report=reports.append)
    second_agg = Aggregator(client(ANVIL_DEV_KEYS[1]), report=reports.append)
    first_server, first_url = _serve(first_agg)
    down_url = "http://127.0.0.1:9"  # nothing listens: the second aggregator is down
    services = []
    for i in range(3):
        verifier = client(VERIFIER_KEYS[i])
        services.append(VerifierService(
            verifier, BLS[i], judge_challenge=lambda opened: Judgement("upheld", "sampling", ""),
            send=Fanout({url: partial(post_verdict, url, account=verifier.account)
                         for url in (first_url, down_url)}),
            state_file=tmp_path / f"state-{i}.json", report=reports.append))
    try:
        one, _ = cw.open(1)
        for service in services:
            service.tick()
        assert not any(s.decisions[one].delivered for s in services)  # the second is down
        first_agg.tick()
        assert client().challenge(one).status == ChallengeState.SETTLED
        for service in services:
            service.tick()  # the challenge closed: the verdicts wait for no one
        assert all(s.decisions[one].delivered for s in services)

        # the second comes up; both receive every verdict of a new challenge and tick at once
        second_server, second_url = _serve(second_agg)
        for i, service in enumerate(services):
            verifier = client(VERIFIER_KEYS[i])
            service.send = Fanout({url: partial(post_verdict, url, account=verifier.account)
                                   for url in (first_url, second_url)})
        two, _ = cw.open(2)
        for service in services:
            service.tick()
        assert all(s.decisions[two].delivered for s in services)
        reports.clear()
        ticks = [threading.Thread(target=a.tick) for a in (first_agg, second_agg)]
        for thread in ticks:
            thread.start()
        for thread in ticks:
            thread.join()
        assert client().challenge(two).status == ChallengeState.SETTLED
        advance_time(w3, client().appeal_window() + 1)
        for aggregator in (first_agg, second_agg, first_agg, second_agg):
            aggregator.tick()
        final = client().challenge(two)
        assert final.status == ChallengeState.FINALIZED
        assert final.claimed_bitmap == final.signer_bitmap  # every reward claimed, once
        assert not any("failed" in line for line in reports), reports
        second_server.shutdown()
    finally:
        first_server.shutdown()
