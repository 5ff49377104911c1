// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {BN254} from "../../src/BN254.sol";

/// @notice The committee's set bytes (`IVerifierCommittee.activeSet`, docs/committee.md "The
/// set") read and written independently of the contract: a header (apk1.x, apk1.y, active
/// stake, active bitmap; 32-byte words) then per index 76 bytes: pk1.x, pk1.y (32 bytes each)
/// and the stake (12 bytes).
library CommitteeSet {
    uint256 internal constant HEADER = 0x80;
    uint256 internal constant ENTRY = 0x4c;

    function count(bytes memory set) internal pure returns (uint256) {
        return (set.length - HEADER) / ENTRY;
    }

    function word(bytes memory set, uint256 offset) internal pure returns (uint256 w) {
        require(offset + 0x20 <= set.length, "set: read past the end");
        assembly ("memory-safe") {
            w := mload(add(add(set, 0x20), offset))
        }
    }

    function setWord(bytes memory set, uint256 offset, uint256 w) internal pure {
        require(offset + 0x20 <= set.length, "set: write past the end");
        assembly ("memory-safe") {
            mstore(add(add(set, 0x20), offset), w)
        }
    }

    function apk1(bytes memory set) internal pure returns (BN254.G1Point memory) {
        return BN254.G1Point(word(set, 0), word(set, 0x20));
    }

    function activeStake(bytes memory set) internal pure returns (uint256) {
        return word(set, 0x40);
    }

    function activeBitmap(bytes memory set) internal pure returns (uint256) {
        return word(set, 0x60);
    }

    function pk1(bytes memory set, uint256 i) internal pure returns (BN254.G1Point memory) {
        return BN254.G1Point(word(set, HEADER + i * ENTRY), word(set, HEADER + i * ENTRY + 0x20));
    }

    function stake(bytes memory set, uint256 i) internal pure returns (uint256) {
        return word(set, HEADER + i * ENTRY + 0x2c) & type(uint96).max;
    }

    /// @dev The active indices outside `signerBitmap`, ascending, one byte each.
    function nonSigners(bytes memory set, uint256 signerBitmap) internal pure returns (bytes memory list) {
        uint256 left = activeBitmap(set) & ~signerBitmap;
        for (uint256 i; left != 0; ++i) {
            if ((left >> i) & 1 == 1) {
                list = abi.encodePacked(list, uint8(i));
                left &= ~(uint256(1) << i);
            }
        }
    }

    /// @dev The set of keys `pk1s` with `stakes` (zero stake: not active), apk1 given.
    function pack(BN254.G1Point memory apk, BN254.G1Point[] memory pk1s, uint256[] memory stakes)
        internal
        pure
        returns (bytes memory set)
    {
        uint256 total;
        uint256 bitmap;
        bytes memory entries;
        for (uint256 i; i < pk1s.length; ++i) {
            if (stakes[i] == 0) {
                entries = abi.encodePacked(entries, uint256(0), uint256(0), uint96(0));
                continue;
            }
            total += stakes[i];
            bitmap |= uint256(1) << i;
            entries = abi.encodePacked(entries, pk1s[i].X, pk1s[i].Y, uint96(stakes[i]));
        }
        set = abi.encodePacked(apk.X, apk.Y, total, bitmap, entries);
    }
}
