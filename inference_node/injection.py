"""Injecting the experience library into prompts, and reusing its KV cache across requests.

Rendering. The active experiences are shown exactly as the trainer shows them (`[G0]. text` lines,
`trainer.tfgrpo_prompts.format_library`), under a header that names the library::

    Experiences from earlier practice; apply those that fit this problem:
    [G0]. Check units before adding.
    [G1]. Re-read the question.

For chat requests the block opens the system message; a caller's own system (or developer)
message follows it after a blank line. For `/v1/completions` the block and a blank line precede
the prompt. An empty library injects nothing.

Prefix reuse. Because the block comes first, every request under one library shares the same
leading tokens: the chat template's opening and the block (`LibraryPrefix.token_ids`). The rest
of the prompt is tokenized on its own and appended, so the model sees `prefix + rest` whether or
not the cache is used, and greedy output is the same either way. `LibraryInjector` builds one
`LibraryPrefix` per (library version, prompt kind) and drops it when the version changes;
`PrefixKVCache` keys its past_key_values on that very object (weakly), so a cache is computed once
per library version, stays alive while an in-flight request still holds the old prefix, and is
freed with it. Requests never share a mutable cache: each batch gets a deep copy (copy-on-use),
repeated along the batch axis, which the model then extends with the request's own tokens.

Differences from vLLM's automatic prefix caching: only the library prefix is cached (not arbitrary
shared prefixes), and whole, not in blocks, which is all a node with one library needs.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from inference_node.library import LibrarySnapshot

LIBRARY_INTRO = "Experiences from earlier practice; apply those that fit this problem:"
_SENTINEL = "\x00gym-library-end\x00"


def format_library(snapshot: LibrarySnapshot) -> str:
    """The `[Gi]. text` lines, numbered in prompt order like the trainer's."""
    return "\n".join(f"[G{i}]. {text}" for i, (_, text) in enumerate(snapshot.experiences))


def library_block(snapshot: LibrarySnapshot) -> str:
    return f"{LIBRARY_INTRO}\n{format_library(snapshot)}" if snapshot.experiences else ""


@dataclass(eq=False)  # hashed by identity: the KV cache is keyed on this very object
class LibraryPrefix:
    """The shared leading tokens of every prompt of one kind under one library version."""

    library_version: str
    kind: str  # "chat" or "completion"
    text: str
    token_ids: tuple[int, ...]


@dataclass(frozen=True)
class Prompt:
    """What an engine runs: an optional shared prefix, then this request's own tokens."""

    prefix: LibraryPrefix | None
    token_ids: tuple[int, ...]

    @property
    def all_token_ids(self) -> list[int]:
        return [*(self.prefix.token_ids if self.prefix else ()), *self.token_ids]

    def __len__(self) -> int:
        return len(self.prefix.token_ids if self.prefix else ()) + len(self.token_ids)


@dataclass(frozen=True)
class InjectedPrompt:
    prompt: Prompt
    snapshot: LibrarySnapshot  # the library this request was prompted with (for receipts)


class LibraryInjector:
    """Turns chat messages or a completion prompt into a `Prompt` under a library snapshot."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._version: str | None = None
        self._prefixes: dict[str, LibraryPrefix | None] = {}

    def _encode(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _prefix(self, snapshot: LibrarySnapshot, kind: str) -> LibraryPrefix | None:
        if snapshot.version != self._version:  # new library: drop the old prefixes (and caches)
            self._version, self._prefixes = snapshot.version, {}
        if kind not in self._prefixes:
            self._prefixes[kind] = self._build_prefix(snapshot, kind)
        return self._prefixes[kind]

    def _build_prefix(self, snapshot: LibrarySnapshot, kind: str) -> LibraryPrefix | None:
        block = library_block(snapshot)
        if not block:
            return None
        if kind == "chat":
            text = self._render([{"role": "system", "content": block + _SENTINEL}],
                                generation_prompt=False)
            if _SENTINEL not in text:
                return None
            text = text[:text.index(_SENTINEL)]
        else:
            text = block + "\n\n"
        return LibraryPrefix(snapshot.version, kind, text, self._encode(text))

    def _render(self, messages: list[dict], generation_prompt: bool,
                tools: list[dict] | None = None) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, tools=tools,
                                                  add_generation_prompt=generation_prompt)

    def chat(self, messages: list[dict], snapshot: LibrarySnapshot,
             tools: list[dict] | None = None) -> InjectedPrompt:
        """`messages` as `{"role", "content": str}` (and tool fields, for a template that
        knows tools: `inference_node.tools.chat_messages`); the library opens the system
        message; `tools` go to the chat template."""
        block = library_block(snapshot)
        if block:
            if messages and messages[0]["role"] in ("system", "developer"):
                system = f"{block}\n\n{messages[0]['content']}"
                messages = messages[1:]
            else:
                system = block
            messages = [{"role": "system", "content": system}, *messages]
        text = self._render(messages, generation_prompt=True, tools=tools)
        prefix = self._prefix(snapshot, "chat")
        if prefix is None or not text.startswith(prefix.text):
            # A template that does not render the system block first: no reuse, still correct.
            return InjectedPrompt(Prompt(None, self._encode(text)), snapshot)
        return InjectedPrompt(Prompt(prefix, self._encode(text[len(prefix.text):])), snapshot)

    def completion(self, prompt: str, snapshot: LibrarySnapshot) -> InjectedPrompt:
        prefix = self._prefix(snapshot, "completion")
        return InjectedPrompt(Prompt(prefix, self._encode(prompt)), snapshot)


class PrefixKVCache:
    """past_key_values of each live `LibraryPrefix`, computed on first use and copied per use.

    `compute(token_ids)` runs the model over the prefix and returns its cache (batch size 1).
    Not thread-safe: the engine's single worker thread is its only user.
    """

    def __init__(self, compute: Callable[[tuple[int, ...]], Any]) -> None:
        self._compute = compute
        self._entries: weakref.WeakKeyDictionary[LibraryPrefix, Any] = weakref.WeakKeyDictionary()
        self.computations = 0  # how many prefixes were run through the model (for tests, metrics)

    def copy_for(self, prefix: LibraryPrefix, batch_size: int) -> Any:
        """A private copy of the prefix's cache, repeated `batch_size` times along the batch."""
        cache = self._entries.get(prefix)
        if cache is None:
            cache = self._entries[prefix] = self._compute(prefix.token_ids)
            self.computations += 1
        private = copy.deepcopy(cache)
        if batch_size > 1:
            private.batch_repeat_interleave(batch_size)
        return private

    def __len__(self) -> int:
        return len(self._entries)
