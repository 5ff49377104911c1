// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";

import {BN254} from "./BN254.sol";
import {IRewardDistributor} from "./IRewardDistributor.sol";
import {IVerifierCommittee} from "./IVerifierCommittee.sol";

/// @title RewardDistributor
/// @notice Epoch reward roots attested by the verifier committee, claimed with Merkle proofs
/// (see `IRewardDistributor`, docs/design.md 4.5).
///
/// The attestation is the committee's `settle` check (docs/committee.md "Keys and
/// signatures") on another message, written plainly rather than in settle's gas-saving
/// assembly: it runs once per epoch. It takes the committee's current set, parsed as
/// `IVerifierCommittee` lays it out (a header of apk1.x, apk1.y, the active stake and the
/// active bitmap, then per slot pk1.x, pk1.y and a 12-byte stake), and checks it against
/// `committee.setHash()`: a verifier that left the set no longer attests, one that joined
/// does.
///
/// Finality: an attestation's appeal window is fixed when it is made (`finalAt`), so
/// `reverse` (before `finalAt`) and `claim` (from `finalAt`) never overlap, and no claim is
/// ever paid from a root that is later reversed: claims of a re-attested epoch start from
/// nothing. Claims pay from the treasury by `transferFrom` after every state change; the
/// distributor holds no tokens.
contract RewardDistributor is IRewardDistributor {
    using SafeERC20 for IERC20;

    /// @notice The longest appeal window governance may set.
    uint64 public constant MAX_APPEAL_WINDOW = 7 days;
    /// @notice Basis points of a whole budget; the pools' split sums to it.
    uint256 public constant BPS = 10_000;
    bytes32 public constant REWARD_TYPEHASH = keccak256(
        "GymRewardRoot(uint256 chainId,address distributor,uint256 epoch,bytes32 root,uint256 total,bytes32 tableCid)"
    );

    /// @dev Bytes of the committee set's header and of one slot's entry (IVerifierCommittee).
    uint256 private constant _SET_HEADER = 0x80;
    uint256 private constant _SET_ENTRY = 0x4c;

    /// @inheritdoc IRewardDistributor
    IERC20 public immutable token;
    /// @inheritdoc IRewardDistributor
    IVerifierCommittee public immutable committee;
    /// @inheritdoc IRewardDistributor
    address public immutable governance;
    /// @inheritdoc IRewardDistributor
    address public immutable treasury;
    /// @inheritdoc IRewardDistributor
    uint256 public immutable startBlock;
    /// @inheritdoc IRewardDistributor
    uint64 public immutable epochBlocks;

    /// @inheritdoc IRewardDistributor
    uint64 public appealWindow;

    /// @dev An epoch's root. `claim` reads words 0 to 2 and rewrites word 2.
    struct Record {
        // word 0
        Status status;
        uint64 attestedAt;
        uint64 finalAt;
        // word 1
        bytes32 root;
        // word 2 (total ≤ a budget, which fits 128 bits)
        uint128 total;
        uint128 claimed;
        string tableCid;
    }

    /// @dev A budget that applies from `fromEpoch` until the next checkpoint's.
    struct Budget {
        uint64 fromEpoch;
        uint128 budget;
        uint16[4] poolBps;
    }

    mapping(uint256 epoch => Record) private _epochs;
    /// @dev Bit e % 256 of word e / 256: whether the account claimed epoch e. An account that
    /// claims epoch after epoch writes a fresh storage word once per 256 epochs, not per claim.
    mapping(address account => mapping(uint256 word => uint256 bits)) private _claimedEpochs;
    /// @dev Ascending `fromEpoch`, the first from epoch 0.
    Budget[] private _budgets;

    modifier onlyGovernance() {
        if (msg.sender != governance) revert RewardsNotGovernance(msg.sender);
        _;
    }

    /// @notice Epoch 0 starts at this block. `budgetPerEpoch` and `poolBps` apply from epoch 0
    /// (see `setBudget`); `treasury` pays the claims and must approve this contract.
    ///
    /// Requirements: no address is zero; `epochBlocks_` is not zero; `appealWindow_` ≤
    /// `MAX_APPEAL_WINDOW`; `poolBps` sums to 10,000; `budgetPerEpoch` fits 128 bits.
    ///
    /// Emits: `BudgetSet` (from epoch 0).
    constructor(
        IERC20 token_,
        IVerifierCommittee committee_,
        address governance_,
        address treasury_,
        uint64 epochBlocks_,
        uint64 appealWindow_,
        uint256 budgetPerEpoch,
        uint16[4] memory poolBps
    ) {
        if (address(token_) == address(0)) revert RewardsInvalidParameter("token", 0);
        if (address(committee_) == address(0)) revert RewardsInvalidParameter("committee", 0);
        if (governance_ == address(0)) revert RewardsInvalidParameter("governance", 0);
        if (treasury_ == address(0)) revert RewardsInvalidParameter("treasury", 0);
        if (epochBlocks_ == 0) revert RewardsInvalidParameter("epochBlocks", 0);
        if (appealWindow_ > MAX_APPEAL_WINDOW) revert RewardsAppealWindowTooLong(appealWindow_, MAX_APPEAL_WINDOW);
        token = token_;
        committee = committee_;
        governance = governance_;
        treasury = treasury_;
        startBlock = block.number;
        epochBlocks = epochBlocks_;
        appealWindow = appealWindow_;
        _setBudgetFrom(0, budgetPerEpoch, poolBps);
    }

    // ---------------------------------------------------------------- attest, reverse, claim

    /// @inheritdoc IRewardDistributor
    /// @dev A σ off the curve reverts in BN254's ecAdd (`BN254PrecompileFailed(0x06)`); an apk2
    /// off the curve (or outside G2's subgroup) fails the pairing (`RewardsInvalidSignature`).
    function attest(
        uint256 epoch,
        bytes32 root,
        uint256 total,
        string calldata tableCid,
        uint256 signerBitmap,
        IVerifierCommittee.SettlementProof calldata proof
    ) external {
        uint256 lastBlock = _lastBlock(epoch);
        if (block.number <= lastBlock) revert RewardsEpochNotOver(epoch, lastBlock, block.number);
        Record storage record = _epochs[epoch];
        if (record.status == Status.Attested) revert RewardsEpochAttested(epoch, record.root);
        if (root == bytes32(0)) revert RewardsZeroRoot(epoch);
        uint256 budget = _budgetAt(epoch).budget;
        if (total > budget) revert RewardsOverBudget(epoch, total, budget);

        bytes32 digest = _rewardDigest(epoch, root, total, keccak256(bytes(tableCid)));
        (uint256 signerStake, uint256 activeStake) = _verifyQuorum(epoch, digest, signerBitmap, proof);

        uint64 attestedAt = uint64(block.timestamp);
        record.status = Status.Attested;
        record.attestedAt = attestedAt;
        record.finalAt = attestedAt + appealWindow;
        record.root = root;
        // casting to uint128 is safe: total <= budget, which setBudget keeps within 128 bits
        // forge-lint: disable-next-line(unsafe-typecast)
        record.total = uint128(total);
        record.claimed = 0;
        record.tableCid = tableCid;
        emit RootAttested(epoch, root, total, tableCid, signerBitmap, signerStake, activeStake);
    }

    /// @inheritdoc IRewardDistributor
    function reverse(uint256 epoch) external onlyGovernance {
        Record storage record = _epochs[epoch];
        if (record.status != Status.Attested) revert RewardsNotAttested(epoch);
        uint256 finalAt_ = record.finalAt;
        // forge-lint: disable-next-line(block-timestamp)
        if (block.timestamp >= finalAt_) revert RewardsAppealWindowOver(epoch, finalAt_, block.timestamp);
        record.status = Status.Reversed;
        emit RootReversed(epoch, record.root);
    }

    /// @inheritdoc IRewardDistributor
    function claim(uint256 epoch, address account, uint256 amount, bytes32[] calldata proof) external {
        Record storage record = _epochs[epoch];
        if (record.status != Status.Attested) revert RewardsNotAttested(epoch);
        uint256 finalAt_ = record.finalAt;
        // forge-lint: disable-next-line(block-timestamp)
        if (block.timestamp < finalAt_) revert RewardsNotFinal(epoch, finalAt_, block.timestamp);
        _markClaimed(epoch, account); // a refusal below undoes it
        // OpenZeppelin StandardMerkleTree's leaf of ("address", "uint256")
        bytes32 leaf = keccak256(bytes.concat(keccak256(abi.encode(account, amount))));
        if (!MerkleProof.verifyCalldata(proof, record.root, leaf)) revert RewardsInvalidProof(epoch, account, amount);
        uint256 claimed = record.claimed;
        uint256 total = record.total;
        // a table whose amounts sum past its total: an attested mistake, refused, not paid
        if (amount > total - claimed) revert RewardsExceedsTotal(epoch, claimed, amount, total);
        // casting to uint128 is safe: claimed + amount <= total, a uint128
        // forge-lint: disable-next-line(unsafe-typecast)
        record.claimed = uint128(claimed + amount);
        emit Claimed(epoch, account, amount);
        token.safeTransferFrom(treasury, account, amount);
    }

    // ---------------------------------------------------------------- governance

    /// @inheritdoc IRewardDistributor
    function setBudget(uint256 budgetPerEpoch, uint16[4] calldata poolBps) external onlyGovernance {
        _setBudgetFrom(currentEpoch(), budgetPerEpoch, poolBps);
    }

    /// @inheritdoc IRewardDistributor
    function setAppealWindow(uint64 appealWindow_) external onlyGovernance {
        if (appealWindow_ > MAX_APPEAL_WINDOW) revert RewardsAppealWindowTooLong(appealWindow_, MAX_APPEAL_WINDOW);
        appealWindow = appealWindow_;
        emit AppealWindowSet(appealWindow_);
    }

    // ---------------------------------------------------------------- views

    /// @inheritdoc IRewardDistributor
    function rewardDigest(uint256 epoch, bytes32 root, uint256 total, string calldata tableCid)
        external
        view
        returns (bytes32)
    {
        return _rewardDigest(epoch, root, total, keccak256(bytes(tableCid)));
    }

    /// @inheritdoc IRewardDistributor
    function budgetOf(uint256 epoch) external view returns (uint256 budget, uint16[4] memory poolBps) {
        Budget storage b = _budgetAt(epoch);
        return (b.budget, b.poolBps);
    }

    /// @inheritdoc IRewardDistributor
    function epochOf(uint256 blockNumber) public view returns (uint256) {
        if (blockNumber < startBlock) revert RewardsBeforeStart(blockNumber, startBlock);
        return (blockNumber - startBlock) / epochBlocks;
    }

    /// @inheritdoc IRewardDistributor
    function epochBounds(uint256 epoch) external view returns (uint256 firstBlock, uint256 lastBlock) {
        lastBlock = _lastBlock(epoch);
        firstBlock = lastBlock == type(uint256).max ? type(uint256).max : lastBlock + 1 - epochBlocks;
    }

    /// @inheritdoc IRewardDistributor
    function currentEpoch() public view returns (uint256) {
        return epochOf(block.number);
    }

    /// @inheritdoc IRewardDistributor
    function epochInfo(uint256 epoch) external view returns (EpochInfo memory) {
        Record storage r = _epochs[epoch];
        return EpochInfo({
            status: r.status,
            root: r.root,
            total: r.total,
            claimed: r.claimed,
            attestedAt: r.attestedAt,
            finalAt: r.finalAt,
            tableCid: r.tableCid
        });
    }

    /// @inheritdoc IRewardDistributor
    function finalAt(uint256 epoch) external view returns (uint256) {
        return _epochs[epoch].finalAt;
    }

    /// @inheritdoc IRewardDistributor
    function isClaimed(uint256 epoch, address account) external view returns (bool) {
        return (_claimedEpochs[account][epoch >> 8] >> (epoch & 0xff)) & 1 == 1;
    }

    // ---------------------------------------------------------------- internal

    function _rewardDigest(uint256 epoch, bytes32 root, uint256 total, bytes32 tableCidHash)
        private
        view
        returns (bytes32)
    {
        return keccak256(abi.encode(REWARD_TYPEHASH, block.chainid, address(this), epoch, root, total, tableCidHash));
    }

    /// @dev The last block of `epoch`, saturating at 2^256 − 1 from epoch 2^64 − 1 on (which no
    /// chain reaches), so that no epoch number overflows the arithmetic.
    function _lastBlock(uint256 epoch) private view returns (uint256) {
        if (epoch >= type(uint64).max) return type(uint256).max;
        return startBlock + (epoch + 1) * epochBlocks - 1;
    }

    /// @dev The budget checkpoint of `epoch`: the last with fromEpoch ≤ epoch (binary search;
    /// the first checkpoint is from epoch 0).
    function _budgetAt(uint256 epoch) private view returns (Budget storage) {
        uint256 low;
        uint256 high = _budgets.length;
        while (high - low > 1) {
            uint256 mid = (low + high) / 2;
            if (_budgets[mid].fromEpoch <= epoch) low = mid;
            else high = mid;
        }
        return _budgets[low];
    }

    /// @dev Sets `account`'s bit of `epoch`, refusing a second claim.
    function _markClaimed(uint256 epoch, address account) private {
        mapping(uint256 word => uint256 bits) storage words = _claimedEpochs[account];
        uint256 bits = words[epoch >> 8];
        uint256 bit = uint256(1) << (epoch & 0xff);
        if (bits & bit != 0) revert RewardsAlreadyClaimed(epoch, account);
        words[epoch >> 8] = bits | bit;
    }

    /// @dev Records a budget from `fromEpoch` on: a new checkpoint, or the last one rewritten
    /// when it starts at the same epoch.
    function _setBudgetFrom(uint256 fromEpoch, uint256 budgetPerEpoch, uint16[4] memory poolBps) private {
        if (budgetPerEpoch > type(uint128).max) revert RewardsInvalidParameter("budgetPerEpoch", budgetPerEpoch);
        uint256 sum = uint256(poolBps[0]) + poolBps[1] + poolBps[2] + poolBps[3];
        if (sum != BPS) revert RewardsInvalidSplit(sum);
        // casting is safe: both were checked to fit (an epoch number is below a block number)
        // forge-lint: disable-next-line(unsafe-typecast)
        Budget memory checkpoint = Budget(uint64(fromEpoch), uint128(budgetPerEpoch), poolBps);
        uint256 n = _budgets.length;
        if (n != 0 && _budgets[n - 1].fromEpoch == fromEpoch) _budgets[n - 1] = checkpoint;
        else _budgets.push(checkpoint);
        emit BudgetSet(fromEpoch, budgetPerEpoch, poolBps);
    }

    /// @dev Checks `proof` for `signerBitmap` on `digest` against the committee's current set,
    /// as `IRewardDistributor.attest` requires; returns the signers' and the active stake.
    function _verifyQuorum(
        uint256 epoch,
        bytes32 digest,
        uint256 signerBitmap,
        IVerifierCommittee.SettlementProof calldata proof
    ) private view returns (uint256 signerStake, uint256 activeStake) {
        bytes32 setHash = keccak256(proof.set);
        bytes32 current = committee.setHash();
        if (setHash != current) revert RewardsStaleSet(setHash, current);
        BN254.G1Point memory apk;
        (apk, signerStake, activeStake) = _signers(proof.set, signerBitmap, proof.nonSigners);
        if (3 * signerStake < 2 * activeStake) revert RewardsBelowThreshold(signerStake, activeStake);

        uint256[] calldata hint = proof.hashHint;
        uint256 hintOffset;
        assembly ("memory-safe") {
            hintOffset := hint.offset
        }
        (uint256 hx, uint256 hy, bool hinted) = BN254.hashToG1Hinted(digest, hintOffset, hint.length);
        if (!hinted) revert RewardsInvalidHashHint(epoch);
        // an aggregate key at infinity would accept σ at infinity for any message
        if (apk.X == 0 && apk.Y == 0) revert RewardsInvalidSignature(epoch);
        if (!_pairingHolds(digest, apk, proof.apk2, proof.sigma, BN254.G1Point(hx, hy))) {
            revert RewardsInvalidSignature(epoch);
        }
    }

    /// @dev The signers' aggregate key (the set's apk1 less each non-signer's pk1) and stake,
    /// and the set's active stake, after checking `signerBitmap` (not empty, active slots only)
    /// and `nonSigners` (every other active slot, once). `set` is the committee's own (its hash
    /// was checked), so well formed: every active slot has an entry.
    function _signers(bytes calldata set, uint256 signerBitmap, bytes calldata nonSigners)
        private
        view
        returns (BN254.G1Point memory apk, uint256 signerStake, uint256 activeStake)
    {
        apk = BN254.G1Point(_word(set, 0), _word(set, 0x20));
        activeStake = _word(set, 0x40);
        uint256 left; // active non-signers not listed yet
        {
            uint256 activeBitmap = _word(set, 0x60);
            uint256 outside = signerBitmap & ~activeBitmap;
            if (signerBitmap == 0 || outside != 0) revert RewardsInvalidSigner(outside == 0 ? 0 : _lowestBit(outside));
            left = activeBitmap & ~signerBitmap;
        }
        signerStake = activeStake;
        for (uint256 k; k < nonSigners.length; ++k) {
            uint256 index = uint8(nonSigners[k]);
            if ((left >> index) & 1 == 0) revert RewardsInvalidNonSigner(index);
            left &= ~(uint256(1) << index);
            (BN254.G1Point memory pk1, uint256 stake) = _entry(set, index);
            signerStake -= stake;
            apk = BN254.ecAdd(apk, BN254.neg(pk1));
        }
        if (left != 0) revert RewardsMissingNonSigner(_lowestBit(left));
    }

    /// @dev The committee's check (`BN254.verify`) with H(m) = `h` given:
    /// e(σ + γ·apk1, −G2) · e(H(m) + γ·G1, apk2) = 1, γ = `BN254.gamma(digest, apk1, apk2, σ)`.
    function _pairingHolds(
        bytes32 digest,
        BN254.G1Point memory apk1,
        BN254.G2Point memory apk2,
        BN254.G1Point memory sigma,
        BN254.G1Point memory h
    ) private view returns (bool valid) {
        uint256 gamma = BN254.gamma(digest, apk1, apk2, sigma);
        BN254.G1Point memory lhs = BN254.ecAdd(sigma, BN254.ecMul(apk1, gamma));
        BN254.G1Point memory rhs = BN254.ecAdd(h, BN254.ecMul(BN254.generatorG1(), gamma));
        (valid,) = BN254.pairing2(lhs, BN254.negGeneratorG2(), rhs, apk2);
    }

    /// @dev Slot `index`'s key and stake in `set`.
    function _entry(bytes calldata set, uint256 index) private pure returns (BN254.G1Point memory pk1, uint256 stake) {
        uint256 at = _SET_HEADER + index * _SET_ENTRY;
        pk1 = BN254.G1Point(_word(set, at), _word(set, at + 0x20));
        stake = uint96(bytes12(set[at + 0x40:at + _SET_ENTRY]));
    }

    /// @dev The 32-byte word of `set` at `offset`.
    function _word(bytes calldata set, uint256 offset) private pure returns (uint256) {
        return uint256(bytes32(set[offset:offset + 32]));
    }

    function _lowestBit(uint256 x) private pure returns (uint256 i) {
        while ((x >> i) & 1 == 0) ++i;
    }
}
