// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ExperienceLedger} from "../src/ExperienceLedger.sol";
import {IExperienceLedger} from "../src/IExperienceLedger.sol";
import {MerkleLog} from "../src/MerkleLog.sol";
import {ExperienceLedgerHandler} from "./handlers/ExperienceLedgerHandler.sol";
import {GymTest} from "./utils/GymTest.sol";
import {Vm} from "./utils/Vm.sol";
import {ReferenceMerkle} from "./utils/ReferenceMerkle.sol";

/// @notice Shared fixture: a publisher log owned by alice, a curated library owned by the DAO
/// (standing in for the timelock), and 64 publisher leaves kept off-chain.
abstract contract ExperienceLedgerFixture is GymTest {
    IExperienceLedger.LogKind internal constant PUBLISHER = IExperienceLedger.LogKind.Publisher;
    IExperienceLedger.LogKind internal constant CURATED = IExperienceLedger.LogKind.Curated;
    uint256 internal constant TREE = 64;

    ExperienceLedger internal ledger;
    address internal alice = address(0xA11CE);
    address internal dao = address(0xDA0);
    address internal mallory = address(0xBAD);
    uint256 internal pubLog;
    uint256 internal curLog;
    bytes32[] internal leaves;
    /// @dev roots[n] = MTH of the first n leaves. Precomputed: the sha256 precompile is a call,
    /// and a call between vm.prank/expectRevert and the ledger call would consume the cheatcode.
    bytes32[] internal roots;

    function setUp() public virtual {
        ledger = new ExperienceLedger();
        vm.prank(alice);
        pubLog = ledger.createLog("alice", PUBLISHER);
        vm.prank(dao);
        curLog = ledger.createLog("library", CURATED);
        for (uint256 i; i < TREE; ++i) {
            leaves.push(ReferenceMerkle.leaf("published", i));
        }
        for (uint256 n; n <= TREE; ++n) {
            roots.push(ReferenceMerkle.root(leaves, n));
        }
    }

    /// @dev A CIDv1 (raw, sha2-256) shaped value, distinct per seed.
    function _cid(uint256 seed) internal pure returns (bytes memory) {
        return abi.encodePacked(hex"01551220", keccak256(abi.encode(seed)));
    }

    function _root(uint256 size) internal view returns (bytes32) {
        return roots[size];
    }

    function _size(uint256 logId) internal view returns (uint64 size) {
        (,,, size,) = ledger.logInfo(logId);
    }

    function _rootOf(uint256 logId) internal view returns (bytes32 root) {
        (,,,, root) = ledger.logInfo(logId);
    }

    /// @dev Anchors alice's log at `size` with the honest proof from its anchored size.
    /// @dev `who`'s anchor of (`size`, `root`) on log `logId`, no CID and no proof, reverts with `err`.
    function _expectAnchorRevert(address who, uint256 logId, uint64 size, bytes32 root, bytes memory err) internal {
        vm.expectRevert(err);
        vm.prank(who);
        ledger.anchor(logId, size, root, "", new bytes32[](0));
    }

    function _anchor(uint256 size) internal {
        uint64 oldSize = _size(pubLog);
        bytes32[] memory proof =
            oldSize == 0 ? new bytes32[](0) : ReferenceMerkle.consistencyProof(leaves, oldSize, size);
        vm.prank(alice);
        ledger.anchor(pubLog, _u64(size), _root(size), _cid(size), proof);
    }

    function _u64(uint256 x) internal pure returns (uint64) {
        require(x <= type(uint64).max, "does not fit in uint64");
        // forge-lint: disable-next-line(unsafe-typecast)
        return uint64(x);
    }

    function _one(bytes32 x) internal pure returns (bytes32[] memory a) {
        a = new bytes32[](1);
        a[0] = x;
    }

    function _oneCid(bytes memory cid) internal pure returns (bytes[] memory a) {
        a = new bytes[](1);
        a[0] = cid;
    }

    function _flip(bytes32[] memory proof, uint256 position, uint256 bit) internal pure returns (bytes32[] memory) {
        bytes32[] memory copy = new bytes32[](proof.length);
        for (uint256 i; i < proof.length; ++i) {
            copy[i] = proof[i];
        }
        copy[position] ^= bytes32(uint256(1) << bit);
        return copy;
    }

    function _sourced(uint64 sourceSize, uint64 index) internal view returns (IExperienceLedger.SourcedLeaf memory) {
        return IExperienceLedger.SourcedLeaf({
            sourceLogId: pubLog,
            sourceSize: sourceSize,
            leafIndex: index,
            leafHash: leaves[index],
            entryCid: _cid(index),
            inclusionProof: ReferenceMerkle.inclusionProof(leaves, sourceSize, index)
        });
    }

    function _curateLeaf(uint64 sourceSize, uint64 index) internal {
        bytes32[] memory proof = ReferenceMerkle.inclusionProof(leaves, sourceSize, index);
        vm.prank(dao);
        ledger.appendFromLog(curLog, pubLog, sourceSize, index, leaves[index], _cid(index), proof);
    }
}

contract ExperienceLedgerTest is ExperienceLedgerFixture {
    // ------------------------------------------------------------------ createLog

    function test_createLog_assignsIdsFromOne() public {
        assertEq(pubLog, 1, "first id");
        assertEq(curLog, 2, "second id");
        assertEq(ledger.createLog("third", PUBLISHER), 3, "third id");
        assertEq(ledger.logCount(), 3, "logCount");
    }

    function test_createLog_recordsOwnerKindAndName() public view {
        (address owner, IExperienceLedger.LogKind kind, string memory name, uint64 size, bytes32 root) =
            ledger.logInfo(curLog);
        assertEq(owner, dao, "owner");
        assertTrue(kind == CURATED, "kind");
        assertEq(name, "library", "name");
        assertEq(size, 0, "size");
        assertEq(root, MerkleLog.EMPTY_ROOT, "empty root");
    }

    function test_createLog_emitsLogCreated() public {
        vm.expectEmit(true, true, true, true, address(ledger));
        emit IExperienceLedger.LogCreated(3, mallory, PUBLISHER, "m");
        vm.prank(mallory);
        ledger.createLog("m", PUBLISHER);
    }

    function testFuzz_createLog(address creator, string calldata name, bool curated) public {
        vm.assume(creator != address(0));
        IExperienceLedger.LogKind kind = curated ? CURATED : PUBLISHER;
        vm.prank(creator);
        uint256 logId = ledger.createLog(name, kind);
        (address owner, IExperienceLedger.LogKind gotKind, string memory gotName,,) = ledger.logInfo(logId);
        assertEq(logId, 3, "id");
        assertEq(owner, creator, "owner");
        assertTrue(gotKind == kind, "kind");
        assertEq(gotName, name, "name");
    }

    // ------------------------------------------------------------------ transferLogOwnership

    function test_transferLogOwnership_movesOwnership() public {
        address bob = address(0xB0B);
        vm.prank(alice);
        ledger.transferLogOwnership(pubLog, bob);
        (address owner,,,,) = ledger.logInfo(pubLog);
        assertEq(owner, bob, "owner");

        vm.prank(bob);
        ledger.anchor(pubLog, 3, _root(3), "", new bytes32[](0));
        bytes32[] memory proof = ReferenceMerkle.consistencyProof(leaves, 3, 4);
        vm.expectRevert(
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerNotLogOwner.selector, pubLog, alice, bob)
        );
        vm.prank(alice);
        ledger.anchor(pubLog, 4, _root(4), "", proof);
    }

    function test_transferLogOwnership_emitsLogOwnershipTransferred() public {
        vm.expectEmit(true, true, true, true, address(ledger));
        emit IExperienceLedger.LogOwnershipTransferred(curLog, dao, alice);
        vm.prank(dao);
        ledger.transferLogOwnership(curLog, alice);
    }

    function test_transferLogOwnership_revertsForNonOwner() public {
        vm.expectRevert(
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerNotLogOwner.selector, curLog, mallory, dao)
        );
        vm.prank(mallory);
        ledger.transferLogOwnership(curLog, mallory);
    }

    function test_transferLogOwnership_revertsOnZeroOwner() public {
        vm.expectRevert(
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerInvalidOwner.selector, pubLog, address(0))
        );
        vm.prank(alice);
        ledger.transferLogOwnership(pubLog, address(0));
    }

    function test_transferLogOwnership_revertsOnUnknownLog() public {
        vm.expectRevert(abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerUnknownLog.selector, 7));
        vm.prank(alice);
        ledger.transferLogOwnership(7, alice);
    }

    function testFuzz_transferLogOwnership(address newOwner, address stranger) public {
        vm.assume(newOwner != address(0) && stranger != newOwner);
        vm.prank(dao);
        ledger.transferLogOwnership(curLog, newOwner);
        (address owner,,,,) = ledger.logInfo(curLog);
        assertEq(owner, newOwner, "owner");
        vm.expectRevert(
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerNotLogOwner.selector, curLog, stranger, newOwner)
        );
        vm.prank(stranger);
        ledger.transferLogOwnership(curLog, stranger);
    }

    // ------------------------------------------------------------------ logInfo, rootAt

    function test_logInfo_revertsOnUnknownLog() public {
        vm.expectRevert(abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerUnknownLog.selector, 0));
        ledger.logInfo(0);
        vm.expectRevert(abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerUnknownLog.selector, 3));
        ledger.logInfo(3);
    }

    function test_rootAt_emptyTreeAtSizeZero() public view {
        assertEq(ledger.rootAt(pubLog, 0), MerkleLog.EMPTY_ROOT, "publisher");
        assertEq(ledger.rootAt(curLog, 0), sha256(""), "curated");
    }

    function test_rootAt_revertsOnUnknownCheckpoint() public {
        _anchor(5);
        vm.expectRevert(abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerUnknownCheckpoint.selector, pubLog, 4));
        ledger.rootAt(pubLog, 4);
    }

    function test_rootAt_revertsOnUnknownLog() public {
        vm.expectRevert(abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerUnknownLog.selector, 9));
        ledger.rootAt(9, 0);
    }

    // ------------------------------------------------------------------ anchor

    function test_anchor_firstCheckpointNeedsNoProof() public {
        _anchor(7);
        assertEq(_size(pubLog), 7, "size");
        assertEq(_rootOf(pubLog), _root(7), "root");
        assertEq(ledger.rootAt(pubLog, 7), _root(7), "rootAt");
    }

    function test_anchor_emitsAnchored() public {
        vm.expectEmit(true, true, true, true, address(ledger));
        emit IExperienceLedger.Anchored(pubLog, 5, _root(5), _cid(5));
        _anchor(5);
    }

    function test_anchor_keepsEveryCheckpoint() public {
        uint8[6] memory sizes = [1, 3, 4, 7, 21, 64];
        for (uint256 i; i < sizes.length; ++i) {
            _anchor(sizes[i]);
        }
        for (uint256 i; i < sizes.length; ++i) {
            assertEq(ledger.rootAt(pubLog, sizes[i]), _root(sizes[i]), "rootAt");
        }
        assertEq(_size(pubLog), 64, "latest size");
        assertEq(_rootOf(pubLog), _root(64), "latest root");
    }

    function test_anchor_revertsForNonOwner() public {
        _expectAnchorRevert(
            mallory,
            pubLog,
            3,
            _root(3),
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerNotLogOwner.selector, pubLog, mallory, alice)
        );
    }

    function test_anchor_revertsOnUnknownLog() public {
        vm.expectRevert(abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerUnknownLog.selector, 5));
        ledger.anchor(5, 3, _root(3), "", new bytes32[](0));
    }

    function test_anchor_revertsOnCuratedLog() public {
        _expectAnchorRevert(
            dao,
            curLog,
            3,
            _root(3),
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerWrongLogKind.selector, curLog, PUBLISHER, CURATED)
        );
    }

    function test_anchor_revertsOnStaleCheckpoint() public {
        _anchor(5);
        vm.startPrank(alice);
        vm.expectRevert(
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerStaleCheckpoint.selector, pubLog, 5, 5)
        );
        ledger.anchor(pubLog, 5, _root(5), "", new bytes32[](0));
        vm.expectRevert(
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerStaleCheckpoint.selector, pubLog, 4, 5)
        );
        ledger.anchor(pubLog, 4, _root(4), "", new bytes32[](0));
        vm.stopPrank();
    }

    function test_anchor_revertsOnSizeZero() public {
        _expectAnchorRevert(
            alice,
            pubLog,
            0,
            MerkleLog.EMPTY_ROOT,
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerStaleCheckpoint.selector, pubLog, 0, 0)
        );
    }

    function test_anchor_revertsOnZeroRoot() public {
        _expectAnchorRevert(
            alice,
            pubLog,
            3,
            bytes32(0),
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerZeroRoot.selector, pubLog, 3)
        );
    }

    function test_anchor_revertsOnFirstAnchorWithProof() public {
        vm.expectRevert(
            abi.encodeWithSelector(
                IExperienceLedger.ExperienceLedgerInvalidConsistencyProof.selector,
                pubLog,
                0,
                MerkleLog.EMPTY_ROOT,
                3,
                _root(3)
            )
        );
        vm.prank(alice);
        ledger.anchor(pubLog, 3, _root(3), "", _one(leaves[0]));
    }

    function test_anchor_revertsOnRewrittenHistory() public {
        _anchor(6);
        bytes32[] memory forged = leaves;
        forged[2] = ReferenceMerkle.leaf("forged", 2);
        bytes32 forgedRoot = ReferenceMerkle.root(forged, 9);
        bytes32[] memory proof = ReferenceMerkle.consistencyProof(forged, 6, 9);
        vm.expectRevert(
            abi.encodeWithSelector(
                IExperienceLedger.ExperienceLedgerInvalidConsistencyProof.selector, pubLog, 6, _root(6), 9, forgedRoot
            )
        );
        vm.prank(alice);
        ledger.anchor(pubLog, 9, forgedRoot, "", proof);
    }

    function test_anchor_revertsOnTamperedProof() public {
        _anchor(6);
        bytes32[] memory proof = _flip(ReferenceMerkle.consistencyProof(leaves, 6, 13), 1, 0);
        vm.expectRevert(
            abi.encodeWithSelector(
                IExperienceLedger.ExperienceLedgerInvalidConsistencyProof.selector, pubLog, 6, _root(6), 13, _root(13)
            )
        );
        vm.prank(alice);
        ledger.anchor(pubLog, 13, _root(13), "", proof);
    }

    function testFuzz_anchor(uint256 oldSize, uint256 newSize) public {
        oldSize = bound(oldSize, 1, TREE - 1);
        newSize = bound(newSize, oldSize + 1, TREE);
        _anchor(oldSize);
        _anchor(newSize);
        assertEq(_size(pubLog), newSize, "size");
        assertEq(ledger.rootAt(pubLog, _u64(oldSize)), _root(oldSize), "old root kept");
        assertEq(_rootOf(pubLog), _root(newSize), "new root");
    }

    function testFuzz_anchor_revertsOnStaleCheckpoint(uint256 anchored, uint256 size) public {
        anchored = bound(anchored, 1, TREE);
        size = bound(size, 0, anchored);
        _anchor(anchored);
        vm.expectRevert(
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerStaleCheckpoint.selector, pubLog, size, anchored)
        );
        vm.prank(alice);
        ledger.anchor(pubLog, _u64(size), _root(size), "", new bytes32[](0));
    }

    function testFuzz_anchor_revertsOnTamperedProof(uint256 oldSize, uint256 newSize, uint256 position, uint8 bit)
        public
    {
        oldSize = bound(oldSize, 1, TREE - 1);
        newSize = bound(newSize, oldSize + 1, TREE);
        _anchor(oldSize);
        bytes32[] memory proof = ReferenceMerkle.consistencyProof(leaves, oldSize, newSize);
        proof = _flip(proof, bound(position, 0, proof.length - 1), bit);
        vm.expectRevert(
            abi.encodeWithSelector(
                IExperienceLedger.ExperienceLedgerInvalidConsistencyProof.selector,
                pubLog,
                oldSize,
                _root(oldSize),
                newSize,
                _root(newSize)
            )
        );
        vm.prank(alice);
        ledger.anchor(pubLog, _u64(newSize), _root(newSize), "", proof);
    }

    // ------------------------------------------------------------------ appendLeaves

    function _appendRange(uint256 from, uint256 to) internal {
        bytes32[] memory batch = new bytes32[](to - from);
        bytes[] memory cids = new bytes[](to - from);
        for (uint256 i = from; i < to; ++i) {
            batch[i - from] = leaves[i];
            cids[i - from] = _cid(i);
        }
        vm.prank(dao);
        ledger.appendLeaves(curLog, batch, cids);
    }

    function test_appendLeaves_rootMatchesReference() public {
        uint8[7] memory ends = [1, 2, 3, 8, 9, 31, 64];
        uint256 from;
        for (uint256 i; i < ends.length; ++i) {
            _appendRange(from, ends[i]);
            from = ends[i];
            assertEq(_size(curLog), from, "size");
            assertEq(_rootOf(curLog), _root(from), "root");
        }
        for (uint256 i; i < ends.length; ++i) {
            assertEq(ledger.rootAt(curLog, ends[i]), _root(ends[i]), "rootAt");
        }
        assertTrue(ledger.isCurated(curLog, leaves[63]), "isCurated");
        assertFalse(ledger.isCurated(pubLog, leaves[63]), "not in another log");
    }

    function test_appendLeaves_emitsLeafAppendedAndCuratedCheckpoint() public {
        _appendRange(0, 2);
        vm.expectEmit(true, true, true, true, address(ledger));
        emit IExperienceLedger.LeafAppended(curLog, 2, leaves[2], _cid(2));
        vm.expectEmit(true, true, true, true, address(ledger));
        emit IExperienceLedger.LeafAppended(curLog, 3, leaves[3], _cid(3));
        vm.expectEmit(true, true, true, true, address(ledger));
        emit IExperienceLedger.CuratedCheckpoint(curLog, 4, _root(4));
        _appendRange(2, 4);
    }

    function test_appendLeaves_revertsForNonOwner() public {
        vm.expectRevert(
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerNotLogOwner.selector, curLog, mallory, dao)
        );
        vm.prank(mallory);
        ledger.appendLeaves(curLog, _one(leaves[0]), _oneCid(""));
    }

    function test_appendLeaves_revertsOnUnknownLog() public {
        vm.expectRevert(abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerUnknownLog.selector, 3));
        ledger.appendLeaves(3, _one(leaves[0]), _oneCid(""));
    }

    function test_appendLeaves_revertsOnPublisherLog() public {
        vm.expectRevert(
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerWrongLogKind.selector, pubLog, CURATED, PUBLISHER)
        );
        vm.prank(alice);
        ledger.appendLeaves(pubLog, _one(leaves[0]), _oneCid(""));
    }

    function test_appendLeaves_revertsOnEmptyBatch() public {
        vm.expectRevert(abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerEmptyBatch.selector, curLog));
        vm.prank(dao);
        ledger.appendLeaves(curLog, new bytes32[](0), new bytes[](0));
    }

    function test_appendLeaves_revertsOnLengthMismatch() public {
        vm.expectRevert(abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerLengthMismatch.selector, 1, 2));
        vm.prank(dao);
        ledger.appendLeaves(curLog, _one(leaves[0]), new bytes[](2));
    }

    function test_appendLeaves_revertsOnLeafAlreadyInLog() public {
        _appendRange(0, 3);
        vm.expectRevert(
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerAlreadyCurated.selector, curLog, leaves[1])
        );
        vm.prank(dao);
        ledger.appendLeaves(curLog, _one(leaves[1]), _oneCid(""));
    }

    function test_appendLeaves_revertsOnDuplicateWithinBatch() public {
        bytes32[] memory batch = new bytes32[](2);
        (batch[0], batch[1]) = (leaves[5], leaves[5]);
        vm.expectRevert(
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerAlreadyCurated.selector, curLog, leaves[5])
        );
        vm.prank(dao);
        ledger.appendLeaves(curLog, batch, new bytes[](2));
    }

    function testFuzz_appendLeaves(uint256 seed) public {
        uint256 from;
        while (from < TREE) {
            uint256 to = from + 1 + (seed & 15);
            if (to > TREE) to = TREE;
            seed >>= 4;
            _appendRange(from, to);
            from = to;
            assertEq(_rootOf(curLog), _root(from), "root");
            assertEq(ledger.rootAt(curLog, _u64(from)), _root(from), "rootAt");
        }
    }

    // ------------------------------------------------------------------ appendFromLog

    function test_appendFromLog_appendsProvenLeaf() public {
        _anchor(7);
        _curateLeaf(7, 3);
        assertEq(_size(curLog), 1, "size");
        assertEq(_rootOf(curLog), leaves[3], "a one-leaf tree's root is its leaf hash");
        assertTrue(ledger.isCurated(curLog, leaves[3]), "isCurated");
        _curateLeaf(7, 6);
        bytes32[] memory curated = new bytes32[](2);
        (curated[0], curated[1]) = (leaves[3], leaves[6]);
        assertEq(_rootOf(curLog), ReferenceMerkle.root(curated, 2), "two-leaf root");
    }

    function test_appendFromLog_acceptsOlderCheckpoint() public {
        _anchor(7);
        _anchor(40);
        _curateLeaf(7, 5);
        _curateLeaf(40, 39);
        assertEq(_size(curLog), 2, "size");
    }

    function test_appendFromLog_emitsLeafCuratedLeafAppendedAndCheckpoint() public {
        _anchor(9);
        vm.expectEmit(true, true, true, true, address(ledger));
        emit IExperienceLedger.LeafCurated(curLog, pubLog, 9, 8, leaves[8]);
        vm.expectEmit(true, true, true, true, address(ledger));
        emit IExperienceLedger.LeafAppended(curLog, 0, leaves[8], _cid(8));
        vm.expectEmit(true, true, true, true, address(ledger));
        emit IExperienceLedger.CuratedCheckpoint(curLog, 1, leaves[8]);
        _curateLeaf(9, 8);
    }

    function test_appendFromLog_revertsOnUnanchoredCheckpoint() public {
        _anchor(7);
        bytes32[] memory proof = ReferenceMerkle.inclusionProof(leaves, 8, 3);
        vm.expectRevert(abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerUnknownCheckpoint.selector, pubLog, 8));
        vm.prank(dao);
        ledger.appendFromLog(curLog, pubLog, 8, 3, leaves[3], "", proof);
    }

    function test_appendFromLog_revertsOnSizeZero() public {
        vm.expectRevert(abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerUnknownCheckpoint.selector, pubLog, 0));
        vm.prank(dao);
        ledger.appendFromLog(curLog, pubLog, 0, 0, leaves[0], "", new bytes32[](0));
    }

    function test_appendFromLog_revertsOnInvalidInclusionProof() public {
        _anchor(7);
        bytes32[] memory proof = ReferenceMerkle.inclusionProof(leaves, 7, 3);
        vm.startPrank(dao);
        vm.expectRevert(
            abi.encodeWithSelector(
                IExperienceLedger.ExperienceLedgerInvalidInclusionProof.selector, pubLog, 7, 4, leaves[3], _root(7)
            )
        );
        ledger.appendFromLog(curLog, pubLog, 7, 4, leaves[3], "", proof);
        vm.expectRevert(
            abi.encodeWithSelector(
                IExperienceLedger.ExperienceLedgerInvalidInclusionProof.selector, pubLog, 7, 3, leaves[8], _root(7)
            )
        );
        ledger.appendFromLog(curLog, pubLog, 7, 3, leaves[8], "", proof);
        vm.stopPrank();
    }

    function test_appendFromLog_revertsOnDoubleInclusion() public {
        _anchor(7);
        _anchor(12);
        _curateLeaf(7, 2);
        bytes32[] memory proof = ReferenceMerkle.inclusionProof(leaves, 12, 2);
        vm.expectRevert(
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerAlreadyCurated.selector, curLog, leaves[2])
        );
        vm.prank(dao);
        ledger.appendFromLog(curLog, pubLog, 12, 2, leaves[2], "", proof);
    }

    function test_appendFromLog_revertsForNonOwner() public {
        _anchor(7);
        bytes32[] memory proof = ReferenceMerkle.inclusionProof(leaves, 7, 0);
        vm.expectRevert(
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerNotLogOwner.selector, curLog, alice, dao)
        );
        vm.prank(alice);
        ledger.appendFromLog(curLog, pubLog, 7, 0, leaves[0], "", proof);
    }

    function test_appendFromLog_revertsOnPublisherTarget() public {
        _anchor(7);
        vm.prank(alice);
        uint256 other = ledger.createLog("not a library", PUBLISHER);
        bytes32[] memory proof = ReferenceMerkle.inclusionProof(leaves, 7, 0);
        vm.expectRevert(
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerWrongLogKind.selector, other, CURATED, PUBLISHER)
        );
        vm.prank(alice);
        ledger.appendFromLog(other, pubLog, 7, 0, leaves[0], "", proof);
    }

    function test_appendFromLog_revertsOnCuratedSource() public {
        _appendRange(0, 4);
        bytes32[] memory proof = ReferenceMerkle.inclusionProof(leaves, 4, 0);
        vm.expectRevert(
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerWrongLogKind.selector, curLog, PUBLISHER, CURATED)
        );
        vm.prank(dao);
        ledger.appendFromLog(curLog, curLog, 4, 0, leaves[0], "", proof);
    }

    function test_appendFromLog_revertsOnUnknownSourceLog() public {
        vm.expectRevert(abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerUnknownLog.selector, 42));
        vm.prank(dao);
        ledger.appendFromLog(curLog, 42, 1, 0, leaves[0], "", new bytes32[](0));
    }

    function test_appendFromLog_revertsOnUnknownCuratedLog() public {
        vm.expectRevert(abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerUnknownLog.selector, 42));
        vm.prank(dao);
        ledger.appendFromLog(42, pubLog, 1, 0, leaves[0], "", new bytes32[](0));
    }

    function testFuzz_appendFromLog(uint256 size, uint256 index, uint256 later) public {
        size = bound(size, 1, TREE - 1);
        index = bound(index, 0, size - 1);
        later = bound(later, size + 1, TREE);
        _anchor(size);
        _anchor(later);
        _curateLeaf(_u64(size), _u64(index));
        assertEq(_rootOf(curLog), leaves[index], "root");
        bytes32[] memory proof = ReferenceMerkle.inclusionProof(leaves, later, index);
        vm.expectRevert(
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerAlreadyCurated.selector, curLog, leaves[index])
        );
        vm.prank(dao);
        ledger.appendFromLog(curLog, pubLog, _u64(later), _u64(index), leaves[index], "", proof);
    }

    // ------------------------------------------------------------------ appendManyFromLog

    function test_appendManyFromLog_oneCheckpointForTheBatch() public {
        _anchor(7);
        _anchor(40);
        IExperienceLedger.SourcedLeaf[] memory batch = new IExperienceLedger.SourcedLeaf[](3);
        batch[0] = _sourced(7, 3);
        batch[1] = _sourced(40, 39);
        batch[2] = _sourced(7, 0);
        bytes32[] memory curated = new bytes32[](3);
        (curated[0], curated[1], curated[2]) = (leaves[3], leaves[39], leaves[0]);
        bytes32 expected = ReferenceMerkle.root(curated, 3);
        vm.prank(dao);
        ledger.appendManyFromLog(curLog, batch);
        assertEq(_size(curLog), 3, "size");
        assertEq(_rootOf(curLog), expected, "root");
        assertEq(ledger.rootAt(curLog, 3), expected, "rootAt");
        vm.expectRevert(abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerUnknownCheckpoint.selector, curLog, 1));
        ledger.rootAt(curLog, 1); // no checkpoint inside a batch
    }

    function test_appendManyFromLog_emitsPerLeafThenOneCheckpoint() public {
        _anchor(9);
        IExperienceLedger.SourcedLeaf[] memory batch = new IExperienceLedger.SourcedLeaf[](2);
        batch[0] = _sourced(9, 8);
        batch[1] = _sourced(9, 1);
        bytes32[] memory curated = new bytes32[](2);
        (curated[0], curated[1]) = (leaves[8], leaves[1]);
        bytes32 expected = ReferenceMerkle.root(curated, 2);
        vm.expectEmit(true, true, true, true, address(ledger));
        emit IExperienceLedger.LeafCurated(curLog, pubLog, 9, 8, leaves[8]);
        vm.expectEmit(true, true, true, true, address(ledger));
        emit IExperienceLedger.LeafAppended(curLog, 0, leaves[8], _cid(8));
        vm.expectEmit(true, true, true, true, address(ledger));
        emit IExperienceLedger.LeafCurated(curLog, pubLog, 9, 1, leaves[1]);
        vm.expectEmit(true, true, true, true, address(ledger));
        emit IExperienceLedger.LeafAppended(curLog, 1, leaves[1], _cid(1));
        vm.expectEmit(true, true, true, true, address(ledger));
        emit IExperienceLedger.CuratedCheckpoint(curLog, 2, expected);
        vm.prank(dao);
        ledger.appendManyFromLog(curLog, batch);
    }

    function test_appendManyFromLog_revertsOnEmptyBatch() public {
        vm.expectRevert(abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerEmptyBatch.selector, curLog));
        vm.prank(dao);
        ledger.appendManyFromLog(curLog, new IExperienceLedger.SourcedLeaf[](0));
    }

    function test_appendManyFromLog_revertsForNonOwner() public {
        _anchor(7);
        IExperienceLedger.SourcedLeaf[] memory batch = new IExperienceLedger.SourcedLeaf[](1);
        batch[0] = _sourced(7, 3);
        vm.expectRevert(
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerNotLogOwner.selector, curLog, mallory, dao)
        );
        vm.prank(mallory);
        ledger.appendManyFromLog(curLog, batch);
    }

    function test_appendManyFromLog_revertsOnDuplicateWithinBatch() public {
        _anchor(7);
        _anchor(12);
        IExperienceLedger.SourcedLeaf[] memory batch = new IExperienceLedger.SourcedLeaf[](2);
        batch[0] = _sourced(7, 2);
        batch[1] = _sourced(12, 2);
        vm.expectRevert(
            abi.encodeWithSelector(IExperienceLedger.ExperienceLedgerAlreadyCurated.selector, curLog, leaves[2])
        );
        vm.prank(dao);
        ledger.appendManyFromLog(curLog, batch);
    }

    function test_appendManyFromLog_oneBadLeafRevertsTheWholeBatch() public {
        _anchor(7);
        IExperienceLedger.SourcedLeaf[] memory batch = new IExperienceLedger.SourcedLeaf[](3);
        batch[0] = _sourced(7, 0);
        batch[1] = _sourced(7, 1);
        batch[2] = _sourced(7, 2);
        batch[2].inclusionProof = _flip(batch[2].inclusionProof, 0, 7);
        vm.expectRevert(
            abi.encodeWithSelector(
                IExperienceLedger.ExperienceLedgerInvalidInclusionProof.selector, pubLog, 7, 2, leaves[2], _root(7)
            )
        );
        vm.prank(dao);
        ledger.appendManyFromLog(curLog, batch);
        assertEq(_size(curLog), 0, "nothing appended");
        assertFalse(ledger.isCurated(curLog, leaves[0]), "first leaf rolled back");
    }

    function testFuzz_appendManyFromLog(uint256 size, uint256 seed, uint256 count) public {
        size = bound(size, 1, TREE);
        count = bound(count, 1, size < 8 ? size : 8);
        seed = bound(seed, 0, size - 1);
        _anchor(size);
        // `count` distinct indexes: a random start, stepping by one modulo the size.
        IExperienceLedger.SourcedLeaf[] memory batch = new IExperienceLedger.SourcedLeaf[](count);
        bytes32[] memory curated = new bytes32[](count);
        for (uint256 i; i < count; ++i) {
            uint256 index = (seed + i) % size;
            batch[i] = _sourced(_u64(size), _u64(index));
            curated[i] = leaves[index];
        }
        bytes32 expected = ReferenceMerkle.root(curated, count);
        vm.prank(dao);
        ledger.appendManyFromLog(curLog, batch);
        assertEq(_size(curLog), count, "size");
        assertEq(_rootOf(curLog), expected, "root");
    }

    // ------------------------------------------------------------------ verifyInclusion

    function test_verifyInclusion_acceptsEveryLeafOfSmallTrees() public view {
        for (uint256 size = 1; size <= 17; ++size) {
            bytes32 root = _root(size);
            for (uint256 index; index < size; ++index) {
                bytes32[] memory proof = ReferenceMerkle.inclusionProof(leaves, size, index);
                assertTrue(ledger.verifyInclusion(leaves[index], index, size, proof, root), "valid proof");
            }
        }
    }

    function test_verifyInclusion_rejectsMalformedProofs() public view {
        bytes32 root = _root(7);
        bytes32[] memory proof = ReferenceMerkle.inclusionProof(leaves, 7, 3);
        assertTrue(ledger.verifyInclusion(leaves[3], 3, 7, proof, root), "control");
        assertFalse(ledger.verifyInclusion(leaves[4], 3, 7, proof, root), "wrong leaf");
        assertFalse(ledger.verifyInclusion(leaves[3], 2, 7, proof, root), "wrong index");
        assertFalse(ledger.verifyInclusion(leaves[3], 3, 8, proof, _root(8)), "size off by one");
        assertFalse(ledger.verifyInclusion(leaves[3], 3, 7, proof, _root(6)), "wrong root");
        assertFalse(ledger.verifyInclusion(leaves[3], 7, 7, proof, root), "index == size");
        assertFalse(ledger.verifyInclusion(leaves[0], 0, 0, new bytes32[](0), MerkleLog.EMPTY_ROOT), "size 0");
        assertFalse(ledger.verifyInclusion(leaves[3], 3, 7, _flip(proof, 2, 255), root), "flipped bit");

        bytes32[] memory longer = new bytes32[](proof.length + 1);
        for (uint256 i; i < proof.length; ++i) {
            longer[i] = proof[i];
        }
        assertFalse(ledger.verifyInclusion(leaves[3], 3, 7, longer, root), "extra hash");
        bytes32[] memory shorter = new bytes32[](proof.length - 1);
        for (uint256 i; i < shorter.length; ++i) {
            shorter[i] = proof[i];
        }
        assertFalse(ledger.verifyInclusion(leaves[3], 3, 7, shorter, root), "missing hash");
        assertTrue(ledger.verifyInclusion(leaves[0], 0, 1, new bytes32[](0), leaves[0]), "one-leaf tree");
        assertFalse(ledger.verifyInclusion(leaves[0], 0, 1, _one(leaves[0]), leaves[0]), "one-leaf, extra hash");
    }

    function testFuzz_verifyInclusion(uint256 size, uint256 index, uint256 position, uint8 bit) public view {
        size = bound(size, 1, TREE);
        index = bound(index, 0, size - 1);
        bytes32 root = _root(size);
        bytes32[] memory proof = ReferenceMerkle.inclusionProof(leaves, size, index);
        assertTrue(ledger.verifyInclusion(leaves[index], index, size, proof, root), "valid");
        if (proof.length > 0) {
            proof = _flip(proof, bound(position, 0, proof.length - 1), bit);
            assertFalse(ledger.verifyInclusion(leaves[index], index, size, proof, root), "tampered");
        }
    }

    function testFuzz_verifyInclusion_rejectsWrongProofLength(uint256 size, uint256 index, uint256 length) public view {
        size = bound(size, 1, TREE);
        index = bound(index, 0, size - 1);
        bytes32[] memory proof = ReferenceMerkle.inclusionProof(leaves, size, index);
        length = bound(length, 0, proof.length + 3);
        vm.assume(length != proof.length);
        bytes32[] memory wrong = new bytes32[](length);
        for (uint256 i; i < length && i < proof.length; ++i) {
            wrong[i] = proof[i];
        }
        assertFalse(ledger.verifyInclusion(leaves[index], index, size, wrong, _root(size)), "wrong length");
    }

    // ------------------------------------------------------------------ verifyConsistency

    function test_verifyConsistency_acceptsEveryPairOfSmallTrees() public view {
        for (uint256 newSize = 1; newSize <= 17; ++newSize) {
            for (uint256 oldSize = 1; oldSize <= newSize; ++oldSize) {
                bytes32[] memory proof = ReferenceMerkle.consistencyProof(leaves, oldSize, newSize);
                assertTrue(
                    ledger.verifyConsistency(oldSize, newSize, _root(oldSize), _root(newSize), proof), "valid proof"
                );
            }
        }
    }

    function test_verifyConsistency_edgeCases() public view {
        bytes32[] memory none = new bytes32[](0);
        bytes32[] memory proof = ReferenceMerkle.consistencyProof(leaves, 3, 7);
        assertTrue(ledger.verifyConsistency(0, 7, MerkleLog.EMPTY_ROOT, _root(7), none), "from empty");
        assertFalse(ledger.verifyConsistency(0, 7, MerkleLog.EMPTY_ROOT, _root(7), proof), "from empty, proof");
        assertFalse(ledger.verifyConsistency(0, 7, _root(1), _root(7), none), "from empty, wrong old root");
        assertTrue(ledger.verifyConsistency(5, 5, _root(5), _root(5), none), "same tree");
        assertFalse(ledger.verifyConsistency(5, 5, _root(5), _root(4), none), "same size, other root");
        assertFalse(ledger.verifyConsistency(5, 5, _root(5), _root(5), _one(_root(5))), "same size, proof");
        assertFalse(ledger.verifyConsistency(7, 3, _root(7), _root(3), proof), "shrinking");
        assertFalse(ledger.verifyConsistency(3, 7, _root(3), _root(7), none), "empty proof");
        assertFalse(ledger.verifyConsistency(3, 8, _root(3), _root(8), proof), "new size off by one");
        assertFalse(ledger.verifyConsistency(4, 7, _root(4), _root(7), proof), "old size off by one");
        assertFalse(ledger.verifyConsistency(3, 7, _root(3), _root(6), proof), "wrong new root");
        assertFalse(ledger.verifyConsistency(3, 7, _root(2), _root(7), proof), "wrong old root");
        bytes32[] memory longer = new bytes32[](proof.length + 1);
        for (uint256 i; i < proof.length; ++i) {
            longer[i] = proof[i];
        }
        assertFalse(ledger.verifyConsistency(3, 7, _root(3), _root(7), longer), "extra hash");
    }

    function testFuzz_verifyConsistency(uint256 oldSize, uint256 newSize, uint256 position, uint8 bit) public view {
        oldSize = bound(oldSize, 1, TREE - 1);
        newSize = bound(newSize, oldSize + 1, TREE);
        bytes32[] memory proof = ReferenceMerkle.consistencyProof(leaves, oldSize, newSize);
        assertTrue(ledger.verifyConsistency(oldSize, newSize, _root(oldSize), _root(newSize), proof), "valid");
        proof = _flip(proof, bound(position, 0, proof.length - 1), bit);
        assertFalse(ledger.verifyConsistency(oldSize, newSize, _root(oldSize), _root(newSize), proof), "tampered");
    }

    // ------------------------------------------------------------------ events

    /// @notice A reader who sees only the events can rebuild both logs and their roots.
    function test_events_rebuildEveryLog() public {
        vm.recordLogs();
        _anchor(10);
        _appendRange(20, 23);
        _curateLeaf(10, 4);
        _anchor(33);
        _curateLeaf(33, 30);
        Vm.Log[] memory logs = vm.getRecordedLogs();

        bytes32[] memory curated = new bytes32[](16);
        uint256 curatedCount;
        uint256 anchoredSize;
        bytes32 anchoredRoot;
        for (uint256 i; i < logs.length; ++i) {
            bytes32 topic0 = logs[i].topics[0];
            if (topic0 == IExperienceLedger.LeafAppended.selector) {
                assertEq(uint256(logs[i].topics[1]), curLog, "LeafAppended logId");
                (uint64 index,) = abi.decode(logs[i].data, (uint64, bytes));
                assertEq(index, curatedCount, "LeafAppended index");
                curated[curatedCount++] = logs[i].topics[2];
            } else if (topic0 == IExperienceLedger.Anchored.selector) {
                assertEq(uint256(logs[i].topics[1]), pubLog, "Anchored logId");
                (anchoredSize, anchoredRoot,) = abi.decode(logs[i].data, (uint64, bytes32, bytes));
            }
        }
        assertEq(curatedCount, 5, "curated leaves");
        assertEq(ReferenceMerkle.root(curated, curatedCount), _rootOf(curLog), "curated root from events");
        assertEq(anchoredSize, 33, "anchored size from events");
        assertEq(anchoredRoot, _root(33), "anchored root from events");
    }
}

/// @notice Handler-based invariants over random sequences of honest and dishonest operations.
contract ExperienceLedgerInvariantTest is GymTest {
    ExperienceLedger internal ledger;
    ExperienceLedgerHandler internal handler;

    function setUp() public {
        ledger = new ExperienceLedger();
        handler = new ExperienceLedgerHandler(ledger);
        bytes4[] memory selectors = new bytes4[](6);
        selectors[0] = ExperienceLedgerHandler.publish.selector;
        selectors[1] = ExperienceLedgerHandler.anchorLatest.selector;
        selectors[2] = ExperienceLedgerHandler.anchorStale.selector;
        selectors[3] = ExperienceLedgerHandler.anchorRewritten.selector;
        selectors[4] = ExperienceLedgerHandler.appendLeaves.selector;
        selectors[5] = ExperienceLedgerHandler.curateFromPublisher.selector;
        targetContract(address(handler));
        targetSelector(FuzzSelector({addr: address(handler), selectors: selectors}));
    }

    function invariant_anchoredSizeNeverDecreases() public view {
        assertFalse(handler.anchoredSizeDecreased(), "anchored size decreased");
        assertFalse(handler.badAnchorAccepted(), "stale or rewritten checkpoint accepted");
        assertFalse(handler.honestOperationRefused(), "honest operation refused");
        uint256 logId = handler.publisherLogId();
        (,,, uint64 size, bytes32 root) = ledger.logInfo(logId);
        assertEq(size, handler.lastAnchoredSize(), "anchored size");
        assertEq(size, handler.maxAnchoredSizeSeen(), "anchored size is the largest seen");
        assertEq(root, ReferenceMerkle.root(handler.published(), size), "anchored root");
    }

    function invariant_curatedRootEqualsReference() public view {
        assertFalse(handler.doubleCurationAccepted(), "leaf curated twice");
        assertFalse(handler.honestOperationRefused(), "honest operation refused");
        bytes32[] memory curated = handler.curatedLeaves();
        (,,, uint64 size, bytes32 root) = ledger.logInfo(handler.curatedLogId());
        assertEq(size, curated.length, "curated size");
        assertEq(root, ReferenceMerkle.root(curated, curated.length), "curated root");
    }
}
