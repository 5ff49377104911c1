// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";

import {BN254} from "../src/BN254.sol";
import {IRewardDistributor} from "../src/IRewardDistributor.sol";
import {IVerifierCommittee} from "../src/IVerifierCommittee.sol";
import {RewardDistributor} from "../src/RewardDistributor.sol";
import {RewardDistributorHandler} from "./handlers/RewardDistributorHandler.sol";
import {CommitteeFixture} from "./utils/CommitteeFixture.sol";
import {CommitteeSet} from "./utils/CommitteeSet.sol";
import {RewardTree} from "./utils/RewardTree.sol";

/// @notice The committee's world (CommitteeFixture: a real VerifierCommittee, verifier i holding
/// key i of tests/vectors/bls_committee.json) plus a RewardDistributor governed by `dao` and
/// paid from `treasury`, which holds `TREASURY_FUNDS` and approved it. Attestations are signed
/// in-test with the verifiers' keys over `rewardDigest`.
abstract contract RewardFixture is CommitteeFixture {
    uint64 internal constant EPOCH_BLOCKS = 100;
    uint64 internal constant REWARD_WINDOW = 1 hours;
    uint256 internal constant BUDGET = 1_000e18;
    uint256 internal constant TREASURY_FUNDS = 100_000e18;
    // a real table's CIDv1 (59 characters: three storage words, as on the devnet)
    string internal constant CID = "bafkreigunhqakt5pluxk2s5rrdc7j3ajganuwbrarjdnjnwvo4h67j4w4q";

    RewardDistributor internal distributor;
    address internal treasury = address(0x7EA5);
    address internal bob = address(0xB0B);

    function setUp() public virtual override {
        super.setUp();
        distributor =
            new RewardDistributor(token, committee, dao, treasury, EPOCH_BLOCKS, REWARD_WINDOW, BUDGET, _split());
        vm.prank(carol);
        require(token.transfer(treasury, TREASURY_FUNDS), "fund the treasury");
        vm.prank(treasury);
        // a finite allowance, as the deployment's: each claim writes it
        token.approve(address(distributor), TREASURY_FUNDS);
    }

    function _split() internal pure returns (uint16[4] memory) {
        return [uint16(4_000), 3_000, 1_500, 1_500];
    }

    /// @dev Rolls to the first block after `epoch` (no-op when already past it).
    function _endEpoch(uint256 epoch) internal {
        (, uint256 last) = distributor.epochBounds(epoch);
        if (block.number <= last) vm.roll(last + 1);
    }

    /// @dev The proof `attest` takes from signers `bitmap` of the committee's current set, signed
    /// over (epoch, root, total, tableCid).
    function _attestProof(uint256 epoch, bytes32 root, uint256 total, string memory tableCid, uint256 bitmap)
        internal
        view
        returns (IVerifierCommittee.SettlementProof memory)
    {
        bytes32 digest = distributor.rewardDigest(epoch, root, total, tableCid);
        return _proof(digest, bitmap, _sign(digest, bitmap), _apk2(bitmap));
    }

    function _attest(uint256 epoch, bytes32 root, uint256 total, uint256 bitmap) internal {
        IVerifierCommittee.SettlementProof memory proof = _attestProof(epoch, root, total, CID, bitmap);
        distributor.attest(epoch, root, total, CID, bitmap, proof);
    }

    /// @dev Five rows: alice 100, carol 250, bob 50 GYM, 0xD06 one base unit, 0xE7E nothing.
    function _table() internal view returns (address[] memory accounts, uint256[] memory amounts) {
        accounts = new address[](5);
        amounts = new uint256[](5);
        (accounts[0], amounts[0]) = (alice, 100e18);
        (accounts[1], amounts[1]) = (carol, 250e18);
        (accounts[2], amounts[2]) = (bob, 50e18);
        (accounts[3], amounts[3]) = (address(0xD06), 1);
        (accounts[4], amounts[4]) = (address(0xE7E), 0);
    }

    function _sum(uint256[] memory amounts) internal pure returns (uint256 total) {
        for (uint256 i; i < amounts.length; ++i) {
            total += amounts[i];
        }
    }

    /// @dev Attests `_table()` for `epoch` (signers 0..2 of 4) once the epoch is over.
    function _attestTable(uint256 epoch) internal returns (address[] memory accounts, uint256[] memory amounts) {
        (accounts, amounts) = _table();
        _endEpoch(epoch);
        _attest(epoch, RewardTree.root(accounts, amounts), _sum(amounts), 0x7);
    }

    function _claim(uint256 epoch, address[] memory accounts, uint256[] memory amounts, uint256 row) internal {
        distributor.claim(epoch, accounts[row], amounts[row], RewardTree.proof(accounts, amounts, row));
    }

    function _final(uint256 epoch) internal {
        vm.warp(distributor.finalAt(epoch));
    }
}

contract RewardDistributorTest is RewardFixture {
    function setUp() public override {
        super.setUp();
        _registerMany(4, MIN_VERIFIER_STAKE);
    }

    // ------------------------------------------------------------------ construction, epochs

    function test_constructor_recordsItsParameters() public view {
        assertEq(address(distributor.token()), address(token), "token");
        assertEq(address(distributor.committee()), address(committee), "committee");
        assertEq(distributor.governance(), dao, "governance");
        assertEq(distributor.treasury(), treasury, "treasury");
        assertEq(distributor.startBlock(), block.number, "epoch 0 starts at the deployment block");
        assertEq(distributor.epochBlocks(), EPOCH_BLOCKS, "epochBlocks");
        assertEq(distributor.appealWindow(), REWARD_WINDOW, "appealWindow");
        (uint256 budget, uint16[4] memory bps) = distributor.budgetOf(0);
        assertEq(budget, BUDGET, "budget of epoch 0");
        assertEq(keccak256(abi.encode(bps)), keccak256(abi.encode(_split())), "pools of epoch 0");
        assertEq(
            distributor.REWARD_TYPEHASH(),
            keccak256(
                "GymRewardRoot(uint256 chainId,address distributor,uint256 epoch,bytes32 root,uint256 total,bytes32 tableCid)"
            ),
            "typehash"
        );
    }

    function test_constructor_refusesBadParameters() public {
        uint16[4] memory split = _split();
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsInvalidParameter.selector, "token", 0));
        new RewardDistributor(IERC20(address(0)), committee, dao, treasury, EPOCH_BLOCKS, REWARD_WINDOW, BUDGET, split);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsInvalidParameter.selector, "committee", 0));
        new RewardDistributor(
            token, IVerifierCommittee(address(0)), dao, treasury, EPOCH_BLOCKS, REWARD_WINDOW, BUDGET, split
        );
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsInvalidParameter.selector, "governance", 0));
        new RewardDistributor(token, committee, address(0), treasury, EPOCH_BLOCKS, REWARD_WINDOW, BUDGET, split);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsInvalidParameter.selector, "treasury", 0));
        new RewardDistributor(token, committee, dao, address(0), EPOCH_BLOCKS, REWARD_WINDOW, BUDGET, split);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsInvalidParameter.selector, "epochBlocks", 0));
        new RewardDistributor(token, committee, dao, treasury, 0, REWARD_WINDOW, BUDGET, split);
        vm.expectRevert(
            abi.encodeWithSelector(IRewardDistributor.RewardsAppealWindowTooLong.selector, 7 days + 1, 7 days)
        );
        new RewardDistributor(token, committee, dao, treasury, EPOCH_BLOCKS, 7 days + 1, BUDGET, split);
        uint256 tooBig = uint256(type(uint128).max) + 1;
        vm.expectRevert(
            abi.encodeWithSelector(IRewardDistributor.RewardsInvalidParameter.selector, "budgetPerEpoch", tooBig)
        );
        new RewardDistributor(token, committee, dao, treasury, EPOCH_BLOCKS, REWARD_WINDOW, tooBig, split);
        split[3] = 1_499;
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsInvalidSplit.selector, 9_999));
        new RewardDistributor(token, committee, dao, treasury, EPOCH_BLOCKS, REWARD_WINDOW, BUDGET, split);
        // the longest window and a whole budget to one pool are fine
        new RewardDistributor(token, committee, dao, treasury, 1, 7 days, 0, [uint16(0), 0, 10_000, 0]);
    }

    function test_epochs_boundsAndCurrent() public {
        uint256 start = distributor.startBlock();
        assertEq(distributor.currentEpoch(), 0, "epoch 0 at deployment");
        (uint256 first, uint256 last) = distributor.epochBounds(0);
        assertEq(first, start, "epoch 0 first block");
        assertEq(last, start + EPOCH_BLOCKS - 1, "epoch 0 last block");
        (first, last) = distributor.epochBounds(3);
        assertEq(first, start + 3 * EPOCH_BLOCKS, "epoch 3 first block");
        assertEq(last, start + 4 * EPOCH_BLOCKS - 1, "epoch 3 last block");
        assertEq(distributor.epochOf(first), 3, "first block in its epoch");
        assertEq(distributor.epochOf(last), 3, "last block in its epoch");
        assertEq(distributor.epochOf(last + 1), 4, "next block in the next epoch");
        vm.roll(last);
        assertEq(distributor.currentEpoch(), 3, "current epoch follows the block");
        (first, last) = distributor.epochBounds(type(uint256).max);
        assertEq(last, type(uint256).max, "an epoch no chain reaches saturates");
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsBeforeStart.selector, start - 1, start));
        distributor.epochOf(start - 1);
    }

    // ------------------------------------------------------------------ attest

    function test_attest_recordsARootTheQuorumSigned() public {
        (address[] memory accounts, uint256[] memory amounts) = _table();
        bytes32 root = RewardTree.root(accounts, amounts);
        uint256 total = _sum(amounts);
        _endEpoch(0);
        IVerifierCommittee.SettlementProof memory proof = _attestProof(0, root, total, CID, 0x7);
        vm.expectEmit(true, true, true, true, address(distributor));
        emit IRewardDistributor.RootAttested(0, root, total, CID, 0x7, 3 * MIN_VERIFIER_STAKE, 4 * MIN_VERIFIER_STAKE);
        vm.prank(bob); // anyone submits
        distributor.attest(0, root, total, CID, 0x7, proof);
        IRewardDistributor.EpochInfo memory info = distributor.epochInfo(0);
        assertEq(uint256(info.status), uint256(IRewardDistributor.Status.Attested), "attested");
        assertEq(info.root, root, "root");
        assertEq(info.total, total, "total");
        assertEq(info.claimed, 0, "nothing claimed");
        assertEq(info.attestedAt, block.timestamp, "attestedAt");
        assertEq(info.tableCid, CID, "tableCid");
        assertEq(info.finalAt, block.timestamp + REWARD_WINDOW, "final after the appeal window");
        assertEq(distributor.finalAt(0), info.finalAt, "finalAt");
        assertEq(token.balanceOf(address(distributor)), 0, "attest moves no tokens");
    }

    function test_attest_refusesAnEpochThatIsNotOver() public {
        (, uint256 last) = distributor.epochBounds(0);
        vm.roll(last);
        IVerifierCommittee.SettlementProof memory proof = _attestProof(0, keccak256("root"), 1, CID, 0x7);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsEpochNotOver.selector, 0, last, last));
        distributor.attest(0, keccak256("root"), 1, CID, 0x7, proof);
        // the current epoch and a far one neither
        proof = _attestProof(5, keccak256("root"), 1, CID, 0x7);
        (, uint256 last5) = distributor.epochBounds(5);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsEpochNotOver.selector, 5, last5, last));
        distributor.attest(5, keccak256("root"), 1, CID, 0x7, proof);
        vm.roll(last + 1);
        _attest(0, keccak256("root"), 1, 0x7);
    }

    /// @dev Two of four equal stakes (half) is below two thirds, whatever they signed.
    function test_attest_refusesARootBelowTheThreshold() public {
        _endEpoch(0);
        IVerifierCommittee.SettlementProof memory proof = _attestProof(0, keccak256("root"), 1, CID, 0x3);
        vm.expectRevert(
            abi.encodeWithSelector(
                IRewardDistributor.RewardsBelowThreshold.selector, 2 * MIN_VERIFIER_STAKE, 4 * MIN_VERIFIER_STAKE
            )
        );
        distributor.attest(0, keccak256("root"), 1, CID, 0x3, proof);
    }

    /// @dev A signature on anything but (epoch, root, total, tableCid) of this distributor, or
    /// by other keys than the bitmap's, is refused.
    function test_attest_refusesAWrongSignature() public {
        _endEpoch(1);
        bytes32 root = keccak256("root");
        bytes32 digest = distributor.rewardDigest(0, root, 1, CID);
        bytes32[5] memory others = [
            distributor.rewardDigest(0, keccak256("other root"), 1, CID),
            distributor.rewardDigest(0, root, 2, CID),
            distributor.rewardDigest(0, root, 1, "bafkreiothertable"),
            distributor.rewardDigest(1, root, 1, CID), // another epoch's
            committee.verdictDigest(1, root, UPHELD, SAMPLING) // a committee message
        ];
        for (uint256 k; k < others.length; ++k) {
            IVerifierCommittee.SettlementProof memory forged = _proof(digest, 0x7, _sign(others[k], 0x7), _apk2(0x7));
            vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsInvalidSignature.selector, 0));
            distributor.attest(0, root, 1, CID, 0x7, forged);
        }
        // signed by 0, 1, 3 but presented as 0, 1, 2 (apk2 of the signers, or of the bitmap)
        IVerifierCommittee.SettlementProof memory swapped = _proof(digest, 0x7, _sign(digest, 0xb), _apk2(0xb));
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsInvalidSignature.selector, 0));
        distributor.attest(0, root, 1, CID, 0x7, swapped);
        swapped.apk2 = _apk2(0x7);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsInvalidSignature.selector, 0));
        distributor.attest(0, root, 1, CID, 0x7, swapped);
        // the same signature bound to another distributor
        RewardDistributor other =
            new RewardDistributor(token, committee, dao, treasury, EPOCH_BLOCKS, REWARD_WINDOW, BUDGET, _split());
        vm.roll(block.number + 2 * EPOCH_BLOCKS);
        bytes32 otherDigest = other.rewardDigest(0, root, 1, CID);
        IVerifierCommittee.SettlementProof memory proof = _proof(otherDigest, 0x7, _sign(digest, 0x7), _apk2(0x7));
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsInvalidSignature.selector, 0));
        other.attest(0, root, 1, CID, 0x7, proof);
        proof.hashHint = BN254.hashToG1Hint(digest);
        distributor.attest(0, root, 1, CID, 0x7, proof);
    }

    function test_attest_refusesASecondRootForAnEpoch() public {
        _endEpoch(0);
        _attest(0, keccak256("root"), 1, 0x7);
        IVerifierCommittee.SettlementProof memory proof = _attestProof(0, keccak256("second"), 1, CID, 0xf);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsEpochAttested.selector, 0, keccak256("root")));
        distributor.attest(0, keccak256("second"), 1, CID, 0xf, proof);
        // the same root again neither
        proof = _attestProof(0, keccak256("root"), 1, CID, 0x7);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsEpochAttested.selector, 0, keccak256("root")));
        distributor.attest(0, keccak256("root"), 1, CID, 0x7, proof);
        // other epochs are separate
        _endEpoch(1);
        _attest(1, keccak256("second"), 1, 0x7);
    }

    function test_attest_refusesAZeroRootAndATotalOverBudget() public {
        _endEpoch(0);
        IVerifierCommittee.SettlementProof memory proof = _attestProof(0, bytes32(0), 1, CID, 0x7);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsZeroRoot.selector, 0));
        distributor.attest(0, bytes32(0), 1, CID, 0x7, proof);
        proof = _attestProof(0, keccak256("root"), BUDGET + 1, CID, 0x7);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsOverBudget.selector, 0, BUDGET + 1, BUDGET));
        distributor.attest(0, keccak256("root"), BUDGET + 1, CID, 0x7, proof);
        _attest(0, keccak256("root"), BUDGET, 0x7); // the whole budget is fine
    }

    /// @dev Roots are attested by the committee's set of the moment: a set from before a
    /// verifier joined, or before one left, is refused, and the new set attests.
    function test_attest_refusesAStaleSet() public {
        _endEpoch(0);
        bytes32 root = keccak256("root");
        IVerifierCommittee.SettlementProof memory proof = _attestProof(0, root, 1, CID, 0x7);
        bytes32 before = keccak256(proof.set);
        _register(4, MIN_VERIFIER_STAKE);
        vm.expectRevert(
            abi.encodeWithSelector(IRewardDistributor.RewardsStaleSet.selector, before, committee.setHash())
        );
        distributor.attest(0, root, 1, CID, 0x7, proof);
        // the five-verifier set: 0..2 are three fifths now, 0..3 four
        proof = _attestProof(0, root, 1, CID, 0x7);
        vm.expectRevert(
            abi.encodeWithSelector(
                IRewardDistributor.RewardsBelowThreshold.selector, 3 * MIN_VERIFIER_STAKE, 5 * MIN_VERIFIER_STAKE
            )
        );
        distributor.attest(0, root, 1, CID, 0x7, proof);
        proof = _attestProof(0, root, 1, CID, 0xf);
        bytes32 fiveSet = keccak256(proof.set);
        vm.prank(verifierAddress(3));
        committee.deregister();
        vm.expectRevert(
            abi.encodeWithSelector(IRewardDistributor.RewardsStaleSet.selector, fiveSet, committee.setHash())
        );
        distributor.attest(0, root, 1, CID, 0xf, proof);
        // slot 3 has left: 0, 1, 2 of {0, 1, 2, 4}
        _attest(0, root, 1, 0x7);
    }

    function test_attest_refusesBadSignersNonSignersAndHint() public {
        _endEpoch(0);
        bytes32 root = keccak256("root");
        IVerifierCommittee.SettlementProof memory proof = _attestProof(0, root, 1, CID, 0x7);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsInvalidSigner.selector, 0));
        distributor.attest(0, root, 1, CID, 0, proof);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsInvalidSigner.selector, 5));
        distributor.attest(0, root, 1, CID, 0x27, proof);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsInvalidSigner.selector, 200));
        distributor.attest(0, root, 1, CID, 0x7 | (1 << 200), proof);
        // non-signers: a signer listed, one listed twice, an inactive slot, one left out
        bytes[4] memory lists = [bytes(hex"0302"), hex"0303", hex"0309", hex""];
        bytes4[4] memory errors = [
            IRewardDistributor.RewardsInvalidNonSigner.selector,
            IRewardDistributor.RewardsInvalidNonSigner.selector,
            IRewardDistributor.RewardsInvalidNonSigner.selector,
            IRewardDistributor.RewardsMissingNonSigner.selector
        ];
        uint256[4] memory indices = [uint256(2), 3, 9, 3];
        for (uint256 k; k < lists.length; ++k) {
            proof.nonSigners = lists[k];
            vm.expectRevert(abi.encodeWithSelector(errors[k], indices[k]));
            distributor.attest(0, root, 1, CID, 0x7, proof);
        }
        proof.nonSigners = hex"03";
        // a hint for another digest, an empty one, and one with its last word off
        uint256[] memory hint = proof.hashHint;
        proof.hashHint = BN254.hashToG1Hint(keccak256("another digest"));
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsInvalidHashHint.selector, 0));
        distributor.attest(0, root, 1, CID, 0x7, proof);
        proof.hashHint = new uint256[](0);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsInvalidHashHint.selector, 0));
        distributor.attest(0, root, 1, CID, 0x7, proof);
        uint256[] memory off = new uint256[](hint.length);
        for (uint256 i; i < hint.length; ++i) {
            off[i] = hint[i];
        }
        off[hint.length - 1] = BN254.P - off[hint.length - 1] + 1;
        proof.hashHint = off;
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsInvalidHashHint.selector, 0));
        distributor.attest(0, root, 1, CID, 0x7, proof);
        // the other root of the same square is the same H up to sign: −σ on −H, still refused
        // as a signature unless σ is negated too
        off[hint.length - 1] = BN254.P - hint[hint.length - 1];
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsInvalidSignature.selector, 0));
        distributor.attest(0, root, 1, CID, 0x7, proof);
        proof.sigma = BN254.neg(proof.sigma);
        distributor.attest(0, root, 1, CID, 0x7, proof);
    }

    /// @dev All four sign: no non-signer, the set's apk1 as is.
    function test_attest_everyVerifierSigning() public {
        _endEpoch(0);
        IVerifierCommittee.SettlementProof memory proof = _attestProof(0, keccak256("root"), 1, CID, 0xf);
        assertEq(proof.nonSigners.length, 0, "no non-signer");
        distributor.attest(0, keccak256("root"), 1, CID, 0xf, proof);
    }

    // ------------------------------------------------------------------ reverse

    /// @dev Reversed within its window, the root pays nothing; the epoch is attested anew and
    /// its new root pays once final.
    function test_reverse_thenReattest() public {
        (address[] memory accounts, uint256[] memory amounts) = _attestTable(0);
        bytes32 first = RewardTree.root(accounts, amounts);
        vm.expectEmit(true, true, true, true, address(distributor));
        emit IRewardDistributor.RootReversed(0, first);
        vm.prank(dao);
        distributor.reverse(0);
        IRewardDistributor.EpochInfo memory info = distributor.epochInfo(0);
        assertEq(uint256(info.status), uint256(IRewardDistributor.Status.Reversed), "reversed");
        assertEq(info.root, first, "the reversed root stays on record");
        _final(0);
        bytes32[] memory path = RewardTree.proof(accounts, amounts, 0);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsNotAttested.selector, 0));
        distributor.claim(0, alice, amounts[0], path);

        // a corrected table: alice gets 90, not 100
        amounts[0] = 90e18;
        bytes32 second = RewardTree.root(accounts, amounts);
        _attest(0, second, _sum(amounts), 0x7);
        info = distributor.epochInfo(0);
        assertEq(uint256(info.status), uint256(IRewardDistributor.Status.Attested), "attested again");
        assertEq(info.root, second, "the new root");
        vm.expectRevert(
            abi.encodeWithSelector(
                IRewardDistributor.RewardsNotFinal.selector, 0, block.timestamp + REWARD_WINDOW, block.timestamp
            )
        );
        _claim(0, accounts, amounts, 0);
        _final(0);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsInvalidProof.selector, 0, alice, 100e18));
        distributor.claim(0, alice, 100e18, path); // the reversed root's leaf
        uint256 before = token.balanceOf(alice);
        _claim(0, accounts, amounts, 0);
        assertEq(token.balanceOf(alice) - before, 90e18, "paid by the new root");
    }

    function test_reverse_onlyGovernanceWithinTheWindow() public {
        vm.prank(dao);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsNotAttested.selector, 0));
        distributor.reverse(0);
        _attestTable(0);
        vm.prank(bob);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsNotGovernance.selector, bob));
        distributor.reverse(0);
        uint256 finalAt = distributor.finalAt(0);
        vm.warp(finalAt - 1);
        vm.prank(dao);
        distributor.reverse(0); // the window's last second
        vm.prank(dao);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsNotAttested.selector, 0));
        distributor.reverse(0); // reversed once
        _attest(0, keccak256("again"), 1, 0x7);
        uint256 windowEnds = distributor.finalAt(0);
        vm.warp(windowEnds);
        vm.prank(dao);
        vm.expectRevert(
            abi.encodeWithSelector(IRewardDistributor.RewardsAppealWindowOver.selector, 0, windowEnds, windowEnds)
        );
        distributor.reverse(0);
    }

    // ------------------------------------------------------------------ claim

    function test_claim_paysOnceFromTheTreasury() public {
        (address[] memory accounts, uint256[] memory amounts) = _attestTable(0);
        _final(0);
        bytes32[] memory path = RewardTree.proof(accounts, amounts, 1);
        uint256 before = token.balanceOf(carol);
        vm.expectEmit(true, true, true, true, address(distributor));
        emit IRewardDistributor.Claimed(0, carol, 250e18);
        vm.prank(bob); // anyone claims for carol; carol is paid
        distributor.claim(0, carol, 250e18, path);
        assertEq(token.balanceOf(carol) - before, 250e18, "carol paid");
        assertEq(token.balanceOf(treasury), TREASURY_FUNDS - 250e18, "from the treasury");
        assertTrue(distributor.isClaimed(0, carol), "claimed");
        assertFalse(distributor.isClaimed(0, alice), "alice not yet");
        assertEq(distributor.epochInfo(0).claimed, 250e18, "claimed so far");
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsAlreadyClaimed.selector, 0, carol));
        distributor.claim(0, carol, 250e18, path);
        // a zero row claims (nothing moves) and is then spent too
        _claim(0, accounts, amounts, 4);
        assertTrue(distributor.isClaimed(0, accounts[4]), "zero row claimed");
        for (uint256 row; row < 4; ++row) {
            if (row != 1) _claim(0, accounts, amounts, row);
        }
        assertEq(distributor.epochInfo(0).claimed, _sum(amounts), "the whole table paid");
        assertEq(token.balanceOf(treasury), TREASURY_FUNDS - _sum(amounts), "treasury paid exactly the table");
        assertEq(token.balanceOf(address(distributor)), 0, "nothing kept");
    }

    function test_claim_refusesAWrongProof() public {
        (address[] memory accounts, uint256[] memory amounts) = _attestTable(0);
        _final(0);
        bytes32[] memory path = RewardTree.proof(accounts, amounts, 0);
        bytes4 invalid = IRewardDistributor.RewardsInvalidProof.selector;
        vm.expectRevert(abi.encodeWithSelector(invalid, 0, alice, 100e18 + 1));
        distributor.claim(0, alice, 100e18 + 1, path); // another amount
        vm.expectRevert(abi.encodeWithSelector(invalid, 0, bob, 100e18));
        distributor.claim(0, bob, 100e18, path); // another account
        vm.expectRevert(abi.encodeWithSelector(invalid, 0, alice, 100e18));
        distributor.claim(0, alice, 100e18, RewardTree.proof(accounts, amounts, 1)); // another row's proof
        bytes32[] memory truncated = new bytes32[](path.length - 1);
        for (uint256 i; i < truncated.length; ++i) {
            truncated[i] = path[i];
        }
        vm.expectRevert(abi.encodeWithSelector(invalid, 0, alice, 100e18));
        distributor.claim(0, alice, 100e18, truncated);
        path[0] ^= bytes32(uint256(1));
        vm.expectRevert(abi.encodeWithSelector(invalid, 0, alice, 100e18));
        distributor.claim(0, alice, 100e18, path);
        // a row that is not in the table
        vm.expectRevert(abi.encodeWithSelector(invalid, 0, bob, 1));
        distributor.claim(0, bob, 1, new bytes32[](0));
        assertFalse(distributor.isClaimed(0, alice), "nothing claimed by refused calls");
    }

    function test_claim_refusesBeforeFinalityAndWithoutARoot() public {
        (address[] memory accounts, uint256[] memory amounts) = _table();
        bytes32[] memory path = RewardTree.proof(accounts, amounts, 0);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsNotAttested.selector, 0));
        distributor.claim(0, alice, 100e18, path);
        _attestTable(0);
        uint256 finalAt = distributor.finalAt(0);
        vm.expectRevert(
            abi.encodeWithSelector(IRewardDistributor.RewardsNotFinal.selector, 0, finalAt, block.timestamp)
        );
        distributor.claim(0, alice, 100e18, path);
        vm.warp(finalAt - 1);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsNotFinal.selector, 0, finalAt, finalAt - 1));
        distributor.claim(0, alice, 100e18, path);
        vm.warp(finalAt);
        distributor.claim(0, alice, 100e18, path);
    }

    /// @dev A table whose rows sum past its attested total (a mistake the signers made) pays
    /// until the total, and refuses the claim that would pass it.
    function test_claim_refusesToPayPastTheTotal() public {
        (address[] memory accounts, uint256[] memory amounts) = _table();
        _endEpoch(0);
        _attest(0, RewardTree.root(accounts, amounts), 300e18, 0x7); // the rows sum to 400
        _final(0);
        _claim(0, accounts, amounts, 1); // 250
        vm.expectRevert(
            abi.encodeWithSelector(IRewardDistributor.RewardsExceedsTotal.selector, 0, 250e18, 100e18, 300e18)
        );
        _claim(0, accounts, amounts, 0);
        _claim(0, accounts, amounts, 2); // 50: exactly the total
        assertEq(distributor.epochInfo(0).claimed, 300e18, "claimed up to the total");
    }

    function test_claim_refusesWhenTheTreasuryWithdrewItsApproval() public {
        (address[] memory accounts, uint256[] memory amounts) = _attestTable(0);
        _final(0);
        vm.prank(treasury);
        token.approve(address(distributor), 0);
        bytes32[] memory path = RewardTree.proof(accounts, amounts, 0);
        vm.expectRevert();
        distributor.claim(0, alice, 100e18, path);
        assertFalse(distributor.isClaimed(0, alice), "a failed payment marks nothing");
    }

    /// @dev The tree helper builds what OpenZeppelin's merkle-tree 1.0.8 (JS) builds: root and a
    /// proof from `StandardMerkleTree.of(_table(), ["address", "uint256"])` in node.
    function test_tree_matchesOpenZeppelinStandardMerkleTree() public view {
        (address[] memory accounts, uint256[] memory amounts) = _table();
        assertEq(
            RewardTree.root(accounts, amounts),
            0x27048c8a4aea487b6d870a91f8d4407e473f133cd416be85d5fdee26ece2449a,
            "root = StandardMerkleTree's"
        );
        bytes32[] memory path = RewardTree.proof(accounts, amounts, 0);
        assertEq(path.length, 3, "proof length");
        assertEq(path[0], 0x2f56d45301f108f4ef362ef1a0642c32d05624608a27b49fb01c93158ae549bc, "proof[0]");
        assertEq(path[1], 0xfbf4c29f9b54fe2b1cc4b084b40660a18623d0d03896b6bdaea3ea2246ffcca8, "proof[1]");
        assertEq(path[2], 0x5245e4c731e8ad90be843a5ac61b2fec10a78571b4dc595d9805229cde0f0080, "proof[2]");
        for (uint256 row; row < accounts.length; ++row) {
            assertTrue(
                MerkleProof.verify(
                    RewardTree.proof(accounts, amounts, row),
                    RewardTree.root(accounts, amounts),
                    RewardTree.leaf(accounts[row], amounts[row])
                ),
                "every row proves"
            );
        }
    }

    /// @dev Random tables of 1..16 rows: every claim, in a random order, pays exactly its row,
    /// the treasury pays exactly the table, and a second claim of any row is refused.
    function testFuzz_claim_paysExactlyTheTable(uint256 seed, uint8 rows) public {
        uint256 n = bound(rows, 1, 16);
        address[] memory accounts = new address[](n);
        uint256[] memory amounts = new uint256[](n);
        for (uint256 i; i < n; ++i) {
            accounts[i] = address(uint160(uint256(keccak256(abi.encode(seed, "account", i)))));
            amounts[i] = uint256(keccak256(abi.encode(seed, "amount", i))) % (BUDGET / 16);
        }
        uint256 total = _sum(amounts);
        _endEpoch(0);
        _attest(0, RewardTree.root(accounts, amounts), total, 0x7);
        _final(0);
        uint256 start = uint256(keccak256(abi.encode(seed, "order"))) % n;
        for (uint256 k; k < n; ++k) {
            uint256 row = (start + k) % n;
            vm.prank(bob);
            _claim(0, accounts, amounts, row);
            assertEq(token.balanceOf(accounts[row]), amounts[row], "paid exactly the row");
        }
        assertEq(distributor.epochInfo(0).claimed, total, "claimed = total");
        assertEq(token.balanceOf(treasury), TREASURY_FUNDS - total, "treasury paid the table");
        uint256 again = uint256(keccak256(abi.encode(seed, "again"))) % n;
        bytes32[] memory path = RewardTree.proof(accounts, amounts, again);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsAlreadyClaimed.selector, 0, accounts[again]));
        distributor.claim(0, accounts[again], amounts[again], path);
    }

    /// @dev Whatever the attested total says of a table, claims never pay past it.
    function testFuzz_claim_neverPastTheTotal(uint256 total, uint256 order) public {
        (address[] memory accounts, uint256[] memory amounts) = _table();
        total = bound(total, 0, _sum(amounts));
        _endEpoch(0);
        _attest(0, RewardTree.root(accounts, amounts), total, 0x7);
        _final(0);
        for (uint256 k; k < accounts.length; ++k) {
            uint256 row = (order % accounts.length + k) % accounts.length;
            bytes32[] memory path = RewardTree.proof(accounts, amounts, row);
            try distributor.claim(0, accounts[row], amounts[row], path) {}
            catch (bytes memory reason) {
                // forge-lint: disable-next-line(unsafe-typecast)
                assertEq(bytes4(reason), IRewardDistributor.RewardsExceedsTotal.selector, "only past the total");
            }
            assertLe(distributor.epochInfo(0).claimed, total, "claimed <= total");
        }
        assertEq(TREASURY_FUNDS - token.balanceOf(treasury), distributor.epochInfo(0).claimed, "paid = claimed");
    }

    // ------------------------------------------------------------------ governance

    /// @dev A budget applies from the epoch it was set in: the epochs before keep theirs (one
    /// not yet attested included), a second change in one epoch replaces the first.
    function test_setBudget_checkpointsFromTheCurrentEpoch() public {
        uint16[4] memory split2 = [uint16(2_500), 2_500, 2_500, 2_500];
        (, uint256 last2) = distributor.epochBounds(2);
        vm.roll(last2 + 1); // epoch 3
        vm.expectEmit(true, true, true, true, address(distributor));
        emit IRewardDistributor.BudgetSet(3, 2 * BUDGET, split2);
        vm.prank(dao);
        distributor.setBudget(2 * BUDGET, split2);
        _assertBudget(0, BUDGET, _split());
        _assertBudget(2, BUDGET, _split());
        _assertBudget(3, 2 * BUDGET, split2);
        _assertBudget(1_000, 2 * BUDGET, split2);
        vm.prank(dao);
        distributor.setBudget(3 * BUDGET, split2); // again in epoch 3: replaces it
        _assertBudget(3, 3 * BUDGET, split2);
        _assertBudget(2, BUDGET, _split());
        (, uint256 last6) = distributor.epochBounds(6);
        vm.roll(last6 + 1); // epoch 7
        vm.prank(dao);
        distributor.setBudget(0, _split());
        _assertBudget(0, BUDGET, _split());
        _assertBudget(3, 3 * BUDGET, split2);
        _assertBudget(6, 3 * BUDGET, split2);
        _assertBudget(7, 0, _split());
        _assertBudget(type(uint256).max, 0, _split());
        // epoch 2 (ended before the change) is held to its own budget, epoch 3 to the new one
        IVerifierCommittee.SettlementProof memory proof = _attestProof(2, keccak256("root"), BUDGET + 1, CID, 0x7);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsOverBudget.selector, 2, BUDGET + 1, BUDGET));
        distributor.attest(2, keccak256("root"), BUDGET + 1, CID, 0x7, proof);
        _attest(3, keccak256("root"), 3 * BUDGET, 0x7);
        proof = _attestProof(7, keccak256("root"), 1, CID, 0x7);
        vm.roll(block.number + EPOCH_BLOCKS);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsOverBudget.selector, 7, 1, 0));
        distributor.attest(7, keccak256("root"), 1, CID, 0x7, proof);
    }

    function _assertBudget(uint256 epoch, uint256 budget, uint16[4] memory split) internal view {
        (uint256 b, uint16[4] memory s) = distributor.budgetOf(epoch);
        assertEq(b, budget, string.concat("budget of epoch ", _str(epoch)));
        assertEq(keccak256(abi.encode(s)), keccak256(abi.encode(split)), string.concat("split of epoch ", _str(epoch)));
    }

    function test_setBudget_governedAndValidated() public {
        vm.prank(bob);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsNotGovernance.selector, bob));
        distributor.setBudget(BUDGET, _split());
        vm.prank(dao);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsInvalidSplit.selector, 10_001));
        distributor.setBudget(BUDGET, [uint16(4_001), 3_000, 1_500, 1_500]);
        uint256 tooBig = uint256(type(uint128).max) + 1;
        vm.prank(dao);
        vm.expectRevert(
            abi.encodeWithSelector(IRewardDistributor.RewardsInvalidParameter.selector, "budgetPerEpoch", tooBig)
        );
        distributor.setBudget(tooBig, _split());
    }

    /// @dev A new window applies to later attestations; an attested root keeps its finality.
    function test_setAppealWindow_appliesToLaterAttestations() public {
        _attestTable(0);
        uint256 firstFinal = distributor.finalAt(0);
        vm.prank(bob);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.RewardsNotGovernance.selector, bob));
        distributor.setAppealWindow(1 days);
        vm.prank(dao);
        vm.expectRevert(
            abi.encodeWithSelector(IRewardDistributor.RewardsAppealWindowTooLong.selector, 7 days + 1, 7 days)
        );
        distributor.setAppealWindow(7 days + 1);
        vm.expectEmit(true, true, true, true, address(distributor));
        emit IRewardDistributor.AppealWindowSet(1 days);
        vm.prank(dao);
        distributor.setAppealWindow(1 days);
        assertEq(distributor.appealWindow(), 1 days, "window set");
        assertEq(distributor.finalAt(0), firstFinal, "an attested root keeps its finality");
        _endEpoch(1);
        _attest(1, keccak256("root"), 1, 0x7);
        assertEq(distributor.finalAt(1), block.timestamp + 1 days, "later roots take the new window");
        // with no window, a root is final (and irreversible) at once
        vm.prank(dao);
        distributor.setAppealWindow(0);
        _endEpoch(2);
        _attest(2, keccak256("root"), 1, 0x7);
        vm.prank(dao);
        vm.expectRevert(
            abi.encodeWithSelector(
                IRewardDistributor.RewardsAppealWindowOver.selector, 2, block.timestamp, block.timestamp
            )
        );
        distributor.reverse(2);
    }
}

/// @notice Gas of `attest` (16 and 64 verifiers, two thirds signing) and of one `claim`
/// (`forge test --match-contract RewardDistributorGas -vv` prints them), measured as
/// ExperienceLedgerGas.t.sol measures: gas() around a CALL from this test, the distributor's
/// account warm (it is the transaction's `to`) and every storage cold, the token's and the
/// committee's accounts cold; total = 21,000 + calldata (EIP-2028; the EIP-7623 floor when
/// higher) + execution. The ceilings are regression bounds a little over the figures measured
/// when this was written (docs/design.md 4.4).
contract RewardDistributorGasTest is RewardFixture {
    uint256 internal constant ATTEST_16_CEILING = 320_000;
    uint256 internal constant ATTEST_64_CEILING = 360_000;
    uint256 internal constant CLAIM_CEILING = 100_000;

    function test_gas_attest16() public {
        assertLe(_measureAttest(16), ATTEST_16_CEILING, "attest execution gas at 16 verifiers");
    }

    function test_gas_attest64() public {
        assertLe(_measureAttest(64), ATTEST_64_CEILING, "attest execution gas at 64 verifiers");
    }

    /// @dev One claim at depth 10 (a table of ~1,000 accounts) and 17 (~100,000), paid to an
    /// account that held no GYM, to one that did, to one that also delegated its votes (a
    /// checkpoint of the token's), and to the holder again for a later epoch (its claimed-epochs
    /// word is no longer fresh).
    function test_gas_claim() public {
        _registerMany(4, MIN_VERIFIER_STAKE);
        // holders of GYM, fresh to this distributor, for each depth; the delegated ones vote as
        // the devnet's holders do, so a payment to them moves votes
        address[2] memory holders = [alice, verifierAddress(60)];
        address[2] memory delegated = [carol, verifierAddress(61)];
        for (uint256 d; d < 2; ++d) {
            vm.prank(delegated[d]);
            token.delegate(delegated[d]);
        }
        string[4] memory kinds = [", new holder", ", holder", ", delegated holder", ", holder, later epoch"];
        uint8[2] memory depths = [10, 17];
        uint256 worst;
        for (uint256 d; d < depths.length; ++d) {
            for (uint256 kind; kind < kinds.length; ++kind) {
                uint256 epoch = kinds.length * d + kind;
                address fresh = address(bytes20(keccak256(abi.encode("fresh account", epoch))));
                address account = [fresh, holders[d], delegated[d], holders[d]][kind];
                uint256 amount = 123e18;
                // a path of random siblings: the root is whatever it proves
                bytes32[] memory path = new bytes32[](depths[d]);
                for (uint256 i; i < path.length; ++i) {
                    path[i] = keccak256(abi.encode("sibling", epoch, i));
                }
                bytes32 root = MerkleProof.processProof(path, RewardTree.leaf(account, amount));
                _endEpoch(epoch);
                _attest(epoch, root, BUDGET, 0x7);
                _final(epoch);
                bytes memory data = abi.encodeCall(RewardDistributor.claim, (epoch, account, amount, path));
                uint256 gasUsed = _measure(data);
                _report(string.concat("claim, depth ", _str(depths[d]), kinds[kind]), gasUsed, data);
                if (gasUsed > worst) worst = gasUsed;
            }
        }
        assertLe(worst, CLAIM_CEILING, "claim execution gas");
    }

    function _measureAttest(uint256 n) internal returns (uint256 gasUsed) {
        _registerMany(n, MIN_VERIFIER_STAKE);
        uint256 quorum = (2 * n + 2) / 3; // ceil(2n/3)
        uint256 bitmap = (uint256(1) << quorum) - 1;
        bytes32 root = keccak256("root");
        _endEpoch(0);
        IVerifierCommittee.SettlementProof memory proof = _attestProof(0, root, BUDGET, CID, bitmap);
        bytes memory data = abi.encodeCall(RewardDistributor.attest, (0, root, BUDGET, CID, bitmap, proof));
        gasUsed = _measure(data);
        _report(string.concat("attest, signers/verifiers ", _str(quorum), "/", _str(n)), gasUsed, data);
        log("  hash hint words", proof.hashHint.length);
    }

    function _measure(bytes memory data) internal returns (uint256 gasUsed) {
        address target = address(distributor);
        vm.cool(target);
        vm.cool(address(token));
        vm.cool(address(committee));
        require(target.code.length > 0, "no code"); // warms the distributor's account only
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
    }

    function _report(string memory what, uint256 executionGas, bytes memory data) internal view {
        uint256 tokens;
        for (uint256 i; i < data.length; ++i) {
            tokens += data[i] == 0 ? 1 : 4;
        }
        uint256 standard = 21_000 + 4 * tokens + executionGas;
        uint256 floor = 21_000 + 10 * tokens;
        log(string.concat(what, ": execution gas"), executionGas);
        log("  calldata bytes", data.length);
        log("  calldata gas (EIP-2028)", 4 * tokens);
        log("  total gas (with EIP-7623 floor)", standard > floor ? standard : floor);
    }
}

/// @notice Across random attest / claim (valid or tampered) / reverse / time sequences, each
/// epoch's claims never pass its attested total and equal what the treasury paid for it, no
/// account is paid twice for an epoch, and the distributor holds nothing.
contract RewardDistributorInvariantTest is RewardFixture {
    RewardDistributorHandler internal handler;

    function setUp() public override {
        super.setUp();
        _registerMany(4, MIN_VERIFIER_STAKE);
        uint256 bitmap = 0x7;
        uint256 sk;
        for (uint256 i; i < 3; ++i) {
            sk = addmod(sk, keys[i].sk, BN254.R);
        }
        bytes memory set = committee.activeSet();
        handler = new RewardDistributorHandler(
            distributor, dao, set, CommitteeSet.nonSigners(set, bitmap), bitmap, sk, _apk2(bitmap)
        );
        targetContract(address(handler));
        bytes4[] memory selectors = new bytes4[](4);
        selectors[0] = RewardDistributorHandler.attest.selector;
        selectors[1] = RewardDistributorHandler.claim.selector;
        selectors[2] = RewardDistributorHandler.reverse.selector;
        selectors[3] = RewardDistributorHandler.warp.selector;
        targetSelector(FuzzSelector({addr: address(handler), selectors: selectors}));
    }

    function invariant_claimedNeverExceedsTheAttestedTotal() public view {
        uint256 paid;
        for (uint256 epoch; epoch < handler.EPOCHS(); ++epoch) {
            IRewardDistributor.EpochInfo memory info = distributor.epochInfo(epoch);
            assertLe(info.claimed, info.total, "claimed <= total");
            assertEq(info.claimed, handler.paid(epoch), "claimed = what the epoch's claims paid");
            paid += info.claimed;
        }
        assertEq(TREASURY_FUNDS - token.balanceOf(treasury), paid, "the treasury paid exactly the claims");
        assertEq(token.balanceOf(address(distributor)), 0, "the distributor holds nothing");
        assertFalse(handler.paidTwice(), "an account paid twice for an epoch");
        assertFalse(handler.reversedAfterAClaim(), "a root reversed after a claim from it");
    }

    /// @dev Not a property: shows (under -vv) that sequences reach every stage.
    function invariant_handlerMadeProgress() public view {
        log("attested", handler.attested());
        log("reversed", handler.reversed());
        log("claims paid", handler.claims());
        log("claims refused", handler.refused());
    }
}
