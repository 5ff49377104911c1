"""Prometheus metrics of one node, in a registry of its own (so several apps can share a process).

Names follow Prometheus conventions and vLLM's where one exists (`time_to_first_token_seconds`,
`prompt_tokens_total`, `generation_tokens_total`), prefixed `gym_node_`.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
STAGE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                 0.5, 1, 2.5)
# What the node does per request beside the engine's decoding (`gym_node_stage_seconds`):
# `prepare`, all of what precedes the engine, checks included, and its parts `library` (the
# X-Gym-Library choice), `tokenize` (library injection and chat template, tokenized) and
# `normalize` (the normalized request and its key); then per answer, on a thread off the
# decoding path, `commitment` (TOPLOC over the decode states), `digests` (the receipt built),
# `signature` (its EIP-712 hash, signed), `receipt_log` (handed to the write-ahead file),
# `bundle` (kept for verifiers), and `receipt`, all of these and the wait for a thread.
STAGES = ("prepare", "library", "tokenize", "normalize", "commitment", "digests", "signature",
          "receipt_log", "bundle", "receipt")


class NodeMetrics:
    def __init__(self, queue_depth: Callable[[], int], library_size: Callable[[], int],
                 prefix_computations: Callable[[], int], running: Callable[[], int]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        # `route` is the route's template (`/v1/receipts/{cid}/proof`), or `(unmatched)`: a
        # label per raw path would grow without bound. Status 499: the client went away.
        self.requests = Counter("gym_node_requests_total", "HTTP requests by route and status",
                                ["route", "status"], registry=r)
        self.prompt_tokens = Counter("gym_node_prompt_tokens_total",
                                     "prompt tokens processed (library prefix included)",
                                     registry=r)
        self.generation_tokens = Counter("gym_node_generation_tokens_total",
                                         "tokens generated", registry=r)
        self.latency = Histogram("gym_node_request_latency_seconds",
                                 "end-to-end latency of completion requests", ["route"],
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram("gym_node_time_to_first_token_seconds",
                              "time from request to its first generated token", ["route"],
                              buckets=LATENCY_BUCKETS, registry=r)
        self.stages = Histogram("gym_node_stage_seconds",
                                "seconds a request spends in each of the node's own stages "
                                "beside the engine's decoding", ["stage"],
                                buckets=STAGE_BUCKETS, registry=r)
        for stage in STAGES:
            self.stages.labels(stage)  # each listed from the start, at zero
        Gauge("gym_node_queue_depth", "requests waiting for the engine",
              registry=r).set_function(queue_depth)
        Gauge("gym_node_requests_running", "requests the engine is decoding",
              registry=r).set_function(running)
        Gauge("gym_node_library_size", "experiences in the active library",
              registry=r).set_function(library_size)
        Gauge("gym_node_prefix_cache_computations", "library prefixes run through the model",
              registry=r).set_function(prefix_computations)

    def render(self) -> bytes:
        return generate_latest(self.registry)
