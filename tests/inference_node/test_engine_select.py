"""`gym node serve --engine auto` (the default): vLLM where it can serve the model, else transformers.

The checks ask the installed vLLM (its CPU attention's head sizes, its model registry); the tests
marked `vllm` need it. "vLLM is not installed" is tested on this machine too, in subprocesses
where `import vllm` fails (``sys.modules["vllm"] = None``), whether or not vLLM is installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import httpx
import pytest
from node_helpers import (
    LIBRARY,
    MODEL_NAME,
    free_port,
    needs_vllm,
    node_process,
    stop_node,
    wait_for_health,
)

from inference_node.engine_select import choose_engine

HIDE_VLLM = "import sys; sys.modules['vllm'] = None; "


def test_an_explicit_engine_is_taken_as_given(tiny_model_dir):
    for kind in ("transformers", "vllm"):
        choice = choose_engine(kind, tiny_model_dir)
        assert (choice.kind, choice.automatic) == (kind, False)
    with pytest.raises(ValueError, match="unknown engine 'tgi'"):
        choose_engine("tgi", tiny_model_dir)


def test_a_device_asks_for_the_transformers_engine(tiny_model_dir):
    choice = choose_engine("auto", tiny_model_dir, device="cpu")
    assert choice.kind == "transformers" and "--device cpu" in choice.reason


def test_without_vllm_auto_serves_with_transformers_and_vllm_is_a_clear_error(
        tiny_model_dir, gym_env):
    code = (HIDE_VLLM + "from inference_node.engine_select import choose_engine; "
            f"c = choose_engine('auto', {str(tiny_model_dir)!r}); print(c.kind, '|', c.reason)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("transformers | vLLM is not installed"), out
    cli = subprocess.run([sys.executable, "-c", HIDE_VLLM + "from devnet.cli import main; main()",
                          "node", "serve", "--model", str(tiny_model_dir), "--engine", "vllm"],
                         env=gym_env.env, capture_output=True, text=True, timeout=120,
                         check=False)
    assert cli.returncode == 1
    assert "error: vLLM is not installed:" in cli.stderr, cli.stderr
    assert "scripts/setup_vllm.sh" in cli.stderr


@needs_vllm
def test_auto_falls_back_for_a_head_size_vllm_cannot_run(tiny_model_dir):
    choice = choose_engine("auto", tiny_model_dir)  # 16-dimensional heads
    assert choice.kind == "transformers" and choice.automatic
    assert "head size 16" in choice.reason


@needs_vllm
def test_auto_falls_back_for_an_architecture_vllm_does_not_know(vllm_model_dir, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(vllm_model_dir, model)
    config = json.loads((model / "config.json").read_text())
    config["architectures"] = ["GymUnheardOfForCausalLM"]
    (model / "config.json").write_text(json.dumps(config))
    choice = choose_engine("auto", model)
    assert choice.kind == "transformers"
    assert "no implementation of GymUnheardOfForCausalLM" in choice.reason


@needs_vllm
def test_auto_picks_vllm_for_a_model_it_supports(vllm_model_dir):
    choice = choose_engine("auto", vllm_model_dir)
    assert (choice.kind, choice.automatic) == ("vllm", True)
    assert "LlamaForCausalLM" in choice.reason and "head size 32" in choice.reason


@needs_vllm
@pytest.mark.slow
def test_gym_node_serve_defaults_to_vllm(vllm_model_dir, tmp_path):
    """A real `gym node serve` without --engine: vLLM serves, /health says so, it answers."""
    library = tmp_path / "library.json"
    library.write_text(json.dumps(LIBRARY))
    port = free_port()
    command = [sys.executable, "-m", "devnet.cli", "node", "serve", "--model",
               str(vllm_model_dir), "--library", str(library), "--port", str(port), "--eager",
               "--served-model-name", MODEL_NAME]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYM_")}
    env.update(GYM_DATA_DIR=str(tmp_path / "data"), COLUMNS="200")
    with node_process(command, env, fork=False) as proc:  # vLLM spawns its processes
        health = wait_for_health(proc, port, timeout_s=600)
        assert health["engine"] == "vllm" and health["library"]["size"] == 3
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=120, json={
            "model": MODEL_NAME, "prompt": "one two", "max_tokens": 3, "temperature": 0}).json()
        assert reply["usage"]["completion_tokens"] == 3
        output = stop_node(proc)
    assert proc.returncode == 0, output
    assert "engine: vllm (vLLM supports LlamaForCausalLM with head size 32" in output, output
