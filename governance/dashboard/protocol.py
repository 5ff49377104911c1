"""Request bodies of the dashboard's JSON API, validated before anything touches the chain."""

from __future__ import annotations

from typing import Annotated

from eth_utils import is_hex, is_hex_address, to_checksum_address
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from governance.client import VoteType


def parse_address(value: str) -> str:
    if not is_hex_address(value):
        raise ValueError(f"{value!r} is not an address (0x and 40 hex digits)")
    return to_checksum_address(value)


def parse_support(value: str) -> str:
    if value.strip().upper() not in VoteType.__members__:
        raise ValueError(f"a vote is for, against or abstain, not {value!r}")
    return value.strip().lower()


def parse_signature(value: str) -> str:
    if not (value.startswith("0x") and is_hex(value) and len(value) == 132):
        raise ValueError("a signature is 65 bytes as 0x-prefixed hex")
    return value


Address = Annotated[str, AfterValidator(parse_address)]
Support = Annotated[str, AfterValidator(parse_support)]
MAX_REASON = 2000  # characters of a vote's reason (it is stored on chain, in the event)
Reason = Annotated[str, Field(max_length=MAX_REASON)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RelayRequest(_Body):
    """A ballot signed by ``voter`` (``eth_signTypedData_v4`` over ``/ballot``'s typed data)."""

    voter: Address
    support: Support
    reason: Reason = ""
    signature: Annotated[str, AfterValidator(parse_signature)]


class SenderRequest(_Body):
    """``from``: the connected account that will send the transaction."""

    sender: Address = Field(alias="from")


class DelegateRequest(SenderRequest):
    to: Address | None = None  # default: the sender itself


class ProposeRequest(SenderRequest):
    log: Annotated[str, Field(min_length=1, max_length=200)]
    indices: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1, max_length=256)]
    description: Reason = ""


class AdvanceRequest(_Body):
    seconds: Annotated[int, Field(ge=0, le=10 * 365 * 86400)]
    blocks: Annotated[int, Field(ge=1, le=1000)] = 1
