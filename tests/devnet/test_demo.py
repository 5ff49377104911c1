"""`gym demo` runs the flow on embedded defaults (devnet, two anchored checkpoints, an audit,
a Training-Free GRPO run published and audited, a DAO curation, an inference node answering
from the curated library with a verified receipt, a forged receipt slashed and a false
challenge rejected by the verifier committee) and leaves nothing running."""

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
    assert "5. DAO curation" in result.stdout
    assert "on-chain root matches the RFC 9162 root of the curated leaves" in result.stdout
    # the DAO curates what the run learned (the samples when it learned nothing), and the node
    # injects the whole curated library
    learned = int(re.search(r"learned (\d+) experiences", result.stdout).group(1))
    curated = int(re.search(r"executed: curated library 'gym/curated' size (\d+)",
                            result.stdout).group(1))
    if learned:
        assert "proposed curating" in result.stdout and "demo/tfgrpo-" in result.stdout
        assert curated >= learned
    else:
        assert "nothing was learned: the DAO curates the sample experiences" in result.stdout
        assert curated == 5
    assert "6. inference node" in result.stdout
    assert f"injected {curated} experiences" in result.stdout
    assert re.search(r"(right|wrong): the (answer is 33|final answer reads)", result.stdout)
    assert "receipt verified" in result.stdout
    assert "node stopped gracefully" in result.stdout
    assert "7. verifier committee" in result.stdout
    assert re.search(r"challenge 1 settled upheld: sampling, signed by verifiers \[", result.stdout)
    assert "challenge 2 settled rejected" in result.stdout
    assert "(slashed)" in result.stdout and "settled on chain" in result.stdout
    # amounts print once with their unit
    assert re.search(r"stake [\d.]+ GYM -> [\d.]+ GYM \(slashed\)", result.stdout), result.stdout
    assert re.search(r"\(bond [\d.]+ GYM\)", result.stdout) and "GYM GYM" not in result.stdout
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
