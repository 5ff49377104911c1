// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {IGovernor} from "@openzeppelin/contracts/governance/IGovernor.sol";
import {TimelockController} from "@openzeppelin/contracts/governance/TimelockController.sol";
import {ExperienceLedger} from "../src/ExperienceLedger.sol";
import {GymGovernor} from "../src/GymGovernor.sol";
import {GymToken} from "../src/GymToken.sol";
import {IExperienceLedger} from "../src/IExperienceLedger.sol";
import {GymGovernorHandler} from "./handlers/GymGovernorHandler.sol";
import {GymTest} from "./utils/GymTest.sol";
import {ReferenceMerkle} from "./utils/ReferenceMerkle.sol";

/// @notice The DAO as `devnet/deploy.py` wires it: GymToken held by four self-delegated voters,
/// a TimelockController whose only proposer and canceller is the governor (executor: anyone,
/// admin: none), and a curated library of the ExperienceLedger owned by the timelock. Alice
/// publishes 16 leaves and anchors her log at sizes 8 and 16.
abstract contract GymGovernorFixture is GymTest {
    uint48 internal constant VOTING_DELAY = 1 hours;
    uint32 internal constant VOTING_PERIOD = 3 days;
    uint256 internal constant THRESHOLD = 10e18;
    uint256 internal constant QUORUM_PERCENT = 10;
    uint256 internal constant MIN_DELAY = 1 hours;
    uint256 internal constant START = 1_750_000_000;
    uint256 internal constant PUBLISHED = 16;

    uint8 internal constant AGAINST = 0;
    uint8 internal constant FOR = 1;
    uint8 internal constant ABSTAIN = 2;

    uint256 internal constant ALICE_KEY = 0xA11CE;
    uint256 internal constant BOB_KEY = 0xB0B;
    uint256 internal constant CAROL_KEY = 0xCA201;
    uint256 internal constant DAVE_KEY = 0xDA7E;

    ExperienceLedger internal ledger;
    GymToken internal token;
    TimelockController internal timelock;
    GymGovernor internal governor;

    address internal alice; // 400 GYM, the publisher
    address internal bob; // 300 GYM
    address internal carol; // 200 GYM
    address internal dave; // 100 GYM: exactly the quorum (10% of 1000)
    address internal mallory = address(0xBAD);
    address[] internal voters;

    uint256 internal pubLog;
    uint256 internal curLog;
    bytes32[] internal published;

    function setUp() public virtual {
        vm.warp(START);
        (alice, bob, carol, dave) = (vm.addr(ALICE_KEY), vm.addr(BOB_KEY), vm.addr(CAROL_KEY), vm.addr(DAVE_KEY));
        voters = [alice, bob, carol, dave];
        uint256[] memory amounts = new uint256[](4);
        (amounts[0], amounts[1], amounts[2], amounts[3]) = (400e18, 300e18, 200e18, 100e18);
        token = new GymToken("Gym", "GYM", voters, amounts);
        for (uint256 i; i < voters.length; ++i) {
            vm.prank(voters[i]);
            token.delegate(voters[i]);
        }

        address[] memory none = new address[](0);
        address[] memory anyone = new address[](1); // address(0): anyone may execute
        timelock = new TimelockController(MIN_DELAY, none, anyone, address(this));
        governor = new GymGovernor(token, timelock, VOTING_DELAY, VOTING_PERIOD, THRESHOLD, QUORUM_PERCENT);
        timelock.grantRole(timelock.PROPOSER_ROLE(), address(governor));
        timelock.grantRole(timelock.CANCELLER_ROLE(), address(governor));
        timelock.renounceRole(timelock.DEFAULT_ADMIN_ROLE(), address(this));

        ledger = new ExperienceLedger();
        curLog = ledger.createLog("gym/curated", IExperienceLedger.LogKind.Curated);
        ledger.transferLogOwnership(curLog, address(timelock));
        for (uint256 i; i < PUBLISHED; ++i) {
            published.push(ReferenceMerkle.leaf("published", i));
        }
        vm.startPrank(alice);
        pubLog = ledger.createLog("alice", IExperienceLedger.LogKind.Publisher);
        ledger.anchor(pubLog, 8, ReferenceMerkle.root(published, 8), "", new bytes32[](0));
        ledger.anchor(
            pubLog, 16, ReferenceMerkle.root(published, 16), "", ReferenceMerkle.consistencyProof(published, 8, 16)
        );
        vm.stopPrank();
        vm.warp(START + 1); // delegations are now in the past: proposals made from here see them
    }

    // ------------------------------------------------------------------ helpers

    function _sourced(uint64 size, uint64 index) internal view returns (IExperienceLedger.SourcedLeaf memory) {
        return IExperienceLedger.SourcedLeaf({
            sourceLogId: pubLog,
            sourceSize: size,
            leafIndex: index,
            leafHash: published[index],
            entryCid: abi.encodePacked(hex"01551220", published[index]),
            inclusionProof: ReferenceMerkle.inclusionProof(published, size, index)
        });
    }

    function _one(IExperienceLedger.SourcedLeaf memory leaf)
        internal
        pure
        returns (IExperienceLedger.SourcedLeaf[] memory batch)
    {
        batch = new IExperienceLedger.SourcedLeaf[](1);
        batch[0] = leaf;
    }

    /// @dev One action: `appendManyFromLog(curLog, batch)` on the ledger.
    function _curation(IExperienceLedger.SourcedLeaf[] memory batch)
        internal
        view
        returns (address[] memory targets, uint256[] memory values, bytes[] memory calldatas)
    {
        targets = new address[](1);
        targets[0] = address(ledger);
        values = new uint256[](1);
        calldatas = new bytes[](1);
        calldatas[0] = abi.encodeCall(ExperienceLedger.appendManyFromLog, (curLog, batch));
    }

    function _propose(address[] memory targets, uint256[] memory values, bytes[] memory calldatas, string memory text)
        internal
        returns (uint256 id)
    {
        vm.prank(alice);
        id = governor.propose(targets, values, calldatas, text);
    }

    function _proposeCuration(IExperienceLedger.SourcedLeaf[] memory batch, string memory text)
        internal
        returns (uint256)
    {
        (address[] memory targets, uint256[] memory values, bytes[] memory calldatas) = _curation(batch);
        return _propose(targets, values, calldatas, text);
    }

    function _startVoting(uint256 id) internal {
        vm.warp(governor.proposalSnapshot(id) + 1);
    }

    function _endVoting(uint256 id) internal {
        vm.warp(governor.proposalDeadline(id) + 1);
    }

    function _vote(address voter, uint256 id, uint8 support) internal {
        vm.prank(voter);
        governor.castVote(id, support);
    }

    /// @dev Alice and bob vote For (700 of 1000), voting ends, the proposal is queued and its
    /// timelock delay passes; ready to execute.
    function _passAndQueue(uint256 id) internal {
        _startVoting(id);
        _vote(alice, id, FOR);
        _vote(bob, id, FOR);
        _endVoting(id);
        governor.queue(id);
        vm.warp(block.timestamp + MIN_DELAY);
    }

    function _size() internal view returns (uint64 size) {
        (,,, size,) = ledger.logInfo(curLog);
    }

    function _curatedRoot() internal view returns (bytes32 root) {
        (,,,, root) = ledger.logInfo(curLog);
    }

    function _state(IGovernor.ProposalState s) internal pure returns (uint256) {
        return uint256(s);
    }

    function _bitmap(IGovernor.ProposalState s) internal pure returns (bytes32) {
        return bytes32(1 << uint8(s));
    }
}

contract GymGovernorTest is GymGovernorFixture {
    // ------------------------------------------------------------------ wiring

    function test_clock_isTimestampInTokenAndGovernor() public view {
        assertEq(token.CLOCK_MODE(), "mode=timestamp", "token clock mode");
        assertEq(governor.CLOCK_MODE(), token.CLOCK_MODE(), "governor clock mode");
        assertEq(uint256(governor.clock()), block.timestamp, "governor clock");
        assertEq(uint256(token.clock()), block.timestamp, "token clock");
    }

    function test_wiring_rolesAndSettings() public view {
        assertTrue(timelock.hasRole(timelock.PROPOSER_ROLE(), address(governor)), "governor proposes");
        assertTrue(timelock.hasRole(timelock.CANCELLER_ROLE(), address(governor)), "governor cancels");
        assertTrue(timelock.hasRole(timelock.EXECUTOR_ROLE(), address(0)), "anyone executes");
        assertFalse(timelock.hasRole(timelock.DEFAULT_ADMIN_ROLE(), address(this)), "deployer is no admin");
        assertFalse(timelock.hasRole(timelock.PROPOSER_ROLE(), address(this)), "deployer is no proposer");
        assertTrue(timelock.hasRole(timelock.DEFAULT_ADMIN_ROLE(), address(timelock)), "timelock admins itself");
        assertEq(governor.timelock(), address(timelock), "governor's timelock");
        assertEq(address(governor.token()), address(token), "governor's token");
        assertEq(governor.votingDelay(), VOTING_DELAY, "voting delay");
        assertEq(governor.votingPeriod(), VOTING_PERIOD, "voting period");
        assertEq(governor.proposalThreshold(), THRESHOLD, "threshold");
        assertEq(governor.quorumNumerator(), QUORUM_PERCENT, "quorum numerator");
        (address owner,,,,) = ledger.logInfo(curLog);
        assertEq(owner, address(timelock), "timelock owns the library");
        for (uint256 i; i < voters.length; ++i) {
            assertEq(token.getVotes(voters[i]), token.balanceOf(voters[i]), "votes = balance");
        }
    }

    function test_token_lengthMismatchReverts() public {
        vm.expectRevert(abi.encodeWithSelector(GymToken.GymTokenLengthMismatch.selector, 4, 1));
        new GymToken("Gym", "GYM", voters, new uint256[](1));
    }

    // ------------------------------------------------------------------ lifecycle

    function test_lifecycle_curatesLeavesWithTheRightRoot() public {
        IExperienceLedger.SourcedLeaf[] memory batch = new IExperienceLedger.SourcedLeaf[](3);
        (batch[0], batch[1], batch[2]) = (_sourced(8, 5), _sourced(16, 12), _sourced(16, 0));
        bytes32[] memory curated = new bytes32[](3);
        (curated[0], curated[1], curated[2]) = (published[5], published[12], published[0]);
        bytes32 expectedRoot = ReferenceMerkle.root(curated, 3);
        (address[] memory targets, uint256[] memory values, bytes[] memory calldatas) = _curation(batch);
        string memory text = "Curate three experiences from alice's log";

        uint256 id = _propose(targets, values, calldatas, text);
        assertEq(id, governor.hashProposal(targets, values, calldatas, keccak256(bytes(text))), "id");
        assertEq(governor.proposalCount(), 1, "enumerable");
        assertEq(_state(governor.state(id)), _state(IGovernor.ProposalState.Pending), "pending");
        assertEq(governor.proposalSnapshot(id), block.timestamp + VOTING_DELAY, "snapshot");

        _startVoting(id);
        assertEq(_state(governor.state(id)), _state(IGovernor.ProposalState.Active), "active");
        _vote(alice, id, FOR);
        _vote(bob, id, AGAINST);
        _vote(carol, id, ABSTAIN);
        _vote(dave, id, FOR);
        (uint256 against, uint256 for_, uint256 abstain) = governor.proposalVotes(id);
        assertEq(against, 300e18, "against");
        assertEq(for_, 500e18, "for");
        assertEq(abstain, 200e18, "abstain");

        _endVoting(id);
        assertEq(_state(governor.state(id)), _state(IGovernor.ProposalState.Succeeded), "succeeded");
        assertTrue(governor.proposalNeedsQueuing(id), "needs queuing");
        governor.queue(targets, values, calldatas, keccak256(bytes(text)));
        assertEq(_state(governor.state(id)), _state(IGovernor.ProposalState.Queued), "queued");
        assertEq(governor.proposalEta(id), block.timestamp + MIN_DELAY, "eta");

        vm.warp(block.timestamp + MIN_DELAY - 1);
        vm.expectRevert(); // TimelockUnexpectedOperationState: not ready yet
        governor.execute(id);

        vm.warp(block.timestamp + 1);
        vm.expectEmit(true, true, true, true, address(ledger));
        emit IExperienceLedger.CuratedCheckpoint(curLog, 3, expectedRoot);
        vm.prank(mallory); // anyone may execute a queued, ready proposal
        governor.execute(targets, values, calldatas, keccak256(bytes(text)));

        assertEq(_state(governor.state(id)), _state(IGovernor.ProposalState.Executed), "executed");
        assertEq(_size(), 3, "library size");
        assertEq(_curatedRoot(), expectedRoot, "library root computed on chain");
        assertEq(ledger.rootAt(curLog, 3), expectedRoot, "rootAt");
        for (uint256 i; i < 3; ++i) {
            assertTrue(ledger.isCurated(curLog, curated[i]), "isCurated");
        }
    }

    /// @dev The other shape of a curation proposal: one `appendFromLog` action per leaf, each
    /// recording its own checkpoint.
    function test_lifecycle_oneAppendFromLogActionPerLeaf() public {
        address[] memory targets = new address[](2);
        (targets[0], targets[1]) = (address(ledger), address(ledger));
        uint256[] memory values = new uint256[](2);
        bytes[] memory calldatas = new bytes[](2);
        bytes32[] memory proof3 = ReferenceMerkle.inclusionProof(published, 8, 3);
        bytes32[] memory proof9 = ReferenceMerkle.inclusionProof(published, 16, 9);
        calldatas[0] = abi.encodeCall(ExperienceLedger.appendFromLog, (curLog, pubLog, 8, 3, published[3], "", proof3));
        calldatas[1] = abi.encodeCall(ExperienceLedger.appendFromLog, (curLog, pubLog, 16, 9, published[9], "", proof9));
        bytes32[] memory curated = new bytes32[](2);
        (curated[0], curated[1]) = (published[3], published[9]);
        bytes32 expectedRoot = ReferenceMerkle.root(curated, 2);

        uint256 id = _propose(targets, values, calldatas, "two leaves, two actions");
        _passAndQueue(id);
        governor.execute(id);
        assertEq(_size(), 2, "size");
        assertEq(_curatedRoot(), expectedRoot, "root");
        assertEq(ledger.rootAt(curLog, 1), published[3], "checkpoint after the first action");
    }

    // ------------------------------------------------------------------ execution checks the proofs

    function test_execute_revertsOnForgedProof() public {
        IExperienceLedger.SourcedLeaf memory leaf = _sourced(8, 4);
        leaf.inclusionProof[1] ^= bytes32(uint256(1));
        bytes32 root8 = ReferenceMerkle.root(published, 8);
        uint256 id = _proposeCuration(_one(leaf), "forged proof");
        _passAndQueue(id);
        vm.expectRevert(
            abi.encodeWithSelector(
                IExperienceLedger.ExperienceLedgerInvalidInclusionProof.selector, pubLog, 8, 4, published[4], root8
            )
        );
        governor.execute(id);
        assertEq(_state(governor.state(id)), _state(IGovernor.ProposalState.Queued), "still queued");
        assertEq(_size(), 0, "library unchanged");
    }

    function test_execute_revertsOnLeafThatIsNotInTheLog() public {
        IExperienceLedger.SourcedLeaf memory leaf = _sourced(16, 4);
        bytes32 foreign = ReferenceMerkle.leaf("never published", 4);
        leaf.leafHash = foreign;
        bytes32 root16 = ReferenceMerkle.root(published, 16);
        uint256 id = _proposeCuration(_one(leaf), "foreign leaf");
        _passAndQueue(id);
        vm.expectRevert(
            abi.encodeWithSelector(
                IExperienceLedger.ExperienceLedgerInvalidInclusionProof.selector, pubLog, 16, 4, foreign, root16
            )
        );
        governor.execute(id);
    }

    function test_execute_revertsOnUnanchoredSize() public {
        // An honest proof, but against size 5, which alice never anchored.
        uint256 id = _proposeCuration(_one(_sourced(5, 2)), "unanchored checkpoint");
        _passAndQueue(id);
        vm.expectRevert(abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerUnknownCheckpoint.selector, pubLog, 5));
        governor.execute(id);
    }

    function test_execute_revertsOnDoubleInclusion() public {
        uint256 first = _proposeCuration(_one(_sourced(8, 2)), "leaf 2");
        _passAndQueue(first);
        governor.execute(first);
        // The same leaf again, proven against the later checkpoint.
        uint256 second = _proposeCuration(_one(_sourced(16, 2)), "leaf 2 again");
        _passAndQueue(second);
        vm.expectRevert(
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerAlreadyCurated.selector, curLog, published[2])
        );
        governor.execute(second);
        assertEq(_size(), 1, "library unchanged");
    }

    // ------------------------------------------------------------------ quorum

    function test_quorum_isTenPercentOfSupplyAtSnapshot() public {
        uint256 id = _proposeCuration(_one(_sourced(8, 1)), "quorum");
        _startVoting(id);
        assertEq(governor.quorum(governor.proposalSnapshot(id)), 100e18, "quorum");
    }

    function test_quorum_exactlyAtQuorumSucceeds() public {
        uint256 id = _proposeCuration(_one(_sourced(8, 1)), "exactly at quorum");
        _startVoting(id);
        _vote(dave, id, FOR); // 100 of 1000: exactly 10%
        _endVoting(id);
        assertEq(_state(governor.state(id)), _state(IGovernor.ProposalState.Succeeded), "succeeded");
    }

    function test_quorum_oneBelowIsDefeated() public {
        vm.prank(dave);
        token.transfer(alice, 1); // dave now holds one unit below the quorum
        vm.warp(block.timestamp + 1);
        uint256 id = _proposeCuration(_one(_sourced(8, 1)), "one below quorum");
        _startVoting(id);
        _vote(dave, id, FOR);
        _endVoting(id);
        (, uint256 for_,) = governor.proposalVotes(id);
        assertEq(for_, 100e18 - 1, "for votes");
        assertEq(_state(governor.state(id)), _state(IGovernor.ProposalState.Defeated), "defeated");
        vm.expectRevert(
            abi.encodeWithSelector(
                IGovernor.GovernorUnexpectedProposalState.selector,
                id,
                IGovernor.ProposalState.Defeated,
                _bitmap(IGovernor.ProposalState.Succeeded)
            )
        );
        governor.queue(id);
    }

    function test_quorum_abstainCounts() public {
        uint256 id = _proposeCuration(_one(_sourced(8, 1)), "abstain counts");
        _startVoting(id);
        _vote(dave, id, ABSTAIN); // 100: reaches the quorum
        _vote(carol, id, FOR); // 200 > 0 against
        _endVoting(id);
        assertEq(_state(governor.state(id)), _state(IGovernor.ProposalState.Succeeded), "abstain reaches quorum");
    }

    function test_quorum_againstDoesNotCount() public {
        vm.startPrank(dave);
        token.transfer(mallory, 1); // dave: one unit below the quorum; mallory: one unit
        vm.stopPrank();
        vm.prank(mallory);
        token.delegate(mallory);
        vm.warp(block.timestamp + 1);
        uint256 id = _proposeCuration(_one(_sourced(8, 2)), "against does not count");
        _startVoting(id);
        _vote(dave, id, FOR);
        _vote(mallory, id, AGAINST); // For + Against = the quorum, For > Against
        _endVoting(id);
        assertEq(_state(governor.state(id)), _state(IGovernor.ProposalState.Defeated), "quorum not reached");
    }

    // ------------------------------------------------------------------ voting window and double votes

    function test_castVote_revertsBeforeVotingStarts() public {
        uint256 id = _proposeCuration(_one(_sourced(8, 1)), "too early");
        bytes memory pending = abi.encodeWithSelector(
            IGovernor.GovernorUnexpectedProposalState.selector,
            id,
            IGovernor.ProposalState.Pending,
            _bitmap(IGovernor.ProposalState.Active)
        );
        vm.expectRevert(pending);
        _vote(alice, id, FOR);
        vm.warp(governor.proposalSnapshot(id)); // the snapshot itself is still before the start
        vm.expectRevert(pending);
        _vote(alice, id, FOR);
    }

    function test_castVote_revertsAfterDeadline() public {
        uint256 id = _proposeCuration(_one(_sourced(8, 1)), "too late");
        vm.warp(governor.proposalDeadline(id)); // the deadline itself is the last moment to vote
        _vote(alice, id, FOR);
        vm.warp(governor.proposalDeadline(id) + 1);
        vm.expectRevert(
            abi.encodeWithSelector(
                IGovernor.GovernorUnexpectedProposalState.selector,
                id,
                IGovernor.ProposalState.Succeeded,
                _bitmap(IGovernor.ProposalState.Active)
            )
        );
        _vote(bob, id, AGAINST);
    }

    function test_castVote_revertsOnDoubleVote() public {
        uint256 id = _proposeCuration(_one(_sourced(8, 1)), "double vote");
        _startVoting(id);
        _vote(alice, id, FOR);
        vm.expectRevert(abi.encodeWithSelector(IGovernor.GovernorAlreadyCastVote.selector, alice));
        _vote(alice, id, AGAINST);
        (uint256 against, uint256 for_,) = governor.proposalVotes(id);
        assertEq(for_, 400e18, "first vote stands");
        assertEq(against, 0, "second vote not counted");
    }

    function test_castVote_weightIsAtSnapshot() public {
        uint256 id = _proposeCuration(_one(_sourced(8, 1)), "snapshot");
        _startVoting(id);
        vm.prank(alice);
        token.transfer(bob, 400e18); // after the snapshot: moves no weight in this proposal
        vm.prank(alice);
        assertEq(governor.castVote(id, FOR), 400e18, "alice votes her snapshot weight");
        vm.prank(bob);
        assertEq(governor.castVote(id, AGAINST), 300e18, "bob's new tokens do not count");
        assertEq(token.getVotes(bob), 700e18, "they count from now on");
    }

    // ------------------------------------------------------------------ castVoteBySig (EIP-712)

    function _ballotDigest(uint256 id, uint8 support, address voter, uint256 nonce) internal view returns (bytes32) {
        (, string memory name, string memory version, uint256 chainId, address verifying,,) = governor.eip712Domain();
        bytes32 domain = keccak256(
            abi.encode(
                keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"),
                keccak256(bytes(name)),
                keccak256(bytes(version)),
                chainId,
                verifying
            )
        );
        bytes32 ballot = keccak256(abi.encode(governor.BALLOT_TYPEHASH(), id, support, voter, nonce));
        return keccak256(abi.encodePacked("\x19\x01", domain, ballot));
    }

    /// @dev `castVoteBySig(id, support, carol, signature)` reverts: the signature is not carol's.
    function _expectBadCarolSignature(uint256 id, uint8 support, bytes memory signature) internal {
        vm.expectRevert(abi.encodeWithSelector(IGovernor.GovernorInvalidSignature.selector, carol));
        governor.castVoteBySig(id, support, carol, signature);
    }

    function _sign(uint256 key, bytes32 digest) internal pure returns (bytes memory) {
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(key, digest);
        return abi.encodePacked(r, s, v);
    }

    function test_castVoteBySig_countsTheSigner_andRejectsReplay() public {
        uint256 id = _proposeCuration(_one(_sourced(8, 1)), "by signature");
        _startVoting(id);
        bytes memory signature = _sign(CAROL_KEY, _ballotDigest(id, FOR, carol, governor.nonces(carol)));

        vm.expectEmit(true, true, true, true, address(governor));
        emit IGovernor.VoteCast(carol, id, FOR, 200e18, "");
        vm.prank(mallory); // a relayer submits; the key never left carol
        governor.castVoteBySig(id, FOR, carol, signature);
        assertTrue(governor.hasVoted(id, carol), "carol voted");
        (, uint256 for_,) = governor.proposalVotes(id);
        assertEq(for_, 200e18, "carol's weight");
        assertEq(governor.nonces(carol), 1, "nonce used");

        // Replayed: the nonce moved on, so the same signature no longer matches carol.
        _expectBadCarolSignature(id, FOR, signature);
    }

    function test_castVoteBySig_rejectsAnotherSignersKey() public {
        uint256 id = _proposeCuration(_one(_sourced(8, 1)), "wrong signer");
        _startVoting(id);
        bytes memory signature = _sign(DAVE_KEY, _ballotDigest(id, FOR, carol, 0));
        _expectBadCarolSignature(id, FOR, signature);
    }

    function test_castVoteBySig_rejectsAChangedSupport() public {
        uint256 id = _proposeCuration(_one(_sourced(8, 1)), "changed support");
        _startVoting(id);
        bytes memory signature = _sign(CAROL_KEY, _ballotDigest(id, FOR, carol, 0));
        _expectBadCarolSignature(id, AGAINST, signature);
    }

    // ------------------------------------------------------------------ only the timelock curates

    function test_onlyTimelockCurates_directCallsRevert() public {
        IExperienceLedger.SourcedLeaf[] memory batch = _one(_sourced(8, 3));
        bytes32[] memory proof = batch[0].inclusionProof;
        address[4] memory callers = [alice, address(governor), address(this), mallory];
        for (uint256 i; i < callers.length; ++i) {
            bytes memory notOwner = abi.encodeWithSelector(
                IExperienceLedger.ExperienceLedgerNotLogOwner.selector, curLog, callers[i], address(timelock)
            );
            vm.expectRevert(notOwner);
            vm.prank(callers[i]);
            ledger.appendFromLog(curLog, pubLog, 8, 3, published[3], "", proof);
            vm.expectRevert(notOwner);
            vm.prank(callers[i]);
            ledger.appendManyFromLog(curLog, batch);
            vm.expectRevert(notOwner);
            vm.prank(callers[i]);
            ledger.appendLeaves(curLog, _oneHash(published[3]), new bytes[](1));
            vm.expectRevert(notOwner);
            vm.prank(callers[i]);
            ledger.transferLogOwnership(curLog, callers[i]);
        }
        assertEq(_size(), 0, "library unchanged");
    }

    function test_onlyGovernorSchedulesOnTheTimelock() public {
        bytes memory data = abi.encodeCall(ExperienceLedger.appendManyFromLog, (curLog, _one(_sourced(8, 3))));
        bytes32 proposer = timelock.PROPOSER_ROLE();
        vm.expectRevert(
            abi.encodeWithSelector(IAccessControl.AccessControlUnauthorizedAccount.selector, address(this), proposer)
        );
        timelock.schedule(address(ledger), 0, data, bytes32(0), bytes32(0), MIN_DELAY);
        vm.expectRevert(
            abi.encodeWithSelector(IAccessControl.AccessControlUnauthorizedAccount.selector, alice, proposer)
        );
        vm.prank(alice);
        timelock.schedule(address(ledger), 0, data, bytes32(0), bytes32(0), MIN_DELAY);
    }

    function _oneHash(bytes32 x) internal pure returns (bytes32[] memory a) {
        a = new bytes32[](1);
        a[0] = x;
    }

    // ------------------------------------------------------------------ governance parameters

    function test_settings_changeOnlyThroughProposals() public {
        address[] memory targets = new address[](4);
        for (uint256 i; i < 4; ++i) {
            targets[i] = address(governor);
        }
        uint256[] memory values = new uint256[](4);
        bytes[] memory calldatas = new bytes[](4);
        calldatas[0] = abi.encodeCall(governor.setVotingDelay, (2 hours));
        calldatas[1] = abi.encodeCall(governor.setVotingPeriod, (5 days));
        calldatas[2] = abi.encodeCall(governor.setProposalThreshold, (50e18));
        calldatas[3] = abi.encodeCall(governor.updateQuorumNumerator, (20));

        uint256 id = _propose(targets, values, calldatas, "retune governance");
        _passAndQueue(id);
        governor.execute(id);
        assertEq(governor.votingDelay(), 2 hours, "voting delay");
        assertEq(governor.votingPeriod(), 5 days, "voting period");
        assertEq(governor.proposalThreshold(), 50e18, "threshold");
        assertEq(governor.quorumNumerator(), 20, "quorum numerator");
        // The new quorum applies to later snapshots only.
        assertEq(governor.quorum(governor.proposalSnapshot(id)), 100e18, "old snapshot keeps 10%");
        vm.warp(block.timestamp + 1);
        assertEq(governor.quorum(block.timestamp - 1), 200e18, "20% from now on");

        // The new settings govern the next proposal.
        uint256 next = _proposeCuration(_one(_sourced(8, 1)), "after retune");
        assertEq(governor.proposalSnapshot(next), block.timestamp + 2 hours, "new delay");
        assertEq(governor.proposalDeadline(next), block.timestamp + 2 hours + 5 days, "new period");
    }

    function test_settings_directCallsRevert() public {
        vm.startPrank(alice);
        vm.expectRevert(abi.encodeWithSelector(IGovernor.GovernorOnlyExecutor.selector, alice));
        governor.setVotingDelay(0);
        vm.expectRevert(abi.encodeWithSelector(IGovernor.GovernorOnlyExecutor.selector, alice));
        governor.setVotingPeriod(1);
        vm.expectRevert(abi.encodeWithSelector(IGovernor.GovernorOnlyExecutor.selector, alice));
        governor.setProposalThreshold(0);
        vm.expectRevert(abi.encodeWithSelector(IGovernor.GovernorOnlyExecutor.selector, alice));
        governor.updateQuorumNumerator(1);
        vm.stopPrank();
    }

    function test_propose_revertsBelowThreshold() public {
        (address[] memory targets, uint256[] memory values, bytes[] memory calldatas) = _curation(_one(_sourced(8, 1)));
        vm.expectRevert(
            abi.encodeWithSelector(IGovernor.GovernorInsufficientProposerVotes.selector, mallory, 0, THRESHOLD)
        );
        vm.prank(mallory);
        governor.propose(targets, values, calldatas, "no votes");
    }

    // ------------------------------------------------------------------ fuzz

    function testFuzz_tallyEqualsSumOfWeights(uint256[5] memory weights, uint8[5] memory choices) public {
        address[] memory holders = new address[](5);
        uint256[] memory amounts = new uint256[](5);
        uint256[3] memory expected;
        uint256 total;
        for (uint256 i; i < 5; ++i) {
            holders[i] = address(uint160(0x1000 + i));
            amounts[i] = bound(weights[i], 0, 1e27);
            choices[i] %= 3;
            expected[choices[i]] += amounts[i];
            total += amounts[i];
        }
        GymToken fuzzToken = new GymToken("Fuzz", "FZ", holders, amounts);
        for (uint256 i; i < 5; ++i) {
            vm.prank(holders[i]);
            fuzzToken.delegate(holders[i]);
        }
        GymGovernor fuzzGovernor = new GymGovernor(fuzzToken, timelock, 1, 1 days, 0, 0);
        vm.warp(block.timestamp + 1);
        (address[] memory targets, uint256[] memory values, bytes[] memory calldatas) = _curation(_one(_sourced(8, 1)));
        uint256 id = fuzzGovernor.propose(targets, values, calldatas, "fuzz");
        vm.warp(block.timestamp + 2);
        for (uint256 i; i < 5; ++i) {
            vm.prank(holders[i]);
            uint256 weight = fuzzGovernor.castVote(id, choices[i]);
            assertEq(weight, amounts[i], "weight returned");
        }
        (uint256 against, uint256 for_, uint256 abstain) = fuzzGovernor.proposalVotes(id);
        assertEq(against, expected[AGAINST], "against");
        assertEq(for_, expected[FOR], "for");
        assertEq(abstain, expected[ABSTAIN], "abstain");
        assertEq(against + for_ + abstain, total, "every weight counted once");
    }

    function testFuzz_curationOfAnyAnchoredLeaf(uint256 index, bool later) public {
        uint64 size = later ? 16 : 8;
        uint64 i = uint64(bound(index, 0, size - 1));
        bytes32 expectedRoot = published[i]; // a one-leaf tree's root is its leaf hash
        uint256 id = _proposeCuration(_one(_sourced(size, i)), "fuzz curation");
        _passAndQueue(id);
        governor.execute(id);
        assertEq(_curatedRoot(), expectedRoot, "root");
    }
}

/// @notice The curated library grows only through executed proposals, whatever the sequence of
/// proposals (honest or not), votes, time jumps and direct attempts.
contract GymGovernorInvariantTest is GymGovernorFixture {
    GymGovernorHandler internal handler;

    function setUp() public override {
        super.setUp();
        handler = new GymGovernorHandler(ledger, governor, timelock, pubLog, curLog, published, voters);
        targetContract(address(handler));
    }

    function invariant_libraryGrowsOnlyThroughExecutedProposals() public view {
        bytes32[] memory executed = handler.executedLeaves();
        assertEq(_size(), executed.length, "library size = leaves of executed proposals");
        assertEq(_curatedRoot(), ReferenceMerkle.root(executed, executed.length), "root");
        assertFalse(handler.bypassAccepted(), "an append around the governor was accepted");
        assertFalse(handler.forgedProposalExecuted(), "a proposal with a bad proof executed");
        (address owner,,,,) = ledger.logInfo(curLog);
        assertEq(owner, address(timelock), "timelock still owns the library");
    }
}
