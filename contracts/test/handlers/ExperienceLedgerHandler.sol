// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ExperienceLedger} from "../../src/ExperienceLedger.sol";
import {IExperienceLedger} from "../../src/IExperienceLedger.sol";
import {ReferenceMerkle} from "../utils/ReferenceMerkle.sol";

/// @notice Drives one publisher log and one curated log of an ExperienceLedger through random
/// sequences of honest and dishonest operations, keeping the off-chain truth (ghost state) that
/// the invariants compare the chain with. The handler owns both logs.
contract ExperienceLedgerHandler {
    ExperienceLedger public immutable ledger;
    uint256 public immutable publisherLogId;
    uint256 public immutable curatedLogId;

    /// @dev The publisher's off-chain tree: every leaf published so far, anchored or not.
    bytes32[] private _published;
    /// @dev Every anchored size, in order.
    uint64[] private _anchoredSizes;
    /// @dev Leaves of the curated log, in append order.
    bytes32[] private _curated;
    uint256 private _nonce;

    uint64 public maxAnchoredSizeSeen;
    bool public anchoredSizeDecreased;
    bool public badAnchorAccepted;
    bool public doubleCurationAccepted;
    /// @dev Set when the ledger refuses an honest operation (handler reverts are not failures).
    bool public honestOperationRefused;

    constructor(ExperienceLedger ledger_) {
        ledger = ledger_;
        publisherLogId = ledger_.createLog("handler publisher", IExperienceLedger.LogKind.Publisher);
        curatedLogId = ledger_.createLog("handler library", IExperienceLedger.LogKind.Curated);
    }

    modifier observesAnchoredSize() {
        _;
        (,,, uint64 size,) = ledger.logInfo(publisherLogId);
        if (size < maxAnchoredSizeSeen) anchoredSizeDecreased = true;
        else maxAnchoredSizeSeen = size;
    }

    // ------------------------------------------------------------------ publisher log

    /// @notice Adds 1..8 leaves to the off-chain tree, without anchoring.
    function publish(uint256 count) external observesAnchoredSize {
        count = _bound(count, 1, 8);
        for (uint256 i; i < count; ++i) {
            _published.push(ReferenceMerkle.leaf("published", _nonce++));
        }
    }

    /// @notice Anchors the whole off-chain tree with an honest consistency proof.
    function anchorLatest() external observesAnchoredSize {
        uint64 oldSize = lastAnchoredSize();
        uint64 size = uint64(_published.length);
        if (size == oldSize) return;
        bytes32[] memory tree = _published;
        bytes32[] memory proof = oldSize == 0 ? new bytes32[](0) : ReferenceMerkle.consistencyProof(tree, oldSize, size);
        try ledger.anchor(publisherLogId, size, ReferenceMerkle.root(tree, size), abi.encode(size), proof) {
            _anchoredSizes.push(size);
        } catch {
            honestOperationRefused = true;
        }
    }

    /// @notice Tries to anchor a size at or below the anchored one; must be refused.
    function anchorStale(uint256 size) external observesAnchoredSize {
        size = _bound(size, 0, lastAnchoredSize());
        // forge-lint: disable-next-line(unsafe-typecast)
        try ledger.anchor(publisherLogId, uint64(size), bytes32(uint256(1)), "", new bytes32[](0)) {
            badAnchorAccepted = true;
        } catch {}
    }

    /// @notice Rewrites one anchored leaf and tries to anchor the rewritten tree with the proof
    /// that is honest for it; must be refused.
    function anchorRewritten(uint256 position, uint256 extra) external observesAnchoredSize {
        uint64 oldSize = lastAnchoredSize();
        if (oldSize == 0) return;
        bytes32[] memory forged = new bytes32[](_published.length + _bound(extra, 1, 4));
        for (uint256 i; i < forged.length; ++i) {
            forged[i] = i < _published.length ? _published[i] : ReferenceMerkle.leaf("extra", i);
        }
        uint256 pos = _bound(position, 0, oldSize - 1);
        forged[pos] = ReferenceMerkle.leaf("forged", pos);
        uint64 size = uint64(forged.length);
        bytes32[] memory proof = ReferenceMerkle.consistencyProof(forged, oldSize, size);
        try ledger.anchor(publisherLogId, size, ReferenceMerkle.root(forged, size), "", proof) {
            badAnchorAccepted = true;
        } catch {}
    }

    // ------------------------------------------------------------------ curated log

    /// @notice Appends 1..8 fresh leaves directly.
    function appendLeaves(uint256 count) external {
        count = _bound(count, 1, 8);
        bytes32[] memory leafHashes = new bytes32[](count);
        bytes[] memory cids = new bytes[](count);
        for (uint256 i; i < count; ++i) {
            leafHashes[i] = ReferenceMerkle.leaf("direct", _nonce++);
            cids[i] = abi.encodePacked(leafHashes[i]);
        }
        try ledger.appendLeaves(curatedLogId, leafHashes, cids) {
            for (uint256 i; i < count; ++i) {
                _curated.push(leafHashes[i]);
            }
        } catch {
            honestOperationRefused = true;
        }
    }

    /// @notice Curates a published leaf, proven against a random anchored checkpoint; a leaf
    /// already curated must be refused.
    function curateFromPublisher(uint256 checkpointSeed, uint256 indexSeed) external {
        if (_anchoredSizes.length == 0) return;
        uint64 size = _anchoredSizes[checkpointSeed % _anchoredSizes.length];
        // forge-lint: disable-next-line(unsafe-typecast)
        uint64 index = uint64(indexSeed % size);
        bytes32[] memory tree = _published;
        bytes32 leafHash = tree[index];
        bytes32[] memory proof = ReferenceMerkle.inclusionProof(tree, size, index);
        bool already = ledger.isCurated(curatedLogId, leafHash);
        try ledger.appendFromLog(curatedLogId, publisherLogId, size, index, leafHash, "", proof) {
            if (already) doubleCurationAccepted = true;
            _curated.push(leafHash);
        } catch {
            if (!already) honestOperationRefused = true;
        }
    }

    // ------------------------------------------------------------------ ghost state

    function lastAnchoredSize() public view returns (uint64) {
        uint256 n = _anchoredSizes.length;
        return n == 0 ? 0 : _anchoredSizes[n - 1];
    }

    function published() external view returns (bytes32[] memory) {
        return _published;
    }

    function curatedLeaves() external view returns (bytes32[] memory) {
        return _curated;
    }

    function _bound(uint256 x, uint256 min, uint256 max) private pure returns (uint256) {
        return min + x % (max - min + 1);
    }
}
