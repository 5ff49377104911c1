"""Perplexity on held-out text: the quality measure of ``gym adapter compress``.

``load_eval_texts`` renders a JSONL file as plain texts, one per row: ``text`` as is;
``problem``/``answer`` (the bundled arithmetic set, default ``trainer/data/arith_heldout.jsonl``)
as ``Question: ...\\nAnswer: ...``; alpaca ``instruction``/``input``/``output`` and
``prompt``/``completion`` as prompt, newline, response. ``perplexity`` is
``exp(total NLL / predicted tokens)`` over all texts, every token after the first of each text
predicted, padding excluded, so batching does not change it beyond float noise.
"""

from __future__ import annotations

import math
from pathlib import Path

from ledger.json_input import parse_json
from trainer._json import LINE_BYTES
from trainer.adapters.errors import AdapterError

DEFAULT_EVAL_DATASET = Path(__file__).resolve().parents[1] / "data" / "arith_heldout.jsonl"


def render_text(row: dict) -> str:
    """One held-out row as plain text (module docstring)."""
    if isinstance(row.get("text"), str):
        return row["text"]
    if "problem" in row and "answer" in row:
        return f"Question: {row['problem']}\nAnswer: {row['answer']}"
    if "instruction" in row and "output" in row:
        prompt = row["instruction"] + (f"\n{row['input']}" if row.get("input") else "")
        return f"{prompt}\n{row['output']}"
    if "prompt" in row and "completion" in row:
        return f"{row['prompt']}\n{row['completion']}"
    raise AdapterError(f"cannot render a row with keys {sorted(row)} as text: use text, "
                       "problem/answer, instruction/output or prompt/completion")


def load_eval_texts(path: str | Path | None = None, limit: int = 0) -> list[str]:
    """Texts of the JSONL file ``path`` (default: the bundled held-out arithmetic split)."""
    path = Path(path) if path else DEFAULT_EVAL_DATASET
    try:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError as exc:
        raise AdapterError(f"cannot read {path}: {exc.strerror or exc}") from None
    texts = []
    for number, line in enumerate(lines[:limit] if limit else lines, 1):
        try:
            row = parse_json(line, max_bytes=LINE_BYTES, what="row")
        except ValueError as exc:
            raise AdapterError(f"{path}:{number}: not valid JSON ({exc})") from None
        if not isinstance(row, dict):
            raise AdapterError(f"{path}:{number}: a row must be a JSON object")
        texts.append(render_text(row))
    if not texts:
        raise AdapterError(f"{path} holds no rows")
    return texts


def perplexity(model, tokenizer, texts: list[str], batch_size: int = 8) -> float:
    """Token-level perplexity of ``model`` on ``texts`` (right-padded batches)."""
    import torch
    import torch.nn.functional as F

    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    total_nll, total_tokens = 0.0, 0
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            rows = [tokenizer(t)["input_ids"] for t in texts[start:start + batch_size]]
            width = max(map(len, rows))
            ids = torch.full((len(rows), width), pad, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for i, row in enumerate(rows):
                ids[i, :len(row)] = torch.tensor(row)
                mask[i, :len(row)] = 1
            ids, mask = ids.to(device), mask.to(device)
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
            targets = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
            total_nll += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                               targets.reshape(-1), ignore_index=-100,
                                               reduction="sum"))
            total_tokens += int((targets != -100).sum())
    if total_tokens == 0:
        raise AdapterError("the held-out texts have no token to predict")
    return math.exp(total_nll / total_tokens)
