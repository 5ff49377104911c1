// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {Governor} from "@openzeppelin/contracts/governance/Governor.sol";
import {TimelockController} from "@openzeppelin/contracts/governance/TimelockController.sol";
import {GovernorCountingSimple} from "@openzeppelin/contracts/governance/extensions/GovernorCountingSimple.sol";
import {GovernorSettings} from "@openzeppelin/contracts/governance/extensions/GovernorSettings.sol";
import {GovernorStorage} from "@openzeppelin/contracts/governance/extensions/GovernorStorage.sol";
import {GovernorTimelockControl} from "@openzeppelin/contracts/governance/extensions/GovernorTimelockControl.sol";
import {GovernorVotes} from "@openzeppelin/contracts/governance/extensions/GovernorVotes.sol";
import {
    GovernorVotesQuorumFraction
} from "@openzeppelin/contracts/governance/extensions/GovernorVotesQuorumFraction.sol";
import {IVotes} from "@openzeppelin/contracts/governance/utils/IVotes.sol";

/// @title GymGovernor
/// @notice The DAO that decides which contributions enter the curated libraries (DESIGN.md
/// "Flows" 2). OpenZeppelin's Governor, assembled from its extensions only:
/// - GovernorSettings: voting delay, voting period and proposal threshold, changeable by
///   proposal (`setVotingDelay`, `setVotingPeriod`, `setProposalThreshold`);
/// - GovernorCountingSimple: For / Against / Abstain; quorum counts For + Abstain;
/// - GovernorVotes: weights are the {GymToken} votes at the proposal snapshot; the governor's
///   ERC-6372 clock is the token's (timestamps: see {GymToken});
/// - GovernorVotesQuorumFraction: quorum = numerator% of the supply at the snapshot, changeable
///   by proposal (`updateQuorumNumerator`);
/// - GovernorTimelockControl: a succeeded proposal is queued in, and executed by, the
///   TimelockController, which owns the curated libraries; the governor itself holds nothing;
/// - GovernorStorage: proposals are enumerable on chain (`proposalCount`, `proposalDetailsAt`)
///   and can be queued / executed / cancelled by id alone.
///
/// A curation proposal calls `ExperienceLedger.appendManyFromLog` (or `appendFromLog`) on a
/// library the timelock owns; the ledger verifies every inclusion proof when the timelock
/// executes, so a forged proof, an unanchored checkpoint or a double inclusion makes
/// `execute` revert with the ledger's own error. Events are the Governor's own (IGovernor), the
/// ones Tally and other indexers read.
contract GymGovernor is
    Governor,
    GovernorSettings,
    GovernorCountingSimple,
    GovernorStorage,
    GovernorVotes,
    GovernorVotesQuorumFraction,
    GovernorTimelockControl
{
    /// @param token The voting token (ERC-5805; {GymToken}).
    /// @param timelock The TimelockController that queues and executes proposals; this
    /// governor needs its proposer and canceller roles.
    /// @param initialVotingDelay Clock units (seconds) from proposal to snapshot / vote start.
    /// @param initialVotingPeriod Clock units (seconds) that voting stays open; not zero.
    /// @param initialProposalThreshold Votes a proposer needs at the moment of proposing.
    /// @param quorumNumerator Percent of the supply at the snapshot needed as For + Abstain.
    constructor(
        IVotes token,
        TimelockController timelock,
        uint48 initialVotingDelay,
        uint32 initialVotingPeriod,
        uint256 initialProposalThreshold,
        uint256 quorumNumerator
    )
        Governor("GymGovernor")
        GovernorSettings(initialVotingDelay, initialVotingPeriod, initialProposalThreshold)
        GovernorVotes(token)
        GovernorVotesQuorumFraction(quorumNumerator)
        GovernorTimelockControl(timelock)
    {}

    // ------------------------------------------------------------------ overrides required by Solidity

    /// @inheritdoc GovernorTimelockControl
    function state(uint256 proposalId) public view override(Governor, GovernorTimelockControl) returns (ProposalState) {
        return super.state(proposalId);
    }

    /// @inheritdoc GovernorTimelockControl
    function proposalNeedsQueuing(uint256 proposalId)
        public
        view
        override(Governor, GovernorTimelockControl)
        returns (bool)
    {
        return super.proposalNeedsQueuing(proposalId);
    }

    /// @inheritdoc GovernorSettings
    function proposalThreshold() public view override(Governor, GovernorSettings) returns (uint256) {
        return super.proposalThreshold();
    }

    function _propose(
        address[] memory targets,
        uint256[] memory values,
        bytes[] memory calldatas,
        string memory description,
        address proposer
    ) internal override(Governor, GovernorStorage) returns (uint256) {
        return super._propose(targets, values, calldatas, description, proposer);
    }

    function _queueOperations(
        uint256 proposalId,
        address[] memory targets,
        uint256[] memory values,
        bytes[] memory calldatas,
        bytes32 descriptionHash
    ) internal override(Governor, GovernorTimelockControl) returns (uint48) {
        return super._queueOperations(proposalId, targets, values, calldatas, descriptionHash);
    }

    function _executeOperations(
        uint256 proposalId,
        address[] memory targets,
        uint256[] memory values,
        bytes[] memory calldatas,
        bytes32 descriptionHash
    ) internal override(Governor, GovernorTimelockControl) {
        super._executeOperations(proposalId, targets, values, calldatas, descriptionHash);
    }

    function _cancel(
        address[] memory targets,
        uint256[] memory values,
        bytes[] memory calldatas,
        bytes32 descriptionHash
    ) internal override(Governor, GovernorTimelockControl) returns (uint256) {
        return super._cancel(targets, values, calldatas, descriptionHash);
    }

    function _executor() internal view override(Governor, GovernorTimelockControl) returns (address) {
        return super._executor();
    }
}
