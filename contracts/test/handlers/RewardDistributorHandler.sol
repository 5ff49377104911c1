// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {BN254} from "../../src/BN254.sol";
import {IRewardDistributor} from "../../src/IRewardDistributor.sol";
import {IVerifierCommittee} from "../../src/IVerifierCommittee.sol";
import {RewardDistributor} from "../../src/RewardDistributor.sol";
import {RewardTree} from "../utils/RewardTree.sol";
import {Vm} from "../utils/Vm.sol";

/// @notice Drives a RewardDistributor through random attest (tables of up to five of a few
/// accounts, whose rows may sum past the total the signers attest) / claim (a row with its
/// proof, or tampered: another amount, another row's proof) / reverse / time sequences over
/// `EPOCHS` epochs. Attestations are signed in place by a fixed quorum of a fixed committee set
/// (secret `signerKey`, G2 key `apk2`). Counts what each epoch's claims paid, per account.
contract RewardDistributorHandler {
    Vm private constant vm = Vm(address(uint160(uint256(keccak256("hevm cheat code")))));

    uint256 public constant EPOCHS = 6;
    uint256 private constant ACCOUNTS = 4;

    RewardDistributor public immutable distributor;
    address public immutable dao;
    uint256 private immutable _bitmap;
    uint256 private immutable _signerKey;
    bytes private _set;
    bytes private _nonSigners;
    BN254.G2Point private _apk2;

    /// @dev The table each epoch was last attested with.
    mapping(uint256 epoch => address[]) private _accounts;
    mapping(uint256 epoch => uint256[]) private _amounts;

    /// @notice What the claims of each epoch paid.
    mapping(uint256 epoch => uint256) public paid;
    mapping(uint256 epoch => mapping(address account => uint256)) public paymentsTo;
    bool public paidTwice;
    bool public reversedAfterAClaim;
    uint256 public attested;
    uint256 public reversed;
    uint256 public claims;
    uint256 public refused;
    /// @dev Forge does not carry vm.warp / vm.roll from one invariant call to the next: every
    /// call moves to these first.
    uint256 private _now;
    uint256 private _block;

    constructor(
        RewardDistributor distributor_,
        address dao_,
        bytes memory set,
        bytes memory nonSigners,
        uint256 bitmap,
        uint256 signerKey,
        BN254.G2Point memory apk2
    ) {
        distributor = distributor_;
        dao = dao_;
        _set = set;
        _nonSigners = nonSigners;
        _bitmap = bitmap;
        _signerKey = signerKey;
        _apk2 = apk2;
        _now = block.timestamp;
        _block = block.number;
    }

    modifier step() {
        vm.warp(_now);
        vm.roll(_block);
        _;
    }

    /// @notice Attests a table for epoch `seed % EPOCHS` when it has no standing root, rolling
    /// past the epoch first if needed. One table in four says a total below its rows' sum.
    function attest(uint256 seed) external step {
        uint256 epoch = seed % EPOCHS;
        if (distributor.epochInfo(epoch).status == IRewardDistributor.Status.Attested) return;
        (, uint256 last) = distributor.epochBounds(epoch);
        if (block.number <= last) {
            _block = last + 1;
            vm.roll(_block);
        }
        uint256 rows = 1 + (seed >> 8) % ACCOUNTS;
        address[] memory accounts = new address[](rows);
        uint256[] memory amounts = new uint256[](rows);
        uint256 total;
        for (uint256 i; i < rows; ++i) {
            // forge-lint: disable-next-line(unsafe-typecast)
            accounts[i] = address(uint160(0xACC0 + (i + epoch) % ACCOUNTS));
            amounts[i] = uint256(keccak256(abi.encode(seed, i))) % 200e18;
            total += amounts[i];
        }
        if ((seed >> 16) % 4 == 0) total = total * ((seed >> 24) % 100) / 100; // a mistaken total
        bytes32 root = RewardTree.root(accounts, amounts);
        string memory cid = "bafkreihandlertable";
        bytes32 digest = distributor.rewardDigest(epoch, root, total, cid);
        IVerifierCommittee.SettlementProof memory proof = IVerifierCommittee.SettlementProof({
            set: _set,
            nonSigners: _nonSigners,
            sigma: BN254.ecMul(BN254.hashToG1(digest), _signerKey),
            apk2: _apk2,
            hashHint: BN254.hashToG1Hint(digest)
        });
        distributor.attest(epoch, root, total, cid, _bitmap, proof);
        _accounts[epoch] = accounts;
        _amounts[epoch] = amounts;
        ++attested;
    }

    /// @notice Claims a row of an epoch's table (from its finality on: the clock moves there),
    /// tampered when `tamper % 4` is 1 (amount + 1) or 2 (another row's proof).
    function claim(uint256 epochSeed, uint256 rowSeed, uint256 tamper) external step {
        uint256 epoch = epochSeed % EPOCHS;
        address[] memory accounts = _accounts[epoch];
        if (accounts.length == 0) return;
        uint256[] memory amounts = _amounts[epoch];
        uint256 row = rowSeed % accounts.length;
        uint256 finalAt = distributor.finalAt(epoch);
        // forge-lint: disable-next-line(block-timestamp)
        if (block.timestamp < finalAt) {
            _now = finalAt;
            vm.warp(_now);
        }
        bytes32[] memory path = RewardTree.proof(accounts, amounts, row);
        uint256 amount = amounts[row];
        if (tamper % 4 == 1) amount += 1;
        if (tamper % 4 == 2) path = RewardTree.proof(accounts, amounts, (row + 1) % accounts.length);
        try distributor.claim(epoch, accounts[row], amount, path) {
            paid[epoch] += amount;
            if (++paymentsTo[epoch][accounts[row]] > 1) paidTwice = true;
            ++claims;
        } catch {
            ++refused;
        }
    }

    /// @notice Governance reverses an epoch's root while it may.
    function reverse(uint256 epochSeed) external step {
        uint256 epoch = epochSeed % EPOCHS;
        IRewardDistributor.EpochInfo memory info = distributor.epochInfo(epoch);
        if (info.status != IRewardDistributor.Status.Attested) return;
        // forge-lint: disable-next-line(block-timestamp)
        if (block.timestamp >= info.finalAt) return; // its appeal window is over
        vm.prank(dao);
        distributor.reverse(epoch);
        if (paid[epoch] != 0) reversedAfterAClaim = true;
        ++reversed;
    }

    function warp(uint256 seconds_) external step {
        _now += seconds_ % 2 hours;
    }
}
