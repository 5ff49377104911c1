// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {BN254} from "../../src/BN254.sol";
import {ExperienceLedger} from "../../src/ExperienceLedger.sol";
import {GymToken} from "../../src/GymToken.sol";
import {IExperienceLedger} from "../../src/IExperienceLedger.sol";
import {IVerifierCommittee} from "../../src/IVerifierCommittee.sol";
import {NodeRegistry} from "../../src/NodeRegistry.sol";
import {VerifierCommittee} from "../../src/VerifierCommittee.sol";
import {CommitteeSet} from "./CommitteeSet.sol";
import {G2Math} from "./G2Math.sol";
import {GymTest} from "./GymTest.sol";

/// @notice The committee's test world: the committee is the test contract's first deployment
/// (0x5615dEB798BB3E4dFa0139dFa1b3D433Cc23b72f, the address the Python vectors are bound to,
/// on chain 31337), then the token (whose address the committee was given in advance), the
/// ledger and a NodeRegistry whose committee it is. Node `alice` is registered; verifier i is
/// the address keccak256("gym-verifier-address-i") (as committee/vectors.py) holding key i of
/// tests/vectors/bls_committee.json. Signatures are made in-test: σ = sk·H(m) with ecMul.
abstract contract CommitteeFixture is GymTest {
    string internal constant VECTORS = "../tests/vectors/bls_committee.json";
    address internal constant VECTOR_COMMITTEE = 0x5615dEB798BB3E4dFa0139dFa1b3D433Cc23b72f;

    uint256 internal constant MIN_VERIFIER_STAKE = 100e18;
    uint256 internal constant BOND = 10e18;
    uint256 internal constant NODE_SLASH = 50e18;
    uint256 internal constant VERIFIER_SLASH = 20e18;
    uint256 internal constant SHARE_BPS = 2_000;
    uint64 internal constant WINDOW = 1 days;
    uint64 internal constant TIMEOUT = 2 days;
    uint256 internal constant NODE_STAKE = 1_000e18;
    uint256 internal constant BALANCE = 1_000_000e18;
    uint256 internal constant ALICE_SIGNER_KEY = 0x5161;
    uint8 internal constant UPHELD = 1;
    uint8 internal constant REJECTED = 2;
    bytes32 internal constant SAMPLING = "sampling";

    struct Key {
        uint256 sk;
        BN254.G1Point pk1;
        BN254.G2Point pk2;
    }

    VerifierCommittee internal committee;
    GymToken internal token;
    ExperienceLedger internal ledger;
    NodeRegistry internal registry;
    address internal dao = address(0xDA0);
    address internal alice = address(0xA11CE);
    address internal carol = address(0xCA401);
    address internal aliceSigner = vm.addr(ALICE_SIGNER_KEY);
    Key[] internal keys;

    function setUp() public virtual {
        // nonce 1: the committee; nonce 2: the token it is given.
        address tokenAt = _createAddress(address(this), 2);
        committee = new VerifierCommittee(
            IERC20(tokenAt), dao, MIN_VERIFIER_STAKE, BOND, NODE_SLASH, VERIFIER_SLASH, SHARE_BPS, WINDOW, TIMEOUT
        );
        address[] memory holders = new address[](66);
        uint256[] memory amounts = new uint256[](66);
        for (uint256 i; i < 64; ++i) {
            holders[i] = verifierAddress(i);
            amounts[i] = BALANCE;
        }
        holders[64] = alice;
        holders[65] = carol;
        amounts[64] = BALANCE;
        amounts[65] = BALANCE;
        token = new GymToken("Gym", "GYM", holders, amounts);
        require(address(token) == tokenAt, "token address");
        ledger = new ExperienceLedger();
        registry = new NodeRegistry(token, dao, ledger, 100e18, address(committee));
        committee.bindRegistry(registry);

        vm.startPrank(alice);
        uint256 log = ledger.createLog("alice receipts", IExperienceLedger.LogKind.Publisher);
        token.approve(address(registry), type(uint256).max);
        registry.register(aliceSigner, keccak256("model"), "http://127.0.0.1:8000", NODE_STAKE, log);
        vm.stopPrank();
        vm.prank(carol);
        token.approve(address(committee), type(uint256).max);
        for (uint256 i; i < 64; ++i) {
            vm.prank(verifierAddress(i));
            token.approve(address(committee), type(uint256).max);
        }
        _loadKeys();
    }

    function verifierAddress(uint256 i) internal pure returns (address) {
        return address(uint160(uint256(keccak256(bytes(string.concat("gym-verifier-address-", _str(i)))))));
    }

    // ------------------------------------------------------------------ keys and signatures

    function _loadKeys() internal {
        string memory json = vm.readFile(VECTORS);
        for (uint256 i; i < 64; ++i) {
            string memory at = string.concat(".keys[", _str(i), "]");
            uint256[] memory pk1 = vm.parseJsonUintArray(json, string.concat(at, ".pk1"));
            uint256[] memory x2 = vm.parseJsonUintArray(json, string.concat(at, ".pk2[0]"));
            uint256[] memory y2 = vm.parseJsonUintArray(json, string.concat(at, ".pk2[1]"));
            keys.push(
                Key({
                    sk: vm.parseJsonUint(json, string.concat(at, ".sk")),
                    pk1: BN254.G1Point(pk1[0], pk1[1]),
                    pk2: BN254.G2Point([x2[0], x2[1]], [y2[0], y2[1]])
                })
            );
        }
    }

    /// @dev σ = (Σ sk_i)·H(digest) over the keys of `keyBitmap` (bit i = key i).
    function _sign(bytes32 digest, uint256 keyBitmap) internal view returns (BN254.G1Point memory) {
        uint256 sk;
        for (uint256 i; i < 64; ++i) {
            if ((keyBitmap >> i) & 1 == 1) sk = addmod(sk, keys[i].sk, BN254.R);
        }
        return BN254.ecMul(BN254.hashToG1(digest), sk);
    }

    /// @dev Σ pk2 over the keys of `keyBitmap`.
    function _apk2(uint256 keyBitmap) internal view returns (BN254.G2Point memory sum) {
        for (uint256 i; i < 64; ++i) {
            if ((keyBitmap >> i) & 1 == 1) sum = G2Math.add(sum, keys[i].pk2);
        }
    }

    // ------------------------------------------------------------------ committee actions

    /// @dev Verifier `i` registers key `i` with `stake` and a valid PoP; lands at the lowest free index.
    function _register(uint256 i, uint256 stake) internal {
        address who = verifierAddress(i);
        BN254.G1Point memory pop = BN254.ecMul(BN254.hashToG1(committee.popDigest(who, keys[i].pk1)), keys[i].sk);
        vm.prank(who);
        committee.register(keys[i].pk1, keys[i].pk2, pop, stake);
    }

    /// @dev Verifiers 0..n-1 register with `stake` each (at indices 0..n-1).
    function _registerMany(uint256 n, uint256 stake) internal {
        for (uint256 i; i < n; ++i) {
            _register(i, stake);
        }
    }

    /// @dev Carol opens a challenge against alice's receipt `receiptHash`.
    function _open(bytes32 receiptHash) internal returns (uint256 id) {
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(ALICE_SIGNER_KEY, receiptHash);
        vm.prank(carol);
        id = committee.openChallenge(alice, receiptHash, abi.encodePacked(r, s, v), "bafyevidence");
    }

    function _receipt(uint256 id) internal pure returns (bytes32) {
        return keccak256(abi.encode("receipt", id));
    }

    /// @dev The proof `settle` takes for signers `bitmap` of the current set, σ and apk2 given:
    /// the set as `activeSet()` returns it, its non-signers and the hash hint for `digest`.
    function _proof(bytes32 digest, uint256 bitmap, BN254.G1Point memory sigma, BN254.G2Point memory apk2)
        internal
        view
        returns (IVerifierCommittee.SettlementProof memory)
    {
        bytes memory set = committee.activeSet();
        return IVerifierCommittee.SettlementProof({
            set: set,
            nonSigners: CommitteeSet.nonSigners(set, bitmap),
            sigma: sigma,
            apk2: apk2,
            hashHint: BN254.hashToG1Hint(digest)
        });
    }

    /// @dev `BN254.hashToG1Hinted` on a memory hint (the library reads calldata).
    function _hinted(bytes32 digest, uint256[] memory hint) internal view returns (uint256, uint256, bool) {
        return this.hintedAt(digest, hint);
    }

    function hintedAt(bytes32 digest, uint256[] calldata hint) external pure returns (uint256 x, uint256 y, bool ok) {
        uint256 offset;
        assembly ("memory-safe") {
            offset := hint.offset
        }
        return BN254.hashToG1Hinted(digest, offset, hint.length);
    }

    function _digest(uint256 id, uint8 verdict, bytes32 reason) internal view returns (bytes32) {
        return committee.verdictDigest(id, committee.challengeOf(id).receiptHash, verdict, reason);
    }

    /// @dev Settle calldata for challenge `id`: signers = `bitmap` (indices = key numbers, as
    /// `_registerMany` lays them out), signed over `verdict`/`reason`.
    function _settleCall(uint256 id, uint8 verdict, bytes32 reason, uint256 bitmap)
        internal
        view
        returns (bytes memory)
    {
        bytes32 digest = _digest(id, verdict, reason);
        return abi.encodeCall(
            VerifierCommittee.settle,
            (
                id,
                committee.challengeOf(id).receiptHash,
                verdict,
                reason,
                bitmap,
                _proof(digest, bitmap, _sign(digest, bitmap), _apk2(bitmap))
            )
        );
    }

    function _settle(uint256 id, uint8 verdict, bytes32 reason, uint256 bitmap) internal {
        _call(_settleCall(id, verdict, reason, bitmap));
    }

    function _call(bytes memory data) internal {
        (bool ok, bytes memory ret) = address(committee).call(data);
        if (!ok) {
            assembly ("memory-safe") {
                revert(add(ret, 0x20), mload(ret))
            }
        }
    }

    // ------------------------------------------------------------------ helpers

    /// @dev CREATE address of `deployer` at `nonce` (1..127).
    function _createAddress(address deployer, uint256 nonce) internal pure returns (address) {
        return address(uint160(uint256(keccak256(abi.encodePacked(bytes1(0xd6), bytes1(0x94), deployer, uint8(nonce))))));
    }

    function _str(uint256 i) internal pure returns (string memory) {
        return vm.toString(i);
    }

    /// @dev The set as docs/committee.md "The set" defines it, built from the slots
    /// (`verifierAt`) with apk1 summed here by ecAdd: what `activeSet()` must return and
    /// `setHash()` commit to.
    function _expectedSet() internal view returns (bytes memory) {
        uint256 n = committee.slotCount();
        BN254.G1Point[] memory pk1s = new BN254.G1Point[](n);
        uint256[] memory stakes = new uint256[](n);
        BN254.G1Point memory apk;
        for (uint256 i; i < n; ++i) {
            IVerifierCommittee.VerifierInfo memory v = committee.verifierAt(i);
            if (v.state != 1) continue;
            pk1s[i] = v.pk1;
            stakes[i] = v.stake;
            apk = BN254.ecAdd(apk, v.pk1);
        }
        return CommitteeSet.pack(apk, pk1s, stakes);
    }

    function _popcount(uint256 x) internal pure returns (uint256 c) {
        while (x != 0) {
            x &= x - 1;
            ++c;
        }
    }
}
