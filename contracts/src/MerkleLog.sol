// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @title MerkleLog
/// @notice RFC 9162 (Certificate Transparency v2) Merkle tree hashing and proof verification.
///
/// - leaf hash  = SHA-256(0x00 || entry bytes)           (§2.1.1)
/// - node hash  = SHA-256(0x01 || left || right)         (§2.1.1)
/// - empty root = SHA-256("")                             (§2.1.1)
/// - inclusion: the audit path runs leaf-to-root, leaf and root excluded (§2.1.3.2)
/// - consistency: the path is in §2.1.4 order, verified with the §2.1.4.2 algorithm
///
/// Computing a root from a proof is separated from comparing it, as in transparency-dev/merkle.
/// Every function returns false (never reverts) on malformed input, so callers choose the error.
/// Beyond the RFC's precondition 0 < first < second for consistency, the edge cases are those of
/// `ledger/rfc9162.py`: a proof from size 0 is valid only when empty and the old root is the
/// empty root; a proof between equal sizes only when empty and the two roots are equal.
///
/// Leaf hashes are computed off-chain (the contract only ever receives them). Node hashes call the
/// SHA-256 precompile (address 2) on 65 bytes written past the free memory pointer and never
/// allocate, so a proof of depth d costs d precompile calls and no memory growth.
library MerkleLog {
    /// @notice Root of the empty tree: SHA-256("").
    bytes32 internal constant EMPTY_ROOT = 0xe3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855;

    /// @notice RFC 9162 interior node hash of `left` and `right`.
    function hashChildren(bytes32 left, bytes32 right) internal view returns (bytes32 h) {
        assembly ("memory-safe") {
            let p := mload(0x40)
            mstore8(p, 0x01)
            mstore(add(p, 0x01), left)
            mstore(add(p, 0x21), right)
            if iszero(staticcall(gas(), 0x02, p, 0x41, 0x00, 0x20)) { revert(0x00, 0x00) }
            h := mload(0x00)
        }
    }

    /// @notice Root implied by `proof` for `leafHash` at `index` in a tree of `size` leaves
    /// (§2.1.3.2, written in assembly: one 65-byte buffer, one precompile call per level).
    /// @return ok False when the proof cannot be an audit path for (`index`, `size`): index out of
    /// range, or too few or too many hashes.
    function rootFromInclusionProof(bytes32 leafHash, uint256 index, uint256 size, bytes32[] calldata proof)
        internal
        view
        returns (bool ok, bytes32 root)
    {
        if (index >= size) return (false, bytes32(0));
        assembly ("memory-safe") {
            let p := mload(0x40)
            mstore8(p, 0x01)
            let fn := index
            let sn := sub(size, 1)
            root := leafHash
            ok := 1
            let off := proof.offset
            for { let end := add(off, shl(5, proof.length)) } lt(off, end) { off := add(off, 0x20) } {
                if iszero(sn) {
                    ok := 0
                    break
                }
                switch or(and(fn, 1), eq(fn, sn))
                case 0 {
                    mstore(add(p, 0x01), root)
                    mstore(add(p, 0x21), calldataload(off))
                }
                default {
                    mstore(add(p, 0x01), calldataload(off))
                    mstore(add(p, 0x21), root)
                    // On the right edge of an unbalanced tree a node may have no sibling at the
                    // levels above it: skip them.
                    for {} iszero(or(and(fn, 1), iszero(fn))) {} {
                        fn := shr(1, fn)
                        sn := shr(1, sn)
                    }
                }
                if iszero(staticcall(gas(), 0x02, p, 0x41, 0x00, 0x20)) { revert(0x00, 0x00) }
                root := mload(0x00)
                fn := shr(1, fn)
                sn := shr(1, sn)
            }
            ok := and(ok, iszero(sn))
        }
    }

    /// @notice Whether `proof` shows `leafHash` at `index` in the tree of `size` leaves with `root`.
    function verifyInclusion(bytes32 leafHash, uint256 index, uint256 size, bytes32[] calldata proof, bytes32 root)
        internal
        view
        returns (bool)
    {
        (bool ok, bytes32 computed) = rootFromInclusionProof(leafHash, index, size, proof);
        return ok && computed == root;
    }

    /// @notice Roots of the old and new trees implied by consistency proof `proof` (§2.1.4.2,
    /// in assembly like the inclusion verifier), for 0 < `oldSize` < `newSize`; `oldRoot` is used
    /// only when `oldSize` is a power of two (the RFC then leaves it out of the proof).
    /// @return ok False when the sizes are out of that range or the proof has the wrong length.
    function rootsFromConsistencyProof(uint256 oldSize, uint256 newSize, bytes32 oldRoot, bytes32[] calldata proof)
        internal
        view
        returns (bool ok, bytes32 fr, bytes32 sr)
    {
        if (oldSize == 0 || oldSize >= newSize || proof.length == 0) return (false, 0, 0);
        assembly ("memory-safe") {
            let p := mload(0x40)
            mstore8(p, 0x01)
            let fn := sub(oldSize, 1)
            let sn := sub(newSize, 1)
            let off := proof.offset
            let end := add(off, shl(5, proof.length))
            // An old tree of 2^k leaves is a complete subtree of the new one: its root is implied.
            switch and(oldSize, fn)
            case 0 { fr := oldRoot }
            default {
                fr := calldataload(off)
                off := add(off, 0x20)
            }
            sr := fr
            for {} and(fn, 1) {} {
                fn := shr(1, fn)
                sn := shr(1, sn)
            }
            ok := 1
            for {} lt(off, end) { off := add(off, 0x20) } {
                if iszero(sn) {
                    ok := 0
                    break
                }
                let c := calldataload(off)
                switch or(and(fn, 1), eq(fn, sn))
                case 0 {
                    mstore(add(p, 0x01), sr)
                    mstore(add(p, 0x21), c)
                    if iszero(staticcall(gas(), 0x02, p, 0x41, 0x00, 0x20)) { revert(0x00, 0x00) }
                    sr := mload(0x00)
                }
                default {
                    mstore(add(p, 0x01), c)
                    mstore(add(p, 0x21), fr)
                    if iszero(staticcall(gas(), 0x02, p, 0x41, 0x00, 0x20)) { revert(0x00, 0x00) }
                    fr := mload(0x00)
                    mstore(add(p, 0x21), sr)
                    if iszero(staticcall(gas(), 0x02, p, 0x41, 0x00, 0x20)) { revert(0x00, 0x00) }
                    sr := mload(0x00)
                    for {} iszero(or(and(fn, 1), iszero(fn))) {} {
                        fn := shr(1, fn)
                        sn := shr(1, sn)
                    }
                }
                fn := shr(1, fn)
                sn := shr(1, sn)
            }
            ok := and(ok, iszero(sn))
        }
    }

    /// @notice Whether `proof` shows (`newSize`, `newRoot`) extending (`oldSize`, `oldRoot`).
    function verifyConsistency(
        uint256 oldSize,
        uint256 newSize,
        bytes32 oldRoot,
        bytes32 newRoot,
        bytes32[] calldata proof
    ) internal view returns (bool) {
        if (oldSize == 0) return proof.length == 0 && oldRoot == EMPTY_ROOT;
        if (oldSize == newSize) return proof.length == 0 && oldRoot == newRoot;
        (bool ok, bytes32 fr, bytes32 sr) = rootsFromConsistencyProof(oldSize, newSize, oldRoot, proof);
        return ok && fr == oldRoot && sr == newRoot;
    }
}
