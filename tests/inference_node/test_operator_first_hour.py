"""An operator's first hour: `gym node model` (where the shipped model is) and
`gym node serve --log-level` (the node's own status lines first, the engine libraries quiet
unless asked), run for real as subprocesses."""

from __future__ import annotations

import shutil
import subprocess

import gym_forkserver
import httpx
from node_helpers import GYM, free_port, node_env, node_process, stop_node, wait_for_health


def _run(command: list[str], env: dict[str, str]):
    if command[0] == str(GYM):  # a `gym` command: forked with its libraries imported
        return gym_forkserver.run(GYM, command[1:], env)
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def test_node_model_prints_the_cached_checkpoint_alone(tiny_model_dir, tmp_path):
    """A converted checkpoint in GYM_MODEL_CACHE: its directory, alone on stdout, at once."""
    cache = tmp_path / "models"
    shutil.copytree(tiny_model_dir, cache / "SmolLM2-135M-Instruct")
    env = {**node_env(tmp_path / "data"), "GYM_MODEL_CACHE": str(cache)}
    result = _run([str(GYM), "node", "model"], env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{cache / 'SmolLM2-135M-Instruct'}\n"
    assert "converting" not in result.stderr  # nothing to convert
    # the path is usable as `--model "$(gym node model)"`: a model directory the node accepts
    shell = _run(["bash", "-c", (f'"{GYM}" node serve --model "$("{GYM}" node model)" '
                                 "--library /nonexistent.json")], env)
    assert shell.returncode != 0
    assert "nonexistent.json" in shell.stderr and "--model" not in shell.stderr


def test_node_model_help_says_what_it_prints():
    result = _run([str(GYM), "node", "model", "--help"],
                  {**node_env(GYM.parent), "COLUMNS": "200"})
    assert result.returncode == 0
    assert "GYM_MODEL_CACHE" in result.stdout and "--model" in result.stdout


def _serve(model_dir, tmp_path, *log_level: str) -> tuple[list[str], int]:
    """`gym node serve --engine transformers` of the tiny model, one request, SIGTERM: its
    output lines (stdout and stderr), and the port."""
    port = free_port()
    command = [str(GYM), "node", "serve", "--model", str(model_dir), "--engine",
               "transformers", "--served-model-name", "tiny", "--port", str(port), *log_level]
    with node_process(command, node_env(tmp_path / "data")) as proc:
        wait_for_health(proc, port, timeout_s=90)
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/completions",
                           json={"model": "tiny", "prompt": "one two", "max_tokens": 2},
                           timeout=60)
        assert reply.status_code == 200
        output = stop_node(proc)
        assert proc.returncode == 0, output
    return [line for line in output.splitlines() if line.strip()], port


def test_serve_prints_its_own_status_first_and_keeps_the_engine_quiet(tiny_model_dir, tmp_path):
    lines, port = _serve(tiny_model_dir, tmp_path)  # --log-level warning, the default
    assert lines[0].startswith(f"gym node: loading {tiny_model_dir} with the transformers "
                               "engine"), lines
    ready = [line for line in lines if line.startswith("gym node: ready")]
    assert len(ready) == 1 and f"http://127.0.0.1:{port}/v1" in ready[0], lines
    text = "\n".join(lines)
    for noise in ("Uvicorn running", "Started server process", "Application startup complete",
                  "POST /v1/completions", "INFO", "Loading weights"):
        assert noise not in text, text
    assert len(lines) <= 6, text  # loading, engine, loaded, ready, stopped


def test_serve_log_level_info_brings_the_engine_logs_back(tiny_model_dir, tmp_path):
    quiet, _ = _serve(tiny_model_dir, tmp_path / "quiet", "--log-level", "warning")
    lines, _ = _serve(tiny_model_dir, tmp_path / "info", "--log-level", "info")
    assert lines[0].startswith("gym node: loading"), lines
    text = "\n".join(lines)
    for line in ("Uvicorn running", "Application startup complete", "POST /v1/completions"):
        assert line in text, text
    assert len(lines) > len(quiet)


def test_serve_refuses_an_unknown_log_level(tiny_model_dir, tmp_path):
    result = _run([str(GYM), "node", "serve", "--model", str(tiny_model_dir), "--log-level",
                   "loud"], node_env(tmp_path))
    assert result.returncode != 0 and "loud" in result.stderr
    assert "Traceback" not in result.stderr
