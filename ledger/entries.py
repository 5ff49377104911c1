"""Ledger entries: typed models, canonical bytes, CID and leaf hash (docs/design.md "3.1 Entries").

An entry is a JSON object with ``"type"`` and ``"v"`` (format version), serialised with
RFC 8785 JSON Canonicalization (the ``rfc8785`` package); those bytes are the entry, at most
``MAX_ENTRY_BYTES`` (256 KiB). Its CID is CIDv1, codec raw (0x55), sha2-256 of the bytes,
in base32 (``bafkrei...``), the CID ``ipfs add --cid-version=1`` gives for the same bytes.
Its leaf hash in a log is RFC 9162 ``SHA-256(0x00 || bytes)``.

Types, all version 1: ``experience``, ``adapter``, ``run``, ``receipt`` (also version 2),
``contribution``, ``evaluation``. Unknown types and
versions are rejected, never guessed at.

Canonical form: optional fields that are absent are left out, never written as ``null``.
``decode_entry`` rejects bytes that are not exactly ``encode_entry`` of what they decode to
(other key order, whitespace, escapes, number spellings, duplicate keys, explicit nulls), so
that one entry has one byte string, hence one CID and one leaf hash. Numbers follow RFC 8785:
``1.0`` and ``1`` are one number, integers beyond 2**53 - 1 are refused.

Every rule broken raises ``EntryError`` whose ``field`` is the dotted path of the offending
field (``files[0].cid``) and whose message states the rule.

>>> note = ExperienceEntry(
...     text="Check the units before comparing magnitudes.",
...     domain="math",
...     op="add",
...     provenance=Provenance(method="tfgrpo", base_model="SmolLM2-135M-Instruct", step=3),
... )
>>> data = encode_entry(note)
>>> data[:40]
b'{"domain":"math","op":"add","provenance"'
>>> decode_entry(data) == note
True
>>> cid = entry_cid(data)
>>> cid.startswith("bafkrei")
True
>>> fold_library([(cid, note)]) == {cid: note.text}
True
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import rfc8785
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    model_validator,
)

from ledger import rfc9162
from ledger.canonical_json import canonical_bytes
from ledger.errors import EntryError
from ledger.json_input import JSONInputError, parse_json
from ledger.multiformats import CID, DAG_PB, RAW, SHA2_256, MultiformatError, raw_cid

MAX_ENTRY_BYTES = 256 * 1024  # one IPFS block, one UnixFS chunk
MAX_EXPERIENCE_WORDS = 64  # the format's limit; the trainer aims at 32
MAX_ENTRY_DEPTH = 64  # arrays/objects nested deeper are refused before the JSON decoder runs
MAX_PROVENANCE_RECEIPTS = 64  # receipt CIDs one experience's provenance may cite


class _Rule(ValueError):
    """A rule broken inside a model; ``field`` is relative to where pydantic found it."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message, self.field = message, field


def _path(parts: Iterable[str | int]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _problems(exc: ValidationError) -> list[tuple[str | None, str]]:
    """Every problem pydantic found, as ``(dotted field or None, message)``; the problems of a
    nested model come with the nested model's path in front of their own."""
    out: list[tuple[str | None, str]] = []
    for err in exc.errors():
        field, message = _path(err["loc"]), err["msg"]
        # A _Rule comes from our validators; an EntryError from a nested model's __init__.
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, EntryError):
            out += [(".".join(filter(None, [field, sub])) or None, text)
                    for sub, text in cause.problems]
            continue
        if isinstance(cause, _Rule):
            message = cause.message
            field = ".".join(filter(None, [field, cause.field]))
        elif err["type"] == "extra_forbidden":
            message = "unknown field"
        out.append((field or None, message))
    return out


def _entry_error(exc: ValidationError) -> EntryError:
    """Every problem pydantic found, as one ``EntryError``: its message names the first and
    counts the others, its ``problems`` lists them all."""
    problems = _problems(exc)
    field, message = problems[0]
    more = len(problems) - 1
    if more:
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    return EntryError(message, field=field, problems=problems)


class _Strict(BaseModel):
    """Strict types, no unknown fields, immutable; validation errors are ``EntryError``."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    def __init__(self, **data: Any):
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _entry_error(exc) from None


# --- field types ------------------------------------------------------------------------------


def _parse_cid(value: str) -> CID:
    """A CID in its one accepted spelling: CIDv1, sha2-256, lowercase base32 (``b...``)."""
    try:
        cid = CID.parse(value)
    except MultiformatError as exc:
        raise _Rule(f"not a CID ({exc})") from None
    if cid.version != 1 or cid.hash_code != SHA2_256 or len(cid.digest) != 32 or str(cid) != value:
        raise _Rule("must be a sha2-256 CIDv1 spelt in lowercase base32 ('b...')")
    return cid


def _entry_cid_rule(value: str) -> str:
    if _parse_cid(value).codec != RAW:
        raise _Rule("an entry CID must use the raw codec (bafkrei...)")
    return value


def _content_cid_rule(value: str) -> str:
    if _parse_cid(value).codec not in (RAW, DAG_PB):
        raise _Rule("a content CID must use the raw or dag-pb codec")
    return value


def _hex_rule(prefix: str, digits: int):
    def check(value: str) -> str:
        body = value.removeprefix(prefix)
        if not value.startswith(prefix) or len(body) != digits or body.strip("0123456789abcdef"):
            raise _Rule(f"must be {prefix!r} followed by {digits} lowercase hex digits")
        return value

    return check


def _relative_path_rule(value: str) -> str:
    parts = value.split("/")
    if value.startswith("/") or "\\" in value or any(p in ("", ".", "..") for p in parts):
        raise _Rule("must be a relative path with '/' separators and no '.', '..' or empty parts")
    return value


def _number_or_curve_rule(value: Any) -> Any:
    def is_number(x: Any) -> bool:
        return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)

    if not (is_number(value) or (isinstance(value, list) and all(map(is_number, value)))):
        raise _Rule("must be a number or a list of numbers")
    return value


def is_content_cid(value: object) -> bool:
    """Whether ``value`` is a content CID as entries spell them: sha2-256 CIDv1, raw or
    dag-pb, lowercase base32 (what ``ContentCid`` fields accept)."""
    try:
        return isinstance(value, str) and bool(_content_cid_rule(value))
    except _Rule:
        return False


EntryCid = Annotated[str, AfterValidator(_entry_cid_rule)]  # CIDv1 raw sha2-256: an entry
ContentCid = Annotated[str, AfterValidator(_content_cid_rule)]  # raw or dag-pb: any content
Sha256Digest = Annotated[str, AfterValidator(_hex_rule("sha256:", 64))]
Bytes32Hex = Annotated[str, AfterValidator(_hex_rule("0x", 64))]
Address = Annotated[str, AfterValidator(_hex_rule("0x", 40))]  # lowercase, not EIP-55
Signature65Hex = Annotated[str, AfterValidator(_hex_rule("0x", 130))]
NonEmptyStr = Annotated[str, Field(min_length=1)]
NonNegInt = Annotated[int, Field(ge=0)]
MetricValue = Annotated[Any, AfterValidator(_number_or_curve_rule)]


# --- experience -------------------------------------------------------------------------------


class Provenance(_Strict):
    run_cid: EntryCid | None = None  # the run entry that produced the experience, if published
    method: NonEmptyStr  # e.g. "tfgrpo"
    base_model: NonEmptyStr  # name of the frozen model the experience was learnt for
    step: NonNegInt  # training step (epoch x batch) that produced it
    epoch: NonNegInt | None = None  # epoch of that step, for multi-epoch methods
    base_model_digest: Sha256Digest | None = None  # digest of the frozen weights, if local
    # receipt entries of the rollouts the experience was learnt from, when the policy gave any
    receipts: Annotated[list[EntryCid], Field(min_length=1, max_length=MAX_PROVENANCE_RECEIPTS)] \
        | None = None


class ExperienceEntry(_Strict):
    """One op on a library of experiences.

    ``add`` creates the experience whose id is this entry's own CID; ``update`` replaces the
    text of ``target``; ``delete`` hides ``target`` and its text, possibly empty, is the
    reason. ``target`` is required for update/delete and forbidden for add. Text is at most
    ``MAX_EXPERIENCE_WORDS`` whitespace-separated words and not blank for add/update.
    """

    type: Literal["experience"] = "experience"
    v: Literal[1] = 1
    text: str
    domain: NonEmptyStr
    op: Literal["add", "update", "delete"]
    target: EntryCid | None = None
    provenance: Provenance

    @model_validator(mode="after")
    def _op_rules(self) -> ExperienceEntry:
        words = len(self.text.split())
        if words > MAX_EXPERIENCE_WORDS:
            raise _Rule(f"at most {MAX_EXPERIENCE_WORDS} words, got {words}", "text")
        if self.op != "delete" and words == 0:
            raise _Rule(f"must not be blank for op {self.op!r}", "text")
        if self.op == "add" and self.target is not None:
            raise _Rule(
                "must be absent for op 'add': an added experience's id is its CID", "target"
            )
        if self.op != "add" and self.target is None:
            raise _Rule(f"is required for op {self.op!r}", "target")
        return self


# --- adapter ----------------------------------------------------------------------------------


class BaseModelRef(_Strict):
    name: NonEmptyStr  # e.g. "HuggingFaceTB/SmolLM2-135M-Instruct"
    weights_digest: Sha256Digest  # digest of the frozen weights file(s)


class AdapterFile(_Strict):
    path: Annotated[str, AfterValidator(_relative_path_rule)]  # inside the adapter folder
    cid: ContentCid  # raw for one chunk, dag-pb (UnixFS, as Kubo) for larger files
    size: NonNegInt  # bytes


class AdapterEntry(_Strict):
    """A LoRA (or other PEFT) adapter produced by gradient training of ``base_model``."""

    type: Literal["adapter"] = "adapter"
    v: Literal[1] = 1
    base_model: BaseModelRef
    method: NonEmptyStr  # e.g. "sft", "grpo", "dpo"
    files: Annotated[list[AdapterFile], Field(min_length=1)]
    config: dict[str, JsonValue]  # adapter config (rank, alpha, target modules, ...)
    dataset_digest: Sha256Digest
    metrics: dict[str, float]
    run_cid: EntryCid

    @model_validator(mode="after")
    def _unique_paths(self) -> AdapterEntry:
        paths = [f.path for f in self.files]
        for i, path in enumerate(paths):
            if path in paths[:i]:
                raise _Rule(f"duplicate path {path!r}", f"files[{i}].path")
        return self


# --- run --------------------------------------------------------------------------------------


class RunEntry(_Strict):
    """Manifest of one training run: enough to rerun it and to compare its results."""

    type: Literal["run"] = "run"
    v: Literal[1] = 1
    config: dict[str, JsonValue]
    code_version: NonEmptyStr  # e.g. git commit
    packages: dict[str, str]  # distribution name -> version
    hardware: dict[str, JsonValue]
    dataset_digests: list[Sha256Digest]
    metrics: dict[str, MetricValue]  # numbers, or lists of numbers for curves
    artifacts: dict[str, ContentCid] | None = None  # name -> CID (snapshots, reports, ...)


# --- contribution -----------------------------------------------------------------------------

MAX_CONTRIBUTION_ROUNDS = 4096  # averaging rounds one contribution record lists


class ContributionRound(_Strict):
    epoch: NonNegInt  # the collaborative step the averaging round ended
    samples: NonNegInt  # samples the peer brought to it


class ContributionChecks(_Strict):
    """What the publisher re-computed of the peer's claimed local steps (trainer.swarm.work)."""

    checked: NonNegInt  # claimed local steps re-computed
    passed: NonNegInt  # of those, within the tolerance
    tolerance: Annotated[float, Field(ge=0, le=1)]  # relative L2 difference of the sketches

    @model_validator(mode="after")
    def _passed_of_checked(self) -> ContributionChecks:
        if self.passed > self.checked:
            raise _Rule("more passed than checked", "passed")
        return self


class ContributionEntry(_Strict):
    """A volunteer peer's signed contribution record to a swarm run (docs/design.md "3.13"),
    as the publishing peer accepted it, with what it credited. ``signature`` is the
    contributor's EIP-712 signature of the record's fields (``ledger.contributions``): the
    entry's format is checked here, its signature when it is published and by ``gym audit``."""

    type: Literal["contribution"] = "contribution"
    v: Literal[1] = 1
    run_cid: EntryCid  # the run entry of the run contributed to
    run: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
    config_digest: Sha256Digest
    peer_id: Annotated[str, Field(min_length=1, max_length=256)]  # libp2p, base58
    contributor: Address
    samples: NonNegInt  # samples processed in all
    steps: NonNegInt  # local optimizer steps
    epoch: NonNegInt  # the collaborative step reached
    rounds: Annotated[list[ContributionRound], Field(max_length=MAX_CONTRIBUTION_ROUNDS)]
    signature: Signature65Hex
    credited_samples: NonNegInt  # of the rounds the publisher saw it average in
    credited_rounds: NonNegInt
    share: Annotated[float, Field(ge=0, le=1)]  # of all contributors' credited samples
    checks: ContributionChecks | None = None  # absent: the publisher's own work, or unchecked

    @model_validator(mode="after")
    def _record_rules(self) -> ContributionEntry:
        for i in range(1, len(self.rounds)):
            if self.rounds[i].epoch <= self.rounds[i - 1].epoch:
                raise _Rule("rounds are listed by increasing epoch", f"rounds[{i}].epoch")
        if self.credited_samples > self.samples or self.credited_rounds > len(self.rounds):
            raise _Rule("credits more than the record claims", "credited_samples")
        return self


# --- audit ------------------------------------------------------------------------------------

MAX_AUDIT_LEAVES = 8192  # sampled leaves one audit report lists (~140 KB at most)
AuditOutcome = Literal["verified", "failed", "not retained", "refused", "unreachable",
                       "invalid bundle", "abstained"]  # committee.audits' per-receipt findings
AUDIT_OUTCOMES: tuple[str, ...] = get_args(AuditOutcome)


class AuditEntry(_Strict):
    """A verifier's report of the random audit of one anchored checkpoint of a node's receipt
    log (``committee.audits``): leaves ``[from_size, size)`` of log ``log_id``, which node
    ``node`` (its operator) anchored; the sample drawn at ``rate_bps`` from the checkpoint's
    seed; per sampled leaf, in order, its outcome. Who anchored the verifier's audits log is
    who reports it; whoever counts a report re-draws the sample from the chain
    (``committee.rewards.facts``)."""

    type: Literal["audit"] = "audit"
    v: Literal[1] = 1
    node: Address
    log_id: Annotated[int, Field(ge=1)]
    from_size: NonNegInt
    size: Annotated[int, Field(ge=1)]
    rate_bps: Annotated[int, Field(ge=1, le=10_000)]
    leaves: Annotated[list[NonNegInt], Field(max_length=MAX_AUDIT_LEAVES)]
    outcomes: Annotated[list[AuditOutcome], Field(max_length=MAX_AUDIT_LEAVES)]

    @model_validator(mode="after")
    def _sample_rules(self) -> AuditEntry:
        if self.from_size >= self.size:
            raise _Rule("from_size must be below size", "from_size")
        if len(self.outcomes) != len(self.leaves):
            raise _Rule("one outcome per leaf", "outcomes")
        for i, leaf in enumerate(self.leaves):
            if not self.from_size <= leaf < self.size or (i and leaf <= self.leaves[i - 1]):
                raise _Rule("leaves are increasing, within [from_size, size)", f"leaves[{i}]")
        return self


# --- evaluation -------------------------------------------------------------------------------

MAX_EVALUATION_ARMS = 8  # "baseline", "library", "adapter", "adapter+library", and a few more
MAX_EVALUATION_SEEDS = 64
MAX_EVALUATION_PROBLEMS = 10_000
MAX_EVALUATION_K = 64
MAX_EVALUATION_GENERATIONS = 200_000  # arms x seeds x problems x k: a ~12 MB receipt table
MAX_EVALUATION_EXPERIENCES = 1024  # a library subject's experiences (~62 KB of CIDs)
ARM_NAME_PATTERN = r"^[a-z][a-z0-9+._-]{0,31}$"  # ASCII: RFC 8785 and Python sort them alike
ArmName = Annotated[str, Field(pattern=ARM_NAME_PATTERN)]


class EvaluatedLibrary(_Strict):
    """A curated library at one size of a published log, and the experiences live there."""

    kind: Literal["library"]
    log_id: Annotated[int, Field(ge=1)]  # ExperienceLedger log id
    size: Annotated[int, Field(ge=1)]
    root: Bytes32Hex  # RFC 9162 root at ``size``
    # the live experiences at ``size`` (``fold_library``), in the fold's order
    entries: Annotated[list[EntryCid], Field(min_length=1, max_length=MAX_EVALUATION_EXPERIENCES)]

    @model_validator(mode="after")
    def _entry_rules(self) -> EvaluatedLibrary:
        if len(self.entries) > self.size:
            raise _Rule(f"{len(self.entries)} experiences cannot be live in a log of "
                        f"{self.size} leaves", "entries")
        _refuse_duplicates(self.entries, "entries")
        return self


class EvaluatedAdapter(_Strict):
    kind: Literal["adapter"]
    entry: EntryCid  # the adapter entry


class EvaluationTask(_Strict):
    dataset: ContentCid  # the problems file, answers included
    problems: Annotated[int, Field(ge=1, le=MAX_EVALUATION_PROBLEMS)]  # the first n of it
    verifier: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$")]
    prompt_digest: Sha256Digest  # of the rollout objective (system prompt), UTF-8


class EvaluationSampling(_Strict):
    k: Annotated[int, Field(ge=1, le=MAX_EVALUATION_K)]  # samples per problem
    seeds: Annotated[list[NonNegInt], Field(min_length=1, max_length=MAX_EVALUATION_SEEDS)]
    temperature: Annotated[float, Field(ge=0)]
    top_p: Annotated[float, Field(gt=0, le=1)]
    max_tokens: Annotated[int, Field(ge=1)]

    @model_validator(mode="after")
    def _increasing_seeds(self) -> EvaluationSampling:
        for i in range(1, len(self.seeds)):
            if self.seeds[i] <= self.seeds[i - 1]:
                raise _Rule("seeds are listed once each, increasing", f"seeds[{i}]")
        return self


Share = Annotated[float, Field(ge=0, le=1)]


class SeedFigures(_Strict):
    seed: NonNegInt
    mean_at_k: Share  # rewards are in [0, 1]
    pass_at_k: Share


class ArmResult(_Strict):
    per_seed: Annotated[list[SeedFigures], Field(min_length=1, max_length=MAX_EVALUATION_SEEDS)]


class EvaluationReceipts(_Strict):
    node: Address  # the registered node that signed every generation's receipt
    table: ContentCid  # the receipt table (``ledger.evaluations``): arm -> bundle CIDs


# Before-validators that pick the model themselves, so that errors name ``subject.size`` and
# ``receipts.node`` rather than pydantic's union branches (``subject.library.size``).
def _subject_rule(value: Any) -> Any:
    if isinstance(value, EvaluatedLibrary | EvaluatedAdapter):
        return value
    if not isinstance(value, dict):
        raise _Rule("must be an object whose kind is 'library' or 'adapter'")
    model = {"library": EvaluatedLibrary, "adapter": EvaluatedAdapter}.get(
        kind if isinstance(kind := value.get("kind"), str) else "")
    if model is None:
        raise _Rule("must be 'library' or 'adapter'", "kind")
    return model(**value)


def _receipts_rule(value: Any) -> Any:
    if isinstance(value, EvaluationReceipts) or (isinstance(value, str) and value == "none"):
        return value
    if not isinstance(value, dict):
        raise _Rule("must be 'none' (a local run) or an object {node, table}")
    return EvaluationReceipts(**value)


class EvaluationEntry(_Strict):
    """Mean@k and Pass@k of ``subject`` against ``baseline`` on ``task`` (docs/design.md
    "3.1 Entries"), per arm and per seed.

    Every arm ran the same ``task.problems`` problems with ``sampling.k`` samples each, once per
    seed. ``receipts`` is ``"none"`` for a run on a local model (unverified evidence), else the
    node and the receipt table: for each arm the content CIDs of its generations' receipt
    bundles (the signed receipt, the request, the answer and its receipt-log proof), in
    (seed, problem, sample) order, so a position names one generation
    (``ledger.evaluations.generation_index``). The table is a document of its own because
    ``MAX_EVALUATION_GENERATIONS`` CIDs (~12 MB) are far beyond ``MAX_ENTRY_BYTES``;
    ``ledger.evaluations.check_receipt_table`` checks it against the entry. The figures are a
    function of the generations' rewards (``ledger.evaluations.seed_figures``).
    """

    type: Literal["evaluation"] = "evaluation"
    v: Literal[1] = 1
    subject: Annotated[EvaluatedLibrary | EvaluatedAdapter, BeforeValidator(_subject_rule)]
    baseline: ArmName  # the arm the others are compared against (e.g. the base model alone)
    task: EvaluationTask
    model_digest: Sha256Digest  # the frozen base model every arm ran (``weights_digest``)
    sampling: EvaluationSampling
    arms: Annotated[dict[ArmName, ArmResult], Field(min_length=2, max_length=MAX_EVALUATION_ARMS)]
    receipts: Annotated[Literal["none"] | EvaluationReceipts, BeforeValidator(_receipts_rule)]

    @model_validator(mode="after")
    def _consistent(self) -> EvaluationEntry:
        if self.baseline not in self.arms:
            raise _Rule(f"{self.baseline!r} is not one of the arms {sorted(self.arms)}", "baseline")
        seeds = self.sampling.seeds
        for arm, result in self.arms.items():
            listed = [figures.seed for figures in result.per_seed]
            if listed != seeds:
                raise _Rule(f"lists seeds {listed}, the sampling's are {seeds}",
                            f"arms.{arm}.per_seed")
        generations = len(self.arms) * len(seeds) * self.task.problems * self.sampling.k
        if generations > MAX_EVALUATION_GENERATIONS:
            raise _Rule(f"{generations} generations (arms x seeds x problems x k), the limit is "
                        f"{MAX_EVALUATION_GENERATIONS}", "arms")
        return self


def _refuse_duplicates(values: list[str], field: str) -> None:
    seen: set[str] = set()
    for i, value in enumerate(values):
        if value in seen:
            raise _Rule(f"duplicate {value!r}", f"{field}[{i}]")
        seen.add(value)


# --- receipt ----------------------------------------------------------------------------------


class LibraryRef(_Strict):
    log_id: NonNegInt
    size: NonNegInt
    root: Bytes32Hex  # RFC 9162 root of the curated library at ``size``


class Sampling(_Strict):
    temperature: Annotated[float, Field(ge=0)]
    top_p: Annotated[float, Field(gt=0, le=1)]
    max_tokens: Annotated[int, Field(ge=1)]
    seed: NonNegInt


class TokenCounts(_Strict):
    prompt: NonNegInt
    completion: NonNegInt


class ReceiptEntry(_Strict):
    """Proof-of-inference receipt (docs/design.md "3.6 Receipts").

    ``signature`` is absent while the receipt is being signed and present once it is.
    """

    type: Literal["receipt"] = "receipt"
    v: Literal[1] = 1
    node: Address
    model_digest: Sha256Digest
    adapter_cid: EntryCid | None = None
    library: LibraryRef
    experience_ids: list[EntryCid]
    request_digest: Sha256Digest
    response_digest: Sha256Digest
    sampling: Sampling
    tokens: TokenCounts
    time: NonNegInt  # unix seconds
    activation_commitment: NonEmptyStr  # opaque (base64 or hex) TOPLOC-style commitment
    signature: Signature65Hex | None = None


GYM_SAMPLER = "gym-sampler/1"  # the verifiable sampler a v2 receipt names (docs/sampling.md)
GYM_SAMPLER_2 = "gym-sampler/2"  # /1 plus vLLM's penalties, bias, min_p, top_k, min_tokens


class ReceiptEntryV2(ReceiptEntry):
    """Receipt v2 (docs/receipts.md): every token was chosen by the named verifiable sampler,
    ``request_digest`` covers the normalized request (``inference_node.normalized_request``),
    and ``finish_reason`` says how the answer ended (the verifier checks that it did).
    ``chat_template``: the digest of the chat template the prompt was rendered under, when it
    is not the model's own (``inference_node.chat_templates``); absent, the model's own (a
    receipt signed before the field existed holds none)."""

    v: Literal[2] = 2  # type: ignore[assignment]
    sampler: Literal[GYM_SAMPLER, GYM_SAMPLER_2]  # type: ignore[valid-type]
    finish_reason: Literal["stop", "length"]
    chat_template: Sha256Digest | None = None


Entry = (ExperienceEntry | AdapterEntry | RunEntry | ReceiptEntry | ContributionEntry
         | EvaluationEntry | AuditEntry)
ENTRY_TYPES: dict[str, dict[int, type[Entry]]] = {
    "adapter": {1: AdapterEntry},
    "audit": {1: AuditEntry},
    "contribution": {1: ContributionEntry},
    "evaluation": {1: EvaluationEntry},
    "experience": {1: ExperienceEntry},
    "receipt": {1: ReceiptEntry, 2: ReceiptEntryV2},
    "run": {1: RunEntry},
}


# --- bytes, CID, leaf hash --------------------------------------------------------------------


def encode_entry(entry: Entry) -> bytes:
    """Canonical RFC 8785 bytes of ``entry``; ``EntryError`` if over ``MAX_ENTRY_BYTES``."""
    try:
        data = canonical_bytes(entry.model_dump(mode="json", exclude_none=True))
    except rfc8785.CanonicalizationError as exc:
        raise EntryError(f"not representable in RFC 8785 JSON: {exc}") from None
    if len(data) > MAX_ENTRY_BYTES:
        raise EntryError(f"entry is {len(data)} bytes, the limit is {MAX_ENTRY_BYTES}")
    return data


def decode_entry(data: bytes) -> Entry:
    """The entry that ``data`` encodes, validated.

    Rejects with ``EntryError``: more than ``MAX_ENTRY_BYTES``, invalid UTF-8 or JSON (JSON
    nested deeper than ``MAX_ENTRY_DEPTH`` and duplicate member names included), a non-object, an unknown ``type`` or ``v`` (listing the known ones), any broken field rule,
    and bytes that are not the canonical encoding of the entry they decode to.
    """
    if not isinstance(data, bytes):
        raise EntryError(f"entry bytes must be bytes, got {type(data).__name__}")
    if len(data) > MAX_ENTRY_BYTES:
        raise EntryError(f"entry is {len(data)} bytes, the limit is {MAX_ENTRY_BYTES}")
    entry = _decode_canonical(data)
    return entry if entry is not None else _decode_checked(data)


def _decode_canonical(data: bytes) -> Entry | None:
    """The fast path, for what ledgers hold: canonical bytes of a valid entry with at most
    ``MAX_ENTRY_DEPTH`` brackets in all. The entry, or None for anything else, which
    ``_decode_checked`` then decodes or refuses with its precise error.

    It accepts exactly what ``_decode_checked`` accepts, a third faster (what a million-entry
    audit spends most of its time on): the bracket count bounds the nesting before the decoder
    runs; duplicate member names, whitespace and member order cannot pass, because the entry
    must re-encode to ``data`` byte for byte and canonical bytes hold none of them."""
    if data.count(b"{") + data.count(b"[") > MAX_ENTRY_DEPTH:
        return None
    try:
        obj = _DECODER.decode(data.decode("utf-8"))
    except (ValueError, RecursionError):  # not UTF-8 or JSON, NaN, an integer too long
        return None
    if type(obj) is not dict:
        return None
    kind, version = obj.get("type"), obj.get("v")
    if type(kind) is not str or type(version) is not int:  # True would match version 1
        return None
    model = ENTRY_TYPES.get(kind, {}).get(version)
    if model is None:
        return None
    try:
        entry = model.model_validate(obj)
        return entry if encode_entry(entry) == data else None
    except (ValidationError, EntryError):
        return None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)  # stateless: one for every call


def _decode_checked(data: bytes) -> Entry:
    """``decode_entry`` step by step, each refusal with its own error."""
    try:
        obj = parse_json(data, max_bytes=MAX_ENTRY_BYTES, max_depth=MAX_ENTRY_DEPTH, what="entry")
    except JSONInputError as exc:
        raise EntryError(f"not UTF-8 JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise EntryError(f"an entry is a JSON object, got {type(obj).__name__}")
    kind, version = obj.get("type"), obj.get("v")
    if not isinstance(kind, str) or kind not in ENTRY_TYPES:
        known = ", ".join(sorted(ENTRY_TYPES))
        raise EntryError(f"unknown entry type {kind!r}; known types: {known}", field="type")
    versions = ENTRY_TYPES[kind]
    if type(version) is not int or version not in versions:
        known = ", ".join(map(str, sorted(versions)))
        raise EntryError(
            f"unknown version {version!r} of {kind!r} entries; known versions: {known}", field="v"
        )
    try:
        entry = versions[version].model_validate(obj)
    except ValidationError as exc:
        raise _entry_error(exc) from None
    if encode_entry(entry) != data:
        raise EntryError(
            "bytes are not the canonical RFC 8785 encoding of the entry they decode to "
            "(one entry must have one CID)"
        )
    return entry


# Files that make up a model's weights for ``BaseModelRef.weights_digest`` and a receipt's
# ``model_digest``: the same digest in both, so an adapter's base can be matched to a node.
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.gguf", "config.json")


def files_digest(files: Iterable[str | Path]) -> str:
    """``sha256:`` over each file's name and SHA-256, in the order given."""
    outer = hashlib.sha256()
    for file in map(Path, files):
        with open(file, "rb") as handle:
            inner = hashlib.file_digest(handle, "sha256").hexdigest()
        outer.update(f"{file.name}\0{inner}\n".encode())
    return "sha256:" + outer.hexdigest()


def weights_digest(model_dir: str | Path) -> str | None:
    """``files_digest`` of a model directory's weight and config files (``WEIGHT_FILES``, sorted),
    or None when it holds none."""
    files = sorted({f for pattern in WEIGHT_FILES for f in Path(model_dir).glob(pattern)})
    return files_digest(files) if files else None


def entry_cid(entry_bytes: bytes) -> str:
    """CIDv1, raw codec, sha2-256 of ``entry_bytes``, base32 (``bafkrei...``)."""
    return raw_cid(entry_bytes)


def entry_leaf_hash(entry_bytes: bytes) -> bytes:
    """RFC 9162 leaf hash of an entry: SHA-256(0x00 || entry bytes)."""
    return rfc9162.leaf_hash(entry_bytes)


# --- library state ----------------------------------------------------------------------------


def fold_library(entries: Iterable[tuple[str, Entry]]) -> dict[str, str]:
    """State of a library: experience id -> text, after applying ``entries`` in log order.

    ``entries`` are ``(cid, entry)`` pairs for leaves 0..n-1, ``cid`` being ``entry_cid`` of
    the entry's bytes (not rechecked here). Entries of other types are skipped. ``add``
    creates ``cid -> text``; ``update`` replaces its target's text; ``delete`` removes its
    target. Raises ``EntryError`` for an update/delete whose target is not live at that point
    (never added, or already deleted) and for an add of an id that was added before, so the
    same bytes cannot resurrect a deleted experience. The result keeps the order of the adds.
    """
    state: dict[str, str] = {}
    added: set[str] = set()
    for position, (cid, entry) in enumerate(entries):
        if not isinstance(entry, ExperienceEntry):
            continue
        if entry.op == "add":
            if cid in added:
                raise EntryError(f"leaf {position}: experience {cid} was already added", field="op")
            added.add(cid)
            state[cid] = entry.text
            continue
        if entry.target not in state:
            why = "was deleted" if entry.target in added else "was never added"
            raise EntryError(
                f"leaf {position}: {entry.op} of experience {entry.target}, which {why}",
                field="target",
            )
        if entry.op == "update":
            state[entry.target] = entry.text
        else:
            del state[entry.target]
    return state
