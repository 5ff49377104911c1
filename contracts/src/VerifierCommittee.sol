// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";

import {BN254} from "./BN254.sol";
import {INodeRegistry} from "./INodeRegistry.sol";
import {IVerifierCommittee} from "./IVerifierCommittee.sol";

/// @title VerifierCommittee
/// @notice BLS verifier committee over BN254 (see `IVerifierCommittee`, docs/committee.md).
///
/// Gas notes. `settle` reads six storage words: `setHash`, `apk1` (two), the active stake and
/// bitmap (one word), and the challenge's status word and receipt hash; it rewrites only the
/// status word, which `openChallenge` already made nonzero. The set comes in calldata and is
/// checked against `setHash` with one copy and one keccak; signers are checked against the
/// active bitmap, so only the non-signers' entries are read (an ecAdd each, no storage), and the
/// signers' stake is the active stake less theirs. Every membership or stake change recomputes
/// `setHash` over all `slotCount` slots: about 3 cold SLOADs per active slot plus the hash, ~7k
/// gas a slot, so ~450k gas at 64 verifiers and ~0.9M at 128, paid by the verifier joining,
/// leaving or adding stake (and by `reverse` when it ejects one), never by `settle`.
///
/// Time: `DEREGISTRATION_DELAY` (14 days) exceeds `MAX_APPEAL_WINDOW` (7 days), so a verifier
/// that signed a settlement cannot withdraw (nor free its index for someone else) before the
/// settlement's appeal window is over: `reverse` always finds it, and `claim` pays the holder
/// recorded for the index at settlement time (`_tenures`).
contract VerifierCommittee is IVerifierCommittee {
    using SafeERC20 for IERC20;

    /// @notice Slots (indices 0..127); signer bitmaps fit 128 bits.
    uint256 public constant MAX_VERIFIERS = 128;
    /// @notice Seconds between `deregister` and `withdraw`; longer than any appeal window.
    uint64 public constant DEREGISTRATION_DELAY = 14 days;
    /// @notice The longest appeal window governance may set.
    uint64 public constant MAX_APPEAL_WINDOW = 7 days;
    /// @notice Basis points denominator of `challengerShareBps`.
    uint256 public constant BPS = 10_000;
    /// @notice The longest settlement timeout the constructor accepts.
    uint64 public constant MAX_SETTLEMENT_TIMEOUT = 30 days;

    bytes32 public constant POP_TYPEHASH =
        keccak256("GymVerifierPoP(uint256 chainId,address committee,address verifier,uint256 pkX,uint256 pkY)");
    bytes32 public constant VERDICT_TYPEHASH = keccak256(
        "GymVerdict(uint256 chainId,address committee,uint256 challengeId,bytes32 receiptHash,uint8 verdict,bytes32 reason)"
    );

    uint256 private constant _P = 0x30644e72e131a029b85045b68181585d97816a916871ca8d3c208c16d87cfd47; // BN254.P

    uint8 private constant FREE = 0;
    uint8 private constant ACTIVE = 1;
    uint8 private constant UNBONDING = 2;

    /// @notice The token staked and bonded (GymToken).
    IERC20 public immutable token;
    /// @notice The DAO timelock: reverses settlements, sets the appeal window, receives slashes.
    address public immutable governance;
    /// @notice May bind the registry, once.
    address public immutable deployer;
    /// @notice Least stake of a verifier.
    uint256 public immutable minVerifierStake;
    /// @notice Bond a challenger pays to `openChallenge`.
    uint256 public immutable challengeBond;
    /// @notice Slashed from a node whose challenge is finally upheld (capped at its stake).
    uint256 public immutable nodeSlash;
    /// @notice Slashed from each signer of a reversed settlement (capped at its stake).
    uint256 public immutable verifierSlash;
    /// @notice Share of the node's slashed stake paid to the challenger, in basis points.
    uint256 public immutable challengerShareBps;
    /// @inheritdoc IVerifierCommittee
    uint64 public immutable settlementTimeout;

    /// @notice The NodeRegistry this committee opens challenges in (bound once after deployment).
    INodeRegistry public registry;
    /// @notice Seconds after settlement during which governance may reverse it.
    uint64 public appealWindow;

    /// @inheritdoc IVerifierCommittee
    bytes32 public setHash;
    BN254.G1Point private _apk1;
    /// @notice One past the highest index ever used: the length of the set `settle` takes.
    uint256 public slotCount;
    /// @dev Stake of the active verifiers (at most 128 uint96 stakes) and the active indices
    /// (bit i = index i): one storage word, which `settle` reads instead of summing the set.
    uint128 private _activeStake;
    uint128 private _activeBitmap;
    /// @notice Stake of every verifier, active or unbonding (what this contract holds for them).
    uint256 public totalStake;
    /// @notice Bonds of challenges not yet finalized.
    uint256 public openBonds;
    /// @notice Rewards finalized but not yet claimed.
    uint256 public unclaimedRewards;
    /// @notice Committee challenges opened so far (the highest id).
    uint256 public challengeCount;

    /// @dev One storage word per slot: what `setHash` needs besides the key.
    struct Slot {
        uint96 stake;
        uint64 unbondingEnds;
        uint8 state;
    }

    /// @dev Who held an index from when.
    struct Tenure {
        address verifier;
        uint64 from;
    }

    /// @dev Packed so that `settle` only rewrites word 0, made nonzero by `openChallenge`, and
    /// `expire` reads its status and `openedAt` in one word. `settle` writes word 0 whole in
    /// assembly: keep `_W0_*` below in step with this layout.
    struct Record {
        // word 0
        uint128 signerBitmap;
        uint64 settledAt;
        Status status;
        uint8 verdict;
        uint48 openedAt;
        // word 1
        address challenger;
        uint96 bond;
        // word 2
        address operator;
        uint96 registryChallengeId;
        // word 3
        bytes32 receiptHash;
        // word 4 (finalize, claim)
        uint128 rewardShare;
        uint128 claimedBitmap;
    }

    // Bit offsets in a Record's word 0 (the layout above).
    uint256 private constant _W0_SETTLED_AT = 128;
    uint256 private constant _W0_STATUS = 192;
    uint256 private constant _W0_VERDICT = 200;

    uint256 private _usedBitmap; // indices held (active or unbonding)
    mapping(uint256 index => Slot) private _slots;
    mapping(uint256 index => BN254.G1Point) private _pk1s;
    mapping(uint256 index => Tenure[]) private _tenures;
    mapping(address verifier => uint256 indexPlusOne) private _indexOf;
    mapping(bytes32 pkHash => bool) private _keyUsed;
    mapping(uint256 challengeId => Record) private _records;

    modifier onlyGovernance() {
        if (msg.sender != governance) revert CommitteeNotGovernance(msg.sender);
        _;
    }

    constructor(
        IERC20 token_,
        address governance_,
        uint256 minVerifierStake_,
        uint256 challengeBond_,
        uint256 nodeSlash_,
        uint256 verifierSlash_,
        uint256 challengerShareBps_,
        uint64 appealWindow_,
        uint64 settlementTimeout_
    ) {
        if (minVerifierStake_ == 0 || minVerifierStake_ > type(uint96).max) {
            revert CommitteeInvalidParameter("minVerifierStake", minVerifierStake_);
        }
        if (challengeBond_ > type(uint96).max) revert CommitteeInvalidParameter("challengeBond", challengeBond_);
        if (challengerShareBps_ > BPS) revert CommitteeInvalidParameter("challengerShareBps", challengerShareBps_);
        if (appealWindow_ > MAX_APPEAL_WINDOW) revert CommitteeAppealWindowTooLong(appealWindow_, MAX_APPEAL_WINDOW);
        if (settlementTimeout_ == 0 || settlementTimeout_ > MAX_SETTLEMENT_TIMEOUT) {
            revert CommitteeInvalidParameter("settlementTimeout", settlementTimeout_);
        }
        token = token_;
        governance = governance_;
        deployer = msg.sender;
        minVerifierStake = minVerifierStake_;
        challengeBond = challengeBond_;
        nodeSlash = nodeSlash_;
        verifierSlash = verifierSlash_;
        challengerShareBps = challengerShareBps_;
        appealWindow = appealWindow_;
        settlementTimeout = settlementTimeout_;
        setHash = keccak256("");
    }

    /// @notice Binds the NodeRegistry, whose `committee()` must be this contract. Deployer only, once.
    function bindRegistry(INodeRegistry registry_) external {
        if (msg.sender != deployer || address(registry) != address(0) || registry_.committee() != address(this)) {
            revert CommitteeCannotBind(msg.sender);
        }
        registry = registry_;
        emit RegistryBound(address(registry_));
    }

    // ---------------------------------------------------------------- verifiers

    /// @inheritdoc IVerifierCommittee
    function register(
        BN254.G1Point calldata pk1,
        BN254.G2Point calldata pk2,
        BN254.G1Point calldata popSig,
        uint256 stake
    ) external {
        uint256 held = _indexOf[msg.sender];
        if (held != 0) revert CommitteeAlreadyRegistered(msg.sender, held - 1);
        if (stake < minVerifierStake) revert CommitteeStakeBelowMinimum(stake, minVerifierStake);
        if (stake > type(uint96).max) revert CommitteeInvalidParameter("stake", stake);
        bytes32 pkHash = keccak256(abi.encode(pk1.X, pk1.Y));
        if (_keyUsed[pkHash]) revert CommitteeKeyUsed(pkHash);
        if (pk1.X == 0 && pk1.Y == 0) revert CommitteeInvalidProofOfPossession(msg.sender);
        (bool pairingOk,) = BN254.verify(_popDigest(msg.sender, pk1.X, pk1.Y), pk1, pk2, popSig);
        if (!pairingOk) revert CommitteeInvalidProofOfPossession(msg.sender);

        uint256 used = _usedBitmap;
        uint256 index;
        while (index < MAX_VERIFIERS && (used >> index) & 1 == 1) ++index;
        if (index == MAX_VERIFIERS) revert CommitteeFull(MAX_VERIFIERS);

        // forge-lint: disable-next-line(incorrect-shift)
        _usedBitmap = used | (1 << index);
        if (index >= slotCount) slotCount = index + 1;
        // casting to uint96 is safe: stake <= type(uint96).max was checked above
        // forge-lint: disable-next-line(unsafe-typecast)
        _slots[index] = Slot({stake: uint96(stake), unbondingEnds: 0, state: ACTIVE});
        _pk1s[index] = pk1;
        _tenures[index].push(Tenure({verifier: msg.sender, from: uint64(block.timestamp)}));
        _indexOf[msg.sender] = index + 1;
        _keyUsed[pkHash] = true;
        _apk1 = BN254.ecAdd(_apk1, pk1);
        // casting to uint128 is safe: stake <= type(uint96).max, index < 128
        // forge-lint: disable-next-line(unsafe-typecast,incorrect-shift)
        (_activeStake, _activeBitmap) = (_activeStake + uint128(stake), _activeBitmap | uint128(1 << index));
        totalStake += stake;
        emit VerifierRegistered(msg.sender, index, pk1.X, pk1.Y, stake);
        _recommit();
        token.safeTransferFrom(msg.sender, address(this), stake);
    }

    /// @inheritdoc IVerifierCommittee
    function addStake(uint256 amount) external {
        (uint256 index, Slot storage slot) = _activeSlot(msg.sender);
        if (amount == 0) revert CommitteeZeroAmount();
        uint256 stake = slot.stake + amount;
        if (stake > type(uint96).max) revert CommitteeInvalidParameter("stake", stake);
        // casting to uint96 is safe: checked on the line above
        // forge-lint: disable-next-line(unsafe-typecast)
        slot.stake = uint96(stake);
        // casting to uint128 is safe: amount < stake <= type(uint96).max
        // forge-lint: disable-next-line(unsafe-typecast)
        _activeStake += uint128(amount);
        totalStake += amount;
        emit VerifierStakeAdded(msg.sender, index, amount, stake);
        _recommit();
        token.safeTransferFrom(msg.sender, address(this), amount);
    }

    /// @inheritdoc IVerifierCommittee
    function deregister() external {
        (uint256 index, Slot storage slot) = _activeSlot(msg.sender);
        _leave(index, slot);
        emit VerifierDeregistered(msg.sender, index, slot.unbondingEnds);
        _recommit();
    }

    /// @inheritdoc IVerifierCommittee
    function withdraw() external {
        uint256 held = _indexOf[msg.sender];
        if (held == 0) revert CommitteeNotRegistered(msg.sender);
        uint256 index = held - 1;
        Slot memory slot = _slots[index];
        if (slot.state != UNBONDING) revert CommitteeNotUnbonding(msg.sender);
        // forge-lint: disable-next-line(block-timestamp)
        if (block.timestamp < slot.unbondingEnds) {
            revert CommitteeStillBonded(msg.sender, slot.unbondingEnds, block.timestamp);
        }
        delete _slots[index];
        delete _pk1s[index];
        delete _indexOf[msg.sender];
        // forge-lint: disable-next-line(incorrect-shift)
        _usedBitmap &= ~(1 << index);
        totalStake -= slot.stake;
        // The slot was already zeros in the set (unbonding): setHash does not change.
        emit VerifierWithdrawn(msg.sender, index, slot.stake);
        if (slot.stake != 0) token.safeTransfer(msg.sender, slot.stake);
    }

    // ---------------------------------------------------------------- challenges

    /// @inheritdoc IVerifierCommittee
    function openChallenge(
        address operator,
        bytes32 receiptHash,
        bytes calldata nodeSignature,
        string calldata evidenceCid
    ) external returns (uint256 challengeId) {
        INodeRegistry registry_ = registry;
        if (address(registry_) == address(0)) revert CommitteeRegistryNotBound();
        uint256 registryId = registry_.challenge(operator, receiptHash, nodeSignature, evidenceCid);
        uint256 bond = challengeBond;
        challengeId = ++challengeCount;
        _records[challengeId] = Record({
            signerBitmap: 0,
            settledAt: 0,
            status: Status.Open,
            verdict: 0,
            openedAt: uint48(block.timestamp),
            challenger: msg.sender,
            // casting to uint96 is safe: the constructor checks challengeBond fits
            // forge-lint: disable-next-line(unsafe-typecast)
            bond: uint96(bond),
            operator: operator,
            // casting to uint96 is safe: registry challenge ids count up from 1
            // forge-lint: disable-next-line(unsafe-typecast)
            registryChallengeId: uint96(registryId),
            receiptHash: receiptHash,
            rewardShare: 0,
            claimedBitmap: 0
        });
        openBonds += bond;
        emit ChallengeOpened(challengeId, registryId, operator, msg.sender, receiptHash, bond, evidenceCid);
        if (bond != 0) token.safeTransferFrom(msg.sender, address(this), bond);
    }

    /// @inheritdoc IVerifierCommittee
    function settle(
        uint256 challengeId,
        uint8 verdict,
        bytes32 reason,
        uint256 signerBitmap,
        BN254.G1Point[] calldata pk1s,
        uint96[] calldata stakes,
        BN254.G1Point calldata sigma,
        BN254.G2Point calldata apk2
    ) external {
        uint256 word0 = _recordWord0(challengeId);
        {
            // casting to uint8 is safe: the status byte of word 0
            // forge-lint: disable-next-line(unsafe-typecast)
            Status status = Status(uint8(word0 >> _W0_STATUS));
            if (status != Status.Open) {
                if (status == Status.None) revert CommitteeUnknownChallenge(challengeId);
                revert CommitteeWrongStatus(challengeId, status);
            }
        }
        if (verdict != uint8(Verdict.Upheld) && verdict != uint8(Verdict.Rejected)) {
            revert CommitteeInvalidVerdict(verdict);
        }
        bytes32 digest = _verdictDigest(challengeId, _records[challengeId].receiptHash, verdict, reason);
        // signer stake | active stake << 128, or 0 when σ does not verify
        uint256 stakeSums = _checkSettlement(digest, signerBitmap, pk1s, stakes, sigma, apk2);
        if (stakeSums == 0) revert CommitteeInvalidSignature(challengeId);

        // Word 0 of an open challenge holds only its status and `openedAt`: rewrite it whole
        // (one SSTORE) with the bitmap (below 2^128: `_checkSettlement` refused bits at or past
        // the set's length, at most 128), settledAt, status Settled and the verdict.
        _storeWord0(
            challengeId,
            (word0 & ~(uint256(0xff) << _W0_STATUS)) | signerBitmap | (block.timestamp << _W0_SETTLED_AT)
                | (uint256(uint8(Status.Settled)) << _W0_STATUS) | (uint256(verdict) << _W0_VERDICT)
        );
        emit ChallengeSettled(challengeId, verdict, reason, signerBitmap, uint128(stakeSums), stakeSums >> 128);
    }

    /// @inheritdoc IVerifierCommittee
    function expire(uint256 challengeId) external {
        Record storage record = _records[challengeId];
        Status status = record.status;
        if (status != Status.Open) {
            if (status == Status.None) revert CommitteeUnknownChallenge(challengeId);
            revert CommitteeWrongStatus(challengeId, status);
        }
        uint256 expiresAt = uint256(record.openedAt) + settlementTimeout;
        // forge-lint: disable-next-line(block-timestamp)
        if (block.timestamp < expiresAt) revert CommitteeNotExpired(challengeId, expiresAt, block.timestamp);
        record.status = Status.Expired;
        uint256 bond = record.bond;
        uint256 registryId = record.registryChallengeId;
        openBonds -= bond;
        emit ChallengeExpired(challengeId, bond);
        // Governance may have resolved (or slashed for) the registry challenge directly.
        if (registry.challengeOf(registryId).status == INodeRegistry.ChallengeStatus.Open) {
            registry.resolveChallenge(registryId, false);
        }
        if (bond != 0) token.safeTransfer(record.challenger, bond);
    }

    /// @inheritdoc IVerifierCommittee
    function reverse(uint256 challengeId) external onlyGovernance {
        Record storage record = _settled(challengeId);
        uint256 windowEnds = uint256(record.settledAt) + appealWindow;
        // forge-lint: disable-next-line(block-timestamp)
        if (block.timestamp >= windowEnds) {
            revert CommitteeAppealWindowOver(challengeId, windowEnds, block.timestamp);
        }
        record.status = Status.Reversed;

        uint256 bitmap = record.signerBitmap;
        uint256 slashed;
        bool setChanged;
        while (bitmap != 0) {
            uint256 index = _lowestBit(bitmap);
            bitmap &= bitmap - 1;
            Slot storage slot = _slots[index];
            uint8 state = slot.state;
            if (state == FREE) continue; // cannot happen: withdraw comes after the window
            uint256 stake = slot.stake;
            uint256 amount = stake < verifierSlash ? stake : verifierSlash;
            uint256 left = stake - amount;
            // casting to uint96 is safe: left <= the slot's uint96 stake
            // forge-lint: disable-next-line(unsafe-typecast)
            slot.stake = uint96(left);
            totalStake -= amount;
            slashed += amount;
            bool ejected;
            if (state == ACTIVE) {
                // casting to uint128 is safe: amount <= the slot's uint96 stake
                // forge-lint: disable-next-line(unsafe-typecast)
                _activeStake -= uint128(amount);
                if (amount != 0) setChanged = true;
                if (left < minVerifierStake) {
                    _leave(index, slot);
                    ejected = true;
                }
            }
            emit VerifierSlashed(_holderAt(index, record.settledAt), challengeId, amount, left, ejected);
        }
        emit SettlementReversed(challengeId, slashed);
        if (setChanged) _recommit();
        if (slashed != 0) token.safeTransfer(governance, slashed);
    }

    /// @inheritdoc IVerifierCommittee
    function finalize(uint256 challengeId) external {
        Record storage record = _records[challengeId];
        Status status = record.status;
        if (status == Status.None) revert CommitteeUnknownChallenge(challengeId);
        if (status != Status.Settled && status != Status.Reversed) revert CommitteeWrongStatus(challengeId, status);
        bool reversed = status == Status.Reversed;
        if (!reversed) {
            uint256 windowEnds = uint256(record.settledAt) + appealWindow;
            // forge-lint: disable-next-line(block-timestamp)
            if (block.timestamp < windowEnds) {
                revert CommitteeAppealWindowOpen(challengeId, windowEnds, block.timestamp);
            }
        }
        bool upheld = (record.verdict == uint8(Verdict.Upheld)) != reversed;
        uint256 bond = record.bond;
        uint256 registryId = record.registryChallengeId;
        address operator = record.operator;
        INodeRegistry.ChallengeStatus registryStatus = registry.challengeOf(registryId).status;

        uint256 slashAmount;
        uint256 toChallenger;
        uint256 pool;
        if (upheld) {
            if (registryStatus != INodeRegistry.ChallengeStatus.Dismissed) {
                uint256 nodeStake = registry.nodeOf(operator).stake;
                slashAmount = nodeStake < nodeSlash ? nodeStake : nodeSlash;
            }
            uint256 share = slashAmount * challengerShareBps / BPS;
            toChallenger = bond + share;
            pool = slashAmount - share;
        } else {
            pool = bond;
        }
        uint256 rewardShare;
        uint256 toGovernance = pool;
        if (!reversed) {
            uint256 signers = _popcount(record.signerBitmap);
            rewardShare = pool / signers;
            toGovernance = pool - rewardShare * signers;
            unclaimedRewards += rewardShare * signers;
        }
        record.status = Status.Finalized;
        // casting to uint128 is safe: rewardShare <= the pool, a uint96 bond or a slice of a node's stake
        // forge-lint: disable-next-line(unsafe-typecast)
        record.rewardShare = uint128(rewardShare);
        openBonds -= bond;
        emit ChallengeFinalized(challengeId, upheld, slashAmount, toChallenger, rewardShare, toGovernance);

        if (slashAmount != 0) {
            registry.slash(operator, slashAmount, registryId, address(this));
        } else if (registryStatus == INodeRegistry.ChallengeStatus.Open) {
            registry.resolveChallenge(registryId, upheld);
        }
        if (toChallenger != 0) token.safeTransfer(record.challenger, toChallenger);
        if (toGovernance != 0) token.safeTransfer(governance, toGovernance);
    }

    /// @inheritdoc IVerifierCommittee
    function claim(uint256 challengeId, uint256 index) external {
        Record storage record = _records[challengeId];
        if (record.status != Status.Finalized) revert CommitteeWrongStatus(challengeId, record.status);
        uint256 share = record.rewardShare;
        uint256 claimed = record.claimedBitmap;
        if (
            share == 0 || index >= MAX_VERIFIERS || (record.signerBitmap >> index) & 1 == 0
                || (claimed >> index) & 1 == 1
        ) revert CommitteeNothingToClaim(challengeId, index);
        // casting to uint128 is safe: index < MAX_VERIFIERS = 128 was checked
        // forge-lint: disable-next-line(unsafe-typecast,incorrect-shift)
        record.claimedBitmap = uint128(claimed | (1 << index));
        unclaimedRewards -= share;
        address verifier = _holderAt(index, record.settledAt);
        emit RewardClaimed(challengeId, index, verifier, share);
        token.safeTransfer(verifier, share);
    }

    // ---------------------------------------------------------------- governance

    /// @inheritdoc IVerifierCommittee
    function setAppealWindow(uint64 appealWindow_) external onlyGovernance {
        if (appealWindow_ > MAX_APPEAL_WINDOW) revert CommitteeAppealWindowTooLong(appealWindow_, MAX_APPEAL_WINDOW);
        appealWindow = appealWindow_;
        emit AppealWindowSet(appealWindow_);
    }

    // ---------------------------------------------------------------- views

    /// @inheritdoc IVerifierCommittee
    function popDigest(address verifier, BN254.G1Point calldata pk1) external view returns (bytes32) {
        return _popDigest(verifier, pk1.X, pk1.Y);
    }

    /// @inheritdoc IVerifierCommittee
    function verdictDigest(uint256 challengeId, bytes32 receiptHash, uint8 verdict, bytes32 reason)
        external
        view
        returns (bytes32)
    {
        return _verdictDigest(challengeId, receiptHash, verdict, reason);
    }

    /// @inheritdoc IVerifierCommittee
    function verifierAt(uint256 index) external view returns (VerifierInfo memory info) {
        Slot memory slot = _slots[index];
        if (slot.state == FREE) return info;
        Tenure[] storage tenures = _tenures[index];
        info = VerifierInfo({
            verifier: tenures[tenures.length - 1].verifier,
            stake: slot.stake,
            unbondingEnds: slot.unbondingEnds,
            state: slot.state,
            pk1: _pk1s[index]
        });
    }

    /// @inheritdoc IVerifierCommittee
    function indexOf(address verifier) external view returns (uint256 index, bool found) {
        uint256 held = _indexOf[verifier];
        return held == 0 ? (0, false) : (held - 1, true);
    }

    /// @inheritdoc IVerifierCommittee
    function challengeOf(uint256 challengeId) external view returns (ChallengeInfo memory) {
        Record storage r = _records[challengeId];
        return ChallengeInfo({
            status: r.status,
            verdict: r.verdict,
            settledAt: r.settledAt,
            signerBitmap: r.signerBitmap,
            openedAt: r.openedAt,
            challenger: r.challenger,
            bond: r.bond,
            operator: r.operator,
            registryChallengeId: r.registryChallengeId,
            receiptHash: r.receiptHash,
            rewardShare: r.rewardShare,
            claimedBitmap: r.claimedBitmap
        });
    }

    /// @inheritdoc IVerifierCommittee
    function activeSet() external view returns (BN254.G1Point[] memory pk1s, uint96[] memory stakes) {
        uint256 n = slotCount;
        pk1s = new BN254.G1Point[](n);
        stakes = new uint96[](n);
        for (uint256 i; i < n; ++i) {
            Slot memory slot = _slots[i];
            if (slot.state == ACTIVE) {
                pk1s[i] = _pk1s[i];
                stakes[i] = slot.stake;
            }
        }
    }

    /// @notice Stake of the active verifiers.
    function activeStake() external view returns (uint256) {
        return _activeStake;
    }

    /// @inheritdoc IVerifierCommittee
    function apk1() external view returns (uint256 x, uint256 y) {
        return (_apk1.X, _apk1.Y);
    }

    // ---------------------------------------------------------------- internal

    function _popDigest(address verifier, uint256 pkX, uint256 pkY) private view returns (bytes32) {
        return keccak256(abi.encode(POP_TYPEHASH, block.chainid, address(this), verifier, pkX, pkY));
    }

    function _verdictDigest(uint256 challengeId, bytes32 receiptHash, uint8 verdict, bytes32 reason)
        private
        view
        returns (bytes32)
    {
        return keccak256(
            abi.encode(VERDICT_TYPEHASH, block.chainid, address(this), challengeId, receiptHash, verdict, reason)
        );
    }

    function _activeSlot(address verifier) private view returns (uint256 index, Slot storage slot) {
        uint256 held = _indexOf[verifier];
        if (held == 0) revert CommitteeNotRegistered(verifier);
        index = held - 1;
        slot = _slots[index];
        if (slot.state != ACTIVE) revert CommitteeNotActive(verifier);
    }

    /// @dev Takes an active slot out of the active set (deregistration or ejection).
    function _leave(uint256 index, Slot storage slot) private {
        slot.state = UNBONDING;
        slot.unbondingEnds = uint64(block.timestamp) + DEREGISTRATION_DELAY;
        // casting to uint128 is safe: index < 128
        // forge-lint: disable-next-line(unsafe-typecast,incorrect-shift)
        (_activeStake, _activeBitmap) = (_activeStake - slot.stake, _activeBitmap & ~uint128(1 << index));
        _apk1 = BN254.ecAdd(_apk1, BN254.neg(_pk1s[index]));
    }

    function _settled(uint256 challengeId) private view returns (Record storage record) {
        record = _records[challengeId];
        Status status = record.status;
        if (status == Status.None) revert CommitteeUnknownChallenge(challengeId);
        if (status != Status.Settled) revert CommitteeWrongStatus(challengeId, status);
    }

    /// @dev Recomputes `setHash` over every slot: keccak256 of (pk1.x, pk1.y) for every index,
    /// then the stake of every index, as 32-byte words, zeros for a free or unbonding slot (the
    /// arrays `settle` takes, concatenated). O(slotCount) storage reads.
    function _recommit() private {
        uint256 n = slotCount;
        bytes memory packed = new bytes(n * 96);
        uint256 active;
        for (uint256 i; i < n; ++i) {
            Slot memory slot = _slots[i];
            if (slot.state != ACTIVE) continue;
            BN254.G1Point storage pk = _pk1s[i];
            uint256 x = pk.X;
            uint256 y = pk.Y;
            uint256 stake = slot.stake;
            active += stake;
            assembly ("memory-safe") {
                let keys := add(packed, 0x20)
                let p := add(keys, shl(6, i))
                mstore(p, x)
                mstore(add(p, 0x20), y)
                mstore(add(add(keys, shl(6, n)), shl(5, i)), stake)
            }
        }
        bytes32 h = keccak256(packed);
        setHash = h;
        emit SetUpdated(h, n, active);
    }

    /// @dev Everything `settle` checks but the challenge's status and the verdict: the set in
    /// calldata against `setHash` and the signers (reverting), the two-thirds quorum
    /// (reverting), and whether σ verifies on `digest` under (apk1 − non-signers, apk2).
    /// Returns the signers' stake | the active stake << 128 (each below 2^103: at most 128
    /// uint96 stakes), or 0 when σ does not verify (a valid settlement's signers hold a nonzero
    /// stake).
    ///
    /// The active stake and the active indices come from storage (`_activeStake`,
    /// `_activeBitmap`, one word), kept in step with the set `setHash` commits to (whose active
    /// slots are exactly those bits, whose stakes sum to that stake); so a signer must be a
    /// bit of `_activeBitmap`, and only the non-signers' entries of the calldata set are read
    /// (their keys subtracted from apk1, their stakes from the active stake).
    function _checkSettlement(
        bytes32 digest,
        uint256 bitmap,
        BN254.G1Point[] calldata pk1s,
        uint96[] calldata stakes,
        BN254.G1Point calldata sigma,
        BN254.G2Point calldata apk2
    ) private view returns (uint256 stakeSums) {
        uint256 m;
        uint256 signerStake;
        uint256 active;
        {
            uint256 pkOffset;
            uint256 stakeOffset;
            assembly ("memory-safe") {
                pkOffset := pk1s.offset
                stakeOffset := stakes.offset
            }
            (m, signerStake, active) = _quorum(bitmap, pkOffset, stakeOffset, pk1s.length, stakes.length);
        }
        if (signerStake * 3 < active * 2) revert CommitteeBelowThreshold(signerStake, active);
        bool infinity;
        assembly ("memory-safe") {
            mstore(m, digest)
            infinity := iszero(or(mload(add(m, 0x20)), mload(add(m, 0x40))))
            calldatacopy(add(m, 0x60), apk2, 0x80)
            calldatacopy(add(m, 0xe0), sigma, 0x40)
        }
        // An aggregate key at infinity is refused (σ at infinity would pass for any message).
        if (infinity) return 0;
        (bool valid,) = BN254.verifyAt(m);
        if (valid) stakeSums = signerStake | (active << 128);
    }

    /// @dev Sets word 0 of challenge `challengeId`'s record (see `Record`) to `word0`.
    function _storeWord0(uint256 challengeId, uint256 word0) private {
        Record storage record = _records[challengeId];
        assembly ("memory-safe") {
            sstore(record.slot, word0)
        }
    }

    /// @dev Checks the signer bitmap against the set's length `n` and the set (`n` keys at
    /// calldata `pkOffset`, `stakeCount` stakes at `stakeOffset`) against `setHash`, reverting.
    /// Returns m, the free memory pointer: memory from there is not allocated (the callers
    /// allocate nothing after this) and holds, from m + 0x120, the set as `setHash` hashes it;
    /// `_sumNonSigners` and `BN254.verifyAt` use m..m + 0x2a0 (the nine words γ hashes, then
    /// scratch over the copied set).
    function _checkSet(uint256 bitmap, uint256 pkOffset, uint256 stakeOffset, uint256 n, uint256 stakeCount)
        private
        view
        returns (uint256 m)
    {
        if (bitmap == 0) revert CommitteeInvalidSigner(0);
        if (n < 256 && bitmap >> n != 0) revert CommitteeInvalidSigner(n + _lowestBit(bitmap >> n));
        if (stakeCount != n) revert CommitteeSetMismatch(bytes32(0), setHash);
        bytes32 given;
        assembly ("memory-safe") {
            m := mload(0x40)
            let set := add(m, 0x120)
            calldatacopy(set, pkOffset, shl(6, n))
            calldatacopy(add(set, shl(6, n)), stakeOffset, shl(5, n))
            given := keccak256(set, mul(n, 0x60))
        }
        bytes32 committed = setHash;
        if (given != committed) revert CommitteeSetMismatch(given, committed);
    }

    /// @dev The set and signer checks of `_checkSettlement` (`_checkSet`, then the signers
    /// against `_activeBitmap`) and the stakes: the signers' (the active stake less the
    /// non-signers') and the active one. Returns `_checkSet`'s m, where apk1 − Σ non-signers'
    /// keys is left at m + 0x20.
    function _quorum(uint256 bitmap, uint256 pkOffset, uint256 stakeOffset, uint256 n, uint256 stakeCount)
        private
        view
        returns (uint256 m, uint256 signerStake, uint256 active)
    {
        m = _checkSet(bitmap, pkOffset, stakeOffset, n, stakeCount);
        uint256 activeBitmap;
        (active, activeBitmap) = (_activeStake, _activeBitmap);
        uint256 inactive = bitmap & ~activeBitmap;
        if (inactive != 0) revert CommitteeInvalidSigner(_lowestBit(inactive));
        signerStake = active - _sumNonSigners(m, activeBitmap & ~bitmap, pkOffset, stakeOffset);
    }

    /// @dev Σ stakes of the non-signers (the bits of `nonSigners`) in the set at calldata
    /// `pkOffset` (keys) and `stakeOffset` (stakes), already checked against `setHash`; leaves
    /// apk1 − Σ their keys at m + 0x20 (m + 0x60 scratch). Reverts when an ecAdd fails.
    function _sumNonSigners(uint256 m, uint256 nonSigners, uint256 pkOffset, uint256 stakeOffset)
        private
        view
        returns (uint256 nonSignerStake)
    {
        bool failed;
        assembly ("memory-safe") {
            let acc := add(m, 0x20)
            mstore(acc, sload(_apk1.slot))
            mstore(add(acc, 0x20), sload(add(_apk1.slot, 1)))
            for {} nonSigners {} {
                // skip eight indices at a time while none is a non-signer
                if iszero(and(nonSigners, 0xff)) {
                    nonSigners := shr(8, nonSigners)
                    pkOffset := add(pkOffset, 0x200)
                    stakeOffset := add(stakeOffset, 0x100)
                    continue
                }
                if and(nonSigners, 1) {
                    nonSignerStake := add(nonSignerStake, calldataload(stakeOffset))
                    // acc += −pk (a key in the committed set is a curve point, y in 1..P−1)
                    mstore(add(acc, 0x40), calldataload(pkOffset))
                    mstore(add(acc, 0x60), sub(_P, calldataload(add(pkOffset, 0x20))))
                    if iszero(staticcall(gas(), 0x06, acc, 0x80, acc, 0x40)) { failed := 1 }
                }
                nonSigners := shr(1, nonSigners)
                pkOffset := add(pkOffset, 0x40)
                stakeOffset := add(stakeOffset, 0x20)
            }
        }
        if (failed) revert BN254.BN254PrecompileFailed(0x06);
    }

    /// @dev Word 0 of challenge `challengeId`'s record (see `Record`).
    function _recordWord0(uint256 challengeId) private view returns (uint256 word0) {
        Record storage record = _records[challengeId];
        assembly ("memory-safe") {
            word0 := sload(record.slot)
        }
    }

    /// @dev The verifier that held `index` at time `at`: the latest tenure that began by then.
    function _holderAt(uint256 index, uint64 at) private view returns (address) {
        Tenure[] storage tenures = _tenures[index];
        uint256 i = tenures.length;
        while (i != 0) {
            Tenure storage t = tenures[--i];
            if (t.from <= at) return t.verifier;
        }
        return address(0);
    }

    function _lowestBit(uint256 x) private pure returns (uint256 i) {
        while ((x >> i) & 1 == 0) ++i;
    }

    function _popcount(uint256 x) private pure returns (uint256 count) {
        while (x != 0) {
            x &= x - 1;
            ++count;
        }
    }
}
