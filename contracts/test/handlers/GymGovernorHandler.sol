// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IGovernor} from "@openzeppelin/contracts/governance/IGovernor.sol";
import {TimelockController} from "@openzeppelin/contracts/governance/TimelockController.sol";
import {ExperienceLedger} from "../../src/ExperienceLedger.sol";
import {IExperienceLedger} from "../../src/IExperienceLedger.sol";
import {GymGovernor} from "../../src/GymGovernor.sol";
import {ReferenceMerkle} from "../utils/ReferenceMerkle.sol";
import {Vm} from "../utils/Vm.sol";

/// @notice Drives the DAO through random sequences of proposals (honest, forged proof,
/// unanchored checkpoint, already curated leaf), votes, time jumps, queues and executions, plus
/// attempts to grow the curated library around the governor. Ghost state: the leaves of every
/// proposal whose execution went through, in order — the only way the library may grow.
contract GymGovernorHandler {
    Vm private constant vm = Vm(address(uint160(uint256(keccak256("hevm cheat code")))));

    /// @notice How a proposal's batch is built.
    enum Flavor {
        Honest,
        ForgedProof,
        UnanchoredSize,
        AlreadyCurated
    }

    ExperienceLedger public immutable ledger;
    GymGovernor public immutable governor;
    TimelockController public immutable timelock;
    uint256 public immutable publisherLogId;
    uint256 public immutable curatedLogId;

    bytes32[] private _published; // the publisher's off-chain tree (anchored at 8 and 16)
    address[] private _voters;
    address private _proposer;

    struct Proposal {
        bytes32[] leaves;
        bool forged; // a proof that cannot verify (wrong leaf, or a checkpoint never anchored)
    }

    uint256[] private _ids;
    mapping(uint256 proposalId => Proposal) private _proposals;
    bytes32[] private _executedLeaves; // ghost: leaves of executed proposals, in order
    uint256 private _nonce;
    /// @dev The handler's clock: forge does not carry a vm.warp from one invariant call to the
    /// next, so every call starts by warping to it and every time jump moves it.
    uint256 private _now;

    uint256 public proposalsExecuted;
    bool public forgedProposalExecuted;
    bool public bypassAccepted;

    constructor(
        ExperienceLedger ledger_,
        GymGovernor governor_,
        TimelockController timelock_,
        uint256 publisherLogId_,
        uint256 curatedLogId_,
        bytes32[] memory published_,
        address[] memory voters_
    ) {
        ledger = ledger_;
        governor = governor_;
        timelock = timelock_;
        publisherLogId = publisherLogId_;
        curatedLogId = curatedLogId_;
        _published = published_;
        _voters = voters_;
        _proposer = voters_[0];
        _now = block.timestamp;
    }

    modifier atHandlerTime() {
        vm.warp(_now);
        _;
        _now = vm.getBlockTimestamp();
    }

    // ------------------------------------------------------------------ governance

    /// @notice Proposes to curate 1..3 leaves, built according to `flavorSeed`.
    function propose(uint256 indexSeed, uint256 count, uint256 flavorSeed) external atHandlerTime {
        count = 1 + count % 3;
        Flavor flavor = Flavor(flavorSeed % 4);
        IExperienceLedger.SourcedLeaf[] memory batch = new IExperienceLedger.SourcedLeaf[](count);
        bytes32[] memory leaves = new bytes32[](count);
        for (uint256 i; i < count; ++i) {
            // sizes 8 and 16 are anchored; distinct indexes within the batch
            uint64 size = (indexSeed >> (8 * i)) & 1 == 0 ? 8 : 16;
            uint64 index = uint64((indexSeed % 16 + i) % size);
            batch[i] = _sourced(size, index);
            leaves[i] = batch[i].leafHash;
        }
        if (flavor == Flavor.ForgedProof) {
            batch[0].leafHash = ReferenceMerkle.leaf("forged", _nonce);
        } else if (flavor == Flavor.UnanchoredSize) {
            batch[0] = _sourced(5, batch[0].leafIndex % 5);
        } else if (flavor == Flavor.AlreadyCurated && _executedLeaves.length > 0) {
            batch[0] = _sourcedHash(_executedLeaves[indexSeed % _executedLeaves.length]);
        }
        leaves[0] = batch[0].leafHash;

        address[] memory targets = new address[](1);
        targets[0] = address(ledger);
        uint256[] memory values = new uint256[](1);
        bytes[] memory calldatas = new bytes[](1);
        calldatas[0] = abi.encodeCall(ExperienceLedger.appendManyFromLog, (curatedLogId, batch));
        string memory description = string.concat("curate #", vm.toString(_nonce++));
        vm.prank(_proposer);
        try governor.propose(targets, values, calldatas, description) returns (uint256 id) {
            Proposal storage p = _proposals[id];
            p.leaves = leaves;
            p.forged = flavor == Flavor.ForgedProof || flavor == Flavor.UnanchoredSize;
            _ids.push(id);
        } catch {}
    }

    /// @notice One voter votes on one proposal (refused outside the voting window or twice).
    function vote(uint256 proposalSeed, uint256 voterSeed, uint8 support) external atHandlerTime {
        if (_ids.length == 0) return;
        uint256 id = _ids[proposalSeed % _ids.length];
        address voter = _voters[voterSeed % _voters.length];
        vm.prank(voter);
        try governor.castVote(id, support % 3) {} catch {}
    }

    /// @notice Moves the latest proposal 1..4 stages on, as a determined majority would:
    /// Pending → voting starts; Active → every voter who has not voted votes For, voting ends;
    /// Succeeded → queued; Queued → the timelock delay passes and it is executed. (Random calls
    /// alone rarely line up a whole lifecycle on one proposal.)
    function advance(uint256 stages) external atHandlerTime {
        if (_ids.length == 0) return;
        uint256 id = _ids[_ids.length - 1];
        for (uint256 n = 1 + stages % 4; n > 0; --n) {
            IGovernor.ProposalState state = governor.state(id);
            if (state == IGovernor.ProposalState.Pending) {
                vm.warp(governor.proposalSnapshot(id) + 1);
            } else if (state == IGovernor.ProposalState.Active) {
                for (uint256 i; i < _voters.length; ++i) {
                    if (governor.hasVoted(id, _voters[i])) continue;
                    vm.prank(_voters[i]);
                    governor.castVote(id, 1);
                }
                vm.warp(governor.proposalDeadline(id) + 1);
            } else if (state == IGovernor.ProposalState.Succeeded) {
                governor.queue(id);
            } else if (state == IGovernor.ProposalState.Queued) {
                uint256 eta = governor.proposalEta(id);
                if (vm.getBlockTimestamp() < eta) vm.warp(eta);
                _execute(_ids.length - 1);
                return;
            }
        }
    }

    /// @notice Moves time forward by 1 s .. 4 days.
    function warp(uint256 seconds_) external atHandlerTime {
        vm.warp(vm.getBlockTimestamp() + 1 + seconds_ % 4 days);
    }

    function queue(uint256 proposalSeed) external atHandlerTime {
        if (_ids.length == 0) return;
        try governor.queue(_ids[proposalSeed % _ids.length]) {} catch {}
    }

    /// @notice Executes a proposal; when that goes through, its leaves join the ghost library.
    function execute(uint256 proposalSeed) external atHandlerTime {
        _execute(proposalSeed);
    }

    function _execute(uint256 proposalSeed) private {
        if (_ids.length == 0) return;
        uint256 id = _ids[proposalSeed % _ids.length];
        Proposal storage p = _proposals[id];
        bool honest = !p.forged && _honest(p.leaves);
        try governor.execute(id) {
            if (!honest) forgedProposalExecuted = true;
            for (uint256 i; i < p.leaves.length; ++i) {
                _executedLeaves.push(p.leaves[i]);
            }
            ++proposalsExecuted;
        } catch {}
    }

    // ------------------------------------------------------------------ attempts to bypass

    /// @notice A voter, the governor or this handler appends a valid leaf directly: refused.
    function appendDirectly(uint256 callerSeed, uint256 indexSeed) external atHandlerTime {
        IExperienceLedger.SourcedLeaf memory leaf = _sourced(16, uint64(indexSeed % 16));
        address caller = callerSeed % 3 == 0 ? address(governor) : _voters[callerSeed % _voters.length];
        if (callerSeed % 5 == 0) caller = address(this);
        vm.prank(caller);
        try ledger.appendFromLog(
            curatedLogId,
            leaf.sourceLogId,
            leaf.sourceSize,
            leaf.leafIndex,
            leaf.leafHash,
            leaf.entryCid,
            leaf.inclusionProof
        ) {
            bypassAccepted = true;
        } catch {}
    }

    /// @notice A voter schedules an append on the timelock without a vote: refused.
    function scheduleDirectly(uint256 voterSeed, uint256 indexSeed) external atHandlerTime {
        IExperienceLedger.SourcedLeaf[] memory batch = new IExperienceLedger.SourcedLeaf[](1);
        batch[0] = _sourced(16, uint64(indexSeed % 16));
        bytes memory data = abi.encodeCall(ExperienceLedger.appendManyFromLog, (curatedLogId, batch));
        uint256 delay = timelock.getMinDelay();
        vm.prank(_voters[voterSeed % _voters.length]);
        try timelock.schedule(address(ledger), 0, data, bytes32(0), bytes32(_nonce++), delay) {
            bypassAccepted = true;
        } catch {}
    }

    // ------------------------------------------------------------------ ghost state

    function executedLeaves() external view returns (bytes32[] memory) {
        return _executedLeaves;
    }

    function proposalCount() external view returns (uint256) {
        return _ids.length;
    }

    function _sourced(uint64 size, uint64 index) private view returns (IExperienceLedger.SourcedLeaf memory) {
        bytes32[] memory tree = _published;
        return IExperienceLedger.SourcedLeaf({
            sourceLogId: publisherLogId,
            sourceSize: size,
            leafIndex: index,
            leafHash: tree[index],
            entryCid: abi.encodePacked(tree[index]),
            inclusionProof: ReferenceMerkle.inclusionProof(tree, size, index)
        });
    }

    function _sourcedHash(bytes32 leafHash) private view returns (IExperienceLedger.SourcedLeaf memory) {
        for (uint64 i; i < _published.length; ++i) {
            if (_published[i] == leafHash) return _sourced(16, i);
        }
        revert("not a published leaf");
    }

    /// @dev Whether the batch could honestly be executed now: published, distinct, not curated.
    function _honest(bytes32[] storage leaves) private view returns (bool) {
        for (uint256 i; i < leaves.length; ++i) {
            if (ledger.isCurated(curatedLogId, leaves[i])) return false;
            bool found;
            for (uint256 j; j < _published.length; ++j) {
                if (_published[j] == leaves[i]) found = true;
            }
            if (!found) return false;
            for (uint256 j; j < i; ++j) {
                if (leaves[j] == leaves[i]) return false;
            }
        }
        return true;
    }
}
