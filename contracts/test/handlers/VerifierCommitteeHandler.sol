// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {BN254} from "../../src/BN254.sol";
import {GymToken} from "../../src/GymToken.sol";
import {INodeRegistry} from "../../src/INodeRegistry.sol";
import {IVerifierCommittee} from "../../src/IVerifierCommittee.sol";
import {NodeRegistry} from "../../src/NodeRegistry.sol";
import {VerifierCommittee} from "../../src/VerifierCommittee.sol";
import {CommitteeSet} from "../utils/CommitteeSet.sol";
import {G2Math} from "../utils/G2Math.sol";
import {Vm} from "../utils/Vm.sol";

/// @notice Drives the committee through random register / addStake / deregister / withdraw /
/// openChallenge / settle (always with a valid two-thirds aggregate, signed in place) / reverse
/// / finalize / claim / expire sequences and time jumps, beside the DAO's own path in the
/// NodeRegistry: bond-free challenges of the same receipts and direct slashes. Calls that the
/// state makes meaningless return early instead of reverting, so that every sequence keeps
/// going; slashes are counted per receipt from the node's stake.
contract VerifierCommitteeHandler {
    Vm private constant vm = Vm(address(uint160(uint256(keccak256("hevm cheat code")))));

    struct Key {
        address who;
        uint256 sk;
        BN254.G1Point pk1;
        BN254.G2Point pk2;
        bool used; // a key registers once
    }

    VerifierCommittee public immutable committee;
    GymToken public immutable token;
    NodeRegistry public immutable registry;
    address public immutable dao;
    address public immutable challenger;
    uint256 private immutable _nodeSignerKey;

    Key[] private _keys;
    mapping(uint256 challengeId => bytes set) private _openedWith;
    mapping(address verifier => uint256 keyPlusOne) private _keyOf;
    uint256 public calls;
    /// @notice How many of each state change went through (to see that sequences do progress).
    uint256 public settled;
    uint256 public reversed;
    uint256 public finalized;
    uint256 public claimed;
    uint256 public withdrawn;
    uint256 public expired;
    uint256 public daoSlashed;
    /// @notice Whether some receipt was slashed twice (by the DAO, the committee, or both).
    bool public receiptSlashedTwice;
    /// @notice Whether `finalize` reverted for a challenge that was due (reversed, or settled
    /// with its appeal window over): its bond and rewards would be stuck.
    bool public finalizeRefused;
    mapping(bytes32 receiptHash => uint256) public slashesOf;
    /// @dev Forge does not carry a vm.warp from one invariant call to the next: every call
    /// warps to this clock first.
    uint256 private _now;

    constructor(
        VerifierCommittee committee_,
        GymToken token_,
        NodeRegistry registry_,
        address dao_,
        address challenger_,
        uint256 nodeSignerKey
    ) {
        committee = committee_;
        token = token_;
        registry = registry_;
        dao = dao_;
        challenger = challenger_;
        _nodeSignerKey = nodeSignerKey;
        _now = block.timestamp;
    }

    function addKey(address who, uint256 sk, BN254.G1Point calldata pk1, BN254.G2Point calldata pk2) external {
        _keys.push(Key({who: who, sk: sk, pk1: pk1, pk2: pk2, used: false}));
        _keyOf[who] = _keys.length;
    }

    modifier step() {
        vm.warp(_now);
        ++calls;
        _;
    }

    function register(uint256 seed, uint256 stakeSeed) external step {
        Key storage k = _keys[seed % _keys.length];
        if (k.used) return;
        k.used = true;
        uint256 stake = committee.minVerifierStake() + stakeSeed % 400e18;
        bytes32 digest = committee.popDigest(k.who, k.pk1);
        BN254.G1Point memory pop = BN254.ecMul(BN254.hashToG1(digest), k.sk);
        vm.prank(k.who);
        committee.register(k.pk1, k.pk2, pop, stake);
    }

    function addStake(uint256 seed, uint256 amount) external step {
        (address who, IVerifierCommittee.VerifierInfo memory v) = _slot(seed);
        if (v.state != 1) return;
        vm.prank(who);
        committee.addStake(1 + amount % 100e18);
    }

    function deregister(uint256 seed) external step {
        (address who, IVerifierCommittee.VerifierInfo memory v) = _slot(seed);
        if (v.state != 1) return;
        vm.prank(who);
        committee.deregister();
    }

    function withdraw(uint256 seed) external step {
        (address who, IVerifierCommittee.VerifierInfo memory v) = _slot(seed);
        if (v.state != 2) return;
        if (block.timestamp < v.unbondingEnds) {
            _now = v.unbondingEnds;
            vm.warp(_now);
        }
        vm.prank(who);
        committee.withdraw();
        ++withdrawn;
    }

    function open(uint256 salt) external step {
        bytes32 receiptHash = keccak256(abi.encode("receipt", salt));
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(_nodeSignerKey, receiptHash);
        address operator = vm.addr(_nodeSignerKey);
        operator = registry.operatorOfSigner(operator);
        vm.prank(challenger);
        uint256 id = committee.openChallenge(operator, receiptHash, abi.encodePacked(r, s, v), "bafyevidence");
        _openedWith[id] = committee.activeSet();
    }

    function settle(uint256 idSeed, uint256 mask, bool upheld) external step {
        uint256 id = _pick(idSeed);
        if (id == 0) return;
        IVerifierCommittee.ChallengeInfo memory c = committee.challengeOf(id);
        if (c.status != IVerifierCommittee.Status.Open) return;
        if (block.timestamp >= uint256(c.openedAt) + committee.settlementTimeout()) return; // closed
        bytes memory set = _openedWith[id]; // the set the challenge opened with judges it
        uint256 bitmap = _signers(set, mask);
        if (bitmap == 0) return;
        _settle(id, c.receiptHash, upheld, bitmap, set);
        ++settled;
    }

    function _settle(uint256 id, bytes32 receiptHash, bool upheld, uint256 bitmap, bytes memory set) private {
        uint8 verdict = upheld ? 1 : 2;
        bytes32 reason = upheld ? bytes32("sampling") : bytes32(0);
        IVerifierCommittee.SettlementProof memory proof = _proof(set, bitmap, id, receiptHash, verdict, reason);
        committee.settle(id, receiptHash, verdict, reason, bitmap, proof);
    }

    function _proof(bytes memory set, uint256 bitmap, uint256 id, bytes32 receiptHash, uint8 verdict, bytes32 reason)
        private
        view
        returns (IVerifierCommittee.SettlementProof memory proof)
    {
        bytes32 digest = committee.verdictDigest(id, receiptHash, verdict, reason);
        (BN254.G1Point memory sigma, BN254.G2Point memory apk2) = _aggregate(digest, bitmap, CommitteeSet.count(set));
        proof = IVerifierCommittee.SettlementProof({
            set: set,
            nonSigners: CommitteeSet.nonSigners(set, bitmap),
            sigma: sigma,
            apk2: apk2,
            hashHint: BN254.hashToG1Hint(digest)
        });
    }

    /// @dev The active slots picked by `mask`, or all of them when that is below two thirds.
    function _signers(bytes memory set, uint256 mask) private pure returns (uint256 bitmap) {
        uint256 active;
        uint256 total;
        uint256 signed;
        for (uint256 i; i < CommitteeSet.count(set); ++i) {
            uint256 stake = CommitteeSet.stake(set, i);
            if (stake != 0) active |= 1 << i;
            total += stake;
            if ((mask >> i) & 1 == 1) signed += stake;
        }
        bitmap = active & mask;
        if (bitmap == 0 || signed * 3 < total * 2) bitmap = active;
    }

    function _aggregate(bytes32 digest, uint256 bitmap, uint256 n)
        private
        view
        returns (BN254.G1Point memory sigma, BN254.G2Point memory apk2)
    {
        uint256 sk;
        for (uint256 i; i < n; ++i) {
            if ((bitmap >> i) & 1 == 0) continue;
            Key storage k = _keys[_keyOf[committee.verifierAt(i).verifier] - 1];
            sk = addmod(sk, k.sk, BN254.R);
            apk2 = G2Math.add(apk2, k.pk2);
        }
        sigma = BN254.ecMul(BN254.hashToG1(digest), sk);
    }

    function reverse(uint256 idSeed) external step {
        uint256 id = _pick(idSeed);
        if (id == 0) return;
        IVerifierCommittee.ChallengeInfo memory c = committee.challengeOf(id);
        if (c.status != IVerifierCommittee.Status.Settled) return;
        if (block.timestamp >= uint256(c.settledAt) + committee.appealWindow()) return;
        vm.prank(dao);
        committee.reverse(id);
        ++reversed;
    }

    function finalize(uint256 idSeed) external step {
        uint256 id = _pick(idSeed);
        if (id == 0) return;
        IVerifierCommittee.ChallengeInfo memory c = committee.challengeOf(id);
        if (c.status == IVerifierCommittee.Status.Settled) {
            uint256 ends = uint256(c.settledAt) + committee.appealWindow();
            if (block.timestamp < ends) {
                _now = ends;
                vm.warp(_now);
            }
        } else if (c.status != IVerifierCommittee.Status.Reversed) {
            return;
        }
        uint256 stake = registry.nodeOf(c.operator).stake;
        try committee.finalize(id) {
            ++finalized;
            if (registry.nodeOf(c.operator).stake < stake) _countSlash(c.receiptHash);
        } catch {
            finalizeRefused = true;
        }
    }

    /// @dev A bond-free NodeRegistry challenge of the receipt of a committee challenge (the
    /// registry refuses it while that receipt has an open or upheld one).
    function freeChallenge(uint256 idSeed) external step {
        uint256 id = _pick(idSeed);
        if (id == 0) return;
        bytes32 receiptHash = committee.challengeOf(id).receiptHash;
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(_nodeSignerKey, receiptHash);
        address operator = registry.operatorOfSigner(vm.addr(_nodeSignerKey));
        try registry.challenge(operator, receiptHash, abi.encodePacked(r, s, v), "bafyfree") {} catch {}
    }

    /// @dev The DAO slashes 1 GYM for any registry challenge, free or the committee's.
    function daoSlash(uint256 idSeed) external step {
        uint256 count = registry.challengeCount();
        if (count == 0) return;
        uint256 id = 1 + idSeed % count;
        INodeRegistry.Challenge memory c = registry.challengeOf(id);
        if (registry.nodeOf(c.operator).stake < 1e18) return;
        vm.prank(dao);
        try registry.slash(c.operator, 1e18, id, dao) {
            ++daoSlashed;
            _countSlash(c.receiptHash);
        } catch {}
    }

    function _countSlash(bytes32 receiptHash) private {
        if (++slashesOf[receiptHash] > 1) receiptSlashedTwice = true;
    }

    function claim(uint256 idSeed, uint256 indexSeed) external step {
        uint256 id = _pick(idSeed);
        if (id == 0) return;
        IVerifierCommittee.ChallengeInfo memory c = committee.challengeOf(id);
        if (c.status != IVerifierCommittee.Status.Finalized || c.rewardShare == 0) return;
        uint256 open = uint256(c.signerBitmap) & ~uint256(c.claimedBitmap);
        if (open == 0) return;
        // the (indexSeed mod 128)-th index at or after which an unclaimed signer bit is set
        uint256 index = indexSeed % 128;
        while ((open >> index) == 0) index = 0;
        while ((open >> index) & 1 == 0) ++index;
        committee.claim(id, index);
        ++claimed;
    }

    /// @dev Expires an open challenge, moving the clock to its expiry first when needed.
    function expire(uint256 idSeed) external step {
        uint256 id = _pick(idSeed);
        if (id == 0) return;
        IVerifierCommittee.ChallengeInfo memory c = committee.challengeOf(id);
        if (c.status != IVerifierCommittee.Status.Open) return;
        uint256 ends = uint256(c.openedAt) + committee.settlementTimeout();
        if (block.timestamp < ends) {
            _now = ends;
            vm.warp(_now);
        }
        committee.expire(id);
        ++expired;
    }

    function warp(uint256 seconds_) external step {
        _now += 1 + seconds_ % 3 days;
    }

    function _pick(uint256 seed) private view returns (uint256) {
        uint256 count = committee.challengeCount();
        return count == 0 ? 0 : 1 + seed % count;
    }

    function _slot(uint256 seed) private view returns (address who, IVerifierCommittee.VerifierInfo memory v) {
        uint256 n = committee.slotCount();
        if (n == 0) return (address(0), v);
        v = committee.verifierAt(seed % n);
        who = v.verifier;
    }
}
