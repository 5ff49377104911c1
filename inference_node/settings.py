"""Settings of one inference node (environment variables prefixed `GYM_NODE_`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class NodeSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GYM_NODE_", extra="ignore")

    served_model_name: str | None = Field(
        default=None, description="model id in /v1/models and responses; default: the engine's")
    max_queue: int = Field(default=64, ge=1, description="waiting requests before 429")
    default_max_tokens: int = Field(default=256, ge=1, description="when a request sets none")
    host: str = "127.0.0.1"
    port: int = 8000
    registry: str | None = Field(
        default=None, description="NodeRegistry address (GYM_NODE_REGISTRY); default: the "
        "deployment's")
