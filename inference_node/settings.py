"""Settings of one inference node (environment variables prefixed `GYM_NODE_`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from inference_node.defaults import DEFAULT_HOST, DEFAULT_MAX_QUEUE, DEFAULT_PORT

__all__ = ["DEFAULT_HOST", "DEFAULT_MAX_QUEUE", "DEFAULT_PORT", "NodeSettings"]


class NodeSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GYM_NODE_", extra="ignore")

    served_model_name: str | None = Field(
        default=None, description="model id in /v1/models and responses; default: the engine's")
    max_queue: int = Field(default=DEFAULT_MAX_QUEUE, ge=1, description="waiting requests before 429")
    default_max_tokens: int = Field(default=256, ge=1, description="when a request sets none")
    max_body_bytes: int = Field(
        default=4 * 1024 * 1024, ge=1024, description="request bodies above this are refused "
        "with 413 before they are read in full (GYM_NODE_MAX_BODY_BYTES)")
    max_json_depth: int = Field(
        default=32, ge=4, description="JSON nesting beyond this is refused with 400 before the "
        "decoder runs (an OpenAI request nests 5 levels; JSON schemas in tools a few more)")
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    registry: str | None = Field(
        default=None, description="NodeRegistry address (GYM_NODE_REGISTRY); default: the "
        "deployment's")
