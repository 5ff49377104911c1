// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IExperienceLedger} from "./IExperienceLedger.sol";
import {MerkleLog} from "./MerkleLog.sol";

/// @title ExperienceLedger
/// @notice Publisher logs (off-chain RFC 9162 trees whose checkpoints are anchored here, each
/// proven consistent with the last) and curated libraries (leaves appended on-chain, each either
/// given by the owner or proven to sit in an anchored publisher log). See {IExperienceLedger}.
///
/// Storage per log: one packed slot (owner, kind, size), the name, the root of every checkpoint,
/// and for curated logs the right-edge frontier: `_frontier[logId][k]` is the root of the
/// complete subtree of 2^k leaves for each set bit k of the size, so an append touches
/// O(log n) slots and the root is folded from at most 64 of them.
contract ExperienceLedger is IExperienceLedger {
    struct Log {
        address owner;
        LogKind kind;
        uint64 size;
    }

    uint256 private _logCount;
    mapping(uint256 logId => Log) private _logs;
    mapping(uint256 logId => string) private _names;
    mapping(uint256 logId => mapping(uint64 size => bytes32 root)) private _roots;
    mapping(uint256 logId => mapping(uint256 level => bytes32 subtreeRoot)) private _frontier;
    mapping(uint256 logId => mapping(bytes32 leafHash => bool)) private _curated;

    // ------------------------------------------------------------------ logs

    /// @inheritdoc IExperienceLedger
    function createLog(string calldata name, LogKind kind) external returns (uint256 logId) {
        logId = ++_logCount;
        _logs[logId] = Log({owner: msg.sender, kind: kind, size: 0});
        _names[logId] = name;
        emit LogCreated(logId, msg.sender, kind, name);
    }

    /// @inheritdoc IExperienceLedger
    function transferLogOwnership(uint256 logId, address newOwner) external {
        Log storage log = _ownedLog(logId);
        if (newOwner == address(0)) revert ExperienceLedgerInvalidOwner(logId, newOwner);
        emit LogOwnershipTransferred(logId, msg.sender, newOwner);
        log.owner = newOwner;
    }

    /// @inheritdoc IExperienceLedger
    function logInfo(uint256 logId)
        external
        view
        returns (address owner, LogKind kind, string memory name, uint64 size, bytes32 root)
    {
        Log storage log = _existingLog(logId);
        size = log.size;
        return (log.owner, log.kind, _names[logId], size, size == 0 ? MerkleLog.EMPTY_ROOT : _roots[logId][size]);
    }

    /// @inheritdoc IExperienceLedger
    function rootAt(uint256 logId, uint64 size) external view returns (bytes32 root) {
        _existingLog(logId);
        if (size == 0) return MerkleLog.EMPTY_ROOT;
        root = _roots[logId][size];
        if (root == bytes32(0)) revert ExperienceLedgerUnknownCheckpoint(logId, size);
    }

    /// @inheritdoc IExperienceLedger
    function logCount() external view returns (uint256) {
        return _logCount;
    }

    /// @inheritdoc IExperienceLedger
    function isCurated(uint256 logId, bytes32 leafHash) external view returns (bool) {
        return _curated[logId][leafHash];
    }

    // ------------------------------------------------------------------ publisher logs

    /// @inheritdoc IExperienceLedger
    function anchor(
        uint256 logId,
        uint64 size,
        bytes32 root,
        bytes calldata batchCid,
        bytes32[] calldata consistencyProof
    ) external {
        Log storage log = _ownedLog(logId);
        _requireKind(logId, log.kind, LogKind.Publisher);
        uint64 oldSize = log.size;
        if (size <= oldSize) revert ExperienceLedgerStaleCheckpoint(logId, size, oldSize);
        if (root == bytes32(0)) revert ExperienceLedgerZeroRoot(logId, size);
        bytes32 oldRoot = oldSize == 0 ? MerkleLog.EMPTY_ROOT : _roots[logId][oldSize];
        if (!MerkleLog.verifyConsistency(oldSize, size, oldRoot, root, consistencyProof)) {
            revert ExperienceLedgerInvalidConsistencyProof(logId, oldSize, oldRoot, size, root);
        }
        log.size = size;
        _roots[logId][size] = root;
        emit Anchored(logId, size, root, batchCid);
    }

    // ------------------------------------------------------------------ curated logs

    /// @inheritdoc IExperienceLedger
    function appendLeaves(uint256 logId, bytes32[] calldata leafHashes, bytes[] calldata entryCids) external {
        Log storage log = _ownedLog(logId);
        _requireKind(logId, log.kind, LogKind.Curated);
        uint256 n = leafHashes.length;
        if (n == 0) revert ExperienceLedgerEmptyBatch(logId);
        if (n != entryCids.length) revert ExperienceLedgerLengthMismatch(n, entryCids.length);
        uint64 size = log.size;
        for (uint256 i; i < n; ++i) {
            _appendLeaf(logId, size, leafHashes[i], entryCids[i]);
            ++size;
        }
        _recordCuratedCheckpoint(log, logId, size);
    }

    /// @inheritdoc IExperienceLedger
    function appendFromLog(
        uint256 curatedLogId,
        uint256 sourceLogId,
        uint64 sourceSize,
        uint64 leafIndex,
        bytes32 leafHash,
        bytes calldata entryCid,
        bytes32[] calldata inclusionProof
    ) external {
        Log storage log = _ownedLog(curatedLogId);
        _requireKind(curatedLogId, log.kind, LogKind.Curated);
        uint64 size = log.size;
        _curateLeaf(curatedLogId, size, sourceLogId, sourceSize, leafIndex, leafHash, entryCid, inclusionProof);
        _recordCuratedCheckpoint(log, curatedLogId, size + 1);
    }

    /// @inheritdoc IExperienceLedger
    function appendManyFromLog(uint256 curatedLogId, SourcedLeaf[] calldata leaves) external {
        Log storage log = _ownedLog(curatedLogId);
        _requireKind(curatedLogId, log.kind, LogKind.Curated);
        uint256 n = leaves.length;
        if (n == 0) revert ExperienceLedgerEmptyBatch(curatedLogId);
        uint64 size = log.size;
        for (uint256 i; i < n; ++i) {
            SourcedLeaf calldata leaf = leaves[i];
            _curateLeaf(
                curatedLogId,
                size,
                leaf.sourceLogId,
                leaf.sourceSize,
                leaf.leafIndex,
                leaf.leafHash,
                leaf.entryCid,
                leaf.inclusionProof
            );
            ++size;
        }
        _recordCuratedCheckpoint(log, curatedLogId, size);
    }

    // ------------------------------------------------------------------ verification

    /// @inheritdoc IExperienceLedger
    function verifyInclusion(bytes32 leafHash, uint256 index, uint256 size, bytes32[] calldata proof, bytes32 root)
        external
        view
        returns (bool)
    {
        return MerkleLog.verifyInclusion(leafHash, index, size, proof, root);
    }

    /// @inheritdoc IExperienceLedger
    function verifyConsistency(
        uint256 oldSize,
        uint256 newSize,
        bytes32 oldRoot,
        bytes32 newRoot,
        bytes32[] calldata proof
    ) external view returns (bool) {
        return MerkleLog.verifyConsistency(oldSize, newSize, oldRoot, newRoot, proof);
    }

    // ------------------------------------------------------------------ internals

    /// @dev Verifies that `leafHash` is leaf `leafIndex` of publisher log `sourceLogId` at its
    /// anchored checkpoint `sourceSize`, then appends it as leaf number `size` of `curatedLogId`
    /// (the caller records the checkpoint).
    function _curateLeaf(
        uint256 curatedLogId,
        uint64 size,
        uint256 sourceLogId,
        uint64 sourceSize,
        uint64 leafIndex,
        bytes32 leafHash,
        bytes calldata entryCid,
        bytes32[] calldata inclusionProof
    ) private {
        _requireKind(sourceLogId, _existingLog(sourceLogId).kind, LogKind.Publisher);
        bytes32 sourceRoot = _roots[sourceLogId][sourceSize];
        if (sourceRoot == bytes32(0)) revert ExperienceLedgerUnknownCheckpoint(sourceLogId, sourceSize);
        if (!MerkleLog.verifyInclusion(leafHash, leafIndex, sourceSize, inclusionProof, sourceRoot)) {
            revert ExperienceLedgerInvalidInclusionProof(sourceLogId, sourceSize, leafIndex, leafHash, sourceRoot);
        }
        emit LeafCurated(curatedLogId, sourceLogId, sourceSize, leafIndex, leafHash);
        _appendLeaf(curatedLogId, size, leafHash, entryCid);
    }

    /// @dev Pushes `leafHash` as leaf number `size` onto the frontier of curated log `logId`:
    /// merge it with the complete subtrees of equal height on the right edge (the set low bits
    /// of `size`), then store the merged subtree at the first clear bit.
    function _appendLeaf(uint256 logId, uint64 size, bytes32 leafHash, bytes calldata entryCid) private {
        if (_curated[logId][leafHash]) revert ExperienceLedgerAlreadyCurated(logId, leafHash);
        _curated[logId][leafHash] = true;
        emit LeafAppended(logId, size, leafHash, entryCid);

        mapping(uint256 => bytes32) storage frontier = _frontier[logId];
        bytes32 node = leafHash;
        uint256 level;
        for (uint256 s = size; s & 1 == 1; s >>= 1) {
            node = MerkleLog.hashChildren(frontier[level], node);
            ++level;
        }
        frontier[level] = node;
    }

    /// @dev Sets the size of curated log `logId` to `size`, folds its frontier into the RFC 9162
    /// root (smallest subtree first, each larger one joining on the left) and records it.
    function _recordCuratedCheckpoint(Log storage log, uint256 logId, uint64 size) private {
        mapping(uint256 => bytes32) storage frontier = _frontier[logId];
        uint256 level;
        uint256 s = size;
        while (s & 1 == 0) {
            s >>= 1;
            ++level;
        }
        bytes32 root = frontier[level];
        for (s >>= 1; s != 0; s >>= 1) {
            ++level;
            if (s & 1 == 1) root = MerkleLog.hashChildren(frontier[level], root);
        }
        log.size = size;
        _roots[logId][size] = root;
        emit CuratedCheckpoint(logId, size, root);
    }

    function _existingLog(uint256 logId) private view returns (Log storage log) {
        log = _logs[logId];
        if (log.owner == address(0)) revert ExperienceLedgerUnknownLog(logId);
    }

    function _ownedLog(uint256 logId) private view returns (Log storage log) {
        log = _existingLog(logId);
        address owner = log.owner;
        if (msg.sender != owner) revert ExperienceLedgerNotLogOwner(logId, msg.sender, owner);
    }

    function _requireKind(uint256 logId, LogKind actual, LogKind expected) private pure {
        if (actual != expected) revert ExperienceLedgerWrongLogKind(logId, expected, actual);
    }
}
