"""`gym demo` runs the flow on embedded defaults (devnet, two anchored checkpoints, an audit,
a Training-Free GRPO run published and audited, a DAO curation, an inference node answering
from the curated library with a verified receipt) and leaves nothing running."""

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
    assert "6. inference node" in result.stdout
    assert "injected 5 experiences" in result.stdout  # the whole curated library
    assert "receipt verified" in result.stdout
    assert "node stopped gracefully" in result.stdout
    assert running_anvil(gym_env.data_dir) is None


def test_demo_keep_leaves_the_devnet_running(gym_env):
    result = gym_env.run("demo", "--keep", "--no-train", "--no-node")
    assert result.returncode == 0, result.stderr
    assert "executed: curated library 'gym/curated' size 5" in result.stdout
    assert running_anvil(gym_env.data_dir) is not None
    assert gym_env.run("devnet", "status").returncode == 0
