"""Publishing an adapter run and fetching it back by CID: every file re-added and checked,
tampered bytes refused with nothing written, inclusion checked against the anchored root."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest
import torch
from gym_helpers import kubo_cid
from test_adapters_support import make_adapter_run

import trainer.adapters
from ledger import LocalBlockStore, LogStore, decode_entry, encode_entry, entry_cid
from ledger.multiformats import CID
from ledger.proofs import proof_document
from ledger.unixfs import CHUNK_SIZE, import_bytes_stream
from trainer.adapters import (
    AdapterEntryError,
    AdapterError,
    AdapterIntegrityError,
    AdapterRunError,
    build_adapter_entries,
    fetch_adapter,
    publish_adapter_run,
)
from trainer.adapters.fetch import ENTRY_FILE


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_model_dir) -> Path:
    return make_adapter_run(tmp_path_factory.mktemp("adapter-run") / "run", tiny_model_dir)


@pytest.fixture
def stored(run_dir, tmp_path):
    """The run's entries built into a local store, the adapter entry stored too."""
    content = LocalBlockStore(tmp_path / "ipfs")
    entries = build_adapter_entries(run_dir, content)
    cid = content.add_file(entries.adapter, pin=True)
    return content, entries, cid


def test_package_docstring_example_runs():
    result = doctest.testmod(trainer.adapters, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_entries_list_every_file_with_kubo_cids(stored, run_dir):
    content, entries, _ = stored
    run, adapter = decode_entry(entries.run), decode_entry(entries.adapter)
    files = sorted(p.relative_to(run_dir / "adapter").as_posix()
                   for p in (run_dir / "adapter").rglob("*") if p.is_file())
    assert [f.path for f in adapter.files] == files
    big = [f for f in adapter.files if f.size > CHUNK_SIZE]
    assert big and big[0].path == "adapter_model.safetensors" and big[0].cid.startswith("bafybei")
    for f in adapter.files:
        data = (run_dir / "adapter" / f.path).read_bytes()
        assert f.cid == kubo_cid(data) and f.size == len(data)
        assert content.cat(f.cid) == data
    manifest = json.loads((run_dir / "run.json").read_text())
    assert adapter.run_cid == entry_cid(entries.run)
    assert adapter.method == "sft" and adapter.base_model.model_dump() == manifest["base_model"]
    assert adapter.config == manifest["adapter"]["config"]
    assert adapter.metrics == manifest["adapter"]["metrics"]
    assert run.metrics == manifest["run"]["metrics"]
    assert run.dataset_digests == manifest["run"]["dataset_digests"]
    assert set(run.artifacts) >= {"run.json", "base/model.safetensors", "base/config.json"}
    assert run.artifacts["base/model.safetensors"] == kubo_cid(
        (run_dir / "base" / "model.safetensors").read_bytes())


def test_a_broken_run_manifest_is_refused(run_dir, tmp_path):
    broken = tmp_path / "run"
    broken.mkdir()
    (broken / "adapter").symlink_to(run_dir / "adapter")
    manifest = json.loads((run_dir / "run.json").read_text())
    manifest["base_model"]["weights_digest"] = "md5:abc"
    (broken / "run.json").write_text(json.dumps(manifest))
    with pytest.raises(AdapterRunError, match="base_model.weights_digest"):
        build_adapter_entries(broken, LocalBlockStore(tmp_path / "ipfs"))
    (broken / "run.json").unlink()
    with pytest.raises(AdapterRunError, match="run.json is missing"):
        build_adapter_entries(broken, LocalBlockStore(tmp_path / "ipfs"))


def test_fetch_writes_identical_files_and_the_entry(stored, run_dir, tmp_path):
    content, entries, cid = stored
    fetched = fetch_adapter(content, cid, tmp_path / "out" / "adapter")
    for f in fetched.entry.files:
        assert (fetched.directory / f.path).read_bytes() == (run_dir / "adapter" / f.path
                                                             ).read_bytes()
    assert (fetched.directory / ENTRY_FILE).read_bytes() == entries.adapter
    assert entry_cid((fetched.directory / ENTRY_FILE).read_bytes()) == cid
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["adapter"]


def test_fetched_adapter_reloads_to_identical_logits(stored, run_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    content, _, cid = stored
    fetched = fetch_adapter(content, cid, tmp_path / "adapter")
    ids = torch.tensor([[5, 17, 42, 99, 7, 250, 3]])
    logits = []
    for adapter_dir in (run_dir / "adapter", fetched.directory):
        base = AutoModelForCausalLM.from_pretrained(run_dir / "base")
        model = PeftModel.from_pretrained(base, adapter_dir).eval()
        with torch.no_grad():
            logits.append(model(ids).logits)
    assert torch.equal(logits[0], logits[1])
    with torch.no_grad():  # and the adapter does change the model
        plain = AutoModelForCausalLM.from_pretrained(run_dir / "base").eval()(ids).logits
    assert not torch.allclose(plain, logits[0], atol=1e-3)


def _leaf_blocks(content: LocalBlockStore, root: str) -> list[Path]:
    from ledger.unixfs import links_of

    block = content.get_block(root)
    return [content._block_path(link.cid) for link in links_of(CID.parse(root), block)]


def test_a_flipped_byte_in_a_stored_block_is_refused(stored, tmp_path):
    content, entries, cid = stored
    weights = next(f for f in decode_entry(entries.adapter).files if f.size > CHUNK_SIZE)
    leaf = _leaf_blocks(content, weights.cid)[1]
    data = bytearray(leaf.read_bytes())
    data[100] ^= 0x01
    leaf.write_bytes(bytes(data))
    target = tmp_path / "out" / "adapter"
    with pytest.raises(AdapterIntegrityError, match="adapter_model.safetensors: the content "
                                                    "store holds corrupt blocks") as info:
        fetch_adapter(content, cid, target)
    assert info.value.path == "adapter_model.safetensors"
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def _entry_with(entries, **changes) -> bytes:
    entry = decode_entry(entries.adapter)
    return encode_entry(entry.model_copy(update=changes))


def test_a_file_whose_bytes_do_not_re_add_to_its_cid_is_refused(stored, run_dir, tmp_path):
    """Every block hashes correctly, but the DAG is not Kubo's (dag-pb leaves, as CIDv0 adds):
    the bytes come back intact yet re-add to another CID, so the entry is not honest."""
    content, entries, _ = stored
    data = (run_dir / "adapter" / "adapter_model.safetensors").read_bytes()
    other = import_bytes_stream(data, lambda c, b: content.put_block(c, b), cid_version=0)
    entry = decode_entry(entries.adapter)
    files = [f.model_copy(update={"cid": str(other.to_v1())}) if f.size > CHUNK_SIZE else f
             for f in entry.files]
    assert content.cat(str(other.to_v1())) == data
    cid = content.add_file(_entry_with(entries, files=files))
    with pytest.raises(AdapterIntegrityError, match="re-add to CID") as info:
        fetch_adapter(content, cid, tmp_path / "adapter")
    assert info.value.expected == str(other.to_v1()) and info.value.computed == kubo_cid(data)
    assert not (tmp_path / "adapter").exists()


def test_a_wrong_size_is_refused(stored, tmp_path):
    content, entries, _ = stored
    entry = decode_entry(entries.adapter)
    files = [f.model_copy(update={"size": f.size + 1}) if f.path == "adapter_config.json" else f
             for f in entry.files]
    cid = content.add_file(_entry_with(entries, files=files))
    with pytest.raises(AdapterIntegrityError, match="adapter_config.json: got"):
        fetch_adapter(content, cid, tmp_path / "adapter")
    assert not (tmp_path / "adapter").exists()


class LyingStore:
    """A store that hands back other bytes than it was asked for (no block verification)."""

    def __init__(self, inner: LocalBlockStore, victim: str):
        self.inner, self.victim = inner, victim

    def cat(self, cid):
        return self.inner.cat(cid)

    def cat_iter(self, cid):
        for chunk in self.inner.cat_iter(cid):
            yield chunk.replace(b"lora", b"LORA") if cid == self.victim else chunk


def test_a_store_serving_wrong_bytes_is_refused(stored, tmp_path):
    content, entries, cid = stored
    config = next(f for f in decode_entry(entries.adapter).files
                  if f.path == "adapter_config.json")
    with pytest.raises(AdapterIntegrityError, match="adapter_config.json: its bytes re-add"):
        fetch_adapter(LyingStore(content, config.cid), cid, tmp_path / "adapter")
    assert not (tmp_path / "adapter").exists()


def test_wrong_cids_and_targets_are_refused(stored, tmp_path):
    content, entries, cid = stored
    content.add_file(entries.run)
    with pytest.raises(AdapterEntryError, match="is a 'run' entry, not an adapter entry"):
        fetch_adapter(content, entry_cid(entries.run), tmp_path / "a")
    weights = next(f for f in decode_entry(entries.adapter).files if f.size > CHUNK_SIZE)
    with pytest.raises(AdapterEntryError, match="not an entry CID"):
        fetch_adapter(content, weights.cid, tmp_path / "a")
    with pytest.raises(AdapterEntryError, match="not in the local content store"):
        fetch_adapter(content, entry_cid(b"nothing"), tmp_path / "a")
    entry = decode_entry(entries.adapter)
    clash = [*entry.files, entry.files[0].model_copy(update={"path": entry.files[0].path + "/x"})]
    with pytest.raises(AdapterEntryError, match="both as a file and as a folder"):
        fetch_adapter(content, content.add_file(_entry_with(entries, files=clash)),
                      tmp_path / "a")
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine")
    with pytest.raises(AdapterError, match="not an empty directory"):
        fetch_adapter(content, cid, occupied)
    assert [p.name for p in occupied.iterdir()] == ["keep.txt"]
    assert not (tmp_path / "a").exists()


@pytest.mark.anvil
def test_publish_then_fetch_with_an_inclusion_proof(run_dir, tmp_path, ledger_devnet):
    store = LogStore(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    content = LocalBlockStore(tmp_path / "ipfs")
    contract = ledger_devnet.contract()
    published = publish_adapter_run(run_dir, store, content, contract, "alice/adapters")
    log = store.get_log("alice/adapters")
    assert log.size == published.size == 2 and published.adapter_index == 1
    assert contract.log_info(log.chain_log_id).size == 2
    leaves = list(store.leaves("alice/adapters"))
    assert [leaf.cid for leaf in leaves] == [published.run_cid, published.adapter_cid]
    adapter = decode_entry(content.cat(published.adapter_cid))
    assert adapter.run_cid == published.run_cid and adapter.files == published.files

    doc = proof_document(store, content, "alice/adapters", 1)
    fetched = fetch_adapter(content, published.adapter_cid, tmp_path / "adapter", proof=doc,
                            contract=contract)
    assert fetched.inclusion.index == 1 and fetched.inclusion.size == 2
    for f in adapter.files:
        assert (tmp_path / "adapter" / f.path).read_bytes() == (run_dir / "adapter" / f.path
                                                                ).read_bytes()
    wrong_leaf = proof_document(store, content, "alice/adapters", 0)
    with pytest.raises(AdapterEntryError, match="inclusion proof is about entry"):
        fetch_adapter(content, published.adapter_cid, tmp_path / "again", proof=wrong_leaf,
                      contract=contract)
    # leaf 0's proof without its entry, claiming the adapter's CID: the leaf is the run's
    claimed = {**{k: v for k, v in wrong_leaf.items() if k != "entry"},
               "entry_cid": published.adapter_cid}
    with pytest.raises(AdapterEntryError, match="does not hash to the leaf hash"):
        fetch_adapter(content, published.adapter_cid, tmp_path / "again", proof=claimed,
                      contract=contract)
    bare = {k: v for k, v in doc.items() if k != "entry"}  # the right leaf, entry left out
    assert fetch_adapter(content, published.adapter_cid, tmp_path / "bare", proof=bare,
                         contract=contract).inclusion.entry_checked
    forged = {**doc, "root": "0x" + "11" * 32}
    with pytest.raises(AdapterEntryError, match="inclusion proof does not verify"):
        fetch_adapter(content, published.adapter_cid, tmp_path / "again", proof=forged,
                      contract=contract)
    # a proof against a size that was never anchored: the chain cannot vouch for its root
    from ledger.publish import append_entries

    append_entries(store, content, "alice/adapters", [content.cat(published.run_cid)])
    unanchored = proof_document(store, content, "alice/adapters", 1, size=3)
    with pytest.raises(AdapterEntryError, match="is not anchored at size 3"):
        fetch_adapter(content, published.adapter_cid, tmp_path / "again", proof=unanchored,
                      contract=contract)
    assert not (tmp_path / "again").exists()


@pytest.mark.anvil
def test_publish_fetch_and_compress_commands(ledger_devnet, run_dir, tmp_path):
    import re

    gym = ledger_devnet.gym
    published = gym.run("adapter", "publish", str(run_dir), "alice/adapters")
    assert published.returncode == 0, published.stderr
    cid = re.search(r"adapter entry (bafkrei[a-z2-7]+) \(leaf 1\)", published.stdout).group(1)

    fetched = gym.run("adapter", "fetch", cid, str(tmp_path / "a"), "--log", "alice/adapters",
                      "--index", "1")
    assert fetched.returncode == 0, fetched.stderr
    assert "verified" in fetched.stdout and "as leaf 1" in fetched.stdout
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        assert (tmp_path / "a" / name).read_bytes() == (run_dir / "adapter" / name).read_bytes()
    proof = gym.run("ledger", "proof", "alice/adapters", "1", "--json")
    (tmp_path / "proof.json").write_text(proof.stdout)
    with_proof = gym.run("adapter", "fetch", cid, str(tmp_path / "p"), "--proof",
                         str(tmp_path / "proof.json"))
    assert with_proof.returncode == 0, with_proof.stderr
    wrong = gym.run("adapter", "fetch", cid, str(tmp_path / "b"), "--log", "alice/adapters",
                    "--index", "0")
    assert wrong.returncode == 1 and "inclusion proof is about entry" in wrong.stderr
    assert not (tmp_path / "b").exists()

    delta = gym.run("adapter", "compress", str(tmp_path / "a"), "--base", str(run_dir / "base"),
                    "--bits", "1", "--output", str(tmp_path / "d1"), "--eval-limit", "4",
                    "--publish", "alice/adapters")
    assert delta.returncode == 0, delta.stderr
    delta_cid = re.search(r"published delta entry (bafkrei[a-z2-7]+) \(leaf 2\)",
                          delta.stdout).group(1)
    again = gym.run("adapter", "fetch", delta_cid, str(tmp_path / "d1-fetched"), "--log",
                    "alice/adapters", "--index", "2")
    assert again.returncode == 0, again.stderr
    entry = json.loads((tmp_path / "d1-fetched" / ENTRY_FILE).read_text())
    assert entry["method"] == "bitdelta-1" and entry["run_cid"] == decode_entry(
        (tmp_path / "a" / ENTRY_FILE).read_bytes()).run_cid
    assert entry["config"]["source_adapter"]["entry_cid"] == cid
    assert (tmp_path / "d1-fetched" / "delta.safetensors").read_bytes() == (
        tmp_path / "d1" / "delta.safetensors").read_bytes()

    content = LocalBlockStore(gym.data_dir / "ipfs")
    weights = next(f for f in decode_entry(content.cat(cid)).files if f.size > CHUNK_SIZE)
    leaf = _leaf_blocks(content, weights.cid)[0]
    data = bytearray(leaf.read_bytes())
    data[7] ^= 0x80
    leaf.write_bytes(bytes(data))
    tampered = gym.run("adapter", "fetch", cid, str(tmp_path / "c"))
    assert tampered.returncode == 1
    assert tampered.stderr.strip().splitlines()[-1].startswith(
        "error: adapter_model.safetensors: the content store holds corrupt blocks")
    assert not (tmp_path / "c").exists()
