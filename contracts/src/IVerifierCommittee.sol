// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {BN254} from "./BN254.sol";

/// @title IVerifierCommittee
/// @notice Staked BLS verifier committee that judges challenges against node receipts
/// (docs/committee.md).
///
/// Verifiers stake GYM and register a BN254 key pair with a proof of possession. A challenger
/// opens a challenge here with a bond (the committee opens it in the NodeRegistry as its
/// challenger); the verifiers check the receipt off chain and sign the verdict; anyone submits
/// the aggregate signature to `settle`, which needs signers holding at least two thirds of the
/// active stake. Governance (the DAO timelock) may `reverse` a settlement during the appeal
/// window, slashing the verifiers that signed it. After the window (or a reversal) anyone
/// `finalize`s: an upheld challenge slashes the node through the NodeRegistry, pays the
/// challenger its bond and a share, and leaves the rest to the signers; a rejected one forfeits
/// the bond to the signers. Signers `claim` their part.
///
/// The active set is committed to by `setHash` = keccak256 of `activeSet()`: a header (apk1.x,
/// apk1.y, the active stake, the active bitmap; 32-byte words) then every index's pk1.x, pk1.y
/// (32 bytes each) and stake (12 bytes) over 0..slotCount-1, zeros for free or unbonding slots.
/// A challenge is judged by the set of the moment it opened (`ChallengeOpened.setHash`; the
/// `SetUpdated` event of that commitment carries its bytes), which `settle` takes in calldata,
/// until `openedAt + settlementTimeout`; after that it may only `expire`, returning the bond.
interface IVerifierCommittee {
    /// @notice Where a committee challenge stands.
    enum Status {
        None,
        Open,
        Settled,
        Reversed,
        Finalized,
        Expired
    }

    /// @notice Verdicts a settlement can carry (docs/committee.md "Messages").
    /// 1 = upheld (the receipt fails verification), 2 = rejected (it verifies).
    enum Verdict {
        None,
        Upheld,
        Rejected
    }

    /// @notice A verifier slot. `state` 0 = free, 1 = active, 2 = unbonding (out of the active
    /// set, still slashable until `unbondingEnds`).
    struct VerifierInfo {
        address verifier;
        uint96 stake;
        uint64 unbondingEnds;
        uint8 state;
        BN254.G1Point pk1;
    }

    /// @notice What `settle` checks a verdict with. `set` is the set the challenge opened with
    /// (`activeSet()` then; it hashes to the `setHash` of its `ChallengeOpened`); `nonSigners` lists the active indices not in the signer bitmap, one byte
    /// each, in any order; `sigma` is the aggregate signature and `apk2` the signers' aggregate
    /// G2 key; `hashHint` proves H(verdictDigest(...)) with no square root taken on chain
    /// (`BN254.hashToG1Hinted`, docs/committee.md "Hash to G1").
    struct SettlementProof {
        bytes set;
        bytes nonSigners;
        BN254.G1Point sigma;
        BN254.G2Point apk2;
        uint256[] hashHint;
    }

    /// @notice A committee challenge. `verdict` is the one settled (a reversal flips the outcome,
    /// not this field; see `status`). `rewardShare` is what each signer may claim once finalized.
    /// `openedAt`: when it was opened; it may `expire` from `openedAt + settlementTimeout()`.
    /// `settledAt` and `signerBitmap` are 0 for a challenge never settled (open or expired).
    struct ChallengeInfo {
        Status status;
        uint8 verdict;
        uint64 settledAt;
        uint128 signerBitmap;
        uint64 openedAt;
        address challenger;
        uint96 bond;
        address operator;
        uint96 registryChallengeId;
        bytes32 receiptHash;
        uint128 rewardShare;
        uint128 claimedBitmap;
    }

    // ---------------------------------------------------------------- events

    /// @notice The committee was bound to its NodeRegistry.
    event RegistryBound(address indexed registry);

    /// @notice `verifier` registered key `pk1` at `index` staking `stake`.
    event VerifierRegistered(address indexed verifier, uint256 indexed index, uint256 pkX, uint256 pkY, uint256 stake);

    /// @notice `verifier` added `amount`; its stake is now `stake`.
    event VerifierStakeAdded(address indexed verifier, uint256 indexed index, uint256 amount, uint256 stake);

    /// @notice `verifier` left the active set; its stake can be withdrawn from `unbondingEnds`.
    event VerifierDeregistered(address indexed verifier, uint256 indexed index, uint64 unbondingEnds);

    /// @notice `verifier` withdrew `amount` and freed `index`.
    event VerifierWithdrawn(address indexed verifier, uint256 indexed index, uint256 amount);

    /// @notice `verifier` lost `amount` for signing the reversed settlement of `challengeId`;
    /// `stake` remains. `ejected`: it fell below the minimum and left the active set.
    event VerifierSlashed(
        address indexed verifier, uint256 indexed challengeId, uint256 amount, uint256 stake, bool ejected
    );

    /// @notice The active set changed: its new commitment, number of slots and active stake,
    /// and the set itself (`activeSet()`), from which a later `settle` of a challenge opened
    /// under this commitment takes it.
    event SetUpdated(bytes32 setHash, uint256 slotCount, uint256 activeStake, bytes set);

    /// @notice `challenger` opened challenge `challengeId` (NodeRegistry challenge
    /// `registryChallengeId`) against `operator`'s receipt, bonding `bond`, while the active
    /// set's commitment was `setHash`: that set judges it. Verifiers watch this.
    event ChallengeOpened(
        uint256 indexed challengeId,
        uint256 indexed registryChallengeId,
        address indexed operator,
        address challenger,
        bytes32 receiptHash,
        bytes32 setHash,
        uint256 bond,
        string evidenceCid
    );

    /// @notice Challenge `challengeId` was settled with `verdict` and `reason`, signed by
    /// verifiers holding `signerStake` of `activeStake` (who they are: `challengeOf`'s
    /// `signerBitmap`).
    event ChallengeSettled(
        uint256 indexed challengeId, uint8 verdict, bytes32 reason, uint256 signerStake, uint256 activeStake
    );

    /// @notice Governance reversed the settlement of `challengeId`; `slashed` went to it.
    event SettlementReversed(uint256 indexed challengeId, uint256 slashed);

    /// @notice Challenge `challengeId` ended `upheld` or not: `nodeSlashed` taken from the node,
    /// `toChallenger` paid back to the challenger (bond + share), `rewardShare` per signer to
    /// claim, `toGovernance` sent to governance (a reversed pool, rounding dust).
    event ChallengeFinalized(
        uint256 indexed challengeId,
        bool upheld,
        uint256 nodeSlashed,
        uint256 toChallenger,
        uint256 rewardShare,
        uint256 toGovernance
    );

    /// @notice Challenge `challengeId` expired unsettled: `bondReturned` went back to the
    /// challenger and its NodeRegistry challenge was dismissed (when still open there).
    event ChallengeExpired(uint256 indexed challengeId, uint256 bondReturned);

    /// @notice `verifier`, at `index` when `challengeId` was settled, was paid `amount`.
    event RewardClaimed(uint256 indexed challengeId, uint256 indexed index, address indexed verifier, uint256 amount);

    /// @notice Governance set the appeal window to `appealWindow` seconds.
    event AppealWindowSet(uint64 appealWindow);

    // ---------------------------------------------------------------- errors

    /// @notice `caller` is not governance.
    error CommitteeNotGovernance(address caller);
    /// @notice `caller` is not the deployer, or the registry is already bound.
    error CommitteeCannotBind(address caller);
    /// @notice No NodeRegistry is bound yet.
    error CommitteeRegistryNotBound();
    /// @notice `stake` is below `minStake`.
    error CommitteeStakeBelowMinimum(uint256 stake, uint256 minStake);
    /// @notice A zero amount.
    error CommitteeZeroAmount();
    /// @notice `verifier` already holds slot `index`.
    error CommitteeAlreadyRegistered(address verifier, uint256 index);
    /// @notice `verifier` holds no slot.
    error CommitteeNotRegistered(address verifier);
    /// @notice `verifier` is not active (it is unbonding).
    error CommitteeNotActive(address verifier);
    /// @notice `verifier` has not deregistered.
    error CommitteeNotUnbonding(address verifier);
    /// @notice `verifier`'s stake unbonds at `unbondingEnds`; it is `timestamp` now.
    error CommitteeStillBonded(address verifier, uint64 unbondingEnds, uint256 timestamp);
    /// @notice All `maxVerifiers` slots are taken.
    error CommitteeFull(uint256 maxVerifiers);
    /// @notice Key (pk1 hash `pkHash`) was registered before; a key serves one registration.
    error CommitteeKeyUsed(bytes32 pkHash);
    /// @notice The proof of possession does not verify (or a key is not a valid point).
    error CommitteeInvalidProofOfPossession(address verifier);
    /// @notice No committee challenge `challengeId`.
    error CommitteeUnknownChallenge(uint256 challengeId);
    /// @notice Challenge `challengeId` is `status`, which the call does not accept.
    error CommitteeWrongStatus(uint256 challengeId, Status status);
    /// @notice `verdict` is neither 1 (upheld) nor 2 (rejected).
    error CommitteeInvalidVerdict(uint8 verdict);
    /// @notice An upheld verdict names the failing check in `reason`; a rejected one has none.
    error CommitteeReasonMismatch(uint8 verdict, bytes32 reason);
    /// @notice Receipt `receiptHash` is already before the committee in challenge
    /// `challengeId`, still open or upheld: one receipt is judged, and slashed for, once.
    error CommitteeReceiptChallenged(bytes32 receiptHash, uint256 challengeId);
    /// @notice The signer bitmap is empty, or names `index`, a free or unbonding slot (or one
    /// past the set).
    error CommitteeInvalidSigner(uint256 index);
    /// @notice `nonSigners` lists `index`, which is not an active slot outside the signer bitmap
    /// (or is listed twice).
    error CommitteeInvalidNonSigner(uint256 index);
    /// @notice `nonSigners` leaves out `index`, an active slot outside the signer bitmap.
    error CommitteeMissingNonSigner(uint256 index);
    /// @notice The hash-to-G1 hint does not prove H(digest) (docs/committee.md "Hash to G1").
    error CommitteeInvalidHashHint();
    /// @notice The challenge was not opened on `receiptHash` with the set hashing to `setHash`
    /// (its `ChallengeOpened` names both).
    error CommitteeNotOpenedWith(bytes32 receiptHash, bytes32 setHash);
    /// @notice Challenge `challengeId` could be settled until `deadline`; it is `timestamp`.
    error CommitteeSettlementClosed(uint256 challengeId, uint256 deadline, uint256 timestamp);
    /// @notice Signers hold `signerStake` of `activeStake`: less than two thirds.
    error CommitteeBelowThreshold(uint256 signerStake, uint256 activeStake);
    /// @notice The aggregate signature does not verify on the verdict digest.
    error CommitteeInvalidSignature(uint256 challengeId);
    /// @notice The appeal window of `challengeId` ended at `windowEnds`; it is `timestamp`.
    error CommitteeAppealWindowOver(uint256 challengeId, uint256 windowEnds, uint256 timestamp);
    /// @notice The appeal window of `challengeId` runs until `windowEnds`; it is `timestamp`.
    error CommitteeAppealWindowOpen(uint256 challengeId, uint256 windowEnds, uint256 timestamp);
    /// @notice `appealWindow` exceeds `maxAppealWindow`.
    error CommitteeAppealWindowTooLong(uint64 appealWindow, uint64 maxAppealWindow);
    /// @notice Slot `index` did not sign challenge `challengeId`, or its reward was claimed, or
    /// the challenge left nothing to claim.
    error CommitteeNothingToClaim(uint256 challengeId, uint256 index);
    /// @notice Challenge `challengeId` may expire from `expiresAt`; it is `timestamp`.
    error CommitteeNotExpired(uint256 challengeId, uint256 expiresAt, uint256 timestamp);
    /// @notice A parameter is out of range (`name`, `value`).
    error CommitteeInvalidParameter(string name, uint256 value);

    // ---------------------------------------------------------------- verifiers

    /// @notice Registers the caller with key (pk1, pk2) at the lowest free index, pulling
    /// `stake` GYM (`transferFrom`). `popSig` is σ = sk·H(popDigest(caller, pk1)).
    ///
    /// Requirements: the caller holds no slot; `stake` ≥ `minVerifierStake()` and approved;
    /// the key was never registered; the PoP verifies; a slot is free.
    ///
    /// Emits: `VerifierRegistered`, `SetUpdated`.
    function register(BN254.G1Point calldata pk1, BN254.G2Point calldata pk2, BN254.G1Point calldata popSig, uint256 stake)
        external;

    /// @notice Adds `amount` GYM to the caller's stake.
    ///
    /// Requirements: the caller is active; `amount` > 0 and approved.
    ///
    /// Emits: `VerifierStakeAdded`, `SetUpdated`.
    function addStake(uint256 amount) external;

    /// @notice Leaves the active set at once; the stake stays slashable for
    /// `DEREGISTRATION_DELAY()` seconds (longer than any appeal window), then `withdraw`.
    ///
    /// Requirements: the caller is active.
    ///
    /// Emits: `VerifierDeregistered`, `SetUpdated`.
    function deregister() external;

    /// @notice Returns the caller's remaining stake and frees its index.
    ///
    /// Requirements: the caller is unbonding and its delay is over.
    ///
    /// Emits: `VerifierWithdrawn`, `SetUpdated`.
    function withdraw() external;

    // ---------------------------------------------------------------- challenges

    /// @notice Opens a challenge against `operator`'s receipt through the NodeRegistry (as its
    /// challenger), pulling `challengeBond()` GYM from the caller.
    ///
    /// Requirements: the registry is bound; the registry's `challenge` requirements; the bond
    /// is approved; no earlier committee challenge of `receiptHash` is open, settled awaiting
    /// its appeal window, or upheld (its registry challenge open or upheld): a rejected or
    /// expired one leaves the receipt challengeable. A challenge opened in the NodeRegistry
    /// directly (governance's path, no bond) does not count: anyone could open one for free.
    ///
    /// Emits: `ChallengeOpened` (and the registry's).
    function openChallenge(address operator, bytes32 receiptHash, bytes calldata nodeSignature, string calldata evidenceCid)
        external
        returns (uint256 challengeId);

    /// @notice Settles open challenge `challengeId`, whose receipt hash is `receiptHash`, with
    /// `verdict` and `reason`, signed by the verifiers in `signerBitmap` (bit i = index i), as
    /// `proof` shows (`SettlementProof`). Moves no tokens.
    ///
    /// Requirements: the challenge is open and `openedAt + settlementTimeout()` has not come;
    /// `receiptHash` is its receipt hash and `proof.set` the set it opened with; `verdict` is 1
    /// (upheld) with a non-zero `reason`, or 2 (rejected) with a zero one; the bitmap is not
    /// empty and names only active slots of that set; `nonSigners`
    /// names every other active slot once; signers hold ≥ 2/3 of that set's active stake; the
    /// hint holds; σ verifies on `verdictDigest(...)` under (apk1 − non-signers, apk2), that key
    /// not at infinity.
    ///
    /// Emits: `ChallengeSettled`.
    function settle(
        uint256 challengeId,
        bytes32 receiptHash,
        uint8 verdict,
        bytes32 reason,
        uint256 signerBitmap,
        SettlementProof calldata proof
    ) external;

    /// @notice Ends open challenge `challengeId` that no quorum settled in time: the challenger
    /// gets its bond back and the NodeRegistry challenge is dismissed (resolved not upheld) when
    /// it is still open there. Anyone may call it. Until it is called, `settle` still works.
    ///
    /// Requirements: the challenge is open; `block.timestamp` ≥ `openedAt +
    /// settlementTimeout()`.
    ///
    /// Emits: `ChallengeExpired` (and the registry's `ChallengeResolved`).
    function expire(uint256 challengeId) external;

    /// @notice Reverses the settlement of `challengeId`: the outcome flips and every signer is
    /// slashed `verifierSlash()` (capped at its stake) to governance.
    ///
    /// Requirements: the caller is governance; the challenge is settled; its appeal window
    /// (`settledAt + appealWindow()`) is not over.
    ///
    /// Emits: `SettlementReversed`, `VerifierSlashed` per signer, `SetUpdated` when one is ejected.
    function reverse(uint256 challengeId) external;

    /// @notice Carries out the final outcome of `challengeId` (see the contract notes).
    ///
    /// Requirements: the challenge is reversed, or settled with its appeal window over.
    ///
    /// Emits: `ChallengeFinalized` (and the registry's `NodeSlashed` / `ChallengeResolved`).
    function finalize(uint256 challengeId) external;

    /// @notice Pays the reward of `challengeId` for slot `index` to the verifier that held it at
    /// settlement. Anyone may call it.
    ///
    /// Requirements: the challenge is finalized with a signers' reward; `index` signed and has
    /// not claimed.
    ///
    /// Emits: `RewardClaimed`.
    function claim(uint256 challengeId, uint256 index) external;

    // ---------------------------------------------------------------- governance

    /// @notice Sets the appeal window (seconds).
    ///
    /// Requirements: the caller is governance; `appealWindow` ≤ `MAX_APPEAL_WINDOW()`.
    ///
    /// Emits: `AppealWindowSet`.
    function setAppealWindow(uint64 appealWindow) external;

    // ---------------------------------------------------------------- views

    /// @notice The PoP digest of `verifier` for key `pk1` on this chain and committee.
    function popDigest(address verifier, BN254.G1Point calldata pk1) external view returns (bytes32);

    /// @notice The verdict digest verifiers sign for `challengeId`.
    function verdictDigest(uint256 challengeId, bytes32 receiptHash, uint8 verdict, bytes32 reason)
        external
        view
        returns (bytes32);

    /// @notice Slot `index`.
    function verifierAt(uint256 index) external view returns (VerifierInfo memory);

    /// @notice The slot `verifier` holds, and whether it holds one.
    function indexOf(address verifier) external view returns (uint256 index, bool found);

    /// @notice The latest committee challenge of receipt `receiptHash` (0: never challenged).
    function challengeOfReceipt(bytes32 receiptHash) external view returns (uint256 challengeId);

    /// @notice Committee challenge `challengeId`.
    function challengeOf(uint256 challengeId) external view returns (ChallengeInfo memory);

    /// @notice The set as `settle` takes it and `setHash` commits to: apk1.x, apk1.y, the active
    /// stake, the active bitmap, then (pk1.x, pk1.y, stake) per index 0..slotCount-1 (zeros when
    /// not active), 32-byte words.
    function activeSet() external view returns (bytes memory);

    /// @notice Seconds after `openedAt` from which an unsettled challenge may `expire`.
    function settlementTimeout() external view returns (uint64);

    /// @notice The commitment to the active set.
    function setHash() external view returns (bytes32);

    /// @notice Sum of the active verifiers' pk1.
    function apk1() external view returns (uint256 x, uint256 y);
}
