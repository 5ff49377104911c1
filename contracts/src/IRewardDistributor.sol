// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";

import {IVerifierCommittee} from "./IVerifierCommittee.sol";

/// @title IRewardDistributor
/// @notice Epoch rewards attested by the verifier committee and claimed on chain with Merkle
/// proofs (docs/design.md 4.5).
///
/// Time is cut into epochs of `epochBlocks()` blocks from `startBlock()`: epoch e covers blocks
/// [startBlock + e·epochBlocks, startBlock + (e+1)·epochBlocks − 1]. Each epoch has a budget
/// (GYM base units) split into four pools, in basis points: 0 data, 1 compute, 2 verification,
/// 3 availability (`budgetOf`; governance changes it from the current epoch on). Off chain, the
/// reward table of an ended epoch is computed from public data, published (`tableCid`) and
/// committed to as the root of an OpenZeppelin StandardMerkleTree over ("address", "uint256")
/// leaves: leaf = keccak256(bytes.concat(keccak256(abi.encode(account, amount)))).
///
/// The committee's verifiers sign `rewardDigest(epoch, root, total, tableCid)` with their BLS
/// keys; anyone submits the aggregate to `attest`, which needs signers holding two thirds of the
/// committee's current active stake (the set `activeSet()` returns now, not that of some
/// earlier moment). Governance (the DAO timelock) may `reverse` an attestation within the
/// appeal window fixed when it was attested (`finalAt`); the epoch may then be attested anew.
/// From `finalAt` on, anyone may `claim` an account's amount, once, paid to the account from
/// the treasury (the DAO timelock, which approved this contract for the rewards).
interface IRewardDistributor {
    /// @notice Where an epoch's root stands. `Reversed`: governance reversed the last attested
    /// root (kept for the record); the epoch may be attested again.
    enum Status {
        None,
        Attested,
        Reversed
    }

    /// @notice An epoch's attested (or reversed) root. `total` is the sum of the table's
    /// amounts, `claimed` what has been paid of it, `attestedAt` the attestation's timestamp
    /// (0 when never attested), `finalAt` when claims open (`finalAt(epoch)`) and `tableCid`
    /// where the reward table is published.
    struct EpochInfo {
        Status status;
        bytes32 root;
        uint256 total;
        uint256 claimed;
        uint64 attestedAt;
        uint64 finalAt;
        string tableCid;
    }

    // ---------------------------------------------------------------- events

    /// @notice `root` of `epoch`, its reward table at `tableCid` summing to `total`, was
    /// attested by the verifiers in `signerBitmap` (bit i = slot i), holding `signerStake` of the
    /// committee's `activeStake`.
    event RootAttested(
        uint256 indexed epoch,
        bytes32 root,
        uint256 total,
        string tableCid,
        uint256 signerBitmap,
        uint256 signerStake,
        uint256 activeStake
    );

    /// @notice Governance reversed `root`, the attested root of `epoch`.
    event RootReversed(uint256 indexed epoch, bytes32 root);

    /// @notice `amount` of `epoch`'s rewards was paid to `account`.
    event Claimed(uint256 indexed epoch, address indexed account, uint256 amount);

    /// @notice From `fromEpoch` on, each epoch's budget is `budget`, split as `poolBps`.
    event BudgetSet(uint256 indexed fromEpoch, uint256 budget, uint16[4] poolBps);

    /// @notice Governance set the appeal window of later attestations to `appealWindow` seconds.
    event AppealWindowSet(uint64 appealWindow);

    // ---------------------------------------------------------------- errors

    /// @notice `caller` is not governance.
    error RewardsNotGovernance(address caller);
    /// @notice A constructor or budget parameter is out of range (`name`, `value`; 0 for a zero
    /// address).
    error RewardsInvalidParameter(string name, uint256 value);
    /// @notice The pools' basis points sum to `sum`, not 10,000.
    error RewardsInvalidSplit(uint256 sum);
    /// @notice `appealWindow` exceeds `maxAppealWindow`.
    error RewardsAppealWindowTooLong(uint64 appealWindow, uint64 maxAppealWindow);
    /// @notice Block `blockNumber` is before `startBlock`, in no epoch.
    error RewardsBeforeStart(uint256 blockNumber, uint256 startBlock);
    /// @notice `epoch` ends at block `lastBlock`; this is block `blockNumber`.
    error RewardsEpochNotOver(uint256 epoch, uint256 lastBlock, uint256 blockNumber);
    /// @notice `epoch` already has an attested root, `root` (governance may reverse it).
    error RewardsEpochAttested(uint256 epoch, bytes32 root);
    /// @notice The root of `epoch` is zero.
    error RewardsZeroRoot(uint256 epoch);
    /// @notice The table of `epoch` sums to `total`, over the epoch's `budget`.
    error RewardsOverBudget(uint256 epoch, uint256 total, uint256 budget);
    /// @notice The proof's set hashes to `setHash`, not to the committee's current
    /// `currentSetHash`.
    error RewardsStaleSet(bytes32 setHash, bytes32 currentSetHash);
    /// @notice The signer bitmap is empty, or names `index`, a slot not active in the set.
    error RewardsInvalidSigner(uint256 index);
    /// @notice `nonSigners` lists `index`, which is not an active slot outside the signer bitmap
    /// (or is listed twice).
    error RewardsInvalidNonSigner(uint256 index);
    /// @notice `nonSigners` leaves out `index`, an active slot outside the signer bitmap.
    error RewardsMissingNonSigner(uint256 index);
    /// @notice Signers hold `signerStake` of `activeStake`: less than two thirds.
    error RewardsBelowThreshold(uint256 signerStake, uint256 activeStake);
    /// @notice The hash-to-G1 hint does not prove H(rewardDigest(...)) of `epoch`.
    error RewardsInvalidHashHint(uint256 epoch);
    /// @notice The aggregate signature does not verify on the reward digest of `epoch`.
    error RewardsInvalidSignature(uint256 epoch);
    /// @notice `epoch` has no attested root (never attested, or reversed).
    error RewardsNotAttested(uint256 epoch);
    /// @notice The appeal window of `epoch`'s root ended at `finalAt`; it is `timestamp`.
    error RewardsAppealWindowOver(uint256 epoch, uint256 finalAt, uint256 timestamp);
    /// @notice `epoch`'s root is claimable from `finalAt`; it is `timestamp`.
    error RewardsNotFinal(uint256 epoch, uint256 finalAt, uint256 timestamp);
    /// @notice `account` already claimed its rewards of `epoch`.
    error RewardsAlreadyClaimed(uint256 epoch, address account);
    /// @notice (`account`, `amount`) is not a leaf of `epoch`'s root by the given proof.
    error RewardsInvalidProof(uint256 epoch, address account, uint256 amount);
    /// @notice Paying `amount` would bring `epoch`'s claims from `claimed` past its `total`.
    error RewardsExceedsTotal(uint256 epoch, uint256 claimed, uint256 amount, uint256 total);

    // ---------------------------------------------------------------- attest, reverse, claim

    /// @notice Records `root`, the Merkle root of `epoch`'s reward table (published at
    /// `tableCid`, summing to `total`), signed by the verifiers in `signerBitmap` (bit i = slot
    /// i of the committee's current set) as `proof` shows (`IVerifierCommittee.SettlementProof`:
    /// the set as `activeSet()` returns it, the non-signers, σ, apk2 and the hash-to-G1 hint
    /// of `rewardDigest(epoch, root, total, tableCid)`). Anyone may submit it. Moves no tokens.
    ///
    /// Requirements:
    /// - `epoch` is over: `block.number` is past its last block;
    /// - no attested root stands for `epoch` (never attested, or reversed);
    /// - `root` is not zero and `total` is at most `budgetOf(epoch)`'s budget;
    /// - `proof.set` is the committee's current set (hashes to its `setHash()`);
    /// - the bitmap is not empty and names only active slots of that set; `proof.nonSigners`
    ///   names every other active slot once (one byte each, any order);
    /// - the signers hold at least two thirds of the set's active stake;
    /// - the hint proves H(digest); σ verifies on the digest under (apk1 − the non-signers'
    ///   pk1, apk2), that key not at infinity.
    ///
    /// Emits: `RootAttested`.
    function attest(
        uint256 epoch,
        bytes32 root,
        uint256 total,
        string calldata tableCid,
        uint256 signerBitmap,
        IVerifierCommittee.SettlementProof calldata proof
    ) external;

    /// @notice Reverses the attested root of `epoch`: nothing can be claimed from it, and the
    /// epoch may be attested again (a new root).
    ///
    /// Requirements: the caller is governance; `epoch` has an attested root whose appeal window
    /// (until `finalAt(epoch)`) is not over.
    ///
    /// Emits: `RootReversed`.
    function reverse(uint256 epoch) external;

    /// @notice Pays `amount` of `epoch`'s rewards to `account` from the treasury
    /// (`transferFrom`), once. Anyone may call it for any account.
    ///
    /// Requirements:
    /// - `epoch` has an attested root and `block.timestamp` ≥ `finalAt(epoch)`;
    /// - `account` has not claimed for `epoch`;
    /// - `proof` proves leaf keccak256(bytes.concat(keccak256(abi.encode(account, amount)))) in
    ///   the root (OpenZeppelin `MerkleProof`, sorted pairs);
    /// - the epoch's claims stay within its `total`;
    /// - the treasury holds `amount` and approved this contract for it.
    ///
    /// Emits: `Claimed`.
    function claim(uint256 epoch, address account, uint256 amount, bytes32[] calldata proof) external;

    // ---------------------------------------------------------------- governance

    /// @notice Sets the budget of every epoch from the current one on: `budgetPerEpoch` GYM
    /// base units, split into the pools as `poolBps` (data, compute, verification,
    /// availability). Earlier epochs keep theirs.
    ///
    /// Requirements: the caller is governance; `poolBps` sums to 10,000; `budgetPerEpoch` fits
    /// 128 bits.
    ///
    /// Emits: `BudgetSet`.
    function setBudget(uint256 budgetPerEpoch, uint16[4] calldata poolBps) external;

    /// @notice Sets the appeal window (seconds) of attestations made from now on; attested roots
    /// keep the `finalAt` they were attested with.
    ///
    /// Requirements: the caller is governance; `appealWindow` ≤ `MAX_APPEAL_WINDOW()`.
    ///
    /// Emits: `AppealWindowSet`.
    function setAppealWindow(uint64 appealWindow) external;

    // ---------------------------------------------------------------- views

    /// @notice The digest the verifiers sign for `root` of `epoch`: keccak256(abi.encode(
    /// REWARD_TYPEHASH, block.chainid, this contract, epoch, root, total,
    /// keccak256(bytes(tableCid)))).
    function rewardDigest(uint256 epoch, bytes32 root, uint256 total, string calldata tableCid)
        external
        view
        returns (bytes32);

    /// @notice The budget of `epoch` and its split into the four pools (basis points): the
    /// latest `setBudget` (or the constructor's) that applies from `epoch` or earlier.
    function budgetOf(uint256 epoch) external view returns (uint256 budget, uint16[4] memory poolBps);

    /// @notice The epoch block `blockNumber` is in (reverts before `startBlock`).
    function epochOf(uint256 blockNumber) external view returns (uint256);

    /// @notice The first and last block of `epoch` (saturating at 2^256 − 1 for epochs past
    /// 2^64, which never come).
    function epochBounds(uint256 epoch) external view returns (uint256 firstBlock, uint256 lastBlock);

    /// @notice The epoch of the current block.
    function currentEpoch() external view returns (uint256);

    /// @notice Where `epoch`'s root stands.
    function epochInfo(uint256 epoch) external view returns (EpochInfo memory);

    /// @notice From when `epoch`'s attested root may be claimed (attestation time + the appeal
    /// window then); 0 when it was never attested.
    function finalAt(uint256 epoch) external view returns (uint256);

    /// @notice Whether `account` claimed its rewards of `epoch`.
    function isClaimed(uint256 epoch, address account) external view returns (bool);

    /// @notice The reward token (GymToken).
    function token() external view returns (IERC20);

    /// @notice The committee whose current set attests roots.
    function committee() external view returns (IVerifierCommittee);

    /// @notice The DAO timelock: reverses roots, sets the budget and the appeal window.
    function governance() external view returns (address);

    /// @notice Who pays the rewards (`transferFrom`; the DAO timelock on the devnet).
    function treasury() external view returns (address);

    /// @notice The block epoch 0 starts at (the deployment's).
    function startBlock() external view returns (uint256);

    /// @notice Blocks per epoch.
    function epochBlocks() external view returns (uint64);

    /// @notice Seconds after attestation during which governance may reverse a root (for
    /// attestations made now).
    function appealWindow() external view returns (uint64);
}
