// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @notice The few Foundry cheatcodes these tests use (the cheatcode contract lives at
/// address(uint160(uint256(keccak256("hevm cheat code"))))). We do not vendor forge-std: the
/// npm copy is too old, and the tests need only this much.
interface Vm {
    struct Log {
        bytes32[] topics;
        bytes data;
        address emitter;
    }

    // Callers
    function prank(address msgSender) external;
    function startPrank(address msgSender) external;
    function stopPrank() external;

    // Expectations
    function expectRevert() external;
    function expectRevert(bytes4 revertData) external;
    function expectRevert(bytes calldata revertData) external;
    function expectEmit() external;
    function expectEmit(bool checkTopic1, bool checkTopic2, bool checkTopic3, bool checkData) external;
    function expectEmit(bool checkTopic1, bool checkTopic2, bool checkTopic3, bool checkData, address emitter) external;
    function recordLogs() external;
    function getRecordedLogs() external returns (Log[] memory logs);

    // Fuzzing
    function assume(bool condition) external pure;

    // Environment
    function warp(uint256 newTimestamp) external;
    function roll(uint256 newHeight) external;
    function deal(address account, uint256 newBalance) external;
    function getBlockTimestamp() external view returns (uint256 timestamp);

    // Keys and signatures
    function addr(uint256 privateKey) external pure returns (address keyAddr);
    function sign(uint256 privateKey, bytes32 digest) external pure returns (uint8 v, bytes32 r, bytes32 s);

    // State
    function cool(address target) external;
    function label(address account, string calldata newLabel) external;

    // Files and JSON
    function readFile(string calldata path) external view returns (string memory data);
    function parseJsonUint(string calldata json, string calldata key) external pure returns (uint256);
    function parseJsonBool(string calldata json, string calldata key) external pure returns (bool);
    function parseJsonBytes32(string calldata json, string calldata key) external pure returns (bytes32);
    function parseJsonBytes32Array(string calldata json, string calldata key) external pure returns (bytes32[] memory);
    function parseJsonString(string calldata json, string calldata key) external pure returns (string memory);
    function parseJsonUintArray(string calldata json, string calldata key) external pure returns (uint256[] memory);
    function parseJsonAddress(string calldata json, string calldata key) external pure returns (address);

    // Formatting
    function toString(uint256 value) external pure returns (string memory);
    function toString(bytes32 value) external pure returns (string memory);
    function toString(address value) external pure returns (string memory);
    function toString(bool value) external pure returns (string memory);
    function toString(bytes calldata value) external pure returns (string memory);
}
