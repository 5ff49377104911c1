"""Limits for the JSON the trainer reads: data sets, run directories, HTTP replies.

Every such parse goes through ``ledger.json_input.parse_json`` (size and depth checked before
the decoder runs, duplicate members refused), so a hostile file or reply raises
``JSONInputError`` (a ``LedgerError`` and a ``ValueError``) instead of crashing the process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ledger.json_input import parse_json

DATASET_BYTES = 1024 * 1024 * 1024  # a whole-file JSON data set
LINE_BYTES = 16 * 1024 * 1024  # one row of a JSONL data set
RUN_FILE_BYTES = 64 * 1024 * 1024  # run.json, report.json, library.json, snapshots, configs
REPLY_BYTES = 64 * 1024 * 1024  # one HTTP reply of an OpenAI-compatible server


def read_json_file(path: str | Path, max_bytes: int = RUN_FILE_BYTES) -> Any:
    """The JSON value in ``path``; ``FileNotFoundError``/``OSError`` as reading raises them,
    ``JSONInputError`` for a file over ``max_bytes``, too deep, or not JSON."""
    with open(path, "rb") as handle:
        data = handle.read(max_bytes + 1)  # never more than the limit into memory
    return parse_json(data, max_bytes=max_bytes, what=str(path))
