// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @title IExperienceLedger
/// @notice Append-only RFC 9162 Merkle logs anchored on-chain (DESIGN.md "Logs").
///
/// Two kinds of log share one id space (1, 2, ...):
/// - a Publisher log keeps its tree off-chain; its owner anchors checkpoints, each one proven
///   consistent (RFC 9162 §2.1.4) with the previous one, so the chain refuses any rewrite;
/// - a Curated log (a library, owned by the DAO timelock) has its leaves appended on-chain; the
///   contract keeps the right-edge frontier and computes the RFC 9162 root itself.
/// Every checkpoint (size, root) of either kind stays readable through `rootAt`, and the events
/// let anyone rebuild every log from the chain and IPFS.
interface IExperienceLedger {
    /// @notice What a log is: an anchored off-chain tree, or a library appended on-chain.
    enum LogKind {
        Publisher,
        Curated
    }

    /// @notice One leaf of a publisher log and the proof that puts it there: leaf `leafIndex`
    /// (RFC 9162 leaf hash `leafHash`, entry `entryCid`) of publisher log `sourceLogId` at its
    /// anchored checkpoint of size `sourceSize`, proven by the audit path `inclusionProof`.
    struct SourcedLeaf {
        uint256 sourceLogId;
        uint64 sourceSize;
        uint64 leafIndex;
        bytes32 leafHash;
        bytes entryCid;
        bytes32[] inclusionProof;
    }

    // ---------------------------------------------------------------- events

    /// @notice A log was created with id `logId`, owned by `owner`.
    event LogCreated(uint256 indexed logId, address indexed owner, LogKind kind, string name);

    /// @notice Ownership of log `logId` moved from `previousOwner` to `newOwner`.
    event LogOwnershipTransferred(uint256 indexed logId, address indexed previousOwner, address indexed newOwner);

    /// @notice Publisher log `logId` anchored checkpoint (`size`, `root`); `batchCid` is the CID
    /// of the batch of entries that the checkpoint added (how readers fetch them from IPFS).
    event Anchored(uint256 indexed logId, uint64 size, bytes32 root, bytes batchCid);

    /// @notice Leaf `leafHash` (RFC 9162 leaf hash of the entry bytes) became leaf number `index`
    /// of log `logId`; `entryCid` is the binary CIDv1 (raw, sha2-256) of the entry bytes.
    event LeafAppended(uint256 indexed logId, uint64 index, bytes32 indexed leafHash, bytes entryCid);

    /// @notice Curated log `logId` reached checkpoint (`size`, `root`), root computed on-chain.
    event CuratedCheckpoint(uint256 indexed logId, uint64 size, bytes32 root);

    /// @notice Leaf `leafHash` entered curated log `curatedLogId`, proven to be leaf `leafIndex`
    /// of publisher log `sourceLogId` at its anchored checkpoint of size `sourceSize`.
    event LeafCurated(
        uint256 indexed curatedLogId, uint256 indexed sourceLogId, uint64 sourceSize, uint64 leafIndex, bytes32 leafHash
    );

    // ---------------------------------------------------------------- errors

    /// @notice No log has id `logId`.
    error ExperienceLedgerUnknownLog(uint256 logId);

    /// @notice `caller` is not `owner`, the owner of log `logId`.
    error ExperienceLedgerNotLogOwner(uint256 logId, address caller, address owner);

    /// @notice `newOwner` cannot own log `logId` (the zero address).
    error ExperienceLedgerInvalidOwner(uint256 logId, address newOwner);

    /// @notice Log `logId` is of kind `actual`, the operation needs kind `expected`.
    error ExperienceLedgerWrongLogKind(uint256 logId, LogKind expected, LogKind actual);

    /// @notice Checkpoint size `size` is not above the last anchored size `anchoredSize`.
    error ExperienceLedgerStaleCheckpoint(uint256 logId, uint64 size, uint64 anchoredSize);

    /// @notice A zero root was offered for checkpoint `size` of log `logId` (zero marks "no
    /// checkpoint" in storage and is never a SHA-256 output in practice).
    error ExperienceLedgerZeroRoot(uint256 logId, uint64 size);

    /// @notice The proof does not show (`newSize`, `newRoot`) extending (`oldSize`, `oldRoot`).
    error ExperienceLedgerInvalidConsistencyProof(
        uint256 logId, uint64 oldSize, bytes32 oldRoot, uint64 newSize, bytes32 newRoot
    );

    /// @notice Log `logId` has no checkpoint of size `size`.
    error ExperienceLedgerUnknownCheckpoint(uint256 logId, uint64 size);

    /// @notice The proof does not show `leafHash` at `leafIndex` in log `logId` at size `size`
    /// (whose root is `root`).
    error ExperienceLedgerInvalidInclusionProof(
        uint256 logId, uint64 size, uint64 leafIndex, bytes32 leafHash, bytes32 root
    );

    /// @notice Curated log `logId` already holds `leafHash`.
    error ExperienceLedgerAlreadyCurated(uint256 logId, bytes32 leafHash);

    /// @notice `leafHashes` and `entryCids` have different lengths.
    error ExperienceLedgerLengthMismatch(uint256 leafHashes, uint256 entryCids);

    /// @notice An append to log `logId` carried no leaves.
    error ExperienceLedgerEmptyBatch(uint256 logId);

    // ---------------------------------------------------------------- logs

    /// @notice Creates a log owned by the caller.
    /// @param name Free-form label (researcher, run family, library name).
    /// @param kind Publisher (off-chain tree, anchored checkpoints) or Curated (appended on-chain).
    /// @return logId The new log's id; ids count up from 1.
    ///
    /// Requirements: none.
    ///
    /// Emits: {LogCreated}.
    function createLog(string calldata name, LogKind kind) external returns (uint256 logId);

    /// @notice Hands log `logId` to `newOwner`.
    ///
    /// Requirements:
    /// - log `logId` exists and the caller owns it;
    /// - `newOwner` is not the zero address.
    ///
    /// Emits: {LogOwnershipTransferred}.
    function transferLogOwnership(uint256 logId, address newOwner) external;

    /// @notice Everything about log `logId` at its latest checkpoint.
    /// @return owner Current owner.
    /// @return kind Publisher or Curated.
    /// @return name The label given at creation.
    /// @return size Latest anchored (Publisher) or appended (Curated) size; 0 before any.
    /// @return root RFC 9162 root at `size` (the empty-tree root SHA-256("") at size 0).
    ///
    /// Requirements: log `logId` exists.
    ///
    /// Emits: nothing.
    function logInfo(uint256 logId)
        external
        view
        returns (address owner, LogKind kind, string memory name, uint64 size, bytes32 root);

    /// @notice Root of the checkpoint of size `size` of log `logId`.
    ///
    /// Requirements:
    /// - log `logId` exists;
    /// - `size` is 0 (the empty tree) or a size the log was anchored (Publisher) or appended
    ///   (Curated, after each append call) at.
    ///
    /// Emits: nothing.
    function rootAt(uint256 logId, uint64 size) external view returns (bytes32 root);

    /// @notice Number of logs created so far (the highest log id).
    ///
    /// Requirements: none.
    ///
    /// Emits: nothing.
    function logCount() external view returns (uint256);

    /// @notice Whether curated log `logId` holds leaf `leafHash`.
    ///
    /// Requirements: none (false for unknown logs).
    ///
    /// Emits: nothing.
    function isCurated(uint256 logId, bytes32 leafHash) external view returns (bool);

    // ---------------------------------------------------------------- publisher logs

    /// @notice Anchors checkpoint (`size`, `root`) of publisher log `logId`.
    /// @param batchCid CID of the batch of entries this checkpoint adds (recorded in the event).
    /// @param consistencyProof RFC 9162 §2.1.4 proof from the last anchored checkpoint; empty
    /// for the first anchor.
    ///
    /// Requirements:
    /// - log `logId` exists, is a Publisher log, and the caller owns it;
    /// - `size` is strictly greater than the last anchored size;
    /// - `root` is not zero;
    /// - `consistencyProof` proves (`size`, `root`) consistent with the last anchored checkpoint
    ///   (first anchor: the proof is empty).
    ///
    /// Emits: {Anchored}.
    function anchor(
        uint256 logId,
        uint64 size,
        bytes32 root,
        bytes calldata batchCid,
        bytes32[] calldata consistencyProof
    ) external;

    // ---------------------------------------------------------------- curated logs

    /// @notice Appends leaves to curated log `logId`, then records the new on-chain root.
    /// @param leafHashes RFC 9162 leaf hashes, appended in order.
    /// @param entryCids Binary CIDv1 of each entry, recorded in the events.
    ///
    /// Requirements:
    /// - log `logId` exists, is a Curated log, and the caller owns it;
    /// - `leafHashes` is not empty and as long as `entryCids`;
    /// - no leaf hash is already in the log (nor twice in the batch).
    ///
    /// Emits: {LeafAppended} per leaf, then {CuratedCheckpoint}.
    function appendLeaves(uint256 logId, bytes32[] calldata leafHashes, bytes[] calldata entryCids) external;

    /// @notice Appends to curated log `curatedLogId` the leaf `leafHash`, after verifying that it
    /// is leaf `leafIndex` of publisher log `sourceLogId` at its anchored checkpoint `sourceSize`.
    /// @param entryCid Binary CIDv1 of the entry, recorded in the event.
    /// @param inclusionProof RFC 9162 audit path of the leaf in the source checkpoint.
    ///
    /// Requirements:
    /// - log `curatedLogId` exists, is a Curated log, and the caller owns it;
    /// - log `sourceLogId` exists and is a Publisher log anchored at exactly `sourceSize`;
    /// - `inclusionProof` proves `leafHash` at `leafIndex` under that checkpoint's root;
    /// - `leafHash` is not already in the curated log.
    ///
    /// Emits: {LeafCurated}, {LeafAppended}, then {CuratedCheckpoint}.
    function appendFromLog(
        uint256 curatedLogId,
        uint256 sourceLogId,
        uint64 sourceSize,
        uint64 leafIndex,
        bytes32 leafHash,
        bytes calldata entryCid,
        bytes32[] calldata inclusionProof
    ) external;

    /// @notice Appends to curated log `curatedLogId` every leaf of `leaves` in order, each one
    /// verified as in {appendFromLog}, then records one checkpoint for the whole batch. A DAO
    /// proposal that curates n leaves makes this one call instead of n {appendFromLog} calls:
    /// one action to vote on, and one checkpoint root stored instead of n.
    ///
    /// Requirements:
    /// - log `curatedLogId` exists, is a Curated log, and the caller owns it;
    /// - `leaves` is not empty;
    /// - for each leaf, as in {appendFromLog}: its source is a Publisher log anchored at exactly
    ///   `sourceSize`, its proof verifies, and its leaf hash is neither in the curated log nor
    ///   earlier in the batch.
    ///
    /// Emits: {LeafCurated} and {LeafAppended} per leaf, then one {CuratedCheckpoint}.
    function appendManyFromLog(uint256 curatedLogId, SourcedLeaf[] calldata leaves) external;

    // ---------------------------------------------------------------- verification

    /// @notice Whether `proof` (RFC 9162 §2.1.3 audit path) shows `leafHash` at `index` in a tree
    /// of `size` leaves with root `root`. False, never a revert, on any malformed input
    /// (index out of range, wrong proof length, wrong hashes).
    ///
    /// Requirements: none.
    ///
    /// Emits: nothing.
    function verifyInclusion(bytes32 leafHash, uint256 index, uint256 size, bytes32[] calldata proof, bytes32 root)
        external
        view
        returns (bool);

    /// @notice Whether `proof` (RFC 9162 §2.1.4) shows the tree (`newSize`, `newRoot`) extending
    /// (`oldSize`, `oldRoot`). From size 0 the proof must be empty and `oldRoot` the empty root
    /// SHA-256(""); between equal sizes it must be empty and the roots equal. False, never a
    /// revert, on any malformed input.
    ///
    /// Requirements: none.
    ///
    /// Emits: nothing.
    function verifyConsistency(
        uint256 oldSize,
        uint256 newSize,
        bytes32 oldRoot,
        bytes32 newRoot,
        bytes32[] calldata proof
    ) external view returns (bool);
}
