// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @title INodeRegistry
/// @notice Staked registry of inference nodes (DESIGN.md "Contracts": NodeRegistry).
///
/// An operator (the address that sends `register`) stakes GYM, names the key that signs its
/// EIP-712 receipts (`signer`), the model it serves (`modelDigest`), where it serves
/// (`endpoint`), and the ExperienceLedger Publisher log it owns and anchors its receipts in.
/// Leaving takes two steps: `deregister` starts an unbonding delay during which the stake can
/// still be slashed, `withdraw` returns what is left once the delay is over.
///
/// Anyone may open a challenge against a receipt the node signed (the challenge carries the
/// receipt's EIP-712 digest and the node's signature over it, so nobody can challenge a receipt
/// a node never issued); a challenge has no on-chain effect by itself (and so needs no bond:
/// spam costs its sender gas and nobody else anything). Governance (the DAO timelock) judges:
/// it dismisses or upholds a challenge and slashes stake against one that is not dismissed,
/// paying the slashed tokens to a beneficiary it names. The verifier committee fixed at
/// deployment (`committee()`, see IVerifierCommittee) may do the same: it opens challenges
/// here on behalf of bonded challengers and carries out its finalized verdicts.
///
/// One receipt (an operator and a receipt hash) is slashed at most once (`slash` refuses any
/// challenge of a receipt already slashed) and is challenged by at most one open challenge at a
/// time, with one exception: a challenge the committee opens is never blocked by an open
/// bond-free one, so nobody shields a receipt from the committee for the price of gas. Once a
/// challenge of the receipt is upheld the receipt is judged and takes no new challenge. A
/// dismissed challenge leaves the receipt challengeable: dismissal answers that challenge (its
/// evidence, or a committee that did not settle in time), not the receipt. `receiptRecord`
/// shows where a receipt stands.
interface INodeRegistry {
    /// @notice Where a challenge stands.
    enum ChallengeStatus {
        None,
        Open,
        Upheld,
        Dismissed
    }

    /// @notice A registered node. `unbondingEnds` is 0 while the node is bonded, else the time
    /// from which `withdraw` succeeds.
    struct Node {
        address signer;
        uint64 registeredAt;
        uint64 unbondingEnds;
        bytes32 modelDigest;
        uint256 stake;
        uint256 receiptLogId;
        string endpoint;
    }

    /// @notice A challenge against `operator`'s receipt `receiptHash` (its EIP-712 digest). The
    /// evidence CID is only in the `ChallengeOpened` event.
    struct Challenge {
        address operator;
        address challenger;
        uint64 openedAt;
        ChallengeStatus status;
        bytes32 receiptHash;
    }

    /// @notice The challenges of one receipt, `operator`'s receipt hash (0: none): the latest
    /// opened by anyone but the committee (`latestFree`), the latest opened by the committee
    /// (`latestCommittee`), and the one it was slashed for (`slashedFor`). Only a lane's latest
    /// challenge may be open or upheld: each earlier one was dismissed before it was opened.
    struct ReceiptRecord {
        uint64 latestFree;
        uint64 latestCommittee;
        uint64 slashedFor;
    }

    // ---------------------------------------------------------------- events

    /// @notice `operator` registered a node staking `stake`, signing receipts with `signer`.
    event NodeRegistered(
        address indexed operator,
        address indexed signer,
        bytes32 modelDigest,
        string endpoint,
        uint256 stake,
        uint256 receiptLogId
    );

    /// @notice `operator` changed its signer, model digest or endpoint.
    event NodeUpdated(address indexed operator, address indexed signer, bytes32 modelDigest, string endpoint);

    /// @notice `operator` added `amount` to its stake, now `stake`.
    event StakeAdded(address indexed operator, uint256 amount, uint256 stake);

    /// @notice `operator` left; its stake can be withdrawn from `unbondingEnds` on.
    event NodeDeregistered(address indexed operator, uint64 unbondingEnds);

    /// @notice `operator` withdrew `amount` and its node record was deleted.
    event StakeWithdrawn(address indexed operator, uint256 amount);

    /// @notice `challenger` opened challenge `challengeId` against `operator`'s receipt.
    event ChallengeOpened(
        uint256 indexed challengeId,
        address indexed operator,
        address indexed challenger,
        bytes32 receiptHash,
        string evidenceCid
    );

    /// @notice Governance upheld or dismissed challenge `challengeId` against `operator`.
    event ChallengeResolved(uint256 indexed challengeId, address indexed operator, bool upheld);

    /// @notice Governance slashed `amount` of `operator`'s stake for challenge `challengeId`,
    /// paying it to `beneficiary`; `stake` is what remains.
    event NodeSlashed(
        address indexed operator, uint256 indexed challengeId, address indexed beneficiary, uint256 amount, uint256 stake
    );

    // ---------------------------------------------------------------- errors

    /// @notice `caller` is neither the governance executor nor the committee.
    error NodeRegistryNotGovernance(address caller);

    /// @notice `operator` already has a node (bonded or unbonding).
    error NodeRegistryAlreadyRegistered(address operator);

    /// @notice `operator` has no node.
    error NodeRegistryNotRegistered(address operator);

    /// @notice `operator` named the zero address as its signer.
    error NodeRegistryZeroSigner(address operator);

    /// @notice `signer` already signs for `operator`.
    error NodeRegistrySignerTaken(address signer, address operator);

    /// @notice `operator` gave an empty endpoint.
    error NodeRegistryEmptyEndpoint(address operator);

    /// @notice A stake of `stake` is below the minimum `minStake`.
    error NodeRegistryStakeBelowMinimum(uint256 stake, uint256 minStake);

    /// @notice Log `logId` is owned by `owner`, not by `operator`.
    error NodeRegistryNotLogOwner(uint256 logId, address operator, address owner);

    /// @notice Log `logId` is a curated library, not a Publisher log.
    error NodeRegistryNotPublisherLog(uint256 logId);

    /// @notice A zero amount where `operator`'s stake would change.
    error NodeRegistryZeroAmount(address operator);

    /// @notice `operator` is unbonding (until `unbondingEnds`) and can no longer change its node.
    error NodeRegistryUnbonding(address operator, uint64 unbondingEnds);

    /// @notice `operator` has not deregistered.
    error NodeRegistryNotUnbonding(address operator);

    /// @notice `operator`'s stake unbonds at `unbondingEnds`; it is `timestamp` now.
    error NodeRegistryStillBonded(address operator, uint64 unbondingEnds, uint256 timestamp);

    /// @notice The challenge against `operator` came without evidence.
    error NodeRegistryEmptyEvidence(address operator);

    /// @notice `receiptHash` is not signed by a signer of `operator`: the signature recovers to
    /// `recovered` (zero when it is not a valid signature).
    error NodeRegistryNotSignedByNode(address operator, bytes32 receiptHash, address recovered);

    /// @notice `operator`'s receipt `receiptHash` is under challenge `challengeId`, still open:
    /// one open challenge per receipt (the committee's is not blocked by a bond-free one).
    error NodeRegistryReceiptChallengeOpen(address operator, bytes32 receiptHash, uint256 challengeId);

    /// @notice `operator`'s receipt `receiptHash` was judged bad: challenge `challengeId` of it
    /// was upheld, so it takes no new challenge.
    error NodeRegistryReceiptUpheld(address operator, bytes32 receiptHash, uint256 challengeId);

    /// @notice `operator`'s receipt `receiptHash` was already slashed for challenge
    /// `challengeId`: one receipt is slashed once.
    error NodeRegistryReceiptSlashed(address operator, bytes32 receiptHash, uint256 challengeId);

    /// @notice No challenge has id `challengeId`.
    error NodeRegistryUnknownChallenge(uint256 challengeId);

    /// @notice Challenge `challengeId` is `status`, not open.
    error NodeRegistryChallengeNotOpen(uint256 challengeId, ChallengeStatus status);

    /// @notice Challenge `challengeId` is against `challenged`, not `operator`.
    error NodeRegistryChallengeMismatch(uint256 challengeId, address operator, address challenged);

    /// @notice Challenge `challengeId` was dismissed; nothing can be slashed for it.
    error NodeRegistryChallengeDismissed(uint256 challengeId);

    /// @notice Slashing `amount` exceeds `operator`'s stake `stake`.
    error NodeRegistrySlashExceedsStake(address operator, uint256 amount, uint256 stake);

    /// @notice Slashed tokens cannot go to `beneficiary`.
    error NodeRegistryInvalidBeneficiary(address beneficiary);

    // ---------------------------------------------------------------- operators

    /// @notice Registers the caller's node, pulling `stake` GYM from it with `transferFrom`.
    ///
    /// Requirements:
    /// - the caller has no node (bonded or unbonding);
    /// - `signer` is not zero and signs for no other operator;
    /// - `endpoint` is not empty;
    /// - `stake` is at least `minStake()` and the caller approved this contract for it;
    /// - log `receiptLogId` exists in the ledger (else the ledger's `ExperienceLedgerUnknownLog`),
    ///   is a Publisher log and is owned by the caller.
    ///
    /// Emits: `NodeRegistered`.
    function register(
        address signer,
        bytes32 modelDigest,
        string calldata endpoint,
        uint256 stake,
        uint256 receiptLogId
    ) external;

    /// @notice Replaces the caller's signer, model digest and endpoint; the old signer is freed.
    ///
    /// Requirements:
    /// - the caller has a node that is not unbonding;
    /// - `signer` is not zero and signs for no other operator;
    /// - `endpoint` is not empty.
    ///
    /// Emits: `NodeUpdated`.
    function update(address signer, bytes32 modelDigest, string calldata endpoint) external;

    /// @notice Adds `amount` GYM to the caller's stake (pulled with `transferFrom`).
    ///
    /// Requirements:
    /// - the caller has a node that is not unbonding;
    /// - `amount` is not zero and the caller approved this contract for it.
    ///
    /// Emits: `StakeAdded`.
    function addStake(uint256 amount) external;

    /// @notice Starts unbonding the caller's node: it stops being active at once, its stake stays
    /// slashable for `UNBONDING_DELAY()` seconds, then `withdraw` returns it.
    ///
    /// Requirements: the caller has a node that is not unbonding.
    ///
    /// Emits: `NodeDeregistered`.
    function deregister() external;

    /// @notice Returns the caller's remaining stake, deletes its node and frees its signer.
    ///
    /// Requirements:
    /// - the caller has a node and has deregistered it;
    /// - its unbonding delay is over.
    ///
    /// Emits: `StakeWithdrawn`.
    function withdraw() external;

    // ---------------------------------------------------------------- challenges

    /// @notice Opens a challenge against `operator`'s receipt `receiptHash` (its EIP-712
    /// digest), signed by the node as `signature` (65 bytes r || s || v); `evidenceCid` names
    /// the evidence on IPFS. Anyone may call it; no bond is taken.
    ///
    /// Requirements:
    /// - `operator` has a node (bonded or unbonding);
    /// - `signature` recovers, over `receiptHash`, to a key `operator` has named as its signer
    ///   (the current one or an earlier one: rotating keys does not retire old receipts);
    /// - `evidenceCid` is not empty;
    /// - no challenge of the receipt (`operator`, `receiptHash`) is upheld;
    /// - no challenge of the receipt is open, except that the committee may challenge a receipt
    ///   whose open challenge is a bond-free one (not the committee's): a dismissed challenge
    ///   does not count.
    ///
    /// Emits: `ChallengeOpened`.
    function challenge(
        address operator,
        bytes32 receiptHash,
        bytes calldata signature,
        string calldata evidenceCid
    ) external returns (uint256 challengeId);

    // ---------------------------------------------------------------- governance

    /// @notice Slashes `amount` of `operator`'s stake for challenge `challengeId` and pays it to
    /// `beneficiary`; an open challenge becomes upheld. A node left below `minStake()` stays
    /// registered but is no longer active (`isActive`) until it adds stake.
    ///
    /// Requirements:
    /// - the caller is governance or the committee;
    /// - challenge `challengeId` exists, is against `operator` and was not dismissed;
    /// - its receipt was not slashed before (for this challenge or another one);
    /// - `operator` still has a node;
    /// - `amount` is not zero and at most `operator`'s stake;
    /// - `beneficiary` is not zero and not this contract.
    ///
    /// Emits: `NodeSlashed`, and `ChallengeResolved` when the challenge was open.
    function slash(address operator, uint256 amount, uint256 challengeId, address beneficiary) external;

    /// @notice Upholds or dismisses the open challenge `challengeId` without slashing.
    ///
    /// Requirements:
    /// - the caller is governance or the committee;
    /// - challenge `challengeId` exists and is open.
    ///
    /// Emits: `ChallengeResolved`.
    function resolveChallenge(uint256 challengeId, bool upheld) external;

    // ---------------------------------------------------------------- views

    /// @notice `operator`'s node; all zero when it has none.
    ///
    /// Requirements: none.
    ///
    /// Emits: nothing.
    function nodeOf(address operator) external view returns (Node memory);

    /// @notice The operator that `signer` signs for; zero when none.
    ///
    /// Requirements: none.
    ///
    /// Emits: nothing.
    function operatorOfSigner(address signer) external view returns (address);

    /// @notice Whether `operator` has ever named `signer` as its receipt signer (while it has a
    /// node): receipts by such a key can be challenged.
    ///
    /// Requirements: none.
    ///
    /// Emits: nothing.
    function isSignerOf(address operator, address signer) external view returns (bool);

    /// @notice Whether `operator` has a bonded node staking at least `minStake()`.
    ///
    /// Requirements: none.
    ///
    /// Emits: nothing.
    function isActive(address operator) external view returns (bool);

    /// @notice Where `operator`'s receipt `receiptHash` stands: its latest challenges and the
    /// one it was slashed for; all zero when it was never challenged.
    ///
    /// Requirements: none.
    ///
    /// Emits: nothing.
    function receiptRecord(address operator, bytes32 receiptHash) external view returns (ReceiptRecord memory);

    /// @notice Challenge `challengeId`; all zero when it does not exist.
    ///
    /// Requirements: none.
    ///
    /// Emits: nothing.
    function challengeOf(uint256 challengeId) external view returns (Challenge memory);

    /// @notice Number of challenges opened so far (the highest challenge id).
    ///
    /// Requirements: none.
    ///
    /// Emits: nothing.
    function challengeCount() external view returns (uint256);

    /// @notice The verifier committee allowed, besides governance, to slash and resolve
    /// challenges; zero when there is none.
    ///
    /// Requirements: none.
    ///
    /// Emits: nothing.
    function committee() external view returns (address);

    /// @notice Sum of every node's stake, bonded or unbonding: what this contract holds.
    ///
    /// Requirements: none.
    ///
    /// Emits: nothing.
    function totalStaked() external view returns (uint256);
}
