// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {BN254} from "../src/BN254.sol";
import {INodeRegistry} from "../src/INodeRegistry.sol";
import {IVerifierCommittee} from "../src/IVerifierCommittee.sol";
import {VerifierCommittee} from "../src/VerifierCommittee.sol";
import {CommitteeFixture} from "./utils/CommitteeFixture.sol";
import {CommitteeSet} from "./utils/CommitteeSet.sol";
import {G2Math} from "./utils/G2Math.sol";
import {Vm} from "./utils/Vm.sol";
import {VerifierCommitteeHandler} from "./handlers/VerifierCommitteeHandler.sol";

/// @notice The Python vectors (tests/vectors/bls_committee.json, committee/vectors.py) checked
/// against the library and the contract: hash to G1, PoP and verdict digests, γ, and
/// signatures made by py_ecc accepted on chain.
contract VerifierCommitteeVectorsTest is CommitteeFixture {
    function test_vectors_committeeAddressAndChain() public view {
        assertEq(address(committee), VECTOR_COMMITTEE, "committee at the vectors' address");
        assertEq(block.chainid, 31337, "chain id");
    }

    function test_vectors_hashToG1() public view {
        string memory json = vm.readFile(VECTORS);
        uint256 count;
        uint256 skipped;
        for (uint256 i;; ++i) {
            string memory at = string.concat(".hash_to_g1[", _str(i), "]");
            if (!_has(json, string.concat(at, ".digest"))) break;
            BN254.G1Point memory h = BN254.hashToG1(vm.parseJsonBytes32(json, string.concat(at, ".digest")));
            uint256[] memory point = vm.parseJsonUintArray(json, string.concat(at, ".point"));
            assertEq(h.X, point[0], "x");
            assertEq(h.Y, point[1], "y");
            // Python's hint proves the same point to the contract's check, and is what ours is
            uint256[] memory hint = vm.parseJsonUintArray(json, string.concat(at, ".hint"));
            (uint256 x, uint256 y, bool ok) = _hinted(vm.parseJsonBytes32(json, string.concat(at, ".digest")), hint);
            assertTrue(ok, "py hint accepted");
            assertEq(x, point[0], "hinted x");
            assertEq(y, point[1], "hinted y");
            assertEq(
                keccak256(abi.encode(hint)),
                keccak256(abi.encode(BN254.hashToG1Hint(vm.parseJsonBytes32(json, string.concat(at, ".digest"))))),
                "hint = BN254.hashToG1Hint"
            );
            if (hint.length > 1) ++skipped;
            ++count;
        }
        assertTrue(count >= 5, "hash_to_g1 vectors read");
        assertTrue(skipped >= 2, "some vectors skip candidates");
    }

    function test_vectors_g2Generator() public view {
        string memory json = vm.readFile(VECTORS);
        BN254.G2Point memory g = BN254.generatorG2();
        uint256[] memory x = vm.parseJsonUintArray(json, ".g2_generator[0]");
        uint256[] memory y = vm.parseJsonUintArray(json, ".g2_generator[1]");
        assertEq(g.X[0], x[0], "x_im");
        assertEq(g.X[1], x[1], "x_re");
        assertEq(g.Y[0], y[0], "y_im");
        assertEq(g.Y[1], y[1], "y_re");
    }

    function test_vectors_popDigestsAndRegistration() public {
        string memory json = vm.readFile(VECTORS);
        for (uint256 v; v < 3; ++v) {
            string memory at = string.concat(".pop[", _str(v), "]");
            address verifier = vm.parseJsonAddress(json, string.concat(at, ".verifier"));
            uint256 k = vm.parseJsonUint(json, string.concat(at, ".key_index"));
            assertEq(verifier, verifierAddress(k), "verifier address scheme");
            bytes32 digest = committee.popDigest(verifier, keys[k].pk1);
            assertEq(digest, vm.parseJsonBytes32(json, string.concat(at, ".digest")), "pop digest");
            uint256[] memory s = vm.parseJsonUintArray(json, string.concat(at, ".sigma"));
            BN254.G1Point memory sigma = BN254.G1Point(s[0], s[1]);
            BN254.G1Point memory mine = BN254.ecMul(BN254.hashToG1(digest), keys[k].sk);
            assertEq(mine.X, sigma.X, "sigma x = sk.H(m)");
            assertEq(mine.Y, sigma.Y, "sigma y = sk.H(m)");
            vm.prank(verifier);
            committee.register(keys[k].pk1, keys[k].pk2, sigma, MIN_VERIFIER_STAKE);
        }
        assertEq(committee.slotCount(), 3, "three registered with the vectors' PoPs");
    }

    function test_vectors_verdicts() public view {
        string memory json = vm.readFile(VECTORS);
        for (uint256 v; v < 3; ++v) {
            string memory at = string.concat(".verdict[", _str(v), "]");
            bytes32 digest = committee.verdictDigest(
                vm.parseJsonUint(json, string.concat(at, ".challenge_id")),
                vm.parseJsonBytes32(json, string.concat(at, ".receipt_hash")),
                uint8(vm.parseJsonUint(json, string.concat(at, ".verdict"))),
                vm.parseJsonBytes32(json, string.concat(at, ".reason"))
            );
            assertEq(digest, vm.parseJsonBytes32(json, string.concat(at, ".digest")), "verdict digest");
            uint256[] memory signers = vm.parseJsonUintArray(json, string.concat(at, ".signers"));
            uint256 bitmap;
            BN254.G1Point memory apk1;
            for (uint256 i; i < signers.length; ++i) {
                bitmap |= 1 << signers[i];
                apk1 = BN254.ecAdd(apk1, keys[signers[i]].pk1);
            }
            (BN254.G1Point memory sigma, BN254.G1Point memory vApk1, BN254.G2Point memory vApk2) = _verdictPoints(json, at);
            assertEq(vApk1.X, apk1.X, "apk1 x = sum of pk1");
            assertEq(vApk1.Y, apk1.Y, "apk1 y = sum of pk1");
            BN254.G2Point memory apk2 = _apk2(bitmap);
            assertEq(keccak256(abi.encode(apk2)), keccak256(abi.encode(vApk2)), "apk2 = sum of pk2");
            assertEq(
                BN254.gamma(digest, vApk1, vApk2, sigma),
                vm.parseJsonUint(json, string.concat(at, ".gamma")),
                "gamma"
            );
            (bool pairingOk, bool callOk) = BN254.verify(digest, vApk1, vApk2, sigma);
            assertTrue(pairingOk && callOk, "py_ecc aggregate verifies");
            BN254.G1Point memory mine = _sign(digest, bitmap);
            assertEq(mine.X, sigma.X, "in-test signature = py_ecc's");
        }
    }

    /// @dev Verdict vector 0 (challenge 1, signers 0, 1, 2, upheld, "sampling") settles as is.
    function test_vectors_pythonVerdictSettles() public {
        string memory json = vm.readFile(VECTORS);
        string memory at = ".verdict[0]";
        _registerMany(4, MIN_VERIFIER_STAKE);
        uint256 id = _open(vm.parseJsonBytes32(json, string.concat(at, ".receipt_hash")));
        assertEq(id, vm.parseJsonUint(json, string.concat(at, ".challenge_id")), "challenge id");
        (BN254.G1Point memory sigma,, BN254.G2Point memory apk2) = _verdictPoints(json, at);
        bytes memory set = committee.activeSet();
        // everything as Python made it: σ, apk2, the non-signers and the hash hint
        IVerifierCommittee.SettlementProof memory proof = IVerifierCommittee.SettlementProof({
            set: set,
            nonSigners: hex"03",
            sigma: sigma,
            apk2: apk2,
            hashHint: vm.parseJsonUintArray(json, string.concat(at, ".hash_hint"))
        });
        committee.settle(
            id,
            vm.parseJsonBytes32(json, string.concat(at, ".receipt_hash")),
            uint8(vm.parseJsonUint(json, string.concat(at, ".verdict"))),
            vm.parseJsonBytes32(json, string.concat(at, ".reason")),
            0x7,
            proof
        );
        assertEq(uint256(committee.challengeOf(id).status), uint256(IVerifierCommittee.Status.Settled), "settled");
    }

    function _verdictPoints(string memory json, string memory at)
        internal
        pure
        returns (BN254.G1Point memory sigma, BN254.G1Point memory apk1, BN254.G2Point memory apk2)
    {
        uint256[] memory s = vm.parseJsonUintArray(json, string.concat(at, ".sigma"));
        uint256[] memory a = vm.parseJsonUintArray(json, string.concat(at, ".apk1"));
        uint256[] memory x = vm.parseJsonUintArray(json, string.concat(at, ".apk2[0]"));
        uint256[] memory y = vm.parseJsonUintArray(json, string.concat(at, ".apk2[1]"));
        sigma = BN254.G1Point(s[0], s[1]);
        apk1 = BN254.G1Point(a[0], a[1]);
        apk2 = BN254.G2Point([x[0], x[1]], [y[0], y[1]]);
    }

    function _has(string memory json, string memory key) internal view returns (bool) {
        try this.readBytes32(json, key) returns (bytes32) {
            return true;
        } catch {
            return false;
        }
    }

    function readBytes32(string memory json, string memory key) external pure returns (bytes32) {
        return vm.parseJsonBytes32(json, key);
    }
}

contract VerifierCommitteeTest is CommitteeFixture {
    // ------------------------------------------------------------------ registration

    function test_register_assignsIndicesAndCommitsSet() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        assertEq(committee.slotCount(), 3, "slots");
        assertEq(committee.activeStake(), 3 * MIN_VERIFIER_STAKE, "active stake");
        assertEq(token.balanceOf(address(committee)), 3 * MIN_VERIFIER_STAKE, "stake pulled");
        bytes memory set = committee.activeSet();
        assertEq(set, _expectedSet(), "the set: apk1, active stake and bitmap, (pk1, stake) per index");
        assertEq(CommitteeSet.activeBitmap(set), 0x7, "active bitmap");
        assertEq(committee.setHash(), keccak256(set), "setHash = keccak of the set");
        BN254.G1Point memory sum = BN254.ecAdd(BN254.ecAdd(keys[0].pk1, keys[1].pk1), keys[2].pk1);
        (uint256 x, uint256 y) = committee.apk1();
        assertEq(x, sum.X, "apk1 x");
        assertEq(y, sum.Y, "apk1 y");
        IVerifierCommittee.VerifierInfo memory info = committee.verifierAt(1);
        assertEq(info.verifier, verifierAddress(1), "holder");
        assertEq(uint256(info.state), 1, "active");
    }

    function test_register_refusesPoPForAnotherVerifier() public {
        // verifier 1 replays verifier 0's PoP for key 0 under its own address
        address who = verifierAddress(0);
        BN254.G1Point memory pop = BN254.ecMul(BN254.hashToG1(committee.popDigest(who, keys[0].pk1)), keys[0].sk);
        vm.prank(verifierAddress(1));
        vm.expectRevert(
            abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidProofOfPossession.selector, verifierAddress(1))
        );
        committee.register(keys[0].pk1, keys[0].pk2, pop, MIN_VERIFIER_STAKE);
    }

    /// @dev pk' = G − pk_victim (and its G2 twin) would let its owner sign alone for {victim,
    /// pk'} (their sum is G, whose secret is 1), but it has no PoP.
    function test_register_refusesRogueKeyWithoutPoP() public {
        _register(0, MIN_VERIFIER_STAKE);
        BN254.G1Point memory rogue1 = BN254.ecAdd(BN254.generatorG1(), BN254.neg(keys[0].pk1));
        BN254.G2Point memory negPk2 = keys[0].pk2;
        negPk2.Y[0] = BN254.P - negPk2.Y[0];
        negPk2.Y[1] = BN254.P - negPk2.Y[1];
        BN254.G2Point memory rogue2 = G2Math.add(BN254.generatorG2(), negPk2);
        // the attack, were the key accepted: H(m) alone verifies for the pair
        bytes32 m = keccak256("any verdict");
        (bool forged,) = BN254.verify(
            m, BN254.ecAdd(keys[0].pk1, rogue1), G2Math.add(keys[0].pk2, rogue2), BN254.hashToG1(m)
        );
        assertTrue(forged, "rogue pair signs with sk = 1");
        // the best the attacker can offer as a PoP is a signature by G's secret, 1
        address mallory = verifierAddress(9);
        BN254.G1Point memory pop = BN254.hashToG1(committee.popDigest(mallory, rogue1));
        vm.prank(mallory);
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidProofOfPossession.selector, mallory));
        committee.register(rogue1, rogue2, pop, MIN_VERIFIER_STAKE);
    }

    function test_register_refusesReusedKeyAndLowStake() public {
        _register(0, MIN_VERIFIER_STAKE);
        address other = verifierAddress(1);
        BN254.G1Point memory pop = BN254.ecMul(BN254.hashToG1(committee.popDigest(other, keys[0].pk1)), keys[0].sk);
        vm.prank(other);
        vm.expectRevert(
            abi.encodeWithSelector(
                IVerifierCommittee.CommitteeKeyUsed.selector, keccak256(abi.encode(keys[0].pk1.X, keys[0].pk1.Y))
            )
        );
        committee.register(keys[0].pk1, keys[0].pk2, pop, MIN_VERIFIER_STAKE);
        vm.prank(other);
        vm.expectRevert(
            abi.encodeWithSelector(
                IVerifierCommittee.CommitteeStakeBelowMinimum.selector, MIN_VERIFIER_STAKE - 1, MIN_VERIFIER_STAKE
            )
        );
        committee.register(keys[1].pk1, keys[1].pk2, pop, MIN_VERIFIER_STAKE - 1);
    }

    function test_deregister_leavesSetAtOnce_withdrawAfterDelay_freesIndex() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        vm.prank(verifierAddress(1));
        committee.deregister();
        assertEq(committee.activeStake(), 2 * MIN_VERIFIER_STAKE, "left the active stake");
        bytes memory set = committee.activeSet();
        assertEq(CommitteeSet.pk1(set, 1).X + CommitteeSet.stake(set, 1), 0, "zeros in the set");
        assertEq(CommitteeSet.activeBitmap(set), 0x5, "left the active bitmap");
        assertEq(set, _expectedSet(), "the set without it");
        assertEq(committee.setHash(), keccak256(set), "set recommitted");
        uint64 ends = uint64(block.timestamp) + committee.DEREGISTRATION_DELAY();
        vm.prank(verifierAddress(1));
        vm.expectRevert(
            abi.encodeWithSelector(
                IVerifierCommittee.CommitteeStillBonded.selector, verifierAddress(1), ends, block.timestamp
            )
        );
        committee.withdraw();
        vm.warp(ends);
        uint256 before = token.balanceOf(verifierAddress(1));
        vm.prank(verifierAddress(1));
        committee.withdraw();
        assertEq(token.balanceOf(verifierAddress(1)) - before, MIN_VERIFIER_STAKE, "stake returned");
        _register(5, MIN_VERIFIER_STAKE);
        (uint256 index,) = committee.indexOf(verifierAddress(5));
        assertEq(index, 1, "lowest free index reused");
        assertTrue(committee.DEREGISTRATION_DELAY() > committee.MAX_APPEAL_WINDOW(), "delay > any appeal window");
    }

    // ------------------------------------------------------------------ settle

    function test_settle_validAggregateRecordsVerdict() public {
        _registerMany(4, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        assertEq(registry.challengeOf(1).challenger, address(committee), "registry challenger is the committee");
        assertEq(committee.challengeOf(id).challenger, carol, "real challenger recorded");
        // open: word 0 holds the binding, which challengeOf does not show as signers
        assertEq(uint256(committee.challengeOf(id).signerBitmap), 0, "no signers while open");
        assertEq(uint256(committee.challengeOf(id).settledAt), 0, "not settled while open");
        vm.expectEmit(true, false, false, true, address(committee));
        emit IVerifierCommittee.ChallengeSettled(id, UPHELD, SAMPLING, 3 * MIN_VERIFIER_STAKE, 4 * MIN_VERIFIER_STAKE);
        _settle(id, UPHELD, SAMPLING, 0x7);
        IVerifierCommittee.ChallengeInfo memory c = committee.challengeOf(id);
        assertEq(uint256(c.status), uint256(IVerifierCommittee.Status.Settled), "settled");
        assertEq(uint256(c.verdict), UPHELD, "verdict");
        assertEq(uint256(c.signerBitmap), 0x7, "bitmap");
        assertEq(uint256(c.settledAt), block.timestamp, "settledAt");
    }

    function test_settle_refusesWrongMessage() public {
        _registerMany(4, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        // a signature on "rejected" offered for "upheld" (the hint is the upheld digest's)
        bytes32 upheld = _digest(id, UPHELD, SAMPLING);
        IVerifierCommittee.SettlementProof memory proof =
            _proof(upheld, 0xf, _sign(_digest(id, REJECTED, bytes32(0)), 0xf), _apk2(0xf));
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSignature.selector, id));
        committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0xf, proof);
        // and with the hint that goes with the signature: the hint fails first
        proof.hashHint = BN254.hashToG1Hint(_digest(id, REJECTED, bytes32(0)));
        (uint256 hx,,) = _hinted(upheld, proof.hashHint);
        if (hx != BN254.hashToG1(upheld).X) {
            vm.expectRevert(IVerifierCommittee.CommitteeInvalidHashHint.selector);
            committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0xf, proof);
        }
    }

    function test_settle_refusesAReasonThatDoesNotMatchTheVerdict() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        // signed as they are, so only the rule refuses them
        bytes memory upheldWithoutReason = _settleCall(id, UPHELD, bytes32(0), 0x7);
        bytes memory rejectedWithReason = _settleCall(id, REJECTED, SAMPLING, 0x7);
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeReasonMismatch.selector, UPHELD, bytes32(0)));
        _call(upheldWithoutReason);
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeReasonMismatch.selector, REJECTED, SAMPLING));
        _call(rejectedWithReason);
        assertEq(uint256(committee.challengeOf(id).status), uint256(IVerifierCommittee.Status.Open), "still open");
        _settle(id, UPHELD, SAMPLING, 0x7);
        uint256 other = _open(_receipt(2));
        _settle(other, REJECTED, bytes32(0), 0x7);
        assertEq(uint256(committee.challengeOf(other).verdict), uint256(REJECTED), "rejected, no reason");
    }

    function test_openChallenge_oneOpenOrUpheldChallengePerReceipt() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        bytes memory blocked =
            abi.encodeWithSelector(IVerifierCommittee.CommitteeReceiptChallenged.selector, _receipt(1), id);
        vm.expectRevert(blocked);
        _open(_receipt(1));
        _settle(id, UPHELD, SAMPLING, 0x7);
        vm.expectRevert(blocked); // settled, not final: the appeal may still flip it
        _open(_receipt(1));
        vm.warp(block.timestamp + WINDOW);
        committee.finalize(id);
        vm.expectRevert(blocked); // slashed once for it, never again
        _open(_receipt(1));
        assertEq(committee.challengeOfReceipt(_receipt(1)), id, "the upheld challenge");

        // a rejected challenge, or an expired one, leaves the receipt open to the next
        uint256 rejected = _open(_receipt(2));
        _settle(rejected, REJECTED, bytes32(0), 0x7);
        vm.warp(block.timestamp + WINDOW);
        committee.finalize(rejected);
        uint256 expired = _open(_receipt(2));
        vm.warp(block.timestamp + TIMEOUT);
        committee.expire(expired);
        uint256 third = _open(_receipt(2));
        assertEq(committee.challengeOfReceipt(_receipt(2)), third, "latest");
        _settle(third, UPHELD, SAMPLING, 0x7);
        _assertSolvent();
    }

    /// @dev The NodeRegistry's own challenge (governance's path) is free: one opened there
    /// first must not keep the committee from judging the receipt.
    function test_openChallenge_aFreeRegistryChallengeDoesNotBlockTheCommittee() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(ALICE_SIGNER_KEY, _receipt(1));
        vm.prank(alice); // the node itself, to shield its receipt
        registry.challenge(alice, _receipt(1), abi.encodePacked(r, s, v), "bafyjunk");
        uint256 id = _open(_receipt(1));
        _settle(id, UPHELD, SAMPLING, 0x7);
        assertEq(uint256(committee.challengeOf(id).status), uint256(IVerifierCommittee.Status.Settled), "judged");
    }

    /// @dev A receipt the DAO already slashed for (through a free challenge) is judged: the
    /// registry refuses a committee challenge of it before any bond is taken.
    function test_openChallenge_refusedOnceTheRegistrySlashedTheReceipt() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        uint256 free = _freeChallenge(_receipt(1));
        vm.prank(dao);
        registry.slash(alice, 1e18, free, dao);
        uint256 carolBefore = token.balanceOf(carol);
        vm.expectRevert(
            abi.encodeWithSelector(INodeRegistry.NodeRegistryReceiptUpheld.selector, alice, _receipt(1), free)
        );
        _open(_receipt(1));
        assertEq(token.balanceOf(carol), carolBefore, "no bond taken");
    }

    /// @dev The bitmap names signers 0, 1, 2 but σ holds only 0 and 1's signatures.
    function test_settle_refusesMissingSigner() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        bytes32 digest = committee.verdictDigest(id, _receipt(1), UPHELD, SAMPLING);
        BN254.G1Point memory sigma = _sign(digest, 0x3);
        IVerifierCommittee.SettlementProof memory all3 = _proof(digest, 0x7, sigma, _apk2(0x7));
        IVerifierCommittee.SettlementProof memory signed2 = _proof(digest, 0x7, sigma, _apk2(0x3));
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSignature.selector, id));
        committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0x7, all3);
        // nor with apk2 of those who signed: γ binds apk2 to apk1 (0 + 1 + 2)
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSignature.selector, id));
        committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0x7, signed2);
    }

    function test_settle_refusesBelowThreshold() public {
        _registerMany(4, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        bytes memory data = _settleCall(id, UPHELD, SAMPLING, 0x3);
        vm.expectRevert(
            abi.encodeWithSelector(
                IVerifierCommittee.CommitteeBelowThreshold.selector, 2 * MIN_VERIFIER_STAKE, 4 * MIN_VERIFIER_STAKE
            )
        );
        _call(data);
    }

    function test_settle_exactlyTwoThirdsPasses() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        _settle(id, UPHELD, SAMPLING, 0x3);
    }

    function test_settle_refusesReplayOnOtherChallenge() public {
        _registerMany(4, MIN_VERIFIER_STAKE);
        uint256 a = _open(_receipt(1));
        bytes32 digestA = committee.verdictDigest(a, _receipt(1), UPHELD, SAMPLING);
        BN254.G1Point memory sigma = _sign(digestA, 0xf);
        BN254.G2Point memory apk2 = _apk2(0xf);
        vm.warp(block.timestamp + TIMEOUT);
        committee.expire(a);
        uint256 b = _open(_receipt(1)); // a expired: same receipt, same verdict, only the id differs
        // a's signature with the hash hint b's digest needs
        IVerifierCommittee.SettlementProof memory onB = _proof(_digest(b, UPHELD, SAMPLING), 0xf, sigma, apk2);
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSignature.selector, b));
        committee.settle(b, _receipt(1), UPHELD, SAMPLING, 0xf, onB);
        _settle(b, UPHELD, SAMPLING, 0xf);
    }

    function test_settle_refusesReplayFromOtherCommitteeOrChain() public {
        _registerMany(4, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        bytes32 typehash = committee.VERDICT_TYPEHASH();
        bytes32 otherCommittee =
            keccak256(abi.encode(typehash, block.chainid, address(0xC0FFEE), id, _receipt(1), UPHELD, SAMPLING));
        bytes32 otherChain =
            keccak256(abi.encode(typehash, uint256(1), address(committee), id, _receipt(1), UPHELD, SAMPLING));
        bytes32 here = keccak256(abi.encode(typehash, block.chainid, address(committee), id, _receipt(1), UPHELD, SAMPLING));
        assertEq(here, committee.verdictDigest(id, _receipt(1), UPHELD, SAMPLING), "digest layout");
        BN254.G2Point memory apk2 = _apk2(0xf);
        IVerifierCommittee.SettlementProof memory otherCommitteeProof = _proof(here, 0xf, _sign(otherCommittee, 0xf), apk2);
        IVerifierCommittee.SettlementProof memory otherChainProof = _proof(here, 0xf, _sign(otherChain, 0xf), apk2);
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSignature.selector, id));
        committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0xf, otherCommitteeProof);
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSignature.selector, id));
        committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0xf, otherChainProof);
    }

    function test_settle_refusesDoubleSettlementAndUnknown() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        bytes memory data = _settleCall(id, UPHELD, SAMPLING, 0x7);
        _call(data);
        vm.expectRevert(
            abi.encodeWithSelector(
                IVerifierCommittee.CommitteeWrongStatus.selector, id, IVerifierCommittee.Status.Settled
            )
        );
        _call(data);
        BN254.G1Point memory sigma;
        BN254.G2Point memory apk2;
        IVerifierCommittee.SettlementProof memory proof = _proof(bytes32(0), 0x7, sigma, apk2);
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeUnknownChallenge.selector, 9));
        committee.settle(9, _receipt(1), UPHELD, SAMPLING, 0x7, proof);
    }

    function test_settle_refusesSetMismatchAndBadBitmaps() public {
        _registerMany(4, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        bytes32 digest = committee.verdictDigest(id, _receipt(1), UPHELD, SAMPLING);
        IVerifierCommittee.SettlementProof memory proof = _proof(digest, 0x7, _sign(digest, 0x7), _apk2(0x7));
        bytes memory set = proof.set;
        // a non-signer's stake understated, then the active stake, then apk1: each a mismatch
        uint256[3] memory offsets = [CommitteeSet.HEADER + 3 * CommitteeSet.ENTRY + 0x2c, 0x40, 0];
        for (uint256 k; k < 3; ++k) {
            uint256 before = CommitteeSet.word(set, offsets[k]);
            // the stake is the word's last 12 bytes (at offset 0x2c in its entry)
            CommitteeSet.setWord(set, offsets[k], k == 0 ? ((before >> 96) << 96) | 1 : 1);
            vm.expectRevert(
                abi.encodeWithSelector(IVerifierCommittee.CommitteeNotOpenedWith.selector, _receipt(1), keccak256(set))
            );
            committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0x7, proof);
            CommitteeSet.setWord(set, offsets[k], before);
        }
        // the set without its last slot
        proof.set = _slice(set, set.length - CommitteeSet.ENTRY);
        vm.expectRevert(
            abi.encodeWithSelector(IVerifierCommittee.CommitteeNotOpenedWith.selector, _receipt(1), keccak256(proof.set))
        );
        committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0x7, proof);
        proof.set = set;
        // the right set with another receipt hash (with the digest the verifiers signed)
        vm.expectRevert(
            abi.encodeWithSelector(IVerifierCommittee.CommitteeNotOpenedWith.selector, _receipt(2), keccak256(set))
        );
        committee.settle(id, _receipt(2), UPHELD, SAMPLING, 0x7, proof);
        // a bit past the set
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSigner.selector, 5));
        committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0x27, proof);
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSigner.selector, 0));
        committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0, proof);
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSigner.selector, 200));
        committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0x7 | (1 << 200), proof);
        // an unbonding slot (left before the challenge opened) named as a signer
        vm.prank(verifierAddress(3));
        committee.deregister();
        uint256 second = _open(_receipt(2));
        bytes32 digest2 = committee.verdictDigest(second, _receipt(2), UPHELD, SAMPLING);
        proof = _proof(digest2, 0x7, _sign(digest2, 0x7), _apk2(0x7));
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSigner.selector, 3));
        committee.settle(second, _receipt(2), UPHELD, SAMPLING, 0xf, proof);
        // the same three now hold all the active stake (and there is no non-signer)
        assertEq(proof.nonSigners.length, 0, "no non-signer left");
        committee.settle(second, _receipt(2), UPHELD, SAMPLING, 0x7, proof);
    }

    /// @dev A challenge is judged by the set it opened with (its `ChallengeOpened.setHash`,
    /// whose bytes a `SetUpdated` event carries): a verifier that left after the opening still
    /// counts and may sign, one that joined after it does not, and the set of the moment of
    /// settling is refused once it differs.
    function test_settle_usesTheSetOfTheOpening() public {
        _registerMany(4, MIN_VERIFIER_STAKE);
        bytes memory opened = committee.activeSet();
        vm.recordLogs();
        uint256 id = _open(_receipt(1));
        assertEq(_openedSetHash(), keccak256(opened), "ChallengeOpened names the set");
        // verifier 3 leaves, verifier 4 joins (index 4), verifier 0 adds stake
        vm.prank(verifierAddress(3));
        committee.deregister();
        _register(4, MIN_VERIFIER_STAKE);
        vm.prank(verifierAddress(0));
        committee.addStake(MIN_VERIFIER_STAKE);
        bytes memory now_ = committee.activeSet();
        assertTrue(keccak256(now_) != keccak256(opened), "the set moved on");
        bytes32 digest = committee.verdictDigest(id, _receipt(1), UPHELD, SAMPLING);
        // with the present set: refused, whatever the signers
        IVerifierCommittee.SettlementProof memory proof = _proof(digest, 0x17, _sign(digest, 0x17), _apk2(0x17));
        vm.expectRevert(
            abi.encodeWithSelector(IVerifierCommittee.CommitteeNotOpenedWith.selector, _receipt(1), keccak256(now_))
        );
        committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0x17, proof);
        // with the opening's set: the newcomer is no member, the leaver signs (1, 2, 3 of 4)
        proof.set = opened;
        proof.nonSigners = CommitteeSet.nonSigners(opened, 0x17);
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSigner.selector, 4));
        committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0x17, proof);
        proof = _proofWithSet(opened, digest, 0xe);
        vm.expectEmit(true, false, false, true, address(committee));
        emit IVerifierCommittee.ChallengeSettled(id, UPHELD, SAMPLING, 3 * MIN_VERIFIER_STAKE, 4 * MIN_VERIFIER_STAKE);
        committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0xe, proof);
        // the leaver is still slashable when the appeal window ends
        IVerifierCommittee.VerifierInfo memory leaver = committee.verifierAt(3);
        assertTrue(leaver.unbondingEnds > block.timestamp + committee.MAX_APPEAL_WINDOW(), "still bonded");
    }

    /// @dev The `setHash` of the last `ChallengeOpened` in the recorded logs.
    function _openedSetHash() internal returns (bytes32 set) {
        Vm.Log[] memory logs = vm.getRecordedLogs();
        bytes32 topic = IVerifierCommittee.ChallengeOpened.selector;
        for (uint256 i; i < logs.length; ++i) {
            if (logs[i].emitter == address(committee) && logs[i].topics[0] == topic) {
                (,, set,,) = abi.decode(logs[i].data, (address, bytes32, bytes32, uint256, string));
            }
        }
    }

    function _proofWithSet(bytes memory set, bytes32 digest, uint256 bitmap)
        internal
        view
        returns (IVerifierCommittee.SettlementProof memory proof)
    {
        proof = _proof(digest, bitmap, _sign(digest, bitmap), _apk2(bitmap));
        proof.set = set;
        proof.nonSigners = CommitteeSet.nonSigners(set, bitmap);
    }

    /// @dev The non-signer list must name each active non-signer once: a signer, an unbonding
    /// slot, an index past the set or a repeat is refused by index, an omission likewise.
    function test_settle_refusesWrongNonSigners() public {
        _registerMany(8, MIN_VERIFIER_STAKE);
        vm.prank(verifierAddress(7));
        committee.deregister();
        uint256 id = _open(_receipt(1));
        bytes32 digest = committee.verdictDigest(id, _receipt(1), UPHELD, SAMPLING);
        IVerifierCommittee.SettlementProof memory proof = _proof(digest, 0x1f, _sign(digest, 0x1f), _apk2(0x1f));
        assertEq(proof.nonSigners, hex"0506", "non-signers 5 and 6 (7 is unbonding)");
        bytes[5] memory wrong = [bytes(hex"050602"), hex"050607", hex"0506ff", hex"050605", hex"0605"];
        uint256[5] memory index = [uint256(2), 7, 255, 5, 0];
        for (uint256 k; k < 4; ++k) {
            proof.nonSigners = wrong[k];
            vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidNonSigner.selector, index[k]));
            committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0x1f, proof);
        }
        proof.nonSigners = hex"06";
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeMissingNonSigner.selector, 5));
        committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0x1f, proof);
        proof.nonSigners = "";
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeMissingNonSigner.selector, 5));
        committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0x1f, proof);
        // any order will do
        proof.nonSigners = wrong[4];
        committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0x1f, proof);
        assertEq(uint256(committee.challengeOf(id).status), uint256(IVerifierCommittee.Status.Settled), "settled");
    }

    /// @dev The hash hint must prove H(m): a skipped candidate that is a square, a wrong root,
    /// a root at or past p, a missing or an extra word are refused; so is a hint for another
    /// digest. Either root of the last candidate is taken, with σ negated alike.
    function test_settle_hashHint() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        bytes32 digest = committee.verdictDigest(id, _receipt(1), UPHELD, SAMPLING);
        IVerifierCommittee.SettlementProof memory proof = _proof(digest, 0x7, _sign(digest, 0x7), _apk2(0x7));
        uint256[] memory good = proof.hashHint;
        uint256 k = good.length - 1;
        uint256 y = good[k];
        uint256[][] memory bad = new uint256[][](6);
        bad[0] = new uint256[](0);
        bad[1] = _withLast(good, y + 1); // not a root
        bad[2] = _withLast(good, y + BN254.P); // a root, but not below p
        bad[3] = _append(good, y); // an extra word: y taken as a skip witness
        bad[4] = BN254.hashToG1Hint(keccak256("another digest"));
        // the skip witnesses left out: y offered for the first candidate (or 0 when that is it)
        bad[5] = new uint256[](1);
        bad[5][0] = k == 0 ? 0 : y;
        for (uint256 b; b < bad.length; ++b) {
            proof.hashHint = bad[b];
            if (b == 4) {
                // a hint for another digest proves another point: the signature fails instead,
                // unless that digest's first square is the same candidate (then the same point)
                (uint256 hx,, bool ok) = _hinted(digest, bad[4]);
                if (ok && hx == BN254.hashToG1(digest).X) continue;
                vm.expectRevert();
            } else {
                vm.expectRevert(IVerifierCommittee.CommitteeInvalidHashHint.selector);
            }
            committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0x7, proof);
        }
        // the other root: −H(m), which −σ signs
        proof.hashHint = _withLast(good, BN254.P - y);
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSignature.selector, id));
        committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0x7, proof);
        proof.sigma = BN254.neg(proof.sigma);
        committee.settle(id, _receipt(1), UPHELD, SAMPLING, 0x7, proof);
        assertEq(uint256(committee.challengeOf(id).status), uint256(IVerifierCommittee.Status.Settled), "settled");
    }

    /// @dev `BN254.hashToG1Hinted` finds the point `hashToG1` finds, for random digests.
    function testFuzz_hashHintMatchesHashToG1(bytes32 digest) public view {
        BN254.G1Point memory h = BN254.hashToG1(digest);
        (uint256 x, uint256 y, bool ok) = _hinted(digest, BN254.hashToG1Hint(digest));
        assertTrue(ok, "hint accepted");
        assertEq(x, h.X, "x");
        assertEq(y, h.Y, "y");
    }

    function _withLast(uint256[] memory hint, uint256 last) internal pure returns (uint256[] memory out) {
        out = new uint256[](hint.length);
        for (uint256 i; i < hint.length; ++i) {
            out[i] = hint[i];
        }
        out[hint.length - 1] = last;
    }

    function _append(uint256[] memory hint, uint256 last) internal pure returns (uint256[] memory out) {
        out = new uint256[](hint.length + 1);
        for (uint256 i; i < hint.length; ++i) {
            out[i] = hint[i];
        }
        out[hint.length] = last;
    }

    function _slice(bytes memory data, uint256 length) internal pure returns (bytes memory out) {
        out = new bytes(length);
        for (uint256 i; i < length; ++i) {
            out[i] = data[i];
        }
    }

    // ------------------------------------------------------------------ appeal, finality, claims

    function test_finalize_beforeWindowRefused_thenUpheldPays() public {
        _registerMany(4, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        _settle(id, UPHELD, SAMPLING, 0x7);
        uint256 ends = block.timestamp + WINDOW;
        vm.expectRevert(
            abi.encodeWithSelector(IVerifierCommittee.CommitteeAppealWindowOpen.selector, id, ends, block.timestamp)
        );
        committee.finalize(id);
        vm.warp(ends);
        uint256 carolBefore = token.balanceOf(carol);
        committee.finalize(id);
        uint256 share = NODE_SLASH * SHARE_BPS / 10_000;
        assertEq(token.balanceOf(carol) - carolBefore, BOND + share, "bond + share back");
        assertEq(registry.nodeOf(alice).stake, NODE_STAKE - NODE_SLASH, "node slashed");
        assertEq(uint256(registry.challengeOf(1).status), uint256(INodeRegistry.ChallengeStatus.Upheld), "upheld");
        uint256 each = (NODE_SLASH - share) / 3;
        assertEq(uint256(committee.challengeOf(id).rewardShare), each, "share per signer");
        for (uint256 i; i < 3; ++i) {
            uint256 before = token.balanceOf(verifierAddress(i));
            committee.claim(id, i);
            assertEq(token.balanceOf(verifierAddress(i)) - before, each, "claimed");
        }
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeNothingToClaim.selector, id, 0));
        committee.claim(id, 0);
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeNothingToClaim.selector, id, 3));
        committee.claim(id, 3);
        _assertSolvent();
    }

    function test_finalize_rejectedForfeitsBondToSigners() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        _settle(id, REJECTED, bytes32(0), 0x7);
        vm.warp(block.timestamp + WINDOW);
        committee.finalize(id);
        assertEq(uint256(registry.challengeOf(1).status), uint256(INodeRegistry.ChallengeStatus.Dismissed), "dismissed");
        assertEq(registry.nodeOf(alice).stake, NODE_STAKE, "node untouched");
        assertEq(uint256(committee.challengeOf(id).rewardShare), BOND / 3, "bond split");
        _assertSolvent();
    }

    /// @dev The DAO slashed the committee's own registry challenge while it was being judged:
    /// the upheld verdict finalizes (bond back, nothing to share) without slashing twice.
    function test_finalize_upheldAfterTheDaoSlashedItsRegistryChallenge() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        uint256 registryId = committee.challengeOf(id).registryChallengeId;
        vm.prank(dao);
        registry.slash(alice, 30e18, registryId, dao);
        _settle(id, UPHELD, SAMPLING, 0x7);
        vm.warp(block.timestamp + WINDOW);
        uint256 carolBefore = token.balanceOf(carol);
        vm.expectEmit(true, false, false, true, address(committee));
        emit IVerifierCommittee.ChallengeFinalized(id, true, 0, BOND, 0, 0);
        committee.finalize(id);
        assertEq(registry.nodeOf(alice).stake, NODE_STAKE - 30e18, "slashed once, by the DAO");
        assertEq(token.balanceOf(carol) - carolBefore, BOND, "bond back, no share");
        assertEq(uint256(committee.challengeOf(id).status), uint256(IVerifierCommittee.Status.Finalized), "final");
        _assertSolvent();
    }

    /// @dev A free registry challenge of the same receipt, open beside the committee's, was
    /// slashed for by the DAO: the committee's upheld verdict marks its own registry challenge
    /// upheld and slashes nothing more.
    function test_finalize_upheldAfterTheDaoSlashedAFreeChallengeOfTheReceipt() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        uint256 free = _freeChallenge(_receipt(1));
        uint256 id = _open(_receipt(1));
        uint256 registryId = committee.challengeOf(id).registryChallengeId;
        _settle(id, UPHELD, SAMPLING, 0x7);
        vm.prank(dao);
        registry.slash(alice, 30e18, free, dao);
        vm.warp(block.timestamp + WINDOW);
        committee.finalize(id);
        assertEq(registry.nodeOf(alice).stake, NODE_STAKE - 30e18, "slashed once");
        assertEq(
            uint256(registry.challengeOf(registryId).status),
            uint256(INodeRegistry.ChallengeStatus.Upheld),
            "the committee's registry challenge upheld"
        );
        assertEq(uint256(registry.receiptRecord(alice, _receipt(1)).slashedFor), free, "slashed for the free one");
        _assertSolvent();
    }

    function test_reverse_withinWindowSlashesSignersAndFlips() public {
        _registerMany(4, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        _settle(id, REJECTED, bytes32(0), 0x7);
        vm.prank(address(0xBAD));
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeNotGovernance.selector, address(0xBAD)));
        committee.reverse(id);
        vm.warp(block.timestamp + WINDOW - 1);
        vm.prank(dao);
        committee.reverse(id);
        assertEq(token.balanceOf(dao), 3 * VERIFIER_SLASH, "signers slashed to governance");
        // 100 - 20 < the minimum: the three signers were ejected
        assertEq(committee.activeStake(), MIN_VERIFIER_STAKE, "only the non-signer is active");
        assertEq(committee.activeSet(), _expectedSet(), "ejected signers out of the set");
        assertEq(committee.setHash(), keccak256(_expectedSet()), "set recommitted");
        // finalize at once: the outcome is now upheld, the pool goes to governance
        committee.finalize(id);
        uint256 share = NODE_SLASH * SHARE_BPS / 10_000;
        assertEq(registry.nodeOf(alice).stake, NODE_STAKE - NODE_SLASH, "node slashed");
        assertEq(token.balanceOf(dao), 3 * VERIFIER_SLASH + NODE_SLASH - share, "pool to governance");
        assertEq(uint256(committee.challengeOf(id).rewardShare), 0, "nothing to claim");
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeNothingToClaim.selector, id, 0));
        committee.claim(id, 0);
        _assertSolvent();
    }

    function test_reverse_afterWindowRefused() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        _settle(id, UPHELD, SAMPLING, 0x7);
        uint256 ends = block.timestamp + WINDOW;
        vm.warp(ends);
        vm.prank(dao);
        vm.expectRevert(
            abi.encodeWithSelector(IVerifierCommittee.CommitteeAppealWindowOver.selector, id, ends, block.timestamp)
        );
        committee.reverse(id);
    }

    /// @dev Index 0 signs, leaves, withdraws after the delay; a newcomer takes index 0; the old
    /// holder's reward still goes to the old holder.
    function test_claim_paysHolderAtSettlementAfterIndexReuse() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        _settle(id, UPHELD, SAMPLING, 0x7);
        vm.prank(verifierAddress(0));
        committee.deregister();
        vm.warp(block.timestamp + committee.DEREGISTRATION_DELAY());
        vm.prank(verifierAddress(0));
        committee.withdraw();
        committee.finalize(id);
        _register(7, MIN_VERIFIER_STAKE);
        (uint256 index,) = committee.indexOf(verifierAddress(7));
        assertEq(index, 0, "index reused");
        uint256 oldBefore = token.balanceOf(verifierAddress(0));
        uint256 newBefore = token.balanceOf(verifierAddress(7));
        committee.claim(id, 0);
        assertTrue(token.balanceOf(verifierAddress(0)) > oldBefore, "old holder paid");
        assertEq(token.balanceOf(verifierAddress(7)), newBefore, "newcomer not paid");
        _assertSolvent();
    }

    // ------------------------------------------------------------------ expiry

    function test_expire_tooEarlyRefused_thenReturnsBondAndDismisses() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        uint256 openedAt = block.timestamp;
        uint256 id = _open(_receipt(1));
        assertEq(uint256(committee.challengeOf(id).openedAt), openedAt, "openedAt recorded");
        assertEq(uint256(committee.settlementTimeout()), TIMEOUT, "timeout");
        uint256 expiresAt = openedAt + TIMEOUT;
        vm.warp(expiresAt - 1);
        vm.expectRevert(
            abi.encodeWithSelector(IVerifierCommittee.CommitteeNotExpired.selector, id, expiresAt, expiresAt - 1)
        );
        committee.expire(id);

        vm.warp(expiresAt);
        uint256 carolBefore = token.balanceOf(carol);
        vm.expectEmit(true, false, false, true, address(committee));
        emit IVerifierCommittee.ChallengeExpired(id, BOND);
        vm.prank(address(0xBEEF)); // anyone
        committee.expire(id);
        assertEq(token.balanceOf(carol) - carolBefore, BOND, "bond back to the challenger");
        assertEq(uint256(committee.challengeOf(id).status), uint256(IVerifierCommittee.Status.Expired), "expired");
        // never settled: no signers, no settlement time (word 0's binding bits are not shown)
        assertEq(uint256(committee.challengeOf(id).signerBitmap), 0, "no signers");
        assertEq(uint256(committee.challengeOf(id).settledAt), 0, "not settled");
        assertEq(
            uint256(registry.challengeOf(1).status), uint256(INodeRegistry.ChallengeStatus.Dismissed), "dismissed"
        );
        assertEq(registry.nodeOf(alice).stake, NODE_STAKE, "node not slashed");
        assertEq(committee.openBonds(), 0, "no open bond");
        _assertSolvent();
    }

    function test_expire_thenSettleExpireAndFinalizeRefused() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        bytes memory data = _settleCall(id, UPHELD, SAMPLING, 0x7);
        vm.warp(block.timestamp + TIMEOUT);
        committee.expire(id);
        bytes memory expired = abi.encodeWithSelector(
            IVerifierCommittee.CommitteeWrongStatus.selector, id, IVerifierCommittee.Status.Expired
        );
        vm.expectRevert(expired);
        _call(data);
        vm.expectRevert(expired);
        committee.expire(id);
        vm.expectRevert(expired);
        committee.finalize(id);
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeUnknownChallenge.selector, 9));
        committee.expire(9);
        _assertSolvent();
    }

    /// @dev A quorum may settle until `openedAt + settlementTimeout`, not from then on (the
    /// challenge may only expire); a settled challenge no longer expires.
    function test_settle_beforeDeadlineOnly_settledDoesNotExpire() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        uint256 late = _open(_receipt(1));
        uint256 deadline = block.timestamp + TIMEOUT;
        uint256 id = _open(_receipt(2));
        bytes memory lateCall = _settleCall(late, UPHELD, SAMPLING, 0x7);
        vm.warp(deadline - 1);
        _settle(id, UPHELD, SAMPLING, 0x7);
        vm.expectRevert(
            abi.encodeWithSelector(
                IVerifierCommittee.CommitteeWrongStatus.selector, id, IVerifierCommittee.Status.Settled
            )
        );
        committee.expire(id);
        vm.warp(deadline);
        vm.expectRevert(
            abi.encodeWithSelector(IVerifierCommittee.CommitteeSettlementClosed.selector, late, deadline, deadline)
        );
        _call(lateCall);
        committee.expire(late);
    }

    /// @dev Governance resolved the registry challenge itself: `expire` still returns the bond
    /// and leaves the registry alone.
    function test_expire_afterGovernanceResolvedRegistryChallenge() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        vm.prank(dao);
        registry.resolveChallenge(1, true);
        vm.warp(block.timestamp + TIMEOUT);
        uint256 carolBefore = token.balanceOf(carol);
        committee.expire(id);
        assertEq(token.balanceOf(carol) - carolBefore, BOND, "bond back");
        assertEq(uint256(registry.challengeOf(1).status), uint256(INodeRegistry.ChallengeStatus.Upheld), "untouched");
        _assertSolvent();
    }

    function test_constructor_settlementTimeoutBounded() public {
        uint64 maxTimeout = committee.MAX_SETTLEMENT_TIMEOUT();
        vm.expectRevert(
            abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidParameter.selector, "settlementTimeout", 0)
        );
        new VerifierCommittee(token, dao, MIN_VERIFIER_STAKE, BOND, NODE_SLASH, VERIFIER_SLASH, SHARE_BPS, WINDOW, 0);
        vm.expectRevert(
            abi.encodeWithSelector(
                IVerifierCommittee.CommitteeInvalidParameter.selector, "settlementTimeout", uint256(maxTimeout) + 1
            )
        );
        new VerifierCommittee(
            token, dao, MIN_VERIFIER_STAKE, BOND, NODE_SLASH, VERIFIER_SLASH, SHARE_BPS, WINDOW, maxTimeout + 1
        );
        VerifierCommittee ok = new VerifierCommittee(
            token, dao, MIN_VERIFIER_STAKE, BOND, NODE_SLASH, VERIFIER_SLASH, SHARE_BPS, WINDOW, maxTimeout
        );
        assertEq(uint256(ok.settlementTimeout()), maxTimeout, "at the bound");
    }

    function test_registry_onlyCommitteeOrGovernanceJudges() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        _open(_receipt(1));
        vm.prank(carol);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryNotGovernance.selector, carol));
        registry.resolveChallenge(1, true);
        vm.prank(address(committee));
        registry.resolveChallenge(1, false);
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeCannotBind.selector, address(this)));
        committee.bindRegistry(registry);
    }

    function test_setAppealWindow_boundedAndGoverned() public {
        vm.prank(dao);
        committee.setAppealWindow(60);
        assertEq(uint256(committee.appealWindow()), 60, "set");
        uint64 maxWindow = committee.MAX_APPEAL_WINDOW();
        uint64 tooLong = maxWindow + 1;
        vm.prank(dao);
        vm.expectRevert(
            abi.encodeWithSelector(IVerifierCommittee.CommitteeAppealWindowTooLong.selector, tooLong, maxWindow)
        );
        committee.setAppealWindow(tooLong);
    }

    // ------------------------------------------------------------------ fuzz

    function testFuzz_hashToG1_landsOnCurve(bytes32 digest) public view {
        BN254.G1Point memory h = BN254.hashToG1(digest);
        assertTrue(h.X < BN254.P && h.Y < BN254.P, "canonical");
        assertEq(mulmod(h.Y, h.Y, BN254.P), addmod(mulmod(mulmod(h.X, h.X, BN254.P), h.X, BN254.P), 3, BN254.P), "y^2 = x^3 + 3");
        // the precompile agrees it is a curve point
        BN254.ecAdd(h, BN254.generatorG1());
    }

    /// @dev Six verifiers with random stakes, a random nonempty signer set: settles exactly when
    /// the signers hold at least two thirds of the stake.
    function testFuzz_settle_twoThirdsThreshold(uint256 stakeSeed, uint256 bitmap) public {
        uint256 n = 6;
        bitmap = bound(bitmap, 1, (1 << n) - 1);
        uint256 total;
        uint256 signed;
        for (uint256 i; i < n; ++i) {
            uint256 stake = MIN_VERIFIER_STAKE + uint256(keccak256(abi.encode(stakeSeed, i))) % (5 * MIN_VERIFIER_STAKE);
            _register(i, stake);
            total += stake;
            if ((bitmap >> i) & 1 == 1) signed += stake;
        }
        uint256 id = _open(_receipt(1));
        bytes memory data = _settleCall(id, UPHELD, SAMPLING, bitmap);
        if (signed * 3 >= total * 2) {
            _call(data);
            assertEq(uint256(committee.challengeOf(id).status), uint256(IVerifierCommittee.Status.Settled), "settled");
        } else {
            vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeBelowThreshold.selector, signed, total));
            _call(data);
        }
    }

    // ------------------------------------------------------------------ helpers

    /// @dev Mallory's bond-free NodeRegistry challenge of alice's receipt `receiptHash`.
    function _freeChallenge(bytes32 receiptHash) internal returns (uint256 id) {
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(ALICE_SIGNER_KEY, receiptHash);
        vm.prank(address(0xBAD));
        id = registry.challenge(alice, receiptHash, abi.encodePacked(r, s, v), "bafyfree");
    }

    function _assertSolvent() internal view {
        assertEq(
            token.balanceOf(address(committee)),
            committee.totalStake() + committee.openBonds() + committee.unclaimedRewards(),
            "committee balance = stakes + bonds + unclaimed rewards"
        );
    }
}

/// @notice Execution gas of one `settle` with a two-thirds quorum of 16 and of 64 verifiers
/// (`forge test --match-contract VerifierCommitteeGas -vv` prints them; benchmarks/
/// bench_committee_gas.py runs this and compares with EigenLayer's BLSSignatureChecker).
/// Measured as in ExperienceLedgerGas.t.sol (gas() around the call, the committee's account warm
/// and its storage cold, as at the start of a transaction) but with a bare CALL on the calldata
/// in place: Solidity's `.call(data)` first copies `data` within this test's large memory, which
/// added ~1k (16) and ~5k (64) of the test's own gas to earlier figures.
///
/// The issue's target (< 150,000 at 64 verifiers) is met: 148,514 (docs/committee.md "Gas"
/// itemises it). The assertions below are regression ceilings a little over the figures
/// measured when this was written, the one at 64 the target itself.
contract VerifierCommitteeGasTest is CommitteeFixture {
    uint256 internal constant CEILING_16 = 141_000;
    uint256 internal constant CEILING_64 = 150_000;

    function test_gas_settle16() public {
        assertLe(_measureSettle(16), CEILING_16, "settle execution gas at 16 verifiers");
    }

    function test_gas_settle64() public {
        assertLe(_measureSettle(64), CEILING_64, "settle execution gas at 64 verifiers");
    }

    function _measureSettle(uint256 n) internal returns (uint256 gasUsed) {
        _registerMany(n, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        uint256 quorum = (2 * n + 2) / 3; // ceil(2n/3)
        uint256 bitmap = (1 << quorum) - 1;
        bytes memory data = _settleCall(id, UPHELD, SAMPLING, bitmap);
        address target = address(committee);
        vm.cool(target);
        require(target.code.length > 0, "no code");
        // A bare CALL on `data` in place: Solidity's `.call(data)` would first copy `data` in
        // this contract's (large) memory, which is the test's gas, not the committee's.
        bool ok;
        assembly ("memory-safe") {
            let before := gas()
            ok := call(gas(), target, 0, add(data, 0x20), mload(data), 0, 0)
            gasUsed := sub(before, gas())
        }
        if (!ok) {
            assembly ("memory-safe") {
                returndatacopy(0, 0, returndatasize())
                revert(0, returndatasize())
            }
        }
        log(string.concat("settle execution gas, signers/verifiers ", _str(quorum), "/", _str(n)), gasUsed);
        log(string.concat("settle calldata bytes, verifiers ", _str(n)), data.length);
    }
}

/// @notice GYM held by the committee always equals verifier stakes (active and unbonding) + bonds
/// of unfinalized challenges + finalized, unclaimed rewards; the counters match the slots and
/// records they summarise, and `setHash` the active set, across random register / addStake /
/// deregister / withdraw / open / settle / reverse / finalize / claim / expire / time sequences.
contract VerifierCommitteeInvariantTest is CommitteeFixture {
    VerifierCommitteeHandler internal handler;

    function setUp() public override {
        super.setUp();
        handler = new VerifierCommitteeHandler(committee, token, registry, dao, carol, ALICE_SIGNER_KEY);
        for (uint256 i; i < 10; ++i) {
            handler.addKey(verifierAddress(i), keys[i].sk, keys[i].pk1, keys[i].pk2);
            vm.prank(verifierAddress(i));
            token.approve(address(committee), type(uint256).max);
        }
        targetContract(address(handler));
        bytes4[] memory selectors = new bytes4[](13);
        selectors[0] = VerifierCommitteeHandler.register.selector;
        selectors[1] = VerifierCommitteeHandler.addStake.selector;
        selectors[2] = VerifierCommitteeHandler.deregister.selector;
        selectors[3] = VerifierCommitteeHandler.withdraw.selector;
        selectors[4] = VerifierCommitteeHandler.open.selector;
        selectors[5] = VerifierCommitteeHandler.settle.selector;
        selectors[6] = VerifierCommitteeHandler.reverse.selector;
        selectors[7] = VerifierCommitteeHandler.finalize.selector;
        selectors[8] = VerifierCommitteeHandler.claim.selector;
        selectors[9] = VerifierCommitteeHandler.warp.selector;
        selectors[10] = VerifierCommitteeHandler.expire.selector;
        selectors[11] = VerifierCommitteeHandler.freeChallenge.selector;
        selectors[12] = VerifierCommitteeHandler.daoSlash.selector;
        targetSelector(FuzzSelector({addr: address(handler), selectors: selectors}));
    }

    function invariant_balanceCoversStakesBondsAndRewards() public view {
        assertEq(
            token.balanceOf(address(committee)),
            committee.totalStake() + committee.openBonds() + committee.unclaimedRewards(),
            "balance"
        );
        uint256 total;
        uint256 active;
        for (uint256 i; i < committee.slotCount(); ++i) {
            IVerifierCommittee.VerifierInfo memory v = committee.verifierAt(i);
            total += v.stake;
            if (v.state == 1) active += v.stake;
        }
        assertEq(committee.totalStake(), total, "totalStake = sum of slots");
        assertEq(committee.activeStake(), active, "activeStake = sum of active slots");
        uint256 bonds;
        uint256 unclaimed;
        for (uint256 id = 1; id <= committee.challengeCount(); ++id) {
            IVerifierCommittee.ChallengeInfo memory c = committee.challengeOf(id);
            if (c.status == IVerifierCommittee.Status.Finalized) {
                unclaimed += uint256(c.rewardShare) * (_popcount(c.signerBitmap) - _popcount(c.claimedBitmap));
            } else if (c.status != IVerifierCommittee.Status.Expired) {
                bonds += c.bond;
            }
        }
        assertEq(committee.openBonds(), bonds, "openBonds = bonds of challenges neither finalized nor expired");
        assertEq(committee.unclaimedRewards(), unclaimed, "unclaimedRewards = unclaimed shares");
        bytes memory set = _expectedSet();
        assertEq(committee.activeSet(), set, "activeSet = the set built from the slots (apk1 summed anew)");
        assertEq(committee.setHash(), keccak256(set), "setHash commits to the active set");
    }

    /// @notice A receipt is slashed at most once, whether the DAO slashes it through a free
    /// challenge or the committee's, or the committee finalizes an upheld verdict; and a due
    /// `finalize` never reverts because the DAO slashed first.
    function invariant_receiptSlashedAtMostOnce() public view {
        assertFalse(handler.receiptSlashedTwice(), "a receipt slashed twice");
        assertFalse(handler.finalizeRefused(), "a due finalize reverted");
    }

    /// @dev Not a property of the committee: shows (under -vv) that sequences reach every stage.
    function invariant_handlerMadeProgress() public view {
        log("settled", handler.settled());
        log("reversed", handler.reversed());
        log("finalized", handler.finalized());
        log("claimed", handler.claimed());
        log("withdrawn", handler.withdrawn());
        log("expired", handler.expired());
        log("slashed by the DAO", handler.daoSlashed());
    }
}
