"""The package docstring's example, and `gym node serve` run for real as a subprocess."""

from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys

import httpx
from node_helpers import LIBRARY, NODE_KEY, free_port, wait_for_health
from typer.testing import CliRunner

import inference_node
from inference_node.cli import app


def test_package_docstring_example_runs():
    result = doctest.testmod(inference_node)
    assert result.attempted >= 3 and result.failed == 0


def test_serve_help_says_what_exists():
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for option in ("--model", "--library", "--host", "--port", "--max-queue", "--engine",
                   "--register", "--stake", "--endpoint", "--adapter", "--adapter-proof",
                   "--eager"):
        assert option in result.output
    assert "Not yet here" not in result.output
    for command in ("list", "challenge"):
        assert CliRunner().invoke(app, [command, "--help"]).exit_code == 0


def test_register_needs_a_key_and_the_chain(tiny_model_dir, gym_env):
    result = gym_env.run("node", "serve", "--model", str(tiny_model_dir), "--register",
                         "--key-env", "GYM_NODE_KEY", "--offline",
                         extra_env={"GYM_NODE_KEY": NODE_KEY})
    assert result.returncode != 0 and "--register needs a key" in result.stderr


def test_node_serve_subprocess(tiny_model_dir, tmp_path):
    library = tmp_path / "library.json"
    library.write_text(json.dumps(LIBRARY))
    port = free_port()
    command = [sys.executable, "-c", "from inference_node.cli import app; app()", "serve",
               "--model", str(tiny_model_dir), "--library", str(library), "--port", str(port),
               "--max-queue", "4", "--device", "cpu", "--served-model-name", "tiny"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        health = wait_for_health(proc, port, timeout_s=60)
        assert health["status"] == "ok" and health["model"] == "tiny"
        assert health["engine"] == "transformers"  # --device chooses it
        assert health["library"]["size"] == 3
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/completions",
                           json={"model": "tiny", "prompt": "one two", "max_tokens": 3}).json()
        assert reply["usage"]["completion_tokens"] == 3
    finally:
        proc.terminate()
        proc.wait(timeout=30)
