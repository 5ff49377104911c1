// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20Errors} from "@openzeppelin/contracts/interfaces/draft-IERC6093.sol";
import {ExperienceLedger} from "../src/ExperienceLedger.sol";
import {GymToken} from "../src/GymToken.sol";
import {IExperienceLedger} from "../src/IExperienceLedger.sol";
import {INodeRegistry} from "../src/INodeRegistry.sol";
import {NodeRegistry} from "../src/NodeRegistry.sol";
import {GymTest} from "./utils/GymTest.sol";

/// @notice Shared fixture: a ledger, a token held by two operators (alice, bob) each owning a
/// Publisher log for its receipts, a curated log owned by the DAO, and a registry governed by
/// `dao` (standing in for the timelock) with a minimum stake of 100 GYM.
abstract contract NodeRegistryFixture is GymTest {
    uint256 internal constant MIN_STAKE = 100e18;
    uint256 internal constant BALANCE = 1_000e18;
    bytes32 internal constant MODEL = keccak256("model");
    string internal constant ENDPOINT = "http://127.0.0.1:8000";

    ExperienceLedger internal ledger;
    GymToken internal token;
    NodeRegistry internal registry;
    address internal alice = address(0xA11CE);
    address internal bob = address(0xB0B);
    address internal dao = address(0xDA0);
    address internal mallory = address(0xBAD);
    address internal constant COMMITTEE = address(0xC0117EE);
    uint256 internal constant ALICE_SIGNER_KEY = 0x5161;
    uint256 internal constant BOB_SIGNER_KEY = 0x5162;
    uint256 internal constant MALLORY_KEY = 0xBAD;
    bytes32 internal constant RECEIPT = keccak256("receipt");
    address internal aliceSigner = vm.addr(ALICE_SIGNER_KEY);
    address internal bobSigner = vm.addr(BOB_SIGNER_KEY);
    uint256 internal aliceLog;
    uint256 internal bobLog;
    uint256 internal curatedLog;

    function setUp() public virtual {
        ledger = new ExperienceLedger();
        address[] memory holders = new address[](2);
        holders[0] = alice;
        holders[1] = bob;
        uint256[] memory amounts = new uint256[](2);
        amounts[0] = BALANCE;
        amounts[1] = BALANCE;
        token = new GymToken("Gym", "GYM", holders, amounts);
        registry = new NodeRegistry(token, dao, ledger, MIN_STAKE, address(0));
        vm.prank(alice);
        aliceLog = ledger.createLog("alice receipts", IExperienceLedger.LogKind.Publisher);
        vm.prank(bob);
        bobLog = ledger.createLog("bob receipts", IExperienceLedger.LogKind.Publisher);
        vm.prank(dao);
        curatedLog = ledger.createLog("library", IExperienceLedger.LogKind.Curated);
        vm.prank(alice);
        token.approve(address(registry), type(uint256).max);
        vm.prank(bob);
        token.approve(address(registry), type(uint256).max);
    }

    function _registerAlice(uint256 stake) internal {
        vm.prank(alice);
        registry.register(aliceSigner, MODEL, ENDPOINT, stake, aliceLog);
    }

    function _challengeAlice() internal returns (uint256 id) {
        id = _challengeAliceBy(mallory, RECEIPT);
    }

    /// @dev `challenger` challenges alice's receipt `receipt` (signed by her signer).
    function _challengeAliceBy(address challenger, bytes32 receipt) internal returns (uint256 id) {
        vm.prank(challenger);
        id = registry.challenge(alice, receipt, _sign(ALICE_SIGNER_KEY, receipt), "bafyevidence");
    }

    /// @dev `challenger`'s challenge of alice's `receipt` reverts with `err`.
    function _expectChallengeRevert(address challenger, bytes32 receipt, bytes memory err) internal {
        bytes memory signature = _sign(ALICE_SIGNER_KEY, receipt);
        vm.prank(challenger);
        vm.expectRevert(err);
        registry.challenge(alice, receipt, signature, "bafyevidence");
    }

    /// @dev A registry whose committee is `COMMITTEE`, alice registered in it with MIN_STAKE.
    function _useRegistryWithCommittee() internal {
        registry = new NodeRegistry(token, dao, ledger, MIN_STAKE, COMMITTEE);
        vm.prank(alice);
        token.approve(address(registry), type(uint256).max);
        _registerAlice(MIN_STAKE);
    }

    function _receiptOpen(bytes32 receipt, uint256 id) internal view returns (bytes memory) {
        return abi.encodeWithSelector(INodeRegistry.NodeRegistryReceiptChallengeOpen.selector, alice, receipt, id);
    }

    function _receiptUpheld(bytes32 receipt, uint256 id) internal view returns (bytes memory) {
        return abi.encodeWithSelector(INodeRegistry.NodeRegistryReceiptUpheld.selector, alice, receipt, id);
    }

    function _receiptSlashed(bytes32 receipt, uint256 id) internal view returns (bytes memory) {
        return abi.encodeWithSelector(INodeRegistry.NodeRegistryReceiptSlashed.selector, alice, receipt, id);
    }

    /// @dev Alice registered with MIN_STAKE and challenged by mallory: the challenge's id.
    function _aliceChallenged() internal returns (uint256 id) {
        _registerAlice(MIN_STAKE);
        id = _challengeAlice();
    }

    /// @dev The DAO's `slash(operator, amount, id, beneficiary)` reverts with `err`.
    function _expectSlashRevert(address operator, uint256 amount, uint256 id, address beneficiary, bytes memory err)
        internal
    {
        vm.prank(dao);
        vm.expectRevert(err);
        registry.slash(operator, amount, id, beneficiary);
    }

    /// @dev 65 bytes r || s || v, as nodes sign receipts.
    function _sign(uint256 key, bytes32 digest) internal pure returns (bytes memory) {
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(key, digest);
        return abi.encodePacked(r, s, v);
    }

    function _stake(address operator) internal view returns (uint256) {
        return registry.nodeOf(operator).stake;
    }
}

contract NodeRegistryTest is NodeRegistryFixture {
    // ------------------------------------------------------------------ constructor

    function test_constructor_setsImmutables() public view {
        assertEq(address(registry.stakeToken()), address(token), "token");
        assertEq(registry.governance(), dao, "governance");
        assertEq(address(registry.ledger()), address(ledger), "ledger");
        assertEq(registry.minStake(), MIN_STAKE, "min stake");
        assertEq(uint256(registry.UNBONDING_DELAY()), 7 days, "unbonding delay");
    }

    // ------------------------------------------------------------------ register

    function test_register_recordsNodeAndPullsStake() public {
        vm.expectEmit(true, true, false, true, address(registry));
        emit INodeRegistry.NodeRegistered(alice, aliceSigner, MODEL, ENDPOINT, 150e18, aliceLog);
        _registerAlice(150e18);
        INodeRegistry.Node memory node = registry.nodeOf(alice);
        assertEq(node.signer, aliceSigner, "signer");
        assertEq(uint256(node.registeredAt), block.timestamp, "registered at");
        assertEq(uint256(node.unbondingEnds), 0, "bonded");
        assertEq(node.modelDigest, MODEL, "model");
        assertEq(node.stake, 150e18, "stake");
        assertEq(node.receiptLogId, aliceLog, "receipt log");
        assertEq(node.endpoint, ENDPOINT, "endpoint");
        assertEq(registry.operatorOfSigner(aliceSigner), alice, "signer -> operator");
        assertTrue(registry.isActive(alice), "active");
        assertEq(token.balanceOf(address(registry)), 150e18, "registry balance");
        assertEq(token.balanceOf(alice), BALANCE - 150e18, "alice balance");
        assertEq(registry.totalStaked(), 150e18, "total staked");
    }

    function test_register_revertsWhenAlreadyRegistered() public {
        _registerAlice(MIN_STAKE);
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryAlreadyRegistered.selector, alice));
        registry.register(address(0x5163), MODEL, ENDPOINT, MIN_STAKE, aliceLog);
    }

    function test_register_revertsWhenUnbonding() public {
        _registerAlice(MIN_STAKE);
        vm.prank(alice);
        registry.deregister();
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryAlreadyRegistered.selector, alice));
        registry.register(aliceSigner, MODEL, ENDPOINT, MIN_STAKE, aliceLog);
    }

    function test_register_revertsBelowMinimumStake() public {
        vm.prank(alice);
        vm.expectRevert(
            abi.encodeWithSelector(INodeRegistry.NodeRegistryStakeBelowMinimum.selector, MIN_STAKE - 1, MIN_STAKE)
        );
        registry.register(aliceSigner, MODEL, ENDPOINT, MIN_STAKE - 1, aliceLog);
    }

    function test_register_revertsOnSomeoneElsesLog() public {
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryNotLogOwner.selector, bobLog, alice, bob));
        registry.register(aliceSigner, MODEL, ENDPOINT, MIN_STAKE, bobLog);
    }

    function test_register_revertsOnCuratedLog() public {
        vm.prank(dao);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryNotPublisherLog.selector, curatedLog));
        registry.register(aliceSigner, MODEL, ENDPOINT, MIN_STAKE, curatedLog);
    }

    function test_register_revertsOnUnknownLog() public {
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerUnknownLog.selector, 99));
        registry.register(aliceSigner, MODEL, ENDPOINT, MIN_STAKE, 99);
    }

    function test_register_revertsOnZeroSigner() public {
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryZeroSigner.selector, alice));
        registry.register(address(0), MODEL, ENDPOINT, MIN_STAKE, aliceLog);
    }

    function test_register_revertsOnTakenSigner() public {
        _registerAlice(MIN_STAKE);
        vm.prank(bob);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistrySignerTaken.selector, aliceSigner, alice));
        registry.register(aliceSigner, MODEL, ENDPOINT, MIN_STAKE, bobLog);
    }

    function test_register_revertsOnEmptyEndpoint() public {
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryEmptyEndpoint.selector, alice));
        registry.register(aliceSigner, MODEL, "", MIN_STAKE, aliceLog);
    }

    function test_register_revertsWithoutAllowance() public {
        vm.prank(alice);
        token.approve(address(registry), MIN_STAKE - 1);
        vm.prank(alice);
        vm.expectRevert(
            abi.encodeWithSelector(
                IERC20Errors.ERC20InsufficientAllowance.selector, address(registry), MIN_STAKE - 1, MIN_STAKE
            )
        );
        registry.register(aliceSigner, MODEL, ENDPOINT, MIN_STAKE, aliceLog);
    }

    // ------------------------------------------------------------------ update

    function test_update_replacesSignerModelEndpoint() public {
        _registerAlice(MIN_STAKE);
        address newSigner = address(0x5163);
        vm.expectEmit(true, true, false, true, address(registry));
        emit INodeRegistry.NodeUpdated(alice, newSigner, keccak256("model2"), "http://node:9000");
        vm.prank(alice);
        registry.update(newSigner, keccak256("model2"), "http://node:9000");
        INodeRegistry.Node memory node = registry.nodeOf(alice);
        assertEq(node.signer, newSigner, "signer");
        assertEq(node.modelDigest, keccak256("model2"), "model");
        assertEq(node.endpoint, "http://node:9000", "endpoint");
        assertEq(registry.operatorOfSigner(newSigner), alice, "new signer");
        assertEq(registry.operatorOfSigner(aliceSigner), address(0), "old signer freed");
        // the freed signer can be taken by another operator
        vm.prank(bob);
        registry.register(aliceSigner, MODEL, ENDPOINT, MIN_STAKE, bobLog);
        assertEq(registry.operatorOfSigner(aliceSigner), bob, "reused signer");
    }

    function test_update_keepsSameSigner() public {
        _registerAlice(MIN_STAKE);
        vm.prank(alice);
        registry.update(aliceSigner, MODEL, "http://other");
        assertEq(registry.operatorOfSigner(aliceSigner), alice, "signer kept");
    }

    function test_update_revertsWhenNotRegistered() public {
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryNotRegistered.selector, alice));
        registry.update(aliceSigner, MODEL, ENDPOINT);
    }

    function test_update_revertsWhenUnbonding() public {
        _registerAlice(MIN_STAKE);
        vm.prank(alice);
        registry.deregister();
        uint64 ends = uint64(block.timestamp) + registry.UNBONDING_DELAY();
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryUnbonding.selector, alice, ends));
        registry.update(aliceSigner, MODEL, ENDPOINT);
    }

    function test_update_revertsOnTakenSigner() public {
        _registerAlice(MIN_STAKE);
        vm.prank(bob);
        registry.register(bobSigner, MODEL, ENDPOINT, MIN_STAKE, bobLog);
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistrySignerTaken.selector, bobSigner, bob));
        registry.update(bobSigner, MODEL, ENDPOINT);
    }

    function test_update_revertsOnZeroSignerOrEmptyEndpoint() public {
        _registerAlice(MIN_STAKE);
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryZeroSigner.selector, alice));
        registry.update(address(0), MODEL, ENDPOINT);
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryEmptyEndpoint.selector, alice));
        registry.update(aliceSigner, MODEL, "");
    }

    // ------------------------------------------------------------------ addStake

    function test_addStake_increasesStake() public {
        _registerAlice(MIN_STAKE);
        vm.expectEmit(true, false, false, true, address(registry));
        emit INodeRegistry.StakeAdded(alice, 5e18, MIN_STAKE + 5e18);
        vm.prank(alice);
        registry.addStake(5e18);
        assertEq(_stake(alice), MIN_STAKE + 5e18, "stake");
        assertEq(token.balanceOf(address(registry)), MIN_STAKE + 5e18, "balance");
        assertEq(registry.totalStaked(), MIN_STAKE + 5e18, "total");
    }

    function test_addStake_revertsOnZero() public {
        _registerAlice(MIN_STAKE);
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryZeroAmount.selector, alice));
        registry.addStake(0);
    }

    function test_addStake_revertsWhenNotRegistered() public {
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryNotRegistered.selector, alice));
        registry.addStake(1);
    }

    function test_addStake_revertsWhenUnbonding() public {
        _registerAlice(MIN_STAKE);
        vm.prank(alice);
        registry.deregister();
        uint64 ends = uint64(block.timestamp) + registry.UNBONDING_DELAY();
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryUnbonding.selector, alice, ends));
        registry.addStake(1);
    }

    // ------------------------------------------------------------------ deregister / withdraw

    function test_deregister_startsUnbonding() public {
        _registerAlice(MIN_STAKE);
        uint64 ends = uint64(block.timestamp) + registry.UNBONDING_DELAY();
        vm.expectEmit(true, false, false, true, address(registry));
        emit INodeRegistry.NodeDeregistered(alice, ends);
        vm.prank(alice);
        registry.deregister();
        assertEq(uint256(registry.nodeOf(alice).unbondingEnds), uint256(ends), "unbonding ends");
        assertFalse(registry.isActive(alice), "inactive");
        assertEq(registry.operatorOfSigner(aliceSigner), alice, "signer kept while unbonding");
        assertEq(_stake(alice), MIN_STAKE, "stake kept while unbonding");
    }

    function test_deregister_revertsWhenNotRegistered() public {
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryNotRegistered.selector, alice));
        registry.deregister();
    }

    function test_deregister_revertsTwice() public {
        _registerAlice(MIN_STAKE);
        vm.prank(alice);
        registry.deregister();
        uint64 ends = uint64(block.timestamp) + registry.UNBONDING_DELAY();
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryUnbonding.selector, alice, ends));
        registry.deregister();
    }

    function test_withdraw_returnsStakeAndDeletesNode() public {
        _registerAlice(MIN_STAKE);
        vm.prank(alice);
        registry.deregister();
        vm.warp(block.timestamp + registry.UNBONDING_DELAY());
        vm.expectEmit(true, false, false, true, address(registry));
        emit INodeRegistry.StakeWithdrawn(alice, MIN_STAKE);
        vm.prank(alice);
        registry.withdraw();
        assertEq(token.balanceOf(alice), BALANCE, "stake returned");
        assertEq(token.balanceOf(address(registry)), 0, "registry empty");
        assertEq(registry.totalStaked(), 0, "total");
        assertEq(uint256(registry.nodeOf(alice).registeredAt), 0, "node deleted");
        assertEq(registry.operatorOfSigner(aliceSigner), address(0), "signer freed");
        _registerAlice(MIN_STAKE); // and alice may come back
        assertTrue(registry.isActive(alice), "back");
    }

    function test_withdraw_revertsBeforeDelay() public {
        _registerAlice(MIN_STAKE);
        vm.prank(alice);
        registry.deregister();
        uint64 ends = uint64(block.timestamp) + registry.UNBONDING_DELAY();
        vm.warp(ends - 1);
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryStillBonded.selector, alice, ends, ends - 1));
        registry.withdraw();
    }

    function test_withdraw_revertsWithoutDeregister() public {
        _registerAlice(MIN_STAKE);
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryNotUnbonding.selector, alice));
        registry.withdraw();
    }

    function test_withdraw_revertsWhenNotRegistered() public {
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryNotRegistered.selector, alice));
        registry.withdraw();
    }

    function test_withdraw_afterFullSlashReturnsNothing() public {
        uint256 id = _aliceChallenged();
        vm.prank(alice);
        registry.deregister();
        vm.prank(dao);
        registry.slash(alice, MIN_STAKE, id, mallory);
        vm.warp(block.timestamp + registry.UNBONDING_DELAY());
        vm.prank(alice);
        registry.withdraw();
        assertEq(token.balanceOf(alice), BALANCE - MIN_STAKE, "nothing back");
        assertEq(token.balanceOf(mallory), MIN_STAKE, "beneficiary paid");
    }

    // ------------------------------------------------------------------ challenge

    function test_challenge_recordsAndEmits() public {
        _registerAlice(MIN_STAKE);
        vm.expectEmit(true, true, true, true, address(registry));
        emit INodeRegistry.ChallengeOpened(1, alice, mallory, keccak256("receipt"), "bafyevidence");
        uint256 id = _challengeAlice();
        assertEq(id, 1, "first id");
        assertEq(registry.challengeCount(), 1, "count");
        INodeRegistry.Challenge memory ch = registry.challengeOf(id);
        assertEq(ch.operator, alice, "operator");
        assertEq(ch.challenger, mallory, "challenger");
        assertEq(uint256(ch.openedAt), block.timestamp, "opened at");
        assertEq(uint256(ch.status), uint256(INodeRegistry.ChallengeStatus.Open), "open");
        assertEq(ch.receiptHash, keccak256("receipt"), "receipt");
        INodeRegistry.ReceiptRecord memory record = registry.receiptRecord(alice, RECEIPT);
        assertEq(uint256(record.latestFree), id, "the receipt's latest free challenge");
        assertEq(uint256(record.latestCommittee), 0, "none by the committee");
        assertEq(uint256(record.slashedFor), 0, "not slashed");
        assertEq(_challengeAliceBy(mallory, keccak256("another receipt")), 2, "second id");
    }

    function test_challenge_worksWhileUnbonding() public {
        _registerAlice(MIN_STAKE);
        vm.prank(alice);
        registry.deregister();
        assertEq(_challengeAlice(), 1, "challenged while unbonding");
    }

    function test_challenge_revertsWhenNotRegistered() public {
        vm.prank(mallory);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryNotRegistered.selector, alice));
        registry.challenge(alice, RECEIPT, _sign(ALICE_SIGNER_KEY, RECEIPT), "bafyevidence");
    }

    function test_challenge_revertsWithoutEvidence() public {
        _registerAlice(MIN_STAKE);
        vm.prank(mallory);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryEmptyEvidence.selector, alice));
        registry.challenge(alice, RECEIPT, _sign(ALICE_SIGNER_KEY, RECEIPT), "");
    }

    function test_challenge_revertsForAReceiptTheNodeDidNotSign() public {
        _registerAlice(MIN_STAKE);
        vm.startPrank(mallory);
        // signed by someone else
        vm.expectRevert(
            abi.encodeWithSelector(
                INodeRegistry.NodeRegistryNotSignedByNode.selector, alice, RECEIPT, vm.addr(MALLORY_KEY)
            )
        );
        registry.challenge(alice, RECEIPT, _sign(MALLORY_KEY, RECEIPT), "bafyevidence");
        // alice's signer, but over another digest than the one challenged
        bytes memory other = _sign(ALICE_SIGNER_KEY, keccak256("another receipt"));
        vm.expectRevert();
        registry.challenge(alice, RECEIPT, other, "bafyevidence");
        // not a signature at all
        vm.expectRevert(
            abi.encodeWithSelector(INodeRegistry.NodeRegistryNotSignedByNode.selector, alice, RECEIPT, address(0))
        );
        registry.challenge(alice, RECEIPT, hex"1234", "bafyevidence");
        vm.stopPrank();
        assertEq(registry.challengeCount(), 0, "no challenge opened");
    }

    function test_challenge_acceptsReceiptsOfAnEarlierSigner() public {
        _registerAlice(MIN_STAKE);
        bytes memory old = _sign(ALICE_SIGNER_KEY, RECEIPT);
        vm.prank(alice);
        registry.update(vm.addr(0x5163), MODEL, ENDPOINT);
        assertTrue(registry.isSignerOf(alice, aliceSigner), "earlier signer kept");
        assertTrue(registry.isSignerOf(alice, vm.addr(0x5163)), "new signer");
        assertFalse(registry.isSignerOf(bob, aliceSigner), "not bob's");
        vm.prank(mallory);
        assertEq(registry.challenge(alice, RECEIPT, old, "bafyevidence"), 1, "rotation keeps old receipts");
        vm.prank(bob);
        registry.register(bobSigner, MODEL, ENDPOINT, MIN_STAKE, bobLog);
        vm.prank(mallory);
        vm.expectRevert(
            abi.encodeWithSelector(INodeRegistry.NodeRegistryNotSignedByNode.selector, bob, RECEIPT, aliceSigner)
        );
        registry.challenge(bob, RECEIPT, old, "bafyevidence");
    }

    // ------------------------------------------------------------------ challenge: one open per receipt

    function test_challenge_revertsWhileTheReceiptHasAnOpenChallenge() public {
        uint256 id = _aliceChallenged();
        // by anyone, its own challenger and the node included, whatever the evidence
        _expectChallengeRevert(mallory, RECEIPT, _receiptOpen(RECEIPT, id));
        _expectChallengeRevert(bob, RECEIPT, _receiptOpen(RECEIPT, id));
        _expectChallengeRevert(alice, RECEIPT, _receiptOpen(RECEIPT, id));
        assertEq(registry.challengeCount(), 1, "no second challenge");
        assertEq(_challengeAliceBy(bob, keccak256("another receipt")), 2, "another receipt is free");
    }

    /// @dev A receipt is an operator's receipt hash: the same digest signed by another
    /// operator's key is another receipt.
    function test_challenge_sameHashOfAnotherOperatorIsAnotherReceipt() public {
        uint256 id = _aliceChallenged();
        vm.prank(bob);
        registry.register(bobSigner, MODEL, ENDPOINT, MIN_STAKE, bobLog);
        vm.prank(mallory);
        assertEq(registry.challenge(bob, RECEIPT, _sign(BOB_SIGNER_KEY, RECEIPT), "bafyevidence"), id + 1, "bob's");
        assertEq(uint256(registry.receiptRecord(bob, RECEIPT).latestFree), id + 1, "bob's record");
        assertEq(uint256(registry.receiptRecord(alice, RECEIPT).latestFree), id, "alice's record");
    }

    /// @dev A dismissal answers one challenge (its evidence), not the receipt: new evidence
    /// may come in a new challenge, which is then the one open.
    function test_challenge_dismissedLeavesTheReceiptChallengeable() public {
        uint256 first = _aliceChallenged();
        vm.prank(dao);
        registry.resolveChallenge(first, false);
        uint256 second = _challengeAliceBy(bob, RECEIPT);
        assertEq(second, first + 1, "challenged again");
        assertEq(uint256(registry.receiptRecord(alice, RECEIPT).latestFree), second, "latest");
        _expectChallengeRevert(mallory, RECEIPT, _receiptOpen(RECEIPT, second));
        bytes memory dismissed = abi.encodeWithSelector(INodeRegistry.NodeRegistryChallengeDismissed.selector, first);
        _expectSlashRevert(alice, 1, first, mallory, dismissed);
    }

    function test_challenge_revertsOnceTheReceiptIsUpheld() public {
        uint256 id = _aliceChallenged();
        vm.prank(dao);
        registry.resolveChallenge(id, true);
        _expectChallengeRevert(bob, RECEIPT, _receiptUpheld(RECEIPT, id));
        // upheld by a slash
        bytes32 other = keccak256("another receipt");
        uint256 slashed = _challengeAliceBy(bob, other);
        vm.prank(dao);
        registry.slash(alice, 1, slashed, mallory);
        _expectChallengeRevert(mallory, other, _receiptUpheld(other, slashed));
    }

    /// @dev The bond-free lane cannot shield a receipt from the committee (here the node
    /// challenges its own receipt first); the committee's open challenge holds both lanes.
    function test_challenge_aFreeChallengeDoesNotBlockTheCommittee() public {
        _useRegistryWithCommittee();
        uint256 shield = _challengeAliceBy(alice, RECEIPT);
        uint256 bonded = _challengeAliceBy(COMMITTEE, RECEIPT);
        INodeRegistry.ReceiptRecord memory record = registry.receiptRecord(alice, RECEIPT);
        assertEq(uint256(record.latestFree), shield, "free lane");
        assertEq(uint256(record.latestCommittee), bonded, "committee lane");
        _expectChallengeRevert(mallory, RECEIPT, _receiptOpen(RECEIPT, bonded));
        _expectChallengeRevert(COMMITTEE, RECEIPT, _receiptOpen(RECEIPT, bonded));
        // the committee's challenge expires (dismissed): the free one still holds the free lane
        vm.prank(COMMITTEE);
        registry.resolveChallenge(bonded, false);
        _expectChallengeRevert(mallory, RECEIPT, _receiptOpen(RECEIPT, shield));
        assertEq(_challengeAliceBy(COMMITTEE, RECEIPT), bonded + 1, "the committee again");
    }

    // ------------------------------------------------------------------ slash

    function test_slash_paysBeneficiaryAndUpholds() public {
        _registerAlice(150e18);
        uint256 id = _challengeAlice();
        vm.expectEmit(true, true, false, true, address(registry));
        emit INodeRegistry.ChallengeResolved(id, alice, true);
        vm.expectEmit(true, true, true, true, address(registry));
        emit INodeRegistry.NodeSlashed(alice, id, mallory, 60e18, 90e18);
        vm.prank(dao);
        registry.slash(alice, 60e18, id, mallory);
        assertEq(_stake(alice), 90e18, "stake left");
        assertEq(token.balanceOf(mallory), 60e18, "beneficiary");
        assertEq(token.balanceOf(address(registry)), 90e18, "registry");
        assertEq(registry.totalStaked(), 90e18, "total");
        assertEq(uint256(registry.challengeOf(id).status), uint256(INodeRegistry.ChallengeStatus.Upheld), "upheld");
        assertFalse(registry.isActive(alice), "below minimum: inactive");
        vm.prank(alice);
        registry.addStake(10e18);
        assertTrue(registry.isActive(alice), "topped up: active");
        assertEq(uint256(registry.receiptRecord(alice, RECEIPT).slashedFor), id, "receipt slashed for it");
    }

    function test_slash_revertsForAChallengeAlreadySlashed() public {
        uint256 id = _aliceChallenged();
        vm.prank(dao);
        registry.slash(alice, 10e18, id, mallory);
        _expectSlashRevert(alice, 10e18, id, mallory, _receiptSlashed(RECEIPT, id));
        vm.prank(alice);
        registry.deregister(); // unbonding changes nothing
        _expectSlashRevert(alice, 1, id, bob, _receiptSlashed(RECEIPT, id));
        assertEq(_stake(alice), MIN_STAKE - 10e18, "slashed once");
        assertEq(token.balanceOf(mallory), 10e18, "paid once");
    }

    /// @dev Governance may uphold first and slash later, once.
    function test_slash_upheldWithoutSlashIsSlashedOnce() public {
        uint256 id = _aliceChallenged();
        vm.prank(dao);
        registry.resolveChallenge(id, true);
        vm.prank(dao);
        registry.slash(alice, 10e18, id, mallory);
        _expectSlashRevert(alice, 10e18, id, mallory, _receiptSlashed(RECEIPT, id));
        assertEq(_stake(alice), MIN_STAKE - 10e18, "slashed once");
    }

    /// @dev Two challenges of one receipt, one per lane, both open then upheld: one slash
    /// between them, whoever judges.
    function test_slash_onceForAReceiptAcrossItsChallenges() public {
        _useRegistryWithCommittee();
        uint256 free = _challengeAliceBy(mallory, RECEIPT);
        uint256 bonded = _challengeAliceBy(COMMITTEE, RECEIPT);
        vm.prank(dao);
        registry.slash(alice, 10e18, free, mallory);
        vm.prank(COMMITTEE);
        vm.expectRevert(_receiptSlashed(RECEIPT, free));
        registry.slash(alice, 10e18, bonded, COMMITTEE);
        _expectSlashRevert(alice, 10e18, bonded, mallory, _receiptSlashed(RECEIPT, free));
        vm.prank(COMMITTEE);
        registry.resolveChallenge(bonded, true); // still upheld, without a slash
        _expectSlashRevert(alice, 1, bonded, mallory, _receiptSlashed(RECEIPT, free));
        _expectChallengeRevert(COMMITTEE, RECEIPT, _receiptUpheld(RECEIPT, free));
        assertEq(_stake(alice), MIN_STAKE - 10e18, "slashed once");
        assertEq(uint256(registry.receiptRecord(alice, RECEIPT).slashedFor), free, "slashed for");
    }

    function test_slash_revertsForNonGovernance() public {
        uint256 id = _aliceChallenged();
        vm.prank(mallory);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryNotGovernance.selector, mallory));
        registry.slash(alice, 1, id, mallory);
    }

    function test_slash_revertsOnUnknownChallenge() public {
        _registerAlice(MIN_STAKE);
        _expectSlashRevert(
            alice, 1, 7, mallory, abi.encodeWithSelector(INodeRegistry.NodeRegistryUnknownChallenge.selector, 7)
        );
    }

    function test_slash_revertsOnChallengeAgainstAnotherOperator() public {
        _registerAlice(MIN_STAKE);
        vm.prank(bob);
        registry.register(bobSigner, MODEL, ENDPOINT, MIN_STAKE, bobLog);
        uint256 id = _challengeAlice();
        _expectSlashRevert(
            bob,
            1,
            id,
            mallory,
            abi.encodeWithSelector(INodeRegistry.NodeRegistryChallengeMismatch.selector, id, bob, alice)
        );
    }

    function test_slash_revertsOnDismissedChallenge() public {
        uint256 id = _aliceChallenged();
        vm.prank(dao);
        registry.resolveChallenge(id, false);
        _expectSlashRevert(
            alice, 1, id, mallory, abi.encodeWithSelector(INodeRegistry.NodeRegistryChallengeDismissed.selector, id)
        );
    }

    function test_slash_revertsAfterWithdraw() public {
        uint256 id = _aliceChallenged();
        vm.prank(alice);
        registry.deregister();
        vm.warp(block.timestamp + registry.UNBONDING_DELAY());
        vm.prank(alice);
        registry.withdraw();
        _expectSlashRevert(
            alice, 1, id, mallory, abi.encodeWithSelector(INodeRegistry.NodeRegistryNotRegistered.selector, alice)
        );
    }

    function test_slash_revertsOnZeroAmount() public {
        uint256 id = _aliceChallenged();
        _expectSlashRevert(
            alice, 0, id, mallory, abi.encodeWithSelector(INodeRegistry.NodeRegistryZeroAmount.selector, alice)
        );
    }

    function test_slash_revertsAboveStake() public {
        uint256 id = _aliceChallenged();
        _expectSlashRevert(
            alice,
            MIN_STAKE + 1,
            id,
            mallory,
            abi.encodeWithSelector(
                INodeRegistry.NodeRegistrySlashExceedsStake.selector, alice, MIN_STAKE + 1, MIN_STAKE
            )
        );
    }

    function test_slash_revertsOnInvalidBeneficiary() public {
        uint256 id = _aliceChallenged();
        _expectSlashRevert(
            alice,
            1,
            id,
            address(0),
            abi.encodeWithSelector(INodeRegistry.NodeRegistryInvalidBeneficiary.selector, address(0))
        );
        _expectSlashRevert(
            alice,
            1,
            id,
            address(registry),
            abi.encodeWithSelector(INodeRegistry.NodeRegistryInvalidBeneficiary.selector, address(registry))
        );
    }

    // ------------------------------------------------------------------ resolveChallenge

    function test_resolveChallenge_upholdsOrDismisses() public {
        _registerAlice(MIN_STAKE);
        uint256 first = _challengeAlice();
        vm.expectEmit(true, true, false, true, address(registry));
        emit INodeRegistry.ChallengeResolved(first, alice, false);
        vm.prank(dao);
        registry.resolveChallenge(first, false);
        uint256 second = _challengeAlice(); // a dismissed challenge leaves the receipt challengeable
        vm.prank(dao);
        registry.resolveChallenge(second, true);
        assertEq(uint256(registry.challengeOf(first).status), uint256(INodeRegistry.ChallengeStatus.Dismissed), "1");
        assertEq(uint256(registry.challengeOf(second).status), uint256(INodeRegistry.ChallengeStatus.Upheld), "2");
        assertEq(_stake(alice), MIN_STAKE, "no slash");
    }

    function test_resolveChallenge_revertsForNonGovernance() public {
        uint256 id = _aliceChallenged();
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryNotGovernance.selector, alice));
        registry.resolveChallenge(id, false);
    }

    function test_resolveChallenge_revertsOnUnknown() public {
        vm.prank(dao);
        vm.expectRevert(abi.encodeWithSelector(INodeRegistry.NodeRegistryUnknownChallenge.selector, 1));
        registry.resolveChallenge(1, true);
    }

    function test_resolveChallenge_revertsWhenNotOpen() public {
        uint256 id = _aliceChallenged();
        vm.prank(dao);
        registry.resolveChallenge(id, true);
        vm.prank(dao);
        vm.expectRevert(
            abi.encodeWithSelector(
                INodeRegistry.NodeRegistryChallengeNotOpen.selector, id, INodeRegistry.ChallengeStatus.Upheld
            )
        );
        registry.resolveChallenge(id, false);
    }

    // ------------------------------------------------------------------ views

    function test_views_areZeroForStrangers() public view {
        assertEq(uint256(registry.nodeOf(mallory).registeredAt), 0, "no node");
        assertEq(registry.operatorOfSigner(mallory), address(0), "no operator");
        assertFalse(registry.isActive(mallory), "inactive");
        assertEq(registry.challengeOf(1).operator, address(0), "no challenge");
        assertEq(registry.challengeCount(), 0, "count");
    }

    // ------------------------------------------------------------------ fuzz

    function testFuzz_register_stakeAmounts(uint256 stake) public {
        stake = bound(stake, 0, BALANCE);
        vm.prank(alice);
        if (stake < MIN_STAKE) {
            vm.expectRevert(
                abi.encodeWithSelector(INodeRegistry.NodeRegistryStakeBelowMinimum.selector, stake, MIN_STAKE)
            );
        }
        registry.register(aliceSigner, MODEL, ENDPOINT, stake, aliceLog);
        uint256 expected = stake < MIN_STAKE ? 0 : stake;
        assertEq(_stake(alice), expected, "stake");
        assertEq(token.balanceOf(address(registry)), expected, "registry balance");
        assertEq(token.balanceOf(alice), BALANCE - expected, "alice balance");
    }

    function testFuzz_addStake_sums(uint256 stake, uint256 extra) public {
        stake = bound(stake, MIN_STAKE, BALANCE);
        extra = bound(extra, 1, BALANCE - stake + 1);
        _registerAlice(stake);
        vm.prank(alice);
        if (extra > BALANCE - stake) {
            vm.expectRevert(
                abi.encodeWithSelector(IERC20Errors.ERC20InsufficientBalance.selector, alice, BALANCE - stake, extra)
            );
            registry.addStake(extra);
            extra = 0;
        } else {
            registry.addStake(extra);
        }
        assertEq(_stake(alice), stake + extra, "stake");
        assertEq(registry.totalStaked(), token.balanceOf(address(registry)), "total == balance");
    }

    function testFuzz_slash_neverExceedsStake(uint256 stake, uint256 amount) public {
        stake = bound(stake, MIN_STAKE, BALANCE);
        amount = bound(amount, 1, 2 * BALANCE);
        _registerAlice(stake);
        uint256 id = _challengeAlice();
        vm.prank(dao);
        if (amount > stake) {
            vm.expectRevert(
                abi.encodeWithSelector(INodeRegistry.NodeRegistrySlashExceedsStake.selector, alice, amount, stake)
            );
        }
        registry.slash(alice, amount, id, mallory);
        uint256 slashed = amount > stake ? 0 : amount;
        assertEq(_stake(alice), stake - slashed, "stake left");
        assertEq(token.balanceOf(mallory), slashed, "paid");
        assertEq(token.balanceOf(address(registry)), stake - slashed, "registry balance");
    }

    /// @dev Random challenges of one receipt (bond-free or by the committee), judgements by
    /// either judge and slashes: never two open challenges in one lane, one slash at most.
    function testFuzz_slash_oneReceiptOneSlash(uint256 seed) public {
        _useRegistryWithCommittee();
        bytes memory signature = _sign(ALICE_SIGNER_KEY, RECEIPT);
        uint256 slashes;
        for (uint256 step; step < 24; ++step) {
            uint256 action = uint256(keccak256(abi.encode(seed, step)));
            uint256 count = registry.challengeCount();
            uint256 id = count == 0 ? 0 : 1 + (action >> 8) % count;
            uint256 kind = action % 5;
            if (kind < 2) {
                vm.prank(kind == 0 ? mallory : COMMITTEE);
                try registry.challenge(alice, RECEIPT, signature, "bafyevidence") {} catch {}
            } else if (kind < 4 && id != 0) {
                vm.prank(kind == 2 ? dao : COMMITTEE);
                try registry.resolveChallenge(id, (action >> 128) & 1 == 1) {} catch {}
            } else if (id != 0) {
                vm.prank((action >> 128) & 1 == 1 ? dao : COMMITTEE);
                try registry.slash(alice, 1e18, id, mallory) {
                    ++slashes;
                } catch {}
            }
            _assertOneOpenPerLane();
        }
        assertLe(slashes, 1, "slashed at most once");
        assertEq(_stake(alice), MIN_STAKE - slashes * 1e18, "stake");
    }

    function _assertOneOpenPerLane() internal view {
        uint256 free;
        uint256 ofCommittee;
        for (uint256 id = 1; id <= registry.challengeCount(); ++id) {
            INodeRegistry.Challenge memory ch = registry.challengeOf(id);
            if (ch.status != INodeRegistry.ChallengeStatus.Open) continue;
            if (ch.challenger == COMMITTEE) ++ofCommittee;
            else ++free;
        }
        assertLe(free, 1, "open bond-free challenges");
        assertLe(ofCommittee, 1, "open committee challenges");
    }

    function testFuzz_withdraw_unbondingTiming(uint256 registeredAt, uint256 wait) public {
        registeredAt = bound(registeredAt, 1, type(uint32).max);
        wait = bound(wait, 0, 2 * uint256(registry.UNBONDING_DELAY()));
        vm.warp(registeredAt);
        _registerAlice(MIN_STAKE);
        vm.prank(alice);
        registry.deregister();
        uint256 ends = registeredAt + registry.UNBONDING_DELAY();
        vm.warp(registeredAt + wait);
        vm.prank(alice);
        if (registeredAt + wait < ends) {
            vm.expectRevert(
                abi.encodeWithSelector(INodeRegistry.NodeRegistryStillBonded.selector, alice, ends, registeredAt + wait)
            );
        }
        registry.withdraw();
        bool done = registeredAt + wait >= ends;
        assertEq(token.balanceOf(alice), done ? BALANCE : BALANCE - MIN_STAKE, "alice balance");
        assertEq(uint256(registry.nodeOf(alice).registeredAt), done ? 0 : registeredAt, "node");
    }
}

/// @notice Drives a registry (governed by this handler, its committee `COMMITTEE`) through
/// random registrations, top-ups, departures and withdrawals by three operators, and
/// challenges of a few receipts each (bond-free or by the committee), judgements and slashes.
/// The invariant tests compare what the registry holds with the sum of the stakes it records,
/// and count slashes per receipt.
contract NodeRegistryHandler is GymTest {
    uint256 internal constant MIN_STAKE = 100e18;
    uint256 internal constant BALANCE = 10_000e18;

    ExperienceLedger public immutable ledger;
    GymToken public immutable token;
    NodeRegistry public immutable registry;
    address[3] public operators = [address(0x1001), address(0x1002), address(0x1003)];
    uint256[3] private _logs;
    address public constant BENEFICIARY = address(0xBEEF);
    address public constant COMMITTEE = address(0xC0117EE);

    bool public slashAboveStakeAccepted;
    /// @notice Whether some receipt (operator, receipt hash) was slashed a second time.
    bool public receiptSlashedTwice;
    mapping(bytes32 receiptKey => uint256) public slashesOf;

    constructor() {
        ledger = new ExperienceLedger();
        address[] memory holders = new address[](3);
        uint256[] memory amounts = new uint256[](3);
        for (uint256 i; i < 3; ++i) {
            holders[i] = operators[i];
            amounts[i] = BALANCE;
        }
        token = new GymToken("Gym", "GYM", holders, amounts);
        registry = new NodeRegistry(token, address(this), ledger, MIN_STAKE, COMMITTEE);
        for (uint256 i; i < 3; ++i) {
            vm.startPrank(operators[i]);
            _logs[i] = ledger.createLog("receipts", IExperienceLedger.LogKind.Publisher);
            token.approve(address(registry), type(uint256).max);
            vm.stopPrank();
        }
    }

    function register(uint256 who, uint256 stake) external {
        uint256 i = who % 3;
        address op = operators[i];
        if (registry.nodeOf(op).registeredAt != 0) return;
        stake = bound(stake, MIN_STAKE, token.balanceOf(op) < MIN_STAKE ? MIN_STAKE : token.balanceOf(op));
        if (stake > token.balanceOf(op)) return;
        vm.prank(op);
        registry.register(vm.addr(0x5000 + i), keccak256("model"), "http://node", stake, _logs[i]);
    }

    function addStake(uint256 who, uint256 amount) external {
        address op = operators[who % 3];
        INodeRegistry.Node memory node = registry.nodeOf(op);
        if (node.registeredAt == 0 || node.unbondingEnds != 0 || token.balanceOf(op) == 0) return;
        amount = bound(amount, 1, token.balanceOf(op));
        vm.prank(op);
        registry.addStake(amount);
    }

    function deregister(uint256 who) external {
        address op = operators[who % 3];
        INodeRegistry.Node memory node = registry.nodeOf(op);
        if (node.registeredAt == 0 || node.unbondingEnds != 0) return;
        vm.prank(op);
        registry.deregister();
    }

    function withdraw(uint256 who) external {
        address op = operators[who % 3];
        INodeRegistry.Node memory node = registry.nodeOf(op);
        if (node.unbondingEnds == 0) return;
        if (block.timestamp < node.unbondingEnds) vm.warp(node.unbondingEnds);
        vm.prank(op);
        registry.withdraw();
    }

    /// @dev A challenge of one of four receipts of an operator, bond-free or by the committee;
    /// refused ones (open or upheld receipts) are skipped.
    function challenge(uint256 who, uint256 receiptSeed, bool byCommittee) external {
        address op = operators[who % 3];
        if (registry.nodeOf(op).registeredAt == 0) return;
        (bytes32 receipt, bytes memory signature) = _receipt(who, receiptSeed);
        vm.prank(byCommittee ? COMMITTEE : address(0xC4A1));
        try registry.challenge(op, receipt, signature, "bafyevidence") {} catch {}
    }

    function resolve(uint256 idSeed, bool upheld) external {
        uint256 count = registry.challengeCount();
        if (count == 0) return;
        uint256 id = 1 + idSeed % count;
        if (registry.challengeOf(id).status != INodeRegistry.ChallengeStatus.Open) return;
        registry.resolveChallenge(id, upheld);
    }

    /// @dev Slashes for any challenge so far, whatever its status.
    function slash(uint256 idSeed, uint256 amount) external {
        uint256 count = registry.challengeCount();
        if (count == 0) return;
        uint256 id = 1 + idSeed % count;
        INodeRegistry.Challenge memory ch = registry.challengeOf(id);
        _slash(ch.operator, ch.receiptHash, id, amount);
    }

    function challengeAndSlash(uint256 who, uint256 amount) external {
        address op = operators[who % 3];
        if (registry.nodeOf(op).registeredAt == 0) return;
        (bytes32 receipt, bytes memory signature) = _receipt(who, amount);
        try registry.challenge(op, receipt, signature, "bafyevidence") returns (uint256 id) {
            _slash(op, receipt, id, amount);
        } catch {}
    }

    function _slash(address op, bytes32 receipt, uint256 id, uint256 amount) private {
        uint256 stake = registry.nodeOf(op).stake;
        amount = bound(amount, 1, stake + 1e18);
        try registry.slash(op, amount, id, BENEFICIARY) {
            if (amount > stake) slashAboveStakeAccepted = true;
            if (++slashesOf[keccak256(abi.encode(op, receipt))] > 1) receiptSlashedTwice = true;
        } catch {}
    }

    /// @dev One of four receipts of operator `who % 3`, signed by its signer.
    function _receipt(uint256 who, uint256 seed) private pure returns (bytes32 receipt, bytes memory signature) {
        receipt = keccak256(abi.encode("receipt", seed % 4));
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(0x5000 + who % 3, receipt);
        signature = abi.encodePacked(r, s, v);
    }

    function stakeSum() external view returns (uint256 sum) {
        for (uint256 i; i < 3; ++i) {
            sum += registry.nodeOf(operators[i]).stake;
        }
    }
}

contract NodeRegistryInvariantTest is GymTest {
    NodeRegistryHandler internal handler;

    function setUp() public {
        handler = new NodeRegistryHandler();
        targetContract(address(handler));
        bytes4[] memory selectors = new bytes4[](8);
        selectors[0] = NodeRegistryHandler.register.selector;
        selectors[1] = NodeRegistryHandler.addStake.selector;
        selectors[2] = NodeRegistryHandler.deregister.selector;
        selectors[3] = NodeRegistryHandler.withdraw.selector;
        selectors[4] = NodeRegistryHandler.challengeAndSlash.selector;
        selectors[5] = NodeRegistryHandler.challenge.selector;
        selectors[6] = NodeRegistryHandler.resolve.selector;
        selectors[7] = NodeRegistryHandler.slash.selector;
        targetSelector(FuzzSelector({addr: address(handler), selectors: selectors}));
    }

    /// @notice What the registry holds is exactly the stakes it records, bonded or unbonding.
    function invariant_balanceEqualsSumOfStakes() public view {
        NodeRegistry registry = handler.registry();
        uint256 balance = handler.token().balanceOf(address(registry));
        assertEq(balance, registry.totalStaked(), "balance == totalStaked");
        assertEq(balance, handler.stakeSum(), "balance == sum of node stakes");
    }

    /// @notice Tokens are only moved, never made or lost: operators + registry + beneficiary.
    function invariant_supplyConserved() public view {
        GymToken token = handler.token();
        uint256 sum = token.balanceOf(address(handler.registry())) + token.balanceOf(handler.BENEFICIARY());
        for (uint256 i; i < 3; ++i) {
            sum += token.balanceOf(handler.operators(i));
        }
        assertEq(sum, token.totalSupply(), "supply");
    }

    function invariant_slashNeverExceedsStake() public view {
        assertFalse(handler.slashAboveStakeAccepted(), "slash above stake accepted");
    }

    /// @notice A receipt is slashed at most once, through whichever of its challenges.
    function invariant_receiptSlashedAtMostOnce() public view {
        assertFalse(handler.receiptSlashedTwice(), "a receipt slashed twice");
    }

    /// @notice A receipt has at most one open challenge in each lane (the committee's, everyone
    /// else's).
    function invariant_oneOpenChallengePerReceiptAndLane() public view {
        NodeRegistry registry = handler.registry();
        address committee = handler.COMMITTEE();
        uint256 count = registry.challengeCount();
        for (uint256 a = 1; a <= count; ++a) {
            INodeRegistry.Challenge memory x = registry.challengeOf(a);
            if (x.status != INodeRegistry.ChallengeStatus.Open) continue;
            for (uint256 b = a + 1; b <= count; ++b) {
                INodeRegistry.Challenge memory y = registry.challengeOf(b);
                bool sameLane = (x.challenger == committee) == (y.challenger == committee);
                assertFalse(
                    y.status == INodeRegistry.ChallengeStatus.Open && sameLane && y.operator == x.operator
                        && y.receiptHash == x.receiptHash,
                    "two open challenges of one receipt in one lane"
                );
            }
        }
    }
}
