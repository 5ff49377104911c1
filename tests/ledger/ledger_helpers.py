"""Helpers of the ledger tests that drive the real `gym` command (see tests/conftest.py)."""

from __future__ import annotations


def experience(step: int, op: str = "add", target: str | None = None, text: str | None = None
               ) -> dict:
    """An experience entry as a JSON object, distinct for each ``step``."""
    entry = {"type": "experience", "v": 1, "op": op, "domain": "math",
             "text": text or f"Rule {step}: draw a diagram before you compute.",
             "provenance": {"method": "tfgrpo", "base_model": "SmolLM2-135M-Instruct",
                            "step": step}}
    if target is not None:
        entry["target"] = target
    return entry


def ok(result) -> str:
    """The command's stdout, after checking that it succeeded."""
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def one_error_line(result, codes: tuple[int, ...] = (1,)) -> str:
    """The command's one `error: ` line, after checking it failed with one of ``codes`` and
    printed no traceback."""
    assert result.returncode in codes, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    return lines[0]
