"""Amounts of GYM, the GymToken (18 decimals): read from text into base units, shown back.

It lives beside the contracts because the decimals are GymToken's, and ``contracts`` depends
on nothing of ours, so the governance package (thresholds, slashes, vote weights) and the
inference node (stakes) share this one pair.

>>> parse_gym("12.5", "--amount") == 12_500_000_000_000_000_000
True
>>> format_gym(12_500_000_000_000_000_000), format_gym(2_000 * GYM, rounded=True)
('12.5 GYM', '2,000 GYM')
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

GYM = 10**18  # token base units per GYM (18 decimals)


def parse_gym(text: str | int, option: str, error: type[Exception] = ValueError) -> int:
    """``text`` GYM (a decimal such as ``12.5``) in token base units; ``option`` names it in the
    message of ``error``, which the caller picks from its own package's errors."""
    text = str(text)
    try:
        amount = Decimal(text.strip().replace("_", ""))
    except InvalidOperation:
        raise error(f"{option} is an amount of GYM such as 50 or 12.5, not {text!r}") from None
    if not amount.is_finite() or amount < 0:
        raise error(f"{option} must be a non-negative amount of GYM, not {text!r}")
    units = amount * GYM
    if units != units.to_integral_value():
        raise error(f"{option} {text} has more than 18 decimals, GYM's precision")
    return int(units)


def format_gym(amount: int, *, rounded: bool = False) -> str:
    """Token base units as exact GYM, ``12.5 GYM``; ``rounded`` for tables and tallies: four
    significant digits with thousands separators, ``2,000 GYM``."""
    if rounded:
        return f"{amount / GYM:,.4g} GYM"
    text = format(Decimal(amount) / GYM, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"{text} GYM"


__all__ = ["GYM", "format_gym", "parse_gym"]
