"""`gym demo` runs the flow on embedded defaults (devnet, two anchored checkpoints, an audit,
a Training-Free GRPO run published and audited, a registered node through which two candidate
libraries are measured before the vote, a DAO that votes one down and passes the other by their
evidence, the node answering from the curated library with a verified receipt, a forged
receipt slashed and a false challenge rejected by the verifier committee) and leaves nothing
running."""

import re

import pytest

from devnet.anvil import running_anvil

pytestmark = pytest.mark.anvil


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_demo_runs_and_cleans_up(gym_env):
    result = gym_env.run("demo", timeout=1700)
    assert result.returncode == 0, result.stderr
    assert "deployment verified" in result.stdout
    assert "ExperienceLedger" in result.stdout
    assert "appended 3 experiences: size 0 -> 3" in result.stdout
    assert "published size 5" in result.stdout and "hashes from size 3" in result.stdout
    assert "audit clean: 2 checkpoints, 5 entries" in result.stdout
    assert "4. Training-Free GRPO" in result.stdout and "published run bafkrei" in result.stdout
    assert result.stdout.count("audit clean:") == 2  # the training log audits clean too
    assert "5. inference node" in result.stdout and "6. evidence" in result.stdout
    # both candidates measured through the node, each evaluation published and verified
    learned = int(re.search(r"learned (\d+) experiences? from", result.stdout).group(1))
    first = "learned" if learned else "samples"
    for name in (first, "farm rules"):
        assert re.search(rf"{name} \(log demo/[^)]+\): evaluation bafkrei\w+, leaf \d+ of "
                         r"demo/evaluations-", result.stdout), result.stdout
        assert f"verified {name}: 32 receipts" in result.stdout, result.stdout
    assert result.stdout.count("library vs baseline, Mean@2: ") >= 2
    # the DAO decides by the evidence: the farm rules pass (the base model cannot know what a
    # crate holds), what the run learned does not beat the baseline beyond its spread
    assert "7. DAO curation by evidence" in result.stdout
    assert re.search(r"passed on its evidence: proposal \d+ \(farm rules\): library vs "
                     r"baseline, Mean@2: \+[\d.]+ ± [\d.]+ .*: helps; executed, curated "
                     r"library size \d+", result.stdout), result.stdout
    assert re.search(rf"voted down on its evidence: proposal \d+ \({first}\): library vs "
                     r"baseline, Mean@2: .*: (no clear effect|hurts)", result.stdout), result.stdout
    curated = int(re.search(r"executed, curated library size (\d+)", result.stdout).group(1))
    assert curated == 1  # only the farm rule entered the library
    assert "8. inference node answers" in result.stdout
    assert f"injected {curated} experience;" in result.stdout  # one: singular
    assert re.search(r"(right|wrong): the (answer is 33|final answer reads)", result.stdout)
    assert "receipt verified" in result.stdout
    assert "node stopped gracefully" in result.stdout
    assert "9. verifier committee" in result.stdout
    assert re.search(r"challenge 1 settled upheld: sampling, signed by verifiers \[", result.stdout)
    assert "challenge 2 settled rejected" in result.stdout
    assert "(slashed)" in result.stdout and "settled on chain" in result.stdout
    # amounts print once with their unit
    assert re.search(r"stake [\d.]+ GYM -> [\d.]+ GYM \(slashed\)", result.stdout), result.stdout
    assert re.search(r"\(bond [\d.]+ GYM\)", result.stdout) and "GYM GYM" not in result.stdout
    # the epoch it ran in, paid: one table computed three times, attested once, one claim
    assert "10. rewards" in result.stdout
    assert re.search(r"three verifiers computed the same table \(baf\w+, root 0x[0-9a-f]{64}\)",
                     result.stdout), result.stdout
    assert "attested on chain with one aggregate signature" in result.stdout
    # the curated farm rule's uses in the node's receipts pay its author; the node is available
    assert re.search(r"\(.*data [\d.]+ GYM", result.stdout), result.stdout
    assert re.search(r"\(.*availability [\d.]+ GYM", result.stdout), result.stdout
    assert re.search(r"0x[0-9a-fA-F]{40} claimed [\d.]+ GYM", result.stdout), result.stdout
    assert running_anvil(gym_env.data_dir) is None


def test_demo_keep_leaves_the_devnet_running(gym_env):
    result = gym_env.run("demo", "--keep", "--no-train", "--no-node")
    assert result.returncode == 0, result.stderr
    assert "executed: curated library 'gym/curated' size 5" in result.stdout
    # the researcher and the auditor kept their own databases and shared only the chain and
    # the content endpoint: neither wrote a block to a store of its own
    assert "each party on its own data directory" in result.stdout
    parties = gym_env.data_dir / "parties"
    assert (parties / "researcher" / "ledger.sqlite").is_file()
    for name in ("researcher", "auditor"):
        local = parties / name / "ipfs"
        assert not local.exists() or not any(p.is_file() for p in local.rglob("*")), name
    assert running_anvil(gym_env.data_dir) is not None
    assert gym_env.run("devnet", "status").returncode == 0
