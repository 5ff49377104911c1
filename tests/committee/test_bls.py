"""committee.bls and committee.messages (docs/committee.md): signatures, aggregation, the
gamma-bound pairing check, proofs of possession against rogue keys, the point and message
encodings under hostile input, and tests/vectors/bls_committee.json.

Independent cross-checks: hash_to_g1 against Euler's criterion (every skipped x is a
non-residue), the one two-pair check against the two textbook pairing equations computed apart,
and the digests against abi.encode written out word by word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from eth_utils import keccak
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from py_ecc.optimized_bn128 import (
    FQ2,
    FQ12,
    G1,
    G2,
    Z1,
    add,
    b,
    b2,
    eq,
    is_inf,
    is_on_curve,
    multiply,
    neg,
    pairing,
)

from committee import (
    REJECTED,
    UPHELD,
    BLSError,
    SecretKey,
    SignedVerdict,
    Verdict,
    aggregate_pk1,
    aggregate_pk2,
    aggregate_signatures,
    decode_signed_verdict,
    g1_from_ints,
    g1_from_json,
    g1_to_ints,
    g1_to_json,
    g2_from_ints,
    g2_from_json,
    g2_to_ints,
    g2_to_json,
    gamma,
    hash_to_g1,
    pop_digest,
    proof_of_possession,
    reason_bytes,
    reason_text,
    sign,
    verdict_digest,
    verify,
    verify_pop,
)
from committee import vectors as committee_vectors
from committee.bls import P, R, hash_to_g1_hint, hash_to_g1_hinted
from committee.messages import MAX_SIGNED_VERDICT_BYTES, POP_TYPE, VERDICT_TYPE

VECTORS = Path(__file__).resolve().parent.parent / "vectors" / "bls_committee.json"
CHAIN = 31337
COMMITTEE = "0x5615dEB798BB3E4dFa0139dFa1b3D433Cc23b72f"
VERIFIER = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
MESSAGE = keccak(text="a verdict")


@pytest.fixture(scope="module")
def keys():
    """The 64 vector keys: (sk, pk1, pk2)."""
    out = []
    for i in range(64):
        sk = SecretKey.from_seed(f"gym-verifier-{i}")
        out.append((sk, sk.pk1(), sk.pk2()))
    return out


def _aggregate(keys, signers, digest):
    return (aggregate_signatures(sign(keys[i][0], digest) for i in signers),
            aggregate_pk1(keys[i][1] for i in signers), aggregate_pk2(keys[i][2] for i in signers))


def _textbook(sigma, apk1, apk2, digest) -> bool:
    """The same statement as ``verify``, as two equations with a pairing each side:
    e(σ, G2) = e(H(m), apk2) and e(apk1, G2) = e(G1, apk2)."""
    return (pairing(G2, sigma) == pairing(apk2, hash_to_g1(digest))
            and pairing(G2, apk1) == pairing(apk2, G1))


# --------------------------------------------------------------------------- keys


def test_secret_keys_are_in_range_and_deterministic_from_a_seed():
    sk = SecretKey.from_seed("gym-verifier-0")
    assert sk == SecretKey.from_seed(b"gym-verifier-0")
    assert sk.value == int.from_bytes(keccak(text="gym-verifier-0"), "big") % R
    assert 0 < SecretKey.generate().value < R
    assert SecretKey.generate() != SecretKey.generate()
    assert str(sk.value) not in repr(sk) and f"{sk.value:x}" not in repr(sk)
    for bad in (0, R, -1, R + 5, True, 1.0):
        with pytest.raises(BLSError):
            SecretKey(bad)


# --------------------------------------------------------------------------- sign and verify


def test_sign_verify_round_trip(keys):
    sk, pk1, pk2 = keys[0]
    sigma = sign(sk, MESSAGE)
    assert verify(sigma, pk1, pk2, MESSAGE)
    assert _textbook(sigma, pk1, pk2, MESSAGE)
    assert not verify(sigma, pk1, pk2, keccak(text="another verdict"))


@pytest.mark.parametrize("signers", [[0, 1, 2], list(range(64))], ids=["3", "64"])
def test_an_aggregate_verifies(keys, signers):
    sigma, apk1, apk2 = _aggregate(keys, signers, MESSAGE)
    assert verify(sigma, apk1, apk2, MESSAGE)


def test_an_aggregate_on_another_message_fails(keys):
    sigma, apk1, apk2 = _aggregate(keys, [0, 1, 2], MESSAGE)
    assert not verify(sigma, apk1, apk2, keccak(text="another verdict"))


def test_a_missing_signer_fails(keys):
    sigma = aggregate_signatures(sign(keys[i][0], MESSAGE) for i in (0, 1))
    _, apk1, apk2 = _aggregate(keys, [0, 1, 2], MESSAGE)
    assert not verify(sigma, apk1, apk2, MESSAGE)


def test_gamma_binds_apk2_to_apk1(keys):
    # σ and apk2 are the signers {0, 1, 3}, apk1 says {0, 1, 2}: the signature equation alone
    # holds, so a contract that summed pk1 but checked only e(σ, G2) = e(H(m), apk2) would
    # count signer 2, who never signed.
    sigma, _, apk2 = _aggregate(keys, [0, 1, 3], MESSAGE)
    apk1 = aggregate_pk1(keys[i][1] for i in (0, 1, 2))
    assert pairing(G2, sigma) == pairing(apk2, hash_to_g1(MESSAGE))
    assert not _textbook(sigma, apk1, apk2, MESSAGE)
    assert not verify(sigma, apk1, apk2, MESSAGE)


def test_keys_at_infinity_never_verify(keys):
    # σ = 0 with apk = 0 satisfies the equations for every message
    assert not verify(Z1, Z1, multiply(G2, 0), MESSAGE)
    sk, pk1, _ = keys[0]
    assert not verify(sign(sk, MESSAGE), pk1, multiply(G2, 0), MESSAGE)


def test_the_one_pairing_check_agrees_with_the_textbook_equations(keys):
    sigma, apk1, apk2 = _aggregate(keys, [4, 5], MESSAGE)
    g = gamma(MESSAGE, sigma, apk1, apk2)
    left, right = add(sigma, multiply(apk1, g)), add(hash_to_g1(MESSAGE), multiply(G1, g))
    assert pairing(neg(G2), left) * pairing(apk2, right) == FQ12.one()
    assert _textbook(sigma, apk1, apk2, MESSAGE)


def test_rogue_key_forges_an_aggregate_and_the_proof_of_possession_stops_it(keys):
    victim_sk, victim1, victim2 = keys[0]
    x = 0xC0FFEE  # the attacker's secret
    rogue1 = add(multiply(G1, x), neg(victim1))
    rogue2 = add(multiply(G2, x), neg(victim2))
    # a well-formed key: decoding does not stop it
    rogue1 = g1_from_json(g1_to_json(rogue1))
    rogue2 = g2_from_json(g2_to_json(rogue2))
    # the attacker signs alone for "victim + rogue"
    sigma = multiply(hash_to_g1(MESSAGE), x)
    assert verify(sigma, aggregate_pk1([victim1, rogue1]), aggregate_pk2([victim2, rogue2]),
                  MESSAGE)
    # registration: the attacker can sign the PoP message with x, i.e. for x·G, not for rogue
    attacker = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
    digest = pop_digest(CHAIN, COMMITTEE, attacker, rogue1)
    assert not verify_pop(multiply(hash_to_g1(digest), x), rogue1, rogue2, CHAIN, COMMITTEE,
                          attacker)
    # the victim's own proof is accepted only for the victim, on this deployment
    pop = proof_of_possession(victim_sk, CHAIN, COMMITTEE, VERIFIER)
    assert verify_pop(pop, victim1, victim2, CHAIN, COMMITTEE, VERIFIER)
    assert not verify_pop(pop, victim1, victim2, CHAIN, COMMITTEE, attacker)
    assert not verify_pop(pop, victim1, victim2, 1, COMMITTEE, VERIFIER)


# --------------------------------------------------------------------------- hash to G1


def _is_residue(value: int) -> bool:
    return pow(value, (P - 1) // 2, P) in (0, 1)  # Euler's criterion


@pytest.mark.parametrize("digest", committee_vectors.HASH_DIGESTS + [
    keccak(text=f"random-{i}") for i in range(20)], ids=lambda d: d.hex()[:8])
def test_hash_to_g1_is_the_first_x_on_the_curve(digest):
    point = hash_to_g1(digest)
    assert is_on_curve(point, b) and not is_inf(point)
    x, y = g1_to_ints(point)
    x0 = int.from_bytes(digest, "big") % P
    skipped = (x - x0) % P
    assert skipped < 64
    assert all(not _is_residue(((x0 + k) ** 3 + 3) % P) for k in range(skipped))
    assert _is_residue((x ** 3 + 3) % P)
    assert y == pow((x ** 3 + 3) % P, (P + 1) // 4, P)  # the root EigenLayer's expMod gives


def test_the_hash_vectors_include_digests_needing_several_increments():
    doc = json.loads(VECTORS.read_text())
    steps = [(hex_int(v["point"][0]) - hex_int(v["digest"]) % P) % P for v in doc["hash_to_g1"]]
    assert max(steps) >= 2 and 0 in steps
    assert [hash_to_g1(bytes.fromhex(v["digest"][2:])) for v in doc["hash_to_g1"]] == \
        [g1_from_json(v["point"]) for v in doc["hash_to_g1"]]


def hex_int(value: str) -> int:
    return int(value, 16)


@pytest.mark.parametrize("digest", committee_vectors.HASH_DIGESTS + [
    keccak(text=f"random-{i}") for i in range(20)], ids=lambda d: d.hex()[:8])
def test_the_hash_hint_proves_hash_to_g1(digest):
    """hash_to_g1_hint: a root of −β per skipped candidate, then hash_to_g1's y; the contract's
    check (hash_to_g1_hinted) finds hash_to_g1's point, and refuses any word changed."""
    hint = hash_to_g1_hint(digest)
    x, y = g1_to_ints(hash_to_g1(digest))
    x0 = int.from_bytes(digest, "big") % P
    assert len(hint) == (x - x0) % P + 1 and hint[-1] == y
    for k, z in enumerate(hint[:-1]):
        assert z * z % P == (P - ((x0 + k) ** 3 + 3)) % P
    assert hash_to_g1_hinted(digest, hint) == (x, y)
    assert hash_to_g1_hinted(digest, [*hint[:-1], P - y]) == (x, P - y)  # either root
    for bad in ([], [*hint[:-1], y + 1], [*hint[:-1], y + P], [*hint, y], hint[1:] or [0],
                [*hint[:-1], -1], [*hint[:-1], 2**256]):
        assert hash_to_g1_hinted(digest, bad) is None


def test_the_vectors_carry_the_hash_hints():
    doc = json.loads(VECTORS.read_text())
    assert any(len(v["hint"]) > 1 for v in doc["hash_to_g1"])
    for v in doc["hash_to_g1"]:
        assert [hex_int(w) for w in v["hint"]] == hash_to_g1_hint(bytes.fromhex(v["digest"][2:]))
    for v in doc["verdict"]:
        assert [hex_int(w) for w in v["hash_hint"]] == hash_to_g1_hint(bytes.fromhex(v["digest"][2:]))


@pytest.mark.parametrize("digest", [b"", b"\0" * 31, b"\0" * 33, "00" * 32, None])
def test_hash_to_g1_wants_32_bytes(digest):
    with pytest.raises(BLSError):
        hash_to_g1(digest)


# --------------------------------------------------------------------------- encoding


def test_points_round_trip_in_eip197_order(keys):
    _, pk1, pk2 = keys[1]
    assert eq(g1_from_ints(g1_to_ints(pk1)), pk1)
    assert eq(g2_from_ints(g2_to_ints(pk2)), pk2)
    assert eq(g1_from_json(g1_to_json(pk1)), pk1)
    assert eq(g2_from_json(g2_to_json(pk2)), pk2)
    # EIP-197's G2 generator: x = 0x198e…c2 (imaginary) ‖ 0x1800…ed (real)
    (x_im, x_re), _ = g2_to_ints(G2)
    assert hex(x_im).startswith("0x198e9393") and hex(x_re).startswith("0x1800deef")
    assert g1_to_ints(Z1) == (0, 0)
    assert is_inf(g1_from_ints([0, 0], allow_infinity=True))
    assert is_inf(g2_from_ints([[0, 0], [0, 0]], allow_infinity=True))


def _twist_point_outside_the_subgroup():
    """A point on the twist y² = x³ + 3/(9+i) of order not r: square roots in F_p² (p = 3 mod
    4; Adj and Rodríguez-Henríquez, Algorithm 9)."""
    minus_one = FQ2([-1, 0])
    for k in range(1, 100):
        x = FQ2([k, 1])
        rhs = x ** 3 + b2
        a1 = rhs ** ((P - 3) // 4)
        alpha = a1 * a1 * rhs
        x0 = a1 * rhs
        y = FQ2([0, 1]) * x0 if alpha == minus_one else (alpha + FQ2.one()) ** ((P - 1) // 2) * x0
        if y * y == rhs:
            point = (x, y, FQ2.one())
            assert is_on_curve(point, b2) and not is_inf(multiply(point, R))
            return point
    raise AssertionError("no point found")


def test_decoding_refuses_a_g2_point_outside_the_subgroup():
    x, y, _ = _twist_point_outside_the_subgroup()
    (x_re, x_im), (y_re, y_im) = (int(c) for c in x.coeffs), (int(c) for c in y.coeffs)
    with pytest.raises(BLSError, match="subgroup"):
        g2_from_ints([[x_im, x_re], [y_im, y_re]])
    # the same coordinates in py_ecc's (re, im) order are not even on the curve
    with pytest.raises(BLSError, match="not on"):
        g2_from_ints([[x_re, x_im], [y_re, y_im]])


G1_BAD = {
    "off-curve": [1, 1],
    "x = p": [P, 2],
    "y >= p": [1, 2 + P],
    "negative": [-1, 2],
    "infinity": [0, 0],
    "bool": [True, 2],
    "float": [1.0, 2],
    "three coordinates": [1, 2, 3],
    "one coordinate": [1],
    "not a list": "0x01",
    "nested": [[1], [2]],
}


@pytest.mark.parametrize("coords", G1_BAD.values(), ids=G1_BAD.keys())
def test_g1_decoding_refuses(coords):
    with pytest.raises(BLSError):
        g1_from_ints(coords)


def test_g1_decoding_accepts_the_generator():
    assert eq(g1_from_ints([1, 2]), G1)


G1_JSON_BAD = {
    "ints not hex": [1, 2],
    "no 0x": ["01", "02"],
    "too long": ["0x" + "0" * 65, "0x2"],
    "empty": ["0x", "0x2"],
    "not hex": ["0xg1", "0x2"],
    "x >= p": [hex(P), "0x2"],
    "off-curve": ["0x1", "0x3"],
    "infinity": ["0x0", "0x0"],
    "object": {"x": "0x1", "y": "0x2"},
    "null": None,
}


@pytest.mark.parametrize("obj", G1_JSON_BAD.values(), ids=G1_JSON_BAD.keys())
def test_g1_json_decoding_refuses(obj):
    with pytest.raises(BLSError):
        g1_from_json(obj)


def test_g2_decoding_refuses_malformed_points(keys):
    good = g2_to_ints(keys[0][2])
    (a, b_), (c, d) = good
    for bad in ([[a, b_], [c, d + 1]],  # off the twist
                [[a, b_], [c, d + P]],  # out of range
                [[a, b_], [c]],  # wrong shape
                [[a, b_]],
                [[a, b_], [c, d], [0, 0]],
                [a, b_, c, d],
                [[0, 0], [0, 0]],  # infinity
                [[b_, a], [d, c]]):  # (re, im) order
        with pytest.raises(BLSError):
            g2_from_ints(bad)
    with pytest.raises(BLSError):
        g2_from_json([[hex(a), hex(b_)], [hex(c), 17]])


# --------------------------------------------------------------------------- messages


def test_digests_are_abi_encode_word_by_word(keys):
    pk_x, pk_y = g1_to_ints(keys[0][1])

    def word(value: int | bytes) -> bytes:
        return value.rjust(32, b"\0") if isinstance(value, bytes) else value.to_bytes(32, "big")

    committee = bytes.fromhex(COMMITTEE[2:])
    expected = keccak(b"".join([keccak(text=POP_TYPE), word(CHAIN), word(committee),
                                word(bytes.fromhex(VERIFIER[2:])), word(pk_x), word(pk_y)]))
    assert pop_digest(CHAIN, COMMITTEE, VERIFIER, keys[0][1]) == expected
    receipt = keccak(text="receipt")
    expected = keccak(b"".join([keccak(text=VERDICT_TYPE), word(CHAIN), word(committee),
                                word(7), receipt, word(UPHELD), b"sampling".ljust(32, b"\0")]))
    assert verdict_digest(CHAIN, COMMITTEE, 7, receipt, UPHELD, reason_bytes("sampling")) == \
        expected
    assert POP_TYPE == ("GymVerifierPoP(uint256 chainId,address committee,address verifier,"
                        "uint256 pkX,uint256 pkY)")
    assert VERDICT_TYPE == ("GymVerdict(uint256 chainId,address committee,uint256 challengeId,"
                            "bytes32 receiptHash,uint8 verdict,bytes32 reason)")


def test_reasons():
    assert reason_bytes("sampling") == b"sampling" + bytes(24)
    assert reason_text(reason_bytes("library_root")) == "library_root"
    assert reason_text(bytes(32)) == ""
    assert reason_text(reason_bytes("x" * 32)) == "x" * 32
    for bad in ("", "x" * 33, "two words", "é", "a\0b", None):
        with pytest.raises(BLSError):
            reason_bytes(bad)
    for bad in (b"a\0b" + bytes(29), b"\0a" + bytes(30), b"\xff" + bytes(31), b"short"):
        with pytest.raises(BLSError):
            reason_text(bad)


def test_verdict_json_round_trip_and_rules():
    verdict = Verdict(3, keccak(text="r"), UPHELD, reason_bytes("sampling"))
    assert Verdict.from_json(json.loads(json.dumps(verdict.to_json()))) == verdict
    rejected = Verdict(4, keccak(text="r"), REJECTED)
    assert Verdict.from_json(rejected.to_json()) == rejected
    for args in ((3, keccak(text="r"), UPHELD),  # upheld without a reason
                 (3, keccak(text="r"), REJECTED, reason_bytes("sampling")),  # rejected with one
                 (3, keccak(text="r"), 0, bytes(32)), (3, keccak(text="r"), 3, bytes(32)),
                 (-1, keccak(text="r"), REJECTED), (2**256, keccak(text="r"), REJECTED),
                 (3, b"short", REJECTED), (3, keccak(text="r"), True, reason_bytes("x"))):
        with pytest.raises(BLSError):
            Verdict(*args)
    for obj in ({**rejected.to_json(), "extra": 1}, {"challenge_id": 4}, [],
                {**rejected.to_json(), "receipt_hash": "0x12"},
                {**rejected.to_json(), "challenge_id": "4"}):
        with pytest.raises(BLSError):
            Verdict.from_json(obj)


@pytest.fixture(scope="module")
def signed(keys):
    sk = keys[5][0]
    verdict = Verdict(9, keccak(text="receipt-9"), UPHELD, reason_bytes("sampling"))
    return SignedVerdict.create(sk, verdict, chain_id=CHAIN, committee=COMMITTEE,
                                verifier_index=5, verifier=VERIFIER.lower())


def test_signed_verdict_round_trip_and_verify(keys, signed):
    data = signed.to_bytes()
    assert len(data) < MAX_SIGNED_VERDICT_BYTES
    decoded = decode_signed_verdict(data)
    assert decoded.verdict == signed.verdict and decoded.verifier == VERIFIER
    assert decoded.verifier_index == 5 and eq(decoded.sigma, signed.sigma)
    assert decoded.verify(keys[5][1], chain_id=CHAIN, committee=COMMITTEE)
    assert not decoded.verify(keys[6][1], chain_id=CHAIN, committee=COMMITTEE)
    assert not decoded.verify(keys[5][1], chain_id=1, committee=COMMITTEE)


def _mutations(doc: dict) -> dict[str, object]:
    return {
        "not json": b"{",
        "too large": b" " * MAX_SIGNED_VERDICT_BYTES + json.dumps(doc).encode(),
        "too deep": b"[" * 50 + b"]" * 50,
        "a list": b"[]",
        "wrong type": {**doc, "type": "gym-verdict"},
        "wrong version": {**doc, "v": 2},
        "version true": {**doc, "v": True},
        "missing pk2": {k: v for k, v in doc.items() if k != "pk2"},
        "extra key": {**doc, "note": "hi"},
        "negative index": {**doc, "verifier_index": -1},
        "index as string": {**doc, "verifier_index": "5"},
        "bad address": {**doc, "verifier": "0x1234"},
        "sigma off-curve": {**doc, "sigma": ["0x1", "0x3"]},
        "sigma at infinity": {**doc, "sigma": ["0x0", "0x0"]},
        "pk2 swapped halves": {**doc, "pk2": [doc["pk2"][0][::-1], doc["pk2"][1][::-1]]},
        "verdict 3": {**doc, "verdict": {**doc["verdict"], "verdict": 3}},
        "reason not ascii": {**doc, "verdict": {**doc["verdict"], "reason": "0x" + "ff" * 32}},
        "duplicate key": json.dumps(doc)[:-1].encode() + b',"v":1}',
    }


def test_decode_signed_verdict_refuses_malformed_input(signed):
    for name, mutation in _mutations(signed.to_json()).items():
        data = mutation if isinstance(mutation, bytes) else json.dumps(mutation).encode()
        with pytest.raises(BLSError):
            decode_signed_verdict(data)
            pytest.fail(f"accepted: {name}")


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_decode_signed_verdict_raises_only_blserror(signed, data):
    raw = bytearray(signed.to_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        decode_signed_verdict(bytes(raw))
    except BLSError:
        pass


# --------------------------------------------------------------------------- vectors


def test_the_vectors_file_is_what_the_generator_writes(tmp_path):
    out = tmp_path / "bls_committee.json"
    committee_vectors.main([str(out)])
    assert out.read_text() == VECTORS.read_text()
    assert VECTORS.stat().st_size < 100_000


def test_the_vectors_verify(keys):
    doc = json.loads(VECTORS.read_text())
    assert doc["curve"] == "bn254" and len(doc["keys"]) == 64
    assert eq(g2_from_json(doc["g2_generator"]), G2)
    for i, key in enumerate(doc["keys"]):
        assert key["seed"] == f"gym-verifier-{i}"
        assert hex_int(key["sk"]) == keys[i][0].value
        assert eq(g1_from_json(key["pk1"]), keys[i][1])
        assert eq(g2_from_json(key["pk2"]), keys[i][2])
    for pop in doc["pop"]:
        _, pk1, pk2 = keys[pop["key_index"]]
        assert pop["digest"] == "0x" + pop_digest(pop["chain_id"], pop["committee"],
                                                  pop["verifier"], pk1).hex()
        assert verify_pop(g1_from_json(pop["sigma"]), pk1, pk2, pop["chain_id"],
                          pop["committee"], pop["verifier"])
    for v in doc["verdict"]:
        digest = bytes.fromhex(v["digest"][2:])
        assert digest == verdict_digest(v["chain_id"], v["committee"], v["challenge_id"],
                                        v["receipt_hash"], v["verdict"], v["reason"])
        sigma, apk1, apk2 = (g1_from_json(v["sigma"]), g1_from_json(v["apk1"]),
                             g2_from_json(v["apk2"]))
        assert eq(apk1, aggregate_pk1(keys[i][1] for i in v["signers"]))
        assert hex_int(v["gamma"]) == gamma(digest, sigma, apk1, apk2)
        assert verify(sigma, apk1, apk2, digest)
    assert {len(v["signers"]) for v in doc["verdict"]} >= {3, 64}
