"""Publish a gradient-training run (a PEFT adapter) to a researcher's ledger log.

A run directory written by ``gym train sft|dpo|grpo|gspo`` holds ``adapter/`` (PEFT
``save_pretrained``: ``adapter_config.json``, ``adapter_model.safetensors``, ...), ``run.json``
and, for tiny random base models, ``base/``. It becomes:

1. every file of ``adapter/`` stored in the content store as a UnixFS file, its CID the one
   ``ipfs add --cid-version=1`` gives (the content store guarantees it), recorded as
   ``{path, cid, size}``;
2. one ``run`` entry: run.json's ``run`` section (config, code version, packages, hardware,
   dataset digests, metric curves), with the run.json file itself, and ``base/`` when there is
   one, stored as ``artifacts``;
3. one ``adapter`` entry: base model name and weights digest, method, the files, the adapter
   config, dataset digest, final metrics and the run entry's CID;
4. for a volunteer run (``--swarm``), one ``contribution`` entry per record the publishing peer
   accepted (``swarm_records.json``): the record as its peer signed it (the signature checked
   again here), what was credited, and the run entry's CID.

The entries are appended in one transaction (run first) and anchored with one checkpoint, as
``trainer.publish.publish_run`` does for Training-Free GRPO runs. Nothing is appended when any
file or field is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ledger.contributions import recover_contributor
from ledger.entries import (
    AdapterEntry,
    AdapterFile,
    ContributionEntry,
    RunEntry,
    encode_entry,
    entry_cid,
)
from ledger.errors import EntryError, NotFoundError
from trainer._json import read_json_file
from trainer.adapters.errors import AdapterRunError
from trainer.gradient.train import RUN_MANIFEST  # the run directory's manifest, run.json
from trainer.swarm.records import SWARM_RECORDS  # written by a swarm peer


@dataclass(frozen=True)
class AdapterRunEntries:
    run: bytes  # canonical bytes of the run entry
    adapter: bytes  # canonical bytes of the adapter entry
    files: list[AdapterFile]  # the adapter's files as the entry lists them
    contributions: tuple[bytes, ...] = ()  # a swarm run's accepted contribution records


@dataclass(frozen=True)
class PublishedAdapter:
    log: str
    run_cid: str
    adapter_cid: str  # what `gym adapter fetch` takes
    adapter_index: int  # leaf index of the adapter entry in the log
    files: list[AdapterFile]
    size: int  # log size after the anchor
    root: bytes
    tx_hash: str
    contribution_cids: tuple[str, ...] = ()  # leaves adapter_index + 1, + 2, ...


def read_run_manifest(run_dir: str | Path) -> dict:
    """run.json of ``run_dir``, checked for the sections publishing needs."""
    path = Path(run_dir) / RUN_MANIFEST
    try:
        manifest = read_json_file(path)
    except FileNotFoundError:
        raise AdapterRunError(f"{path} is missing: is {path.parent} the output directory of a "
                              "finished `gym train sft|dpo|grpo|gspo` run?") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise AdapterRunError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise AdapterRunError(f"{path} must hold a JSON object")
    for key, kind in (("method", str), ("base_model", dict), ("adapter_dir", str),
                      ("run", dict), ("adapter", dict)):
        if not isinstance(manifest.get(key), kind):
            raise AdapterRunError(f"{path}: {key!r} is missing or not a {kind.__name__}")
    return manifest


def adapter_files(adapter_dir: Path) -> list[Path]:
    """The regular files under ``adapter_dir``, sorted by their '/'-separated relative path."""
    files = sorted((p for p in adapter_dir.rglob("*") if p.is_file()),
                   key=lambda p: p.relative_to(adapter_dir).as_posix())
    if not files:
        raise AdapterRunError(f"{adapter_dir} holds no files")
    return files


def store_files(directory: Path, content, prefix: str = "") -> list[AdapterFile]:
    """Add every file under ``directory`` to ``content`` (pinned) as ``{path, cid, size}``."""
    stored = []
    for file in adapter_files(directory):
        cid = content.add_file(file, pin=True)
        stored.append(AdapterFile(path=prefix + file.relative_to(directory).as_posix(), cid=cid,
                                  size=file.stat().st_size))
    return stored


def build_adapter_entries(run_dir: str | Path, content) -> AdapterRunEntries:
    """Store the run's files in ``content`` and build its two entries (nothing appended)."""
    run_dir = Path(run_dir)
    manifest = read_run_manifest(run_dir)
    adapter_dir = run_dir / manifest["adapter_dir"]
    if not (adapter_dir / "adapter_config.json").is_file():
        raise AdapterRunError(f"{adapter_dir} has no adapter_config.json: not a PEFT adapter "
                              "directory")
    files = store_files(adapter_dir, content)
    artifacts = {RUN_MANIFEST: content.add_file(run_dir / RUN_MANIFEST, pin=True)}
    if (run_dir / "base").is_dir():  # a tiny random base exists nowhere else: keep it
        artifacts.update((f.path, f.cid) for f in store_files(run_dir / "base", content, "base/"))
    swarm = (manifest["run"].get("hardware") or {}).get("swarm")
    if isinstance(swarm, dict):  # the files a ban's evidence names: anyone can re-check it
        artifacts.update(store_evidence(run_dir, swarm.get("banned"), content))
    where = run_dir / RUN_MANIFEST
    run_section = dict(manifest["run"])
    run_section["artifacts"] = {**(run_section.get("artifacts") or {}), **artifacts}
    try:
        run = encode_entry(RunEntry(**run_section))
    except EntryError as exc:
        raise AdapterRunError(f"{where}: its 'run' section is not a valid run entry: {exc}"
                              ) from None
    section = manifest["adapter"]
    config = section.get("config")
    if config is None:
        config = read_json_file(adapter_dir / "adapter_config.json")
    try:
        adapter = encode_entry(AdapterEntry(
            base_model=manifest["base_model"], method=manifest["method"], files=files,
            config=config, dataset_digest=section.get("dataset_digest"),
            metrics=section.get("metrics") or {}, run_cid=entry_cid(run)))
    except EntryError as exc:
        raise AdapterRunError(f"{where}: the adapter entry it describes is not valid: {exc}"
                              ) from None
    return AdapterRunEntries(run, adapter, files, contribution_entries(run_dir, entry_cid(run)))


def store_evidence(run_dir: Path, bans, content) -> dict[str, str]:
    """Store the evidence files the run's ``bans`` name (``swarm_evidence/NAME`` -> CID)."""
    from trainer.swarm.audit import EVIDENCE_PREFIX, evidence_files
    from trainer.swarm.ban_evidence import FILE_NAME

    out = {}
    for name in evidence_files(bans):
        path = run_dir / EVIDENCE_PREFIX / name
        if not FILE_NAME.fullmatch(name) or not path.is_file():
            raise AdapterRunError(f"{run_dir / RUN_MANIFEST}: a ban names the evidence file "
                                  f"{name}, which {path.parent} does not hold")
        out[EVIDENCE_PREFIX + name] = content.add_file(path, pin=True)
    return out


def contribution_entries(run_dir: Path, run_cid: str) -> tuple[bytes, ...]:
    """One ``contribution`` entry per accepted record in ``run_dir/swarm_records.json`` (none
    without the file), each record's signature checked."""
    path = run_dir / SWARM_RECORDS
    if not path.is_file():
        return ()
    try:
        rows = read_json_file(path)["records"]
        if not isinstance(rows, list):
            raise TypeError("'records' is not a list")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise AdapterRunError(f"{path} is not a list of accepted records ({exc})") from None
    entries = []
    for i, row in enumerate(rows):
        try:
            if not isinstance(row, dict) or not isinstance(row.get("record"), dict):
                raise EntryError("each row is {record, credited_samples, credited_rounds, share}")
            entry = ContributionEntry(
                run_cid=run_cid, **row["record"], credited_samples=row.get("credited_samples"),
                credited_rounds=row.get("credited_rounds"), share=row.get("share"),
                checks=row.get("checks"))
            recover_contributor(entry)
            entries.append(encode_entry(entry))
        except (EntryError, TypeError) as exc:
            raise AdapterRunError(f"{path}: records[{i}]: {exc}") from None
    return tuple(entries)


def publish_adapter_run(run_dir: str | Path, store, content, contract, log_name: str
                        ) -> PublishedAdapter:
    """Append the run's ``run`` and ``adapter`` entries to ``log_name`` (created if new) in
    one transaction and anchor them with one checkpoint."""
    from ledger.publish import append_entries, publish

    entries = build_adapter_entries(run_dir, content)
    try:
        store.get_log(log_name)
    except NotFoundError:
        store.create_log(log_name)
    appended = append_entries(store, content, log_name,
                              [entries.run, entries.adapter, *entries.contributions])
    result = publish(store, content, contract, log_name)
    return PublishedAdapter(log_name, entry_cid(entries.run), entry_cid(entries.adapter),
                            appended.old_size + 1, entries.files, result.size, result.root,
                            result.tx_hash, tuple(map(entry_cid, entries.contributions)))


@dataclass(frozen=True)
class PublishedDerivedAdapter:
    log: str
    entry_cid: str
    index: int  # leaf index of the entry in the log
    files: list[AdapterFile]
    size: int  # log size after the anchor
    root: bytes
    tx_hash: str


def publish_derived_adapter(files: list[Path], *, method: str, config: dict,
                            metrics: dict[str, float], source: AdapterEntry, store, content,
                            contract, log_name: str) -> PublishedDerivedAdapter:
    """Publish an artefact derived from the published adapter ``source`` (a compressed delta):
    its ``files`` stored, one ``adapter`` entry with the source's base model, dataset digest
    and run CID, appended to ``log_name`` (created if new) and anchored."""
    from ledger.publish import append_entries, publish

    stored = []
    for file in files:
        stored.append(AdapterFile(path=file.name, cid=content.add_file(file, pin=True),
                                  size=file.stat().st_size))
    try:
        data = encode_entry(AdapterEntry(
            base_model=source.base_model, method=method, files=stored, config=config,
            dataset_digest=source.dataset_digest, metrics=metrics, run_cid=source.run_cid))
    except EntryError as exc:
        raise AdapterRunError(f"the {method} artefact does not make a valid adapter entry: "
                              f"{exc}") from None
    try:
        store.get_log(log_name)
    except NotFoundError:
        store.create_log(log_name)
    appended = append_entries(store, content, log_name, [data])
    result = publish(store, content, contract, log_name)
    return PublishedDerivedAdapter(log_name, entry_cid(data), appended.old_size, stored,
                                   result.size, result.root, result.tx_hash)
