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
/// Gas notes (docs/committee.md "Gas"). `settle` reads one storage word, the challenge's status
/// word, which also binds its receipt hash and the set of its opening (see `Record`), and
/// rewrites it. The set comes in calldata and is checked with one copy and two keccaks; the
/// caller lists the non-signers, so only their entries are read (an ecAdd each, no storage) and
/// the signers' stake is the set's active stake less theirs; H(m) comes with a hint, checked by
/// mulmod. Every membership or stake change recomputes `setHash` over all `slotCount` slots and
/// logs the set (`SetUpdated`): about 3 cold SLOADs per active slot plus the hash and the log,
/// ~7k gas a slot, so ~450k gas at 64 verifiers and ~0.9M at 128, paid by the verifier joining,
/// leaving or adding stake (and by `reverse` when it ejects one), never by `settle`.
///
/// Time: `DEREGISTRATION_DELAY` (14 days) is at least `MAX_APPEAL_WINDOW` (7 days) plus
/// `MAX_SETTLEMENT_TIMEOUT` (7 days), and a challenge settles only before its timeout with the
/// set of its opening, so a verifier that signed a settlement (active at the opening, so
/// deregistered after it, if at all) cannot withdraw (nor free its index for someone else)
/// before the settlement's appeal window is over: `reverse` always finds it, and `claim` pays
/// the holder recorded for the index at settlement time (`_tenures`).
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
    /// @notice The longest settlement timeout the constructor accepts: a challenge settles
    /// against the set it opened with, so a signer that deregistered after the opening must
    /// still be slashable when the appeal window ends (see `settle`).
    uint64 public constant MAX_SETTLEMENT_TIMEOUT = DEREGISTRATION_DELAY - MAX_APPEAL_WINDOW;

    bytes32 public constant POP_TYPEHASH =
        keccak256("GymVerifierPoP(uint256 chainId,address committee,address verifier,uint256 pkX,uint256 pkY)");
    bytes32 public constant VERDICT_TYPEHASH = keccak256(
        "GymVerdict(uint256 chainId,address committee,uint256 challengeId,bytes32 receiptHash,uint8 verdict,bytes32 reason)"
    );

    /// @dev Bytes of the set's header (apk1, active stake, active bitmap) and of one entry.
    uint256 private constant _SET_HEADER = 0x80;
    uint256 private constant _SET_ENTRY = 0x4c;

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
    /// @dev Stake of the active verifiers (at most 128 uint96 stakes).
    uint256 private _activeStake;
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

    /// @dev Packed so that `settle` reads and rewrites only word 0, made nonzero by
    /// `openChallenge`, and `expire` reads its status and `openedAt` in one word. While a
    /// challenge is open, word 0's low 192 bits (`signerBitmap`, `settledAt`) hold the first 24
    /// bytes of keccak256(receiptHash ‖ setHash at opening), the challenge's binding: `settle`
    /// checks the receipt hash and the set in calldata against it, so it reads neither word 3
    /// nor `setHash`, and overwrites it. `settle` reads and writes word 0 whole in assembly:
    /// keep `_W0_*` below in step with this layout.
    struct Record {
        // word 0
        uint128 signerBitmap; // while open: bits 64..191 of the binding
        uint64 settledAt; // while open: bits 192..255 of the binding
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
    uint256 private constant _W0_OPENED_AT = 208;
    /// @dev Word 0's bits that hold the binding >> 64 while a challenge is open (see `Record`).
    uint256 private constant _W0_BINDING_MASK = (1 << 192) - 1;

    uint256 private _usedBitmap; // indices held (active or unbonding)
    mapping(uint256 index => Slot) private _slots;
    mapping(uint256 index => BN254.G1Point) private _pk1s;
    mapping(uint256 index => Tenure[]) private _tenures;
    mapping(address verifier => uint256 indexPlusOne) private _indexOf;
    mapping(bytes32 pkHash => bool) private _keyUsed;
    mapping(uint256 challengeId => Record) private _records;
    mapping(bytes32 receiptHash => uint256 challengeId) private _latestOf;

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
        setHash = keccak256(new bytes(_SET_HEADER));
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
        _activeStake += stake;
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
        _activeStake += amount;
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
        _requireNotBeforeCommittee(registry_, receiptHash);
        uint256 registryId = registry_.challenge(operator, receiptHash, nodeSignature, evidenceCid);
        uint256 bond = challengeBond;
        bytes32 set = setHash;
        // the binding's first 24 bytes, for `settle` (see `Record`)
        uint256 binding = uint256(keccak256(abi.encode(receiptHash, set))) >> 64;
        challengeId = ++challengeCount;
        _latestOf[receiptHash] = challengeId;
        _records[challengeId] = Record({
            // casting to uint128 and uint64 is safe: the binding's low 128 bits, then 64 more
            // forge-lint: disable-next-line(unsafe-typecast)
            signerBitmap: uint128(binding),
            // forge-lint: disable-next-line(unsafe-typecast)
            settledAt: uint64(binding >> 128),
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
        emit ChallengeOpened(challengeId, registryId, operator, msg.sender, receiptHash, set, bond, evidenceCid);
        if (bond != 0) token.safeTransferFrom(msg.sender, address(this), bond);
    }

    /// @inheritdoc IVerifierCommittee
    function settle(
        uint256 challengeId,
        bytes32 receiptHash,
        uint8 verdict,
        bytes32 reason,
        uint256 signerBitmap,
        SettlementProof calldata proof
    ) external {
        Record storage record = _records[challengeId];
        uint256 word0;
        assembly ("memory-safe") {
            word0 := sload(record.slot)
        }
        {
            // casting to uint8 is safe: the status byte of word 0
            // forge-lint: disable-next-line(unsafe-typecast)
            Status status = Status(uint8(word0 >> _W0_STATUS));
            if (status != Status.Open) {
                if (status == Status.None) revert CommitteeUnknownChallenge(challengeId);
                revert CommitteeWrongStatus(challengeId, status);
            }
        }
        {
            uint256 deadline = (word0 >> _W0_OPENED_AT) + settlementTimeout;
            // forge-lint: disable-next-line(block-timestamp)
            if (block.timestamp >= deadline) revert CommitteeSettlementClosed(challengeId, deadline, block.timestamp);
        }
        if (verdict != uint8(Verdict.Upheld) && verdict != uint8(Verdict.Rejected)) {
            revert CommitteeInvalidVerdict(verdict);
        }
        if ((verdict == uint8(Verdict.Upheld)) != (reason != bytes32(0))) {
            revert CommitteeReasonMismatch(verdict, reason);
        }
        // signer stake | active stake << 128, or 0 when σ does not verify
        uint256 stakeSums = _verifySettlement(
            _verdictDigest(challengeId, receiptHash, verdict, reason), receiptHash, word0, signerBitmap, proof
        );
        if (stakeSums == 0) revert CommitteeInvalidSignature(challengeId);

        // Rewrite word 0 whole (one SSTORE): the bitmap (below 2^128: `_verifySettlement`
        // refused bits outside the active bitmap, which has 128) over the binding's bits,
        // settledAt, status Settled and the verdict; `openedAt` stays.
        word0 = (word0 & ~(_W0_BINDING_MASK | (uint256(0xff) << _W0_STATUS))) | signerBitmap
            | (block.timestamp << _W0_SETTLED_AT) | (uint256(uint8(Status.Settled)) << _W0_STATUS)
            | (uint256(verdict) << _W0_VERDICT);
        assembly ("memory-safe") {
            sstore(record.slot, word0)
        }
        emit ChallengeSettled(challengeId, verdict, reason, uint128(stakeSums), stakeSums >> 128);
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
                _activeStake -= amount;
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
            // Nothing to slash when governance dismissed the registry challenge, or already
            // slashed the receipt (for this challenge or a free one): the registry slashes a
            // receipt once, and a refused `slash` would leave this challenge unfinalizable.
            if (
                registryStatus != INodeRegistry.ChallengeStatus.Dismissed
                    && registry.receiptRecord(operator, record.receiptHash).slashedFor == 0
            ) {
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
    function challengeOfReceipt(bytes32 receiptHash) external view returns (uint256) {
        return _latestOf[receiptHash];
    }

    /// @inheritdoc IVerifierCommittee
    function challengeOf(uint256 challengeId) external view returns (ChallengeInfo memory) {
        Record storage r = _records[challengeId];
        // never settled: word 0's bitmap and settledAt bits hold the binding (see `Record`)
        bool unsettled = r.status == Status.Open || r.status == Status.Expired;
        return ChallengeInfo({
            status: r.status,
            verdict: r.verdict,
            settledAt: unsettled ? 0 : r.settledAt,
            signerBitmap: unsettled ? 0 : r.signerBitmap,
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
    function activeSet() external view returns (bytes memory set) {
        (set,) = _packSet();
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

    /// @dev keccak256(abi.encode(VERDICT_TYPEHASH, chainid, this, challengeId, receiptHash,
    /// verdict, reason)), hashed in scratch memory past the free memory pointer (nothing allocated).
    function _verdictDigest(uint256 challengeId, bytes32 receiptHash, uint8 verdict, bytes32 reason)
        private
        view
        returns (bytes32 digest)
    {
        bytes32 typehash = VERDICT_TYPEHASH;
        assembly ("memory-safe") {
            let p := mload(0x40)
            mstore(p, typehash)
            mstore(add(p, 0x20), chainid())
            mstore(add(p, 0x40), address())
            mstore(add(p, 0x60), challengeId)
            mstore(add(p, 0x80), receiptHash)
            mstore(add(p, 0xa0), verdict)
            mstore(add(p, 0xc0), reason)
            digest := keccak256(p, 0xe0)
        }
    }

    /// @dev Reverts while an earlier committee challenge of `receiptHash` is open, settled (the
    /// appeal may flip it) or upheld: its registry challenge is then open or upheld; rejected
    /// and expired ones were dismissed there.
    function _requireNotBeforeCommittee(INodeRegistry registry_, bytes32 receiptHash) private view {
        uint256 prior = _latestOf[receiptHash];
        if (prior == 0) return;
        INodeRegistry.ChallengeStatus status = registry_.challengeOf(_records[prior].registryChallengeId).status;
        if (status == INodeRegistry.ChallengeStatus.Open || status == INodeRegistry.ChallengeStatus.Upheld) {
            revert CommitteeReceiptChallenged(receiptHash, prior);
        }
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
        _activeStake -= slot.stake;
        _apk1 = BN254.ecAdd(_apk1, BN254.neg(_pk1s[index]));
    }

    function _settled(uint256 challengeId) private view returns (Record storage record) {
        record = _records[challengeId];
        Status status = record.status;
        if (status == Status.None) revert CommitteeUnknownChallenge(challengeId);
        if (status != Status.Settled) revert CommitteeWrongStatus(challengeId, status);
    }

    /// @dev Recomputes `setHash` over every slot (`_packSet`). O(slotCount) storage reads.
    function _recommit() private {
        (bytes memory set, uint256 active) = _packSet();
        bytes32 h = keccak256(set);
        setHash = h;
        emit SetUpdated(h, slotCount, active, set);
    }

    /// @dev The set `setHash` commits to (docs/committee.md "The set"): a 128-byte header
    /// (apk1.x, apk1.y, the active stake, the active bitmap, 32-byte words) then, for every
    /// index 0..slotCount-1, a 76-byte entry: pk1.x and pk1.y (32 bytes each) and the stake
    /// (12 bytes, a uint96), zeros for a free or unbonding slot. Also returns the active stake.
    function _packSet() private view returns (bytes memory set, uint256 active) {
        uint256 n = slotCount;
        set = new bytes(_SET_HEADER + n * _SET_ENTRY);
        uint256 bitmap;
        for (uint256 i; i < n; ++i) {
            Slot memory slot = _slots[i];
            if (slot.state != ACTIVE) continue;
            BN254.G1Point storage pk = _pk1s[i];
            uint256 x = pk.X;
            uint256 y = pk.Y;
            uint256 stake = slot.stake;
            active += stake;
            bitmap |= 1 << i;
            assembly ("memory-safe") {
                let e := add(add(set, 0xa0), mul(i, 0x4c))
                // the stake's word covers the entry's last 32 bytes (its first 20, zeros, in
                // y's place), then x and y
                mstore(add(e, 0x2c), stake)
                mstore(e, x)
                mstore(add(e, 0x20), y)
            }
        }
        BN254.G1Point memory apk = _apk1;
        assembly ("memory-safe") {
            mstore(add(set, 0x20), mload(apk))
            mstore(add(set, 0x40), mload(add(apk, 0x20)))
            mstore(add(set, 0x60), active)
            mstore(add(set, 0x80), bitmap)
        }
    }

    /// @dev Everything `settle` checks but the challenge, its receipt hash and the verdict,
    /// reverting on a malformed call: `set` against `setHash`; the signer bitmap against the
    /// set's active bitmap; `nonSigners` (one byte per index) against the active indices not in
    /// the bitmap, each exactly once, in any order; the two-thirds quorum; the hash hint
    /// (`BN254.hashToG1Hinted`, inlined). Returns the signers' stake | the active stake << 128
    /// (each below 2^103: at most 128 uint96 stakes), or 0 when σ does not verify on `digest`
    /// under (apk1 − Σ non-signers' pk1, apk2), or that key is at infinity (a valid
    /// settlement's signers hold a nonzero stake).
    ///
    /// One assembly block, for gas (docs/committee.md "Gas"); a failed check leaves an error
    /// code and its value for `_refuseSettlement`. The proof's fields are read from its ABI head
    /// (offsets of `set` and `nonSigners`, σ, apk2, the offset of `hashHint`) without
    /// Solidity's bounds checks: whatever the offsets point at, the set must hash to
    /// `setHash`, each listed non-signer must be one, each hint word must satisfy its equation
    /// and the points must pass the pairing, so a malformed proof only fails one of those
    /// checks (reads past the calldata give zeros).
    ///
    /// Memory, from the free memory pointer m (nothing is allocated): m..m + 0x120 the nine
    /// words γ hashes (the signers' apk1 is summed in place at m + 0x20, with m + 0x60..m + 0xa0
    /// as the ecAdd operand), the set copied from m + 0x120, whose first 0x180 bytes the
    /// pairing then takes as scratch (`BN254.verifyHashedAt`), once the set is read; H(digest)
    /// at m + 0x2a0.
    function _verifySettlement(
        bytes32 digest,
        bytes32 receiptHash,
        uint256 word0,
        uint256 bitmap,
        SettlementProof calldata proof
    ) private view returns (uint256 stakeSums) {
        uint256 m;
        uint256 err;
        uint256 info;
        uint256 active;
        assembly ("memory-safe") {
            m := mload(0x40)
            let left // active non-signers not listed yet
            {
                let s := add(m, 0x120)
                let o := add(proof, calldataload(proof)) // set: length word, then bytes
                let length := calldataload(o)
                calldatacopy(s, add(o, 0x20), length)
                info := keccak256(s, length)
                // the binding of (receiptHash, this set) against the challenge's (see `Record`)
                mstore(0, receiptHash)
                mstore(0x20, info)
                let binding := shr(64, keccak256(0, 0x40))
                active := mload(add(s, 0x40))
                let activeBitmap := mload(add(s, 0x60))
                left := and(activeBitmap, not(bitmap))
                switch eq(binding, and(word0, _W0_BINDING_MASK))
                case 0 { err := _ERR_SET }
                default {
                    // the committed set: a header, an entry per index below slotCount with a
                    // valid key (y in 1..P−1) where the active bitmap has a bit
                    info := and(bitmap, not(activeBitmap))
                    if or(iszero(bitmap), info) { err := _ERR_SIGNER }
                }
            }
            if iszero(err) {
                // acc = −apk1, plus each non-signer's key, negated back after the loop: the
                // signers' apk1 (keys are added as the set has them; (0, 0) stays itself)
                let acc := add(m, 0x20)
                let p := _P
                mstore(acc, mload(add(m, 0x120)))
                mstore(add(acc, 0x20), mod(sub(p, mload(add(m, 0x140))), p))
                let e := add(proof, calldataload(add(proof, 0x20))) // nonSigners
                let end := add(add(e, 0x20), calldataload(e))
                let stake := 0
                let ok := 1
                for { e := add(e, 0x20) } lt(e, end) { e := add(e, 1) } {
                    let i := shr(248, calldataload(e))
                    if iszero(and(shr(i, left), 1)) {
                        err := _ERR_NON_SIGNER
                        info := i
                        break
                    }
                    left := xor(left, shl(i, 1))
                    // entry i: 0x4c bytes each after the set's 0x80-byte header at m + 0x120
                    i := add(add(m, 0x1a0), mul(i, 0x4c))
                    stake := add(stake, shr(160, mload(add(i, 0x40))))
                    mcopy(add(acc, 0x40), i, 0x40)
                    ok := and(ok, staticcall(gas(), 0x06, acc, 0x80, acc, 0x40))
                }
                mstore(add(acc, 0x20), mod(sub(p, mload(add(acc, 0x20))), p))
                stake := sub(active, stake) // the signers'
                if iszero(err) {
                    switch left
                    case 0 {
                        if iszero(ok) { err := _ERR_EC_ADD }
                        // stakes are below 2^103: no overflow
                        if lt(mul(stake, 3), shl(1, active)) {
                            err := _ERR_THRESHOLD
                            info := stake
                        }
                    }
                    default {
                        err := _ERR_MISSING
                        info := left
                    }
                }
                stakeSums := or(stake, shl(128, active))
            }
            if iszero(err) {
                // H(digest) from the hint, as BN254.hashToG1Hinted
                let p := _P
                let h := add(proof, calldataload(add(proof, 0x100))) // hashHint
                let n := calldataload(h)
                h := add(h, 0x20)
                let last := add(h, shl(5, sub(n, 1)))
                let x := mod(digest, p)
                err := _ERR_HINT
                for {} n { h := add(h, 0x20) } {
                    let beta := addmod(mulmod(mulmod(x, x, p), x, p), 3, p)
                    let y := calldataload(h)
                    if eq(h, last) {
                        if and(lt(y, p), eq(mulmod(y, y, p), beta)) { err := 0 }
                        // H(digest) at m + 0x2a0, past the pairing's scratch
                        mstore(add(m, 0x2a0), x)
                        mstore(add(m, 0x2c0), y)
                        break
                    }
                    if iszero(eq(mulmod(y, y, p), sub(p, beta))) { break }
                    x := addmod(x, 1, p)
                }
                mstore(m, digest)
                calldatacopy(add(m, 0x60), add(proof, 0x80), 0x80) // apk2
                calldatacopy(add(m, 0xe0), add(proof, 0x40), 0x40) // σ
                // an aggregate key at infinity is refused (σ at infinity would pass for any
                // message): no signature verifies then
                if iszero(or(mload(add(m, 0x20)), mload(add(m, 0x40)))) { if iszero(err) { stakeSums := 0 } }
            }
        }
        if (err != 0) _refuseSettlement(err, info, active, receiptHash);
        if (stakeSums == 0) return 0;
        uint256 hx;
        uint256 hy;
        assembly ("memory-safe") {
            hx := mload(add(m, 0x2a0))
            hy := mload(add(m, 0x2c0))
        }
        (bool valid,) = BN254.verifyHashedAt(m, hx, hy);
        if (!valid) stakeSums = 0;
    }

    // Error codes of `_verifySettlement`, raised by `_refuseSettlement`.
    uint256 private constant _ERR_SET = 1;
    uint256 private constant _ERR_SIGNER = 2;
    uint256 private constant _ERR_NON_SIGNER = 3;
    uint256 private constant _ERR_MISSING = 4;
    uint256 private constant _ERR_EC_ADD = 5;
    uint256 private constant _ERR_THRESHOLD = 6;
    uint256 private constant _ERR_HINT = 7;

    /// @dev Reverts with the error `_verifySettlement`'s code `err` stands for; `info` is the
    /// set's hash (set), the bitmap's bits outside the active set (signer), the index
    /// (non-signer), the non-signers left out (missing) or the signers' stake (threshold).
    function _refuseSettlement(uint256 err, uint256 info, uint256 active, bytes32 receiptHash) private pure {
        if (err == _ERR_SET) revert CommitteeNotOpenedWith(receiptHash, bytes32(info));
        if (err == _ERR_SIGNER) revert CommitteeInvalidSigner(info == 0 ? 0 : _lowestBit(info));
        if (err == _ERR_NON_SIGNER) revert CommitteeInvalidNonSigner(info);
        if (err == _ERR_MISSING) revert CommitteeMissingNonSigner(_lowestBit(info));
        if (err == _ERR_EC_ADD) revert BN254.BN254PrecompileFailed(0x06);
        if (err == _ERR_THRESHOLD) revert CommitteeBelowThreshold(info, active);
        revert CommitteeInvalidHashHint();
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
