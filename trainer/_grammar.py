"""Grammar-constrained decoding for `TransformersBackend`: OpenAI's `response_format` via xgrammar.

`GrammarCache` compiles a `response_format` (`{"type": "json_schema", "json_schema": {"schema":
...}}` or `{"type": "json_object"}`) once per schema for one tokenizer. `grammar_processor`
returns a logits processor that keeps one `xgr.GrammarMatcher` per output row and sets every
token the row's grammar forbids to -inf; placed before the seeded sampler, the sampler's Gumbel
noise then picks only among allowed tokens, so a row's sample still depends only on its seed.

Rows are left-padded by `model.generate`, and a finished row keeps producing pad tokens: a
matcher is fed each row's newest token until it has accepted EOS (it is then terminated, and
its row may only emit EOS), never the pad that follows. JSON is compiled without free
whitespace (`any_whitespace=False`): a model cannot spend its token budget on blanks.
"""

from __future__ import annotations

import json

from trainer.errors import TrainerError


class ResponseFormatError(TrainerError, ValueError):
    """A `response_format` that is neither a JSON schema nor `{"type": "json_object"}`."""


# How xgrammar 0.2.8 writes a character of a JSON string in EBNF: a string with maxLength may hold
# raw control characters, and every string may hold UTF-8-encoded surrogates. JSON forbids the
# first (json.loads rejects them) and the second decode to U+FFFD, three per surrogate. Each
# is replaced with the class JSON means.
XGRAMMAR_CHARACTERS = (r'[^\"\\\r\n]', r'[^\0-\x1f\"\\\r\n]', r'[^\"\\\0-\x1f]')
JSON_CHARACTER = r'[^\0-\x1f\"\\\uD800-\uDFFF]'


def json_characters(ebnf: str) -> str:
    """`ebnf` with xgrammar's string characters replaced by `JSON_CHARACTER`."""
    for characters in XGRAMMAR_CHARACTERS:
        ebnf = ebnf.replace(characters, JSON_CHARACTER)
    return ebnf


def format_key(response_format: dict) -> str:
    """The cache key of a `response_format`: its canonical JSON."""
    return json.dumps(response_format, sort_keys=True, separators=(",", ":"))


class GrammarCache:
    """Compiled grammars of one tokenizer, by `format_key`."""

    def __init__(self, tokenizer, vocab_size: int, eos_token_id: int) -> None:
        import xgrammar as xgr

        self.info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size,
                                                       stop_token_ids=[eos_token_id])
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=1)
        self.compiled: dict[str, object] = {}

    def get(self, response_format: dict):
        key = format_key(response_format)
        if key not in self.compiled:
            self.compiled[key] = self._compile(response_format)
        return self.compiled[key]

    def _compile(self, response_format: dict):
        import xgrammar as xgr

        kind = response_format.get("type")
        if kind == "json_object":
            grammar = xgr.Grammar.builtin_json_grammar()
        elif kind == "json_schema":
            spec = response_format.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, dict) else None
            if not isinstance(schema, dict):
                raise ResponseFormatError("response_format json_schema needs a 'schema' object")
            grammar = xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False,
                                                   strict_mode=bool(spec.get("strict", True)))
        else:
            raise ResponseFormatError(f"unsupported response_format type {kind!r} "
                                      "(json_schema or json_object)")
        return self.compiler.compile_grammar(xgr.Grammar.from_ebnf(json_characters(str(grammar))))


def grammar_processor(compiled, rows: int, prompt_length: int, eos_token_id: int):
    """A logits processor masking each of `rows` rows to what `compiled` allows next."""
    import torch
    import xgrammar as xgr
    from transformers import LogitsProcessor

    class GrammarMask(LogitsProcessor):
        def __init__(self) -> None:
            self.matchers = [xgr.GrammarMatcher(compiled) for _ in range(rows)]
            self.bitmask = xgr.allocate_token_bitmask(rows, compiled.tokenizer_info.vocab_size)

        def __call__(self, input_ids, scores):
            scores = scores.float()
            if input_ids.shape[1] > prompt_length:
                for matcher, token in zip(self.matchers, input_ids[:, -1].tolist(), strict=True):
                    if not matcher.is_terminated() and not matcher.accept_token(token):
                        raise TrainerError(f"grammar rejected token {token} it had allowed")
            for i, matcher in enumerate(self.matchers):
                if not matcher.is_terminated():
                    matcher.fill_next_token_bitmask(self.bitmask, i)
            xgr.apply_token_bitmask_inplace(scores, self.bitmask.to(scores.device))
            only_eos = torch.full_like(scores[0], -float("inf"))
            only_eos[eos_token_id] = 0.0
            for i, matcher in enumerate(self.matchers):
                if matcher.is_terminated():
                    scores[i] = only_eos
            return scores

    return GrammarMask()
