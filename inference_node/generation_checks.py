"""What a v2 receipt's answer must satisfy beyond its digests: every token is the verifiable
sampler's choice (``check_sampling``) and the answer ends where the engine would have stopped it
(``check_termination``). ``inference_node.verify`` runs both on the logits of the one prefill
that also checks the activation commitment; ``docs/receipts.md`` explains the rules.

Termination, with ``tokens`` the completion's ids, ``eos`` the ids that end the answer
(``answer_stop_ids``: the model's end-of-sequence ids unless the request set ``ignore_eos``, and
its ``stop_token_ids``; "an EOS" below is any of them) and ``decode`` the tokenizer's
``decode(ids, skip_special_tokens=True)``:

- nothing follows an EOS: only the last token may be one;
- no stop string is in ``decode(tokens[:-1])`` (the answer would have ended earlier);
- ``finish_reason`` "stop": the last token is an EOS, or a stop string is in ``decode(tokens)``
  and the text is that decoding cut before its earliest stop string;
- ``finish_reason`` "length": neither, and exactly ``max_tokens`` tokens (the node clamps
  ``max_tokens`` to the room left in the context, so the context bound is ``max_tokens`` too);
- the text is ``decode`` of the tokens (an ending EOS left out), cut at the stop string. Two
  differences are accepted, both vLLM's: its detokenizer leaves out the U+FFFD that ``decode``
  gives for an answer cut in the middle of a character, and puts a space before the first word
  of a tokenizer that has no decoder (word-level test tokenizers).

Failures raise ``ReceiptError`` with reason ``sampling`` (position, expected and chosen token),
``termination`` or ``response_text``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inference_node.errors import ReceiptError


def eos_token_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """The ids that end an answer: the generation config's EOS, else the tokenizer's (as the
    engines stop)."""
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None) if config is not None else None
    eos = eos if eos is not None else tokenizer.eos_token_id
    return frozenset(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}


def min_tokens_stop_ids(eos: frozenset[int], tokenizer: Any) -> frozenset[int]:
    """The ids ``min_tokens`` masks besides a request's ``stop_token_ids``: the model's EOS ids
    and the tokenizer's (vLLM's ``all_stop_token_ids``, which its own min_tokens processor
    masks before the node's sampler sees the row), whether or not ``ignore_eos``."""
    return frozenset(eos) | ({tokenizer.eos_token_id} - {None})


def model_dir_eos_token_ids(model_dir: Any, tokenizer: Any) -> frozenset[int]:
    """``eos_token_ids`` of the model in ``model_dir`` without loading its weights: the
    generation config transformers would give the loaded model (its ``generation_config.json``,
    else the one derived from ``config.json``)."""
    from types import SimpleNamespace

    from transformers import AutoConfig, GenerationConfig

    try:
        config = GenerationConfig.from_pretrained(model_dir)
    except OSError:
        config = GenerationConfig.from_model_config(AutoConfig.from_pretrained(model_dir))
    return eos_token_ids(SimpleNamespace(generation_config=config), tokenizer)


def answer_stop_ids(normalized: dict, eos: frozenset[int]) -> frozenset[int]:
    """The ids that end an answer to ``normalized`` (a normalized request): the model's EOS
    ids unless ``ignore_eos``, and its ``stop_token_ids``."""
    return (frozenset() if normalized.get("ignore_eos") else frozenset(eos)) \
        | frozenset(normalized.get("stop_token_ids", ()))


def check_sampling(logits: Any, tokens: Sequence[int], *, temperature: float, top_p: float,
                   seed: int, request_key: bytes, tokenizer: Any = None,
                   allowed: Any = None, knobs: Any = None, prompt_ids: Any = None):
    """``inference_node.sampling.check_completion`` on the prefill's logits; the
    ``SamplingCheck`` (near-ties counted), or ``ReceiptError`` sampling at the first token the
    sampler could not have chosen. ``allowed``: the response format's masks, one row per token;
    ``knobs`` (gym-sampler/2) and the ``prompt_ids`` its penalties read."""
    from inference_node.errors import SamplingError
    from inference_node.sampling import check_completion

    try:
        result = check_completion(logits, list(tokens), temperature=temperature, top_p=top_p,
                                  seed=seed, request_key=request_key, allowed=allowed,
                                  knobs=knobs, prompt_ids=prompt_ids)
    except SamplingError as exc:
        raise ReceiptError("sampling", f"the sampler's inputs are out of range ({exc})"
                           ) from None
    miss = result.mismatch
    if miss is not None:
        def shown(token: int) -> str:
            return f"{token} {tokenizer.decode([token])!r}" if tokenizer is not None else str(token)

        raise ReceiptError(
            "sampling", f"completion token {miss.index}: the sampler chooses {shown(miss.expected)}"
            f", the answer has {shown(miss.actual)} (beyond the tolerance "
            f"{result.tolerance:.2g})", expected=miss.expected, computed=miss.actual)
    return result


def check_termination(tokens: Sequence[int], text: str, finish_reason: str, *,
                      max_tokens: int, stop: Sequence[str], eos: frozenset[int],
                      tokenizer: Any) -> str:
    """``ReceiptError`` termination unless the answer ends as the engine ends one (module doc);
    how it ended ("eos", "stop string", "max_tokens") when it does."""
    tokens = list(tokens)
    if not tokens:
        raise ReceiptError("termination", "an answer has at least one token")
    early = next((i for i, t in enumerate(tokens[:-1]) if t in eos), None)
    if early is not None:
        raise ReceiptError("termination", f"completion token {early} is an end-of-sequence "
                           f"token and {len(tokens) - early - 1} more follow it")
    if len(tokens) > max_tokens:
        raise ReceiptError("termination", f"{len(tokens)} tokens, more than max_tokens "
                           f"{max_tokens}", expected=max_tokens, computed=len(tokens))

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    def first_stop(decoded: str) -> int | None:
        hits = [i for i in (decoded.find(s) for s in stop) if i >= 0]
        return min(hits) if hits else None

    before = first_stop(decode(tokens[:-1]))
    if before is not None:
        raise ReceiptError("termination", "a stop string ends before the last token: the "
                           "answer goes on past its end")
    ends_in_eos = tokens[-1] in eos
    decoded = decode(tokens[:-1] if ends_in_eos else tokens)
    cut = None if ends_in_eos else first_stop(decoded)
    if cut is not None:
        how, expected_finish, decoded = "stop string", "stop", decoded[:cut]
    elif ends_in_eos:
        how, expected_finish = "eos", "stop"
    elif len(tokens) == max_tokens:
        how, expected_finish = "max_tokens", "length"
    else:
        raise ReceiptError("termination", f"the answer stops after {len(tokens)} of "
                           f"{max_tokens} tokens with no end-of-sequence token or stop string: "
                           "truncated", expected=max_tokens, computed=len(tokens))
    if finish_reason != expected_finish:
        raise ReceiptError("termination", f"finish_reason {finish_reason!r}, but the answer "
                           f"ends by {how}", expected=expected_finish, computed=finish_reason)
    # an answer cut mid-character decodes to a trailing U+FFFD, which vLLM leaves out
    accepted = {decoded, decoded.rstrip("\ufffd")}
    if text not in accepted and not (text.startswith(" ") and text[1:] in accepted):
        raise ReceiptError("response_text", "the text is not the decoding of the token ids "
                           "up to the answer's end", expected=decoded, computed=text)
    return how
