// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ExperienceLedger} from "../src/ExperienceLedger.sol";
import {IExperienceLedger} from "../src/IExperienceLedger.sol";
import {GymTest} from "./utils/GymTest.sol";
import {ReferenceMerkle} from "./utils/ReferenceMerkle.sol";

/// @notice Gas of the hot paths at realistic sizes (~1M leaves), against the targets of the issue:
/// `verifyInclusion` at depth 20 under 15,000 and `anchor` with a consistency proof at ~1M under
/// 60,000 execution gas. Run with `forge test --match-contract Gas -vv` to see the figures.
///
/// Execution gas = gas consumed by the call (measured with gasleft() around it, the ledger's
/// account warm and its storage cold, as at the start of a transaction that calls it), which
/// counts a warm CALL (100) more than the callee spends: a slight overestimate. Total gas adds
/// the 21,000 intrinsic and the calldata cost (EIP-2028, with the EIP-7623 floor of Prague).
///
/// Proofs come from a tree whose leaves are all equal, so that the hash of any range depends
/// only on its length and trees of a million leaves cost O(log^2 n) hashes to build; the
/// verifiers' work does not depend on the hash values.
contract ExperienceLedgerGasTest is GymTest {
    uint256 internal constant VERIFY_INCLUSION_TARGET = 15_000;
    uint256 internal constant ANCHOR_TARGET = 60_000;
    bytes32 internal constant LEAF = 0x00000000000000000000000000000000000000000000000000000000000000aa;

    ExperienceLedger internal ledger;
    /// @dev (old size, new size) of each anchor measured; log i+1 is anchored at oldSizes[i] in setUp.
    uint64[4] internal oldSizes = [999_999, 1_000_000, 1_048_575, 524_289];
    uint64[4] internal newSizes = [1_000_000, 1_048_576, 1_049_575, 1_048_577];

    function setUp() public {
        ledger = new ExperienceLedger();
        for (uint256 i; i < oldSizes.length; ++i) {
            uint256 logId = ledger.createLog("gas", IExperienceLedger.LogKind.Publisher);
            ledger.anchor(logId, oldSizes[i], _mth(oldSizes[i]), _batchCid(), new bytes32[](0));
        }
        ledger.createLog("gas library", IExperienceLedger.LogKind.Curated);
    }

    function test_gas_verifyInclusionDepth20() public {
        uint256[3] memory sizes = [uint256(1 << 20), 1_000_000, 1_048_575];
        uint256[3] memory indexes = [uint256(777_777), 123_456, 524_287];
        uint256 worst;
        for (uint256 i; i < sizes.length; ++i) {
            bytes32[] memory proof = _path(indexes[i], 0, sizes[i]);
            assertEq(proof.length, 20, "depth");
            bytes memory data =
                abi.encodeCall(ExperienceLedger.verifyInclusion, (LEAF, indexes[i], sizes[i], proof, _mth(sizes[i])));
            (uint256 gasUsed, bytes memory ret) = _measure(data);
            assertTrue(abi.decode(ret, (bool)), "proof verifies");
            _report("verifyInclusion depth 20, size", sizes[i], gasUsed, data);
            if (gasUsed > worst) worst = gasUsed;
        }
        assertLe(worst, VERIFY_INCLUSION_TARGET, "verifyInclusion execution gas");
    }

    function test_gas_anchorWithConsistencyProofAtOneMillion() public {
        uint256 worst;
        for (uint256 i; i < oldSizes.length; ++i) {
            bytes32[] memory proof = _subproof(oldSizes[i], 0, newSizes[i], true);
            bytes memory data =
                abi.encodeCall(ExperienceLedger.anchor, (i + 1, newSizes[i], _mth(newSizes[i]), _batchCid(), proof));
            (uint256 gasUsed,) = _measure(data);
            _report("anchor, proof hashes", proof.length, 0, "");
            _report("anchor to size", newSizes[i], gasUsed, data);
            if (gasUsed > worst) worst = gasUsed;
        }
        assertLe(worst, ANCHOR_TARGET, "anchor execution gas");
    }

    /// @notice Informative: one curation proven against a checkpoint of ~1M leaves.
    function test_gas_appendFromLogAtOneMillion() public {
        uint64 index = 999_998;
        bytes32[] memory proof = _path(index, 0, oldSizes[1]);
        bytes memory data =
            abi.encodeCall(ExperienceLedger.appendFromLog, (5, 2, oldSizes[1], index, LEAF, _batchCid(), proof));
        (uint256 gasUsed,) = _measure(data);
        _report("appendFromLog, first leaf, source size", oldSizes[1], gasUsed, data);
    }

    // ------------------------------------------------------------------ measuring

    function _measure(bytes memory data) internal returns (uint256 gasUsed, bytes memory ret) {
        vm.cool(address(ledger));
        // Warm the account only, as the transaction's `to` is; its storage stays cold.
        require(address(ledger).code.length > 0, "no code");
        bool ok;
        uint256 before = gasleft();
        (ok, ret) = address(ledger).call(data);
        gasUsed = before - gasleft();
        if (!ok) {
            assembly ("memory-safe") {
                revert(add(ret, 0x20), mload(ret))
            }
        }
    }

    function _report(string memory what, uint256 value, uint256 executionGas, bytes memory data) internal view {
        log(what, value);
        if (executionGas == 0) return;
        uint256 tokens;
        for (uint256 i; i < data.length; ++i) {
            tokens += data[i] == 0 ? 1 : 4;
        }
        uint256 standard = 21_000 + 4 * tokens + executionGas;
        uint256 floor = 21_000 + 10 * tokens;
        log("  execution gas", executionGas);
        log("  calldata gas (EIP-2028)", 4 * tokens);
        log("  total gas (with EIP-7623 floor)", standard > floor ? standard : floor);
    }

    // ------------------------------------------------------------------ uniform-leaf tree

    function _batchCid() internal pure returns (bytes memory) {
        return abi.encodePacked(hex"01701220", keccak256("batch"));
    }

    /// @dev MTH of `n` equal leaves.
    function _mth(uint256 n) internal pure returns (bytes32) {
        if (n == 1) return LEAF;
        uint256 k = ReferenceMerkle.split(n);
        return ReferenceMerkle.node(_perfect(k), _mth(n - k));
    }

    /// @dev MTH of 2^j equal leaves, `k` = 2^j.
    function _perfect(uint256 k) internal pure returns (bytes32 h) {
        h = LEAF;
        for (; k > 1; k >>= 1) {
            h = ReferenceMerkle.node(h, h);
        }
    }

    /// @dev RFC 9162 PATH(m, D[lo:hi]) over equal leaves (only the length hi - lo matters).
    function _path(uint256 m, uint256 lo, uint256 hi) internal pure returns (bytes32[] memory) {
        uint256 n = hi - lo;
        if (n == 1) return new bytes32[](0);
        uint256 k = ReferenceMerkle.split(n);
        if (m < k) return _push(_path(m, 0, k), _mth(n - k));
        return _push(_path(m - k, 0, n - k), _perfect(k));
    }

    /// @dev RFC 9162 SUBPROOF(m, D[lo:hi], b) over equal leaves.
    function _subproof(uint256 m, uint256 lo, uint256 hi, bool b) internal pure returns (bytes32[] memory) {
        uint256 n = hi - lo;
        if (m == n) return b ? new bytes32[](0) : _push(new bytes32[](0), _mth(n));
        uint256 k = ReferenceMerkle.split(n);
        if (m <= k) return _push(_subproof(m, 0, k, b), _mth(n - k));
        return _push(_subproof(m - k, 0, n - k, false), _perfect(k));
    }

    function _push(bytes32[] memory a, bytes32 x) internal pure returns (bytes32[] memory out) {
        out = new bytes32[](a.length + 1);
        for (uint256 i; i < a.length; ++i) {
            out[i] = a[i];
        }
        out[a.length] = x;
    }
}
