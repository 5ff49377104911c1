// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";

import {IExperienceLedger} from "./IExperienceLedger.sol";
import {INodeRegistry} from "./INodeRegistry.sol";

/// @title NodeRegistry
/// @notice Inference nodes stake GYM, name their receipt signer and receipt log, and can be
/// challenged by anyone and slashed by governance or the verifier committee (see `INodeRegistry`).
///
/// The unbonding delay is a constant of 7 days, far longer than a governance round (voting
/// delay + voting period + timelock delay: minutes on the devnet, days on a public network), so
/// a node challenged just before it leaves can still be slashed. The minimum stake is fixed at
/// deployment. Every state change happens before the token transfer that goes with it.
///
/// Receipts (`ReceiptRecord`) are keyed by keccak256(operator, receiptHash): a receipt hash
/// commits to the signer key, not the operator, and a key freed by `update` or `withdraw` may
/// sign for another operator later, so each operator answers once for what its keys signed.
/// Challenges run in two lanes, the committee's and everyone else's, one open challenge each:
/// a bond-free challenge must not keep the committee from judging the receipt (the node itself
/// would open one to shield it), while the committee's, bonded and settled or expired within
/// its settlement timeout, holds the free lane only until it is finalized or expires. Either
/// lane's challenge may be upheld and slashed for, once for the receipt. `challenge` reads
/// each lane's latest challenge's status instead of `resolveChallenge` clearing it, so judging
/// costs what it did; `slash` marks the receipt slashed.
contract NodeRegistry is INodeRegistry {
    using SafeERC20 for IERC20;

    /// @notice Seconds between `deregister` and the first successful `withdraw`.
    uint64 public constant UNBONDING_DELAY = 7 days;

    /// @notice The token staked (GymToken).
    IERC20 public immutable stakeToken;
    /// @notice The only address that may slash and resolve challenges (the DAO timelock).
    address public immutable governance;
    /// @notice The verifier committee, which may also slash and resolve challenges (zero: none).
    address public immutable committee;
    /// @notice Where receipt logs live.
    IExperienceLedger public immutable ledger;
    /// @notice Least stake (token base units) that registers a node and keeps it active.
    uint256 public immutable minStake;

    uint256 public totalStaked;
    uint256 public challengeCount;

    mapping(address operator => Node) private _nodes;
    mapping(address signer => address operator) private _operatorOfSigner;
    mapping(address operator => mapping(address signer => bool)) private _signedFor;
    mapping(uint256 challengeId => Challenge) private _challenges;
    mapping(bytes32 receiptKey => ReceiptRecord) private _receipts;

    /// @dev Governance, or the verifier committee carrying out a final verdict.
    modifier onlyJudge() {
        if (msg.sender != governance && (msg.sender != committee || committee == address(0))) {
            revert NodeRegistryNotGovernance(msg.sender);
        }
        _;
    }

    constructor(
        IERC20 stakeToken_,
        address governance_,
        IExperienceLedger ledger_,
        uint256 minStake_,
        address committee_
    ) {
        stakeToken = stakeToken_;
        governance = governance_;
        committee = committee_;
        ledger = ledger_;
        minStake = minStake_;
    }

    // ---------------------------------------------------------------- operators

    /// @inheritdoc INodeRegistry
    function register(
        address signer,
        bytes32 modelDigest,
        string calldata endpoint,
        uint256 stake,
        uint256 receiptLogId
    ) external {
        if (_nodes[msg.sender].registeredAt != 0) revert NodeRegistryAlreadyRegistered(msg.sender);
        if (stake < minStake) revert NodeRegistryStakeBelowMinimum(stake, minStake);
        (address owner, IExperienceLedger.LogKind kind,,,) = ledger.logInfo(receiptLogId);
        if (kind != IExperienceLedger.LogKind.Publisher) revert NodeRegistryNotPublisherLog(receiptLogId);
        if (owner != msg.sender) revert NodeRegistryNotLogOwner(receiptLogId, msg.sender, owner);
        _claimSigner(signer, endpoint);

        _nodes[msg.sender] = Node({
            signer: signer,
            registeredAt: uint64(block.timestamp),
            unbondingEnds: 0,
            modelDigest: modelDigest,
            stake: stake,
            receiptLogId: receiptLogId,
            endpoint: endpoint
        });
        totalStaked += stake;
        emit NodeRegistered(msg.sender, signer, modelDigest, endpoint, stake, receiptLogId);
        stakeToken.safeTransferFrom(msg.sender, address(this), stake);
    }

    /// @inheritdoc INodeRegistry
    function update(address signer, bytes32 modelDigest, string calldata endpoint) external {
        Node storage node = _bondedNode(msg.sender);
        address oldSigner = node.signer;
        delete _operatorOfSigner[oldSigner];
        _claimSigner(signer, endpoint);
        node.signer = signer;
        node.modelDigest = modelDigest;
        node.endpoint = endpoint;
        emit NodeUpdated(msg.sender, signer, modelDigest, endpoint);
    }

    /// @inheritdoc INodeRegistry
    function addStake(uint256 amount) external {
        Node storage node = _bondedNode(msg.sender);
        if (amount == 0) revert NodeRegistryZeroAmount(msg.sender);
        node.stake += amount;
        totalStaked += amount;
        emit StakeAdded(msg.sender, amount, node.stake);
        stakeToken.safeTransferFrom(msg.sender, address(this), amount);
    }

    /// @inheritdoc INodeRegistry
    function deregister() external {
        Node storage node = _bondedNode(msg.sender);
        uint64 unbondingEnds = uint64(block.timestamp) + UNBONDING_DELAY;
        node.unbondingEnds = unbondingEnds;
        emit NodeDeregistered(msg.sender, unbondingEnds);
    }

    /// @inheritdoc INodeRegistry
    function withdraw() external {
        Node storage node = _nodes[msg.sender];
        if (node.registeredAt == 0) revert NodeRegistryNotRegistered(msg.sender);
        uint64 unbondingEnds = node.unbondingEnds;
        if (unbondingEnds == 0) revert NodeRegistryNotUnbonding(msg.sender);
        // A validator's few seconds of skew are nothing against a delay of days.
        // forge-lint: disable-next-line(block-timestamp)
        if (block.timestamp < unbondingEnds) {
            revert NodeRegistryStillBonded(msg.sender, unbondingEnds, block.timestamp);
        }
        uint256 amount = node.stake;
        delete _operatorOfSigner[node.signer];
        delete _nodes[msg.sender];
        totalStaked -= amount;
        emit StakeWithdrawn(msg.sender, amount);
        if (amount != 0) stakeToken.safeTransfer(msg.sender, amount);
    }

    // ---------------------------------------------------------------- challenges

    /// @inheritdoc INodeRegistry
    function challenge(
        address operator,
        bytes32 receiptHash,
        bytes calldata signature,
        string calldata evidenceCid
    ) external returns (uint256 challengeId) {
        if (_nodes[operator].registeredAt == 0) revert NodeRegistryNotRegistered(operator);
        (address recovered, ECDSA.RecoverError recoverError,) = ECDSA.tryRecover(receiptHash, signature);
        if (recoverError != ECDSA.RecoverError.NoError || !_signedFor[operator][recovered]) {
            revert NodeRegistryNotSignedByNode(operator, receiptHash, recovered);
        }
        if (bytes(evidenceCid).length == 0) revert NodeRegistryEmptyEvidence(operator);
        ReceiptRecord storage receipt = _receipts[_receiptKey(operator, receiptHash)];
        bool byCommittee = msg.sender == committee; // never true when there is none: no sender is zero
        _requireChallengeable(operator, receiptHash, receipt, byCommittee);
        challengeId = ++challengeCount;
        // casting to uint64 is safe: ids count up by one per challenge, each paid for in gas
        // forge-lint: disable-next-line(unsafe-typecast)
        uint64 id = uint64(challengeId);
        if (byCommittee) receipt.latestCommittee = id;
        else receipt.latestFree = id;
        _challenges[challengeId] = Challenge({
            operator: operator,
            challenger: msg.sender,
            openedAt: uint64(block.timestamp),
            status: ChallengeStatus.Open,
            receiptHash: receiptHash
        });
        emit ChallengeOpened(challengeId, operator, msg.sender, receiptHash, evidenceCid);
    }

    // ---------------------------------------------------------------- governance

    /// @inheritdoc INodeRegistry
    function slash(address operator, uint256 amount, uint256 challengeId, address beneficiary)
        external
        onlyJudge
    {
        Challenge storage ch = _challenges[challengeId];
        ChallengeStatus status = ch.status;
        if (status == ChallengeStatus.None) revert NodeRegistryUnknownChallenge(challengeId);
        if (ch.operator != operator) revert NodeRegistryChallengeMismatch(challengeId, operator, ch.operator);
        if (status == ChallengeStatus.Dismissed) revert NodeRegistryChallengeDismissed(challengeId);
        // Open or upheld: the latest challenge of its lane (see `ReceiptRecord`).
        bytes32 receiptHash = ch.receiptHash;
        ReceiptRecord storage receipt = _receipts[_receiptKey(operator, receiptHash)];
        uint256 slashedFor = receipt.slashedFor;
        if (slashedFor != 0) revert NodeRegistryReceiptSlashed(operator, receiptHash, slashedFor);
        Node storage node = _nodes[operator];
        if (node.registeredAt == 0) revert NodeRegistryNotRegistered(operator);
        if (amount == 0) revert NodeRegistryZeroAmount(operator);
        uint256 stake = node.stake;
        if (amount > stake) revert NodeRegistrySlashExceedsStake(operator, amount, stake);
        if (beneficiary == address(0) || beneficiary == address(this)) {
            revert NodeRegistryInvalidBeneficiary(beneficiary);
        }

        // casting to uint64 is safe: a challenge id (see `challenge`)
        // forge-lint: disable-next-line(unsafe-typecast)
        receipt.slashedFor = uint64(challengeId);
        node.stake = stake - amount;
        totalStaked -= amount;
        if (status == ChallengeStatus.Open) {
            ch.status = ChallengeStatus.Upheld;
            emit ChallengeResolved(challengeId, operator, true);
        }
        emit NodeSlashed(operator, challengeId, beneficiary, amount, stake - amount);
        stakeToken.safeTransfer(beneficiary, amount);
    }

    /// @inheritdoc INodeRegistry
    function resolveChallenge(uint256 challengeId, bool upheld) external onlyJudge {
        Challenge storage ch = _challenges[challengeId];
        ChallengeStatus status = ch.status;
        if (status == ChallengeStatus.None) revert NodeRegistryUnknownChallenge(challengeId);
        if (status != ChallengeStatus.Open) revert NodeRegistryChallengeNotOpen(challengeId, status);
        ch.status = upheld ? ChallengeStatus.Upheld : ChallengeStatus.Dismissed;
        emit ChallengeResolved(challengeId, ch.operator, upheld);
    }

    // ---------------------------------------------------------------- views

    /// @inheritdoc INodeRegistry
    function nodeOf(address operator) external view returns (Node memory) {
        return _nodes[operator];
    }

    /// @inheritdoc INodeRegistry
    function operatorOfSigner(address signer) external view returns (address) {
        return _operatorOfSigner[signer];
    }

    /// @inheritdoc INodeRegistry
    function isSignerOf(address operator, address signer) external view returns (bool) {
        return _signedFor[operator][signer];
    }

    /// @inheritdoc INodeRegistry
    function isActive(address operator) external view returns (bool) {
        Node storage node = _nodes[operator];
        return node.registeredAt != 0 && node.unbondingEnds == 0 && node.stake >= minStake;
    }

    /// @inheritdoc INodeRegistry
    function challengeOf(uint256 challengeId) external view returns (Challenge memory) {
        return _challenges[challengeId];
    }

    /// @inheritdoc INodeRegistry
    function receiptRecord(address operator, bytes32 receiptHash) external view returns (ReceiptRecord memory) {
        return _receipts[_receiptKey(operator, receiptHash)];
    }

    // ---------------------------------------------------------------- internal

    /// @dev The caller's node, which must exist and not be unbonding.
    function _bondedNode(address operator) private view returns (Node storage node) {
        node = _nodes[operator];
        if (node.registeredAt == 0) revert NodeRegistryNotRegistered(operator);
        if (node.unbondingEnds != 0) revert NodeRegistryUnbonding(operator, node.unbondingEnds);
    }

    /// @dev Reverts when `receipt` (`operator`'s `receiptHash`) takes no new challenge from the
    /// caller: one of its challenges is upheld (covers slashed), the committee's is open, or,
    /// unless `byCommittee`, a free one is open. Dismissed ones do not count.
    function _requireChallengeable(
        address operator,
        bytes32 receiptHash,
        ReceiptRecord storage receipt,
        bool byCommittee
    ) private view {
        uint256 freeId = receipt.latestFree;
        uint256 committeeId = receipt.latestCommittee;
        ChallengeStatus free = freeId == 0 ? ChallengeStatus.None : _challenges[freeId].status;
        ChallengeStatus ofCommittee = committeeId == 0 ? ChallengeStatus.None : _challenges[committeeId].status;
        if (free == ChallengeStatus.Upheld) revert NodeRegistryReceiptUpheld(operator, receiptHash, freeId);
        if (ofCommittee == ChallengeStatus.Upheld) {
            revert NodeRegistryReceiptUpheld(operator, receiptHash, committeeId);
        }
        if (ofCommittee == ChallengeStatus.Open) {
            revert NodeRegistryReceiptChallengeOpen(operator, receiptHash, committeeId);
        }
        if (free == ChallengeStatus.Open && !byCommittee) {
            revert NodeRegistryReceiptChallengeOpen(operator, receiptHash, freeId);
        }
    }

    /// @dev The key of `operator`'s receipt `receiptHash` in `_receipts`.
    function _receiptKey(address operator, bytes32 receiptHash) private pure returns (bytes32) {
        return keccak256(abi.encode(operator, receiptHash));
    }

    /// @dev Checks `signer` and `endpoint` and records `signer` as signing for the caller.
    function _claimSigner(address signer, string calldata endpoint) private {
        if (signer == address(0)) revert NodeRegistryZeroSigner(msg.sender);
        address holder = _operatorOfSigner[signer];
        if (holder != address(0)) revert NodeRegistrySignerTaken(signer, holder);
        if (bytes(endpoint).length == 0) revert NodeRegistryEmptyEndpoint(msg.sender);
        _operatorOfSigner[signer] = msg.sender;
        _signedFor[msg.sender][signer] = true;
    }
}
