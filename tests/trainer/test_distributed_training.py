"""`gym train sft --num-processes 2` through the real `gym` command on the tiny random model:
two CPU ranks (torch distributed, gloo, through accelerate) train one adapter; a rank killed
with -9 ends the run with one line naming it and nothing written."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from tiny_sft import write_sft_config

REPO = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path) -> Path:
    return write_sft_config(tmp_path, 3, output_dir=tmp_path / "run")


def test_two_ranks_train_one_adapter_and_rank_0_writes_it(gym_env, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    result = gym_env.run("train", "sft", str(_config(tmp_path)), "--num-processes", "2",
                         timeout=600)
    assert result.returncode == 0, result.stderr
    assert "sft: 2 processes" in result.stdout
    assert result.stdout.count("final_train_loss") == 1  # one summary: rank 0's
    run = tmp_path / "run"
    assert sorted(p.name for p in run.iterdir()) == [".ranks", "adapter", "base", "run.json"]
    assert [p.name for p in (run / ".ranks").iterdir()] == ["torchrun.log"]  # no rank failed
    assert sorted(p.name for p in (run / "adapter").iterdir()) == [
        "adapter_config.json", "adapter_model.safetensors"]

    manifest = json.loads((run / "run.json").read_text())
    distributed = manifest["run"]["hardware"]["distributed"]
    assert (distributed["world_size"], distributed["backend"]) == (2, "gloo")
    assert (distributed["per_device_batch_size"], distributed["global_batch_size"]) == (2, 4)
    ranks = distributed["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["batches"] == 3 for r in ranks)
    # each rank trained on its own shard, and the averaged gradients kept one adapter
    assert ranks[0]["inputs_digest"] != ranks[1]["inputs_digest"]
    assert ranks[0]["weights_digest"] == ranks[1]["weights_digest"]
    assert manifest["run"]["metrics"]["train_steps"] == 3

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(run / "base"),
                                      run / "adapter")
    lora = [p for name, p in model.named_parameters() if "lora_B" in name]
    assert lora and any(p.abs().sum() > 0 for p in lora)  # trained: B starts at zero


METHODS = {  # data set, format and the method's own section, as the trainer's tests train
    "dpo": ("dpo_arith_pairs.jsonl", "preference", "dpo: {beta: 0.5}\n"),
    "kto": ("kto_arith.jsonl", "kto", "kto: {beta: 0.5}\n"),
    "grpo": ("arith_train.jsonl", "prompt",
             ("grpo: {num_generations: 4, max_completion_length: 12}\n"
              "reward: {verifiers: ['python:tfgrpo_fakes:length_parity']}\n")),
}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_preference_and_rl_methods_train_with_two_ranks(gym_env, tmp_path, method):
    """Not only SFT: each rank takes its own shard, and the averaged gradients leave both
    with the same weights; rank 0 writes the one adapter."""
    data, fmt, section = METHODS[method]
    config = tmp_path / f"{method}.yaml"
    config.write_text(
        f"method: {method}\nmodel: tiny-random\n"
        f"dataset: {{path: {REPO / 'trainer/data' / data}, format: {fmt}, limit: 8}}\n"
        "lora: {r: 4, alpha: 8}\n"
        "training: {max_steps: 2, batch_size: 4, max_length: 512, learning_rate: 0.02, "
        f"seed: 5}}\n{section}output_dir: {tmp_path / 'run'}\n")
    result = gym_env.run("train", method, str(config), "--num-processes", "2", timeout=600,
                         extra_env={"PYTHONPATH": str(REPO / "tests" / "trainer")})  # reward
    assert result.returncode == 0, result.stderr
    assert f"{method}: 2 processes" in result.stdout
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    distributed = manifest["run"]["hardware"]["distributed"]
    assert (distributed["world_size"], distributed["global_batch_size"]) == (2, 8)
    ranks = distributed["ranks"]
    assert [r["batches"] for r in ranks] == [2, 2]
    assert ranks[0]["inputs_digest"] != ranks[1]["inputs_digest"]
    assert ranks[0]["weights_digest"] == ranks[1]["weights_digest"]
    from safetensors.torch import load_file

    adapter = load_file(tmp_path / "run" / "adapter" / "adapter_model.safetensors")
    assert any(t.abs().sum() > 0 for name, t in adapter.items() if "lora_B" in name)


def _rank_pid(rank: int, deadline: float) -> int | None:
    """The pid of the training process with RANK=rank, once it exists."""
    while time.monotonic() < deadline:
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes()
                environ = (proc / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"trainer.gradient.distributed" in cmdline and f"RANK={rank}".encode() in environ:
                return int(proc.name)
        time.sleep(0.2)
    return None


def test_a_rank_killed_ends_the_run_with_one_line_and_nothing_written(gym_env, tmp_path):
    import os
    import signal

    run = tmp_path / "run"
    outcome = {}
    worker = threading.Thread(target=lambda: outcome.update(result=gym_env.run(
        "train", "sft", str(_config(tmp_path)), "--num-processes", "2", "--max-steps", "100000",
        timeout=600)))
    worker.start()
    pid = _rank_pid(1, time.monotonic() + 120)
    assert pid is not None, "rank 1 never started"
    deadline = time.monotonic() + 180
    while not (run / "base" / "config.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)  # rank 0 has written the base: the ranks are in the process group
    os.kill(pid, signal.SIGKILL)
    worker.join(timeout=300)
    result = outcome["result"]
    assert result.returncode == 1
    assert result.stderr.startswith("error: rank 1 died (exit status -9)"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (run / "run.json").exists() and not (run / "adapter").exists()


@pytest.mark.parametrize("processes", ["0", "65"])
def test_num_processes_out_of_range_is_refused(gym_env, tmp_path, processes):
    result = gym_env.run("train", "sft", str(_config(tmp_path)), "--num-processes", processes)
    assert result.returncode == 2 and "--num-processes" in result.stderr


TORCHRUN_REPORT = """terminate called without an active exception
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=======================================================
trainer.gradient.distributed FAILED
-------------------------------------------------------
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 11182)
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 11183)
=======================================================
"""


def test_a_rank_killed_is_named_even_when_the_others_wrote_errors_first(tmp_path):
    from trainer.gradient.distributed import _failure

    ranks = tmp_path / ".ranks"
    ranks.mkdir()
    log = ranks / "torchrun.log"
    log.write_text(TORCHRUN_REPORT)
    # rank 0 noticed the dead peer first: gloo's message, brackets and all
    (ranks / "rank-0.error").write_text(
        "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
        "Connection closed by peer [127.0.0.1]:1234\n")
    assert _failure(ranks, log, 1).startswith("rank 1 died (exit status -9)")
    # a rank that raised (its own error file) is named with its message
    log.write_text(TORCHRUN_REPORT.replace("exitcode  : -9", "exitcode  : 1"))
    assert _failure(ranks, log, 1).startswith("rank 0 failed: RuntimeError: [/__w/")


def test_an_error_message_with_brackets_is_printed_as_it_is(gym_env, tmp_path):
    """The root prints a failing command's message verbatim: text in brackets is not rich
    markup (a gloo message "[/__w/.../pair.cc:553] ..." once crashed the error printer)."""
    for name in ("[bold]x", "[/odd]"):
        config = tmp_path / name.replace("/", "") / "c.yaml"
        config.parent.mkdir()
        config.write_text("method: sft\nbogus: 1\n")
        result = gym_env.run("train", "sft", str(config))
        assert result.returncode == 1
        assert result.stderr == f"error: {config}: dataset: Field required; bogus: unknown key\n"
