// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @notice A reward table's Merkle tree as OpenZeppelin's StandardMerkleTree (the JS package
/// merkle-tree, 1.0.8) builds it for ("address", "uint256") leaves, written
/// independently of `MerkleProof`: leaf = keccak256(bytes.concat(keccak256(abi.encode(account,
/// amount)))), leaves sorted by hash, laid out as a complete binary tree in an array (the
/// root at 0, the children of i at 2i + 1 and 2i + 2, the k-th sorted leaf at length − 1 − k),
/// each node the keccak256 of its children in ascending order. Test code: quadratic sort.
library RewardTree {
    function leaf(address account, uint256 amount) internal pure returns (bytes32) {
        return keccak256(bytes.concat(keccak256(abi.encode(account, amount))));
    }

    function hashPair(bytes32 a, bytes32 b) internal pure returns (bytes32) {
        return a < b ? keccak256(abi.encode(a, b)) : keccak256(abi.encode(b, a));
    }

    /// @dev The tree array of the table (`accounts[i]`, `amounts[i]`), and where each row's
    /// leaf sits in it.
    function build(address[] memory accounts, uint256[] memory amounts)
        internal
        pure
        returns (bytes32[] memory tree, uint256[] memory positionOf)
    {
        uint256 n = accounts.length;
        require(n != 0 && n == amounts.length, "tree: empty or uneven table");
        uint256[] memory order = new uint256[](n); // rows by ascending leaf hash
        bytes32[] memory leaves = new bytes32[](n);
        for (uint256 i; i < n; ++i) {
            leaves[i] = leaf(accounts[i], amounts[i]);
            uint256 j = i;
            while (j > 0 && leaves[order[j - 1]] > leaves[i]) {
                order[j] = order[j - 1];
                --j;
            }
            order[j] = i;
        }
        tree = new bytes32[](2 * n - 1);
        positionOf = new uint256[](n);
        for (uint256 k; k < n; ++k) {
            uint256 at = tree.length - 1 - k;
            tree[at] = leaves[order[k]];
            positionOf[order[k]] = at;
        }
        for (uint256 i = tree.length - n; i > 0; --i) {
            tree[i - 1] = hashPair(tree[2 * i - 1], tree[2 * i]);
        }
    }

    function root(address[] memory accounts, uint256[] memory amounts) internal pure returns (bytes32) {
        (bytes32[] memory tree,) = build(accounts, amounts);
        return tree[0];
    }

    /// @dev The proof of row `row`: the siblings from its leaf up to the root.
    function proof(address[] memory accounts, uint256[] memory amounts, uint256 row)
        internal
        pure
        returns (bytes32[] memory path)
    {
        (bytes32[] memory tree, uint256[] memory positionOf) = build(accounts, amounts);
        uint256 at = positionOf[row];
        uint256 depth;
        for (uint256 i = at; i > 0; i = (i - 1) / 2) {
            ++depth;
        }
        path = new bytes32[](depth);
        for (uint256 d; at > 0; ++d) {
            path[d] = tree[at % 2 == 1 ? at + 1 : at - 1];
            at = (at - 1) / 2;
        }
    }
}
