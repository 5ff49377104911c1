"""Issue 46's evidence: an evaluation of a published library through a signing node, published
as an `evaluation` entry (`gym eval --publish`), and `gym verify evaluation` re-checking it
from an empty data directory with only the chain and the content endpoint; the same entry with
one per-seed figure changed, one generation's receipt swapped for another request's, and one
generation dropped, each refused by its name. A proposal names it; `gym gov show` and
`gym dashboard` (page and API) show it verified with its receipts, the verdict first.

The task is one the code has not seen: its own JSONL and its own verifier (a module written
here, trusted by `--verifier`)."""

from __future__ import annotations

import html
import json
import signal
import sys
from pathlib import Path

import gym_forkserver
import httpx
import pytest
from gym_helpers import gym_dashboard
from node_helpers import MODEL_NAME, NODE_KEY, free_port, wait_for_health

from governance.dashboard.views import VERDICT_WORDS
from ledger.content import open_content_store
from ledger.entries import EvaluationEntry, decode_entry, encode_entry
from ledger.evaluations import ReceiptTable, decode_receipt_table, encode_receipt_table

pytestmark = pytest.mark.anvil

SAMPLES = Path(__file__).resolve().parents[2] / "devnet" / "samples" / "experiences.jsonl"
VERIFIER = "python:letters_task:has_letter"
TASK = [{"problem": f"Name a word with the letter {c}.", "answer": c} for c in "aeo"]
LETTERS_TASK = '''
def has_letter(sample):
    """1 when the answer's letter is in the response (the tiny random model hits it often)."""
    hit = sample["answer"] in sample["response"].lower()
    return {"reward": 1.0 if hit else 0.0, "reasoning": "letter found" if hit else "no letter"}
'''


@pytest.fixture
def published_evaluation(ledger_devnet, tiny_model_dir, tmp_path):
    """A library log published, a registered node signing receipts, and `gym eval --publish`
    of the library against the baseline on the letters task through that node: the
    evaluation's CID, the endpoint, the parties' environments and the `gym` runner."""
    gym = ledger_devnet.gym
    endpoint = json.loads(gym.deployment_file.read_text())["content_api"]
    task_dir = tmp_path / "task"
    task_dir.mkdir()
    (task_dir / "letters_task.py").write_text(LETTERS_TASK)
    dataset = task_dir / "letters.jsonl"
    dataset.write_text("".join(json.dumps(row) + "\n" for row in TASK))

    def party(name: str, **extra: str) -> dict[str, str]:
        home = tmp_path / name
        return {"GYM_DATA_DIR": str(home), "GYM_DB_URL": f"sqlite:///{home / 'index.sqlite'}",
                "GYM_IPFS_API": endpoint, **extra}

    def run(env: dict[str, str], *args: str, ok: bool = True):
        result = gym.run(*args, extra_env=env, timeout=300)
        if ok:
            assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result

    researcher = party("researcher", PYTHONPATH=str(task_dir))
    run(researcher, "ledger", "create", "alice/math")
    run(researcher, "ledger", "append", "alice/math", str(SAMPLES))
    run(researcher, "ledger", "publish", "alice/math")
    port = free_port()
    env = {**gym.env, **party("node"), "GYM_NODE_KEY": NODE_KEY, "OMP_NUM_THREADS": "1"}
    proc = gym_forkserver.popen(Path(sys.executable).parent / "gym", [
        "node", "serve", "--model", str(tiny_model_dir), "--device", "cpu",
        "--served-model-name", MODEL_NAME, "--port", str(port), "--key-env", "GYM_NODE_KEY",
        "--anchor-interval", "1", "--register"], env)
    try:
        wait_for_health(proc, port, timeout_s=120)
        out = run(researcher, "eval", "--dataset", str(dataset), "--verifier", VERIFIER,
                  "--library-log", "alice/math", "--base-url", f"http://127.0.0.1:{port}/v1",
                  "--model", MODEL_NAME, "-k", "2", "--seeds", "2", "--max-new-tokens", "6",
                  "--publish", "alice/evals", "--wait", "60").stdout
    finally:
        proc.send_signal(signal.SIGINT)
        node_output = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 0, node_output
    cid = out.split("evaluation entry ")[1].split(":")[0]
    assert f"gym verify evaluation {cid}" in out, out
    return cid, endpoint, party, run, out


def _publish_altered(endpoint: str, tmp_path: Path, cid: str, *, entry_change=None,
                     table_change=None) -> str:
    """A copy of evaluation ``cid`` with its entry or its receipt table changed, stored on the
    endpoint: the CID of the altered entry."""
    content = open_content_store(endpoint, tmp_path / "mallory")
    entry = decode_entry(content.cat(cid))
    assert isinstance(entry, EvaluationEntry)
    doc = json.loads(encode_entry(entry))
    if table_change is not None:
        table = decode_receipt_table(content.cat(entry.receipts.table))
        arms = {arm: list(cids) for arm, cids in table.arms.items()}
        table_change(arms)
        doc["receipts"]["table"] = content.add_file(encode_receipt_table(ReceiptTable(arms)),
                                                    pin=True)
    if entry_change is not None:
        entry_change(doc)
    return content.add_file(encode_entry(EvaluationEntry(**doc)), pin=True)


@pytest.mark.slow
def test_a_published_evaluation_verifies_from_chain_and_endpoint_alone(
        published_evaluation, ledger_devnet, tiny_model_dir, tmp_path):
    cid, endpoint, party, run, out = published_evaluation
    assert "library vs baseline, Mean@2:" in out, out
    auditor = party("auditor", PYTHONPATH=str(tmp_path / "task"))
    checked = run(auditor, "verify", "evaluation", cid, "--verifier", VERIFIER, "--sample", "2",
                  "--model", str(tiny_model_dir)).stdout
    for check in ("receipt table", "receipts", "requests", "figures", "re-run"):
        assert f"│ {check}" in checked, checked
    assert "skipped" not in checked and "2 generations re-run in full" in checked, checked
    assert "library vs baseline, Pass@2:" in checked
    auditor_store = tmp_path / "auditor" / "ipfs"  # it read everything from the endpoint
    assert not auditor_store.exists() or not any(p.is_file() for p in auditor_store.rglob("*"))

    # the entry's verifier is code: not run unless the auditor names it
    refused = run(party("cautious"), "verify", "evaluation", cid, ok=False)
    assert refused.returncode == 1 and "(verifier)" in refused.stderr, refused.stderr

    def changed_figure(doc: dict) -> None:
        figures = doc["arms"]["library"]["per_seed"][1]
        figures["mean_at_k"] = 1.0 if figures["mean_at_k"] < 1.0 else 0.5

    def swapped(arms: dict) -> None:  # generation 0's receipt answers generation 1's request
        arms["library"][0], arms["library"][1] = arms["library"][1], arms["library"][0]

    def dropped(arms: dict) -> None:
        arms["baseline"].pop()

    mallory = open_content_store(endpoint, tmp_path / "mallory")

    def duplicated(arms: dict) -> None:  # generation 0's receipt again, in other bytes
        bundle = json.loads(mallory.cat(arms["library"][0]))
        arms["library"][1] = mallory.add_file(json.dumps(bundle, indent=2).encode(), pin=True)

    for alteration, reason in (({"entry_change": changed_figure}, "figures"),
                               ({"table_change": swapped}, "other_request"),
                               ({"table_change": dropped}, "missing_generation"),
                               ({"table_change": duplicated}, "duplicate_generation")):
        altered = _publish_altered(endpoint, tmp_path, cid, **alteration)
        result = run(auditor, "verify", "evaluation", altered, "--verifier", VERIFIER, ok=False)
        assert result.returncode == 1, (reason, result.stdout)
        assert f"evaluation FAILS ({reason})" in result.stderr, (reason, result.stderr)

    # Proposals carry it: the proposal of exactly the evaluated entries names it, voters see
    # its effect and that it verified; evidence of another library is refused by name.
    holder = party("holder", PYTHONPATH=str(tmp_path / "task"))
    leaves = ",".join(str(i) for i in range(len(SAMPLES.read_text().splitlines())))
    mismatched = run(holder, "gov", "propose-curation", "--from-log", "alice/math", "--indices",
                     "0,2", "--evidence", cid, "--account", "1", ok=False)
    assert mismatched.returncode == 1 and "not the 2 this proposal adds" in mismatched.stderr, \
        mismatched.stderr
    run(holder, "gov", "propose-curation", "--from-log", "alice/math", "--indices", leaves,
        "--evidence", cid, "--description", "Measured on the letters task.", "--account", "1")
    run(holder, "gov", "propose-curation", "--from-log", "alice/math", "--indices", "0",
        "--account", "1")
    shown = run(holder, "gov", "show", "1", "--verifier", VERIFIER).stdout
    assert shown.index(f"evidence {cid} (verified;") < shown.index("Measured on the"), shown
    assert "library vs baseline, Mean@2:" in shown and "per seed (library - baseline" in shown
    assert f"gym verify evaluation {cid} --sample" in shown, shown
    unchecked = run(holder, "gov", "show", "1").stdout  # the verifier is code it did not name
    assert "does NOT verify; FAILS (verifier)" in unchecked, unchecked
    assert "evidence: none." in run(holder, "gov", "show", "2").stdout

    # The dashboard shows it the same: verified with its receipts (the verifier trusted by
    # --verifier), the verdict first; without --verifier it FAILS (verifier), the verdict kept.
    env = {**ledger_devnet.gym.env, **holder}
    log = tmp_path / "dashboard.log"
    with log.open("wb") as out, gym_dashboard(env, out, lambda _: log.read_text(), "--verifier",
                                              VERIFIER) as (_, base):
        page = html.unescape(httpx.get(f"{base}/proposals/1", timeout=120).text)
        listed = httpx.get(f"{base}/api/proposals/1", timeout=120).json()["evidence"]
    section = page[page.index('<section id="evidence">'):page.index('<section id="description">')]
    headline = next(line for line in shown.splitlines() if "library vs baseline, Mean@2:" in line)
    verdict = headline.rsplit(": ", 1)[1]  # helps, hurts or no clear effect, as gym gov show says
    words = VERDICT_WORDS[verdict]
    assert f"Measured: {words} \u2014 Mean@2 " in section, section
    assert section.index("Measured: ") < section.index("verified with receipts") \
        < section.index("24 receipts checked: signatures, libraries, inclusion, requests and "
                        "every figure")
    assert "registration not checked" not in section  # the deployment's NodeRegistry was read
    assert (f"gym verify evaluation {cid} --sample 8 --model MODEL_DIR --verifier {VERIFIER}"
            in section)
    assert [(e["cid"], e["verified"], e["verdict"], e["badge"]) for e in listed] == [
        (cid, True, verdict, "verified with receipts")]
    with log.open("ab") as out, gym_dashboard(env, out, lambda _: log.read_text()) as (_, base):
        listed = httpx.get(f"{base}/api/proposals/1", timeout=120).json()["evidence"]
    assert listed[0]["verified"] is False and listed[0]["verdict"] == verdict
    assert listed[0]["detail"].startswith("FAILS (verifier): "), listed
    assert listed[0]["headline"].startswith(f"Claimed, but it does not verify: {words}")
