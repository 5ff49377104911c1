// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {BN254} from "../src/BN254.sol";
import {INodeRegistry} from "../src/INodeRegistry.sol";
import {IVerifierCommittee} from "../src/IVerifierCommittee.sol";
import {VerifierCommittee} from "../src/VerifierCommittee.sol";
import {CommitteeFixture} from "./utils/CommitteeFixture.sol";
import {G2Math} from "./utils/G2Math.sol";
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
        for (uint256 i;; ++i) {
            string memory at = string.concat(".hash_to_g1[", _str(i), "]");
            if (!_has(json, string.concat(at, ".digest"))) break;
            BN254.G1Point memory h = BN254.hashToG1(vm.parseJsonBytes32(json, string.concat(at, ".digest")));
            uint256[] memory point = vm.parseJsonUintArray(json, string.concat(at, ".point"));
            assertEq(h.X, point[0], "x");
            assertEq(h.Y, point[1], "y");
            ++count;
        }
        assertTrue(count >= 5, "hash_to_g1 vectors read");
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
        (BN254.G1Point[] memory pk1s, uint96[] memory stakes) = committee.activeSet();
        committee.settle(
            id,
            uint8(vm.parseJsonUint(json, string.concat(at, ".verdict"))),
            vm.parseJsonBytes32(json, string.concat(at, ".reason")),
            0x7,
            pk1s,
            stakes,
            sigma,
            apk2
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
        (BN254.G1Point[] memory pk1s, uint96[] memory stakes) = committee.activeSet();
        assertEq(committee.setHash(), _hashSet(pk1s, stakes), "setHash = keccak of the packed set");
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
        (BN254.G1Point[] memory pk1s, uint96[] memory stakes) = committee.activeSet();
        assertEq(pk1s[1].X + stakes[1], 0, "zeros in the set");
        assertEq(committee.setHash(), _hashSet(pk1s, stakes), "set recommitted");
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
        vm.expectEmit(true, false, false, true, address(committee));
        emit IVerifierCommittee.ChallengeSettled(id, UPHELD, SAMPLING, 0x7, 3 * MIN_VERIFIER_STAKE, 4 * MIN_VERIFIER_STAKE);
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
        bytes memory data = _settleCall(id, REJECTED, bytes32(0), 0xf);
        // same signature, other verdict
        assembly ("memory-safe") {
            mstore(add(data, 0x44), 1)
        }
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSignature.selector, id));
        _call(data);
    }

    /// @dev The bitmap names signers 0, 1, 2 but σ holds only 0 and 1's signatures.
    function test_settle_refusesMissingSigner() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        bytes32 digest = committee.verdictDigest(id, _receipt(1), UPHELD, SAMPLING);
        (BN254.G1Point[] memory pk1s, uint96[] memory stakes) = committee.activeSet();
        BN254.G1Point memory sigma = _sign(digest, 0x3);
        BN254.G2Point memory all3 = _apk2(0x7);
        BN254.G2Point memory signed2 = _apk2(0x3);
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSignature.selector, id));
        committee.settle(id, UPHELD, SAMPLING, 0x7, pk1s, stakes, sigma, all3);
        // nor with apk2 of those who signed: γ binds apk2 to apk1 (0 + 1 + 2)
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSignature.selector, id));
        committee.settle(id, UPHELD, SAMPLING, 0x7, pk1s, stakes, sigma, signed2);
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
        uint256 b = _open(_receipt(1)); // same receipt, same verdict: only the id differs
        bytes32 digestA = committee.verdictDigest(a, _receipt(1), UPHELD, SAMPLING);
        (BN254.G1Point[] memory pk1s, uint96[] memory stakes) = committee.activeSet();
        BN254.G1Point memory sigma = _sign(digestA, 0xf);
        BN254.G2Point memory apk2 = _apk2(0xf);
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSignature.selector, b));
        committee.settle(b, UPHELD, SAMPLING, 0xf, pk1s, stakes, sigma, apk2);
        committee.settle(a, UPHELD, SAMPLING, 0xf, pk1s, stakes, sigma, apk2);
    }

    function test_settle_refusesReplayFromOtherCommitteeOrChain() public {
        _registerMany(4, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        (BN254.G1Point[] memory pk1s, uint96[] memory stakes) = committee.activeSet();
        bytes32 typehash = committee.VERDICT_TYPEHASH();
        bytes32 otherCommittee =
            keccak256(abi.encode(typehash, block.chainid, address(0xC0FFEE), id, _receipt(1), UPHELD, SAMPLING));
        bytes32 otherChain =
            keccak256(abi.encode(typehash, uint256(1), address(committee), id, _receipt(1), UPHELD, SAMPLING));
        bytes32 here = keccak256(abi.encode(typehash, block.chainid, address(committee), id, _receipt(1), UPHELD, SAMPLING));
        assertEq(here, committee.verdictDigest(id, _receipt(1), UPHELD, SAMPLING), "digest layout");
        BN254.G2Point memory apk2 = _apk2(0xf);
        BN254.G1Point memory sigmaOtherCommittee = _sign(otherCommittee, 0xf);
        BN254.G1Point memory sigmaOtherChain = _sign(otherChain, 0xf);
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSignature.selector, id));
        committee.settle(id, UPHELD, SAMPLING, 0xf, pk1s, stakes, sigmaOtherCommittee, apk2);
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSignature.selector, id));
        committee.settle(id, UPHELD, SAMPLING, 0xf, pk1s, stakes, sigmaOtherChain, apk2);
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
        (BN254.G1Point[] memory pk1s, uint96[] memory stakes) = committee.activeSet();
        BN254.G1Point memory sigma;
        BN254.G2Point memory apk2;
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeUnknownChallenge.selector, 9));
        committee.settle(9, UPHELD, SAMPLING, 0x7, pk1s, stakes, sigma, apk2);
    }

    function test_settle_refusesSetMismatchAndBadBitmaps() public {
        _registerMany(4, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        bytes32 digest = committee.verdictDigest(id, _receipt(1), UPHELD, SAMPLING);
        (BN254.G1Point[] memory pk1s, uint96[] memory stakes) = committee.activeSet();
        BN254.G1Point memory sigma = _sign(digest, 0x7);
        BN254.G2Point memory apk2 = _apk2(0x7);
        stakes[3] = 1; // a non-signer's stake understated
        vm.expectRevert();
        committee.settle(id, UPHELD, SAMPLING, 0x7, pk1s, stakes, sigma, apk2);
        stakes[3] = uint96(MIN_VERIFIER_STAKE);
        // a bit past the set
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSigner.selector, 5));
        committee.settle(id, UPHELD, SAMPLING, 0x27, pk1s, stakes, sigma, apk2);
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSigner.selector, 0));
        committee.settle(id, UPHELD, SAMPLING, 0, pk1s, stakes, sigma, apk2);
        // an unbonding slot named as a signer
        vm.prank(verifierAddress(3));
        committee.deregister();
        (pk1s, stakes) = committee.activeSet();
        vm.expectRevert(abi.encodeWithSelector(IVerifierCommittee.CommitteeInvalidSigner.selector, 3));
        committee.settle(id, UPHELD, SAMPLING, 0xf, pk1s, stakes, sigma, apk2);
        // the same three now hold all the active stake
        committee.settle(id, UPHELD, SAMPLING, 0x7, pk1s, stakes, sigma, apk2);
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
        (BN254.G1Point[] memory pk1s, uint96[] memory stakes) = committee.activeSet();
        assertEq(committee.setHash(), _hashSet(pk1s, stakes), "set recommitted");
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

    /// @dev Until someone calls `expire`, a late quorum may still settle; a settled challenge
    /// no longer expires.
    function test_expire_settledRefused_lateSettleAllowed() public {
        _registerMany(3, MIN_VERIFIER_STAKE);
        uint256 id = _open(_receipt(1));
        vm.warp(block.timestamp + TIMEOUT + 1);
        _settle(id, UPHELD, SAMPLING, 0x7);
        vm.expectRevert(
            abi.encodeWithSelector(
                IVerifierCommittee.CommitteeWrongStatus.selector, id, IVerifierCommittee.Status.Settled
            )
        );
        committee.expire(id);
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

    function _hashSet(BN254.G1Point[] memory pk1s, uint96[] memory stakes) internal pure returns (bytes32) {
        return _setCommitment(pk1s, stakes);
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
/// The issue's target (< 150,000 at 64 verifiers) is not met: the check docs/committee.md fixes
/// costs 131k in precompiles alone (pairing of two pairs 113,000, two ecMul 12,000, hash to G1
/// ~2,700, an ecAdd per non-signer), plus six cold storage reads (set hash, apk1, the active
/// stake and bitmap, the challenge's status word and receipt hash), the status write and the
/// event (~18k). The assertion below is a regression ceiling over the figures measured when this
/// was written (see docs/committee.md).
contract VerifierCommitteeGasTest is CommitteeFixture {
    uint256 internal constant CEILING_16 = 158_000;
    uint256 internal constant CEILING_64 = 168_000;

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
        bytes4[] memory selectors = new bytes4[](11);
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
        (BN254.G1Point[] memory pk1s, uint96[] memory stakes) = committee.activeSet();
        assertEq(committee.setHash(), _setCommitment(pk1s, stakes), "setHash commits to the active set");
    }

    /// @dev Not a property of the committee: shows (under -vv) that sequences reach every stage.
    function invariant_handlerMadeProgress() public view {
        log("settled", handler.settled());
        log("reversed", handler.reversed());
        log("finalized", handler.finalized());
        log("claimed", handler.claimed());
        log("withdrawn", handler.withdrawn());
        log("expired", handler.expired());
    }
}
