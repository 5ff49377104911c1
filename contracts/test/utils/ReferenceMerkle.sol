// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @notice Naive recursive RFC 9162 Merkle tree (MTH, PATH and PROOF of §2.1.1, §2.1.3.1 and
/// §2.1.4.1, written as in the RFC), used to cross-check the contract's frontier and verifiers.
/// It hashes with Solidity's `sha256` builtin on purpose: independent of MerkleLog's assembly.
library ReferenceMerkle {
    /// @notice A distinct RFC 9162 leaf hash per (`tag`, `i`), standing in for real entries.
    function leaf(string memory tag, uint256 i) internal pure returns (bytes32) {
        return sha256(abi.encodePacked(bytes1(0x00), tag, i));
    }

    function node(bytes32 left, bytes32 right) internal pure returns (bytes32) {
        return sha256(abi.encodePacked(bytes1(0x01), left, right));
    }

    /// @notice MTH of the first `size` leaves.
    function root(bytes32[] memory leaves, uint256 size) internal pure returns (bytes32) {
        return _mth(leaves, 0, size);
    }

    /// @notice PATH(index, D[0:size]).
    function inclusionProof(bytes32[] memory leaves, uint256 size, uint256 index)
        internal
        pure
        returns (bytes32[] memory)
    {
        return _path(leaves, index, 0, size);
    }

    /// @notice PROOF(oldSize, D[0:newSize]) for 0 < oldSize <= newSize.
    function consistencyProof(bytes32[] memory leaves, uint256 oldSize, uint256 newSize)
        internal
        pure
        returns (bytes32[] memory)
    {
        return _subproof(leaves, oldSize, 0, newSize, true);
    }

    /// @notice Largest power of two strictly below `n` (n >= 2).
    function split(uint256 n) internal pure returns (uint256 k) {
        k = 1;
        while (k << 1 < n) k <<= 1;
    }

    function _mth(bytes32[] memory d, uint256 lo, uint256 hi) private pure returns (bytes32) {
        uint256 n = hi - lo;
        if (n == 0) return sha256("");
        if (n == 1) return d[lo];
        uint256 k = split(n);
        return node(_mth(d, lo, lo + k), _mth(d, lo + k, hi));
    }

    function _path(bytes32[] memory d, uint256 m, uint256 lo, uint256 hi) private pure returns (bytes32[] memory) {
        uint256 n = hi - lo;
        if (n == 1) return new bytes32[](0);
        uint256 k = split(n);
        if (m < k) return _push(_path(d, m, lo, lo + k), _mth(d, lo + k, hi));
        return _push(_path(d, m - k, lo + k, hi), _mth(d, lo, lo + k));
    }

    function _subproof(bytes32[] memory d, uint256 m, uint256 lo, uint256 hi, bool b)
        private
        pure
        returns (bytes32[] memory)
    {
        uint256 n = hi - lo;
        if (m == n) {
            if (b) return new bytes32[](0);
            return _push(new bytes32[](0), _mth(d, lo, hi));
        }
        uint256 k = split(n);
        if (m <= k) return _push(_subproof(d, m, lo, lo + k, b), _mth(d, lo + k, hi));
        return _push(_subproof(d, m - k, lo + k, hi, false), _mth(d, lo, lo + k));
    }

    function _push(bytes32[] memory a, bytes32 x) private pure returns (bytes32[] memory out) {
        out = new bytes32[](a.length + 1);
        for (uint256 i; i < a.length; ++i) {
            out[i] = a[i];
        }
        out[a.length] = x;
    }
}
