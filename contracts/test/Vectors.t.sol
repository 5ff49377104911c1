// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ExperienceLedger} from "../src/ExperienceLedger.sol";
import {GymTest} from "./utils/GymTest.sol";

/// @notice The shared RFC 9162 vectors (tests/vectors/*.json, also read by the Python suite):
/// every valid vector must verify and every invalid one must not, through the ledger's external
/// verifiers (which return false, never revert, on a bad proof).
contract VectorsTest is GymTest {
    string internal constant INCLUSION = "../tests/vectors/inclusion.json";
    string internal constant CONSISTENCY = "../tests/vectors/consistency.json";

    ExperienceLedger internal ledger;

    function setUp() public {
        ledger = new ExperienceLedger();
    }

    function test_vectors_inclusion() public view {
        _checkVectors(INCLUSION, _verifyInclusion);
    }

    function test_vectors_consistency() public view {
        _checkVectors(CONSISTENCY, _verifyConsistency);
    }

    /// @dev Every vector of the file at `path` must verify through `verify` exactly when it is
    /// valid, and the file must hold both kinds.
    function _checkVectors(
        string memory path,
        function(string memory, string memory) internal view returns (bool) verify
    ) private view {
        string memory json = vm.readFile(path);
        uint256 count = vm.parseJsonUint(json, ".count");
        uint256 valid;
        for (uint256 i; i < count; ++i) {
            string memory at = string.concat(".vectors[", vm.toString(i), "]");
            bool expected = vm.parseJsonBool(json, string.concat(at, ".valid"));
            bool verified = verify(json, at);
            if (verified != expected) revert(string.concat(_name(json, at), verified ? ": accepted" : ": rejected"));
            if (expected) ++valid;
        }
        assertTrue(valid > 0 && valid < count, "vectors hold both valid and invalid cases");
    }

    function _verifyInclusion(string memory json, string memory at) internal view returns (bool) {
        return ledger.verifyInclusion(
            vm.parseJsonBytes32(json, string.concat(at, ".leaf_hash")),
            vm.parseJsonUint(json, string.concat(at, ".index")),
            vm.parseJsonUint(json, string.concat(at, ".size")),
            vm.parseJsonBytes32Array(json, string.concat(at, ".proof")),
            vm.parseJsonBytes32(json, string.concat(at, ".root"))
        );
    }

    function _verifyConsistency(string memory json, string memory at) internal view returns (bool) {
        return ledger.verifyConsistency(
            vm.parseJsonUint(json, string.concat(at, ".old_size")),
            vm.parseJsonUint(json, string.concat(at, ".new_size")),
            vm.parseJsonBytes32(json, string.concat(at, ".old_root")),
            vm.parseJsonBytes32(json, string.concat(at, ".new_root")),
            vm.parseJsonBytes32Array(json, string.concat(at, ".proof"))
        );
    }

    function _name(string memory json, string memory at) private pure returns (string memory) {
        return string.concat("vector ", vm.parseJsonString(json, string.concat(at, ".name")));
    }
}
