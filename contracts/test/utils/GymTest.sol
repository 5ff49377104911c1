// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {Vm} from "./Vm.sol";

/// @notice Minimal test base: the cheatcode handle, reverting assertions that print both values,
/// `bound` for fuzz inputs, a console line, and the target lists that forge reads from an
/// invariant test (the same view functions and structs as forge-std's StdInvariant).
abstract contract GymTest {
    Vm internal constant vm = Vm(address(uint160(uint256(keccak256("hevm cheat code")))));

    /// @dev Hardhat-style console address; forge prints `log(string,uint256)` calls under -vv.
    address private constant CONSOLE = 0x000000000000000000636F6e736F6c652e6c6f67;

    struct FuzzSelector {
        address addr;
        bytes4[] selectors;
    }

    address[] private _targetedContracts;
    FuzzSelector[] private _targetedSelectors;

    // ------------------------------------------------------------------ assertions

    function assertTrue(bool condition, string memory message) internal pure {
        if (!condition) revert(message);
    }

    function assertFalse(bool condition, string memory message) internal pure {
        if (condition) revert(message);
    }

    function assertEq(uint256 actual, uint256 expected, string memory message) internal pure {
        if (actual != expected) _fail(message, vm.toString(actual), vm.toString(expected));
    }

    function assertEq(bytes32 actual, bytes32 expected, string memory message) internal pure {
        if (actual != expected) _fail(message, vm.toString(actual), vm.toString(expected));
    }

    function assertEq(address actual, address expected, string memory message) internal pure {
        if (actual != expected) _fail(message, vm.toString(actual), vm.toString(expected));
    }

    function assertEq(bool actual, bool expected, string memory message) internal pure {
        if (actual != expected) _fail(message, vm.toString(actual), vm.toString(expected));
    }

    function assertEq(string memory actual, string memory expected, string memory message) internal pure {
        if (keccak256(bytes(actual)) != keccak256(bytes(expected))) _fail(message, actual, expected);
    }

    function assertEq(bytes memory actual, bytes memory expected, string memory message) internal pure {
        if (keccak256(actual) != keccak256(expected)) _fail(message, vm.toString(actual), vm.toString(expected));
    }

    function assertLe(uint256 actual, uint256 limit, string memory message) internal pure {
        if (actual > limit) _fail(message, vm.toString(actual), string.concat("<= ", vm.toString(limit)));
    }

    function _fail(string memory message, string memory actual, string memory expected) private pure {
        revert(string.concat(message, ": got ", actual, ", expected ", expected));
    }

    // ------------------------------------------------------------------ fuzz helpers

    /// @dev Maps `x` into [min, max]; values already inside are kept so that the fuzzer's edge
    /// values (0, 1, max) still reach the code under test.
    function bound(uint256 x, uint256 min, uint256 max) internal pure returns (uint256) {
        require(min <= max, "bound: min > max");
        if (x >= min && x <= max) return x;
        return min + x % (max - min + 1);
    }

    function log(string memory label, uint256 value) internal view {
        (bool ok,) = CONSOLE.staticcall(abi.encodeWithSignature("log(string,uint256)", label, value));
        ok;
    }

    // ------------------------------------------------------------------ invariant targets

    function targetContract(address target) internal {
        _targetedContracts.push(target);
    }

    function targetSelector(FuzzSelector memory selector) internal {
        _targetedSelectors.push(selector);
    }

    function targetContracts() public view returns (address[] memory) {
        return _targetedContracts;
    }

    function targetSelectors() public view returns (FuzzSelector[] memory) {
        return _targetedSelectors;
    }
}
