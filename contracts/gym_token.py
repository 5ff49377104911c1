"""Amounts of GYM, the GymToken (18 decimals): read from text into base units, shown back.

It lives beside the contracts because the decimals are GymToken's, and ``contracts`` depends
on nothing of ours, so the governance package (thresholds, slashes, vote weights) and the
inference node (stakes) share this one pair.

>>> parse_gym("12.5", "--amount") == 12_500_000_000_000_000_000
True
>>> format_gym(12_500_000_000_000_000_000), format_gym(2_000 * GYM, rounded=True)
('12.5 GYM', '2,000 GYM')
>>> [format_gym(units, rounded=True) for units in (0, 1, GYM // 2, 12_345 * GYM, 10**30)]
['0 GYM', '<0.0001 GYM', '0.5 GYM', '12,345 GYM', '1,000,000,000,000 GYM']
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

GYM = 10**18  # token base units per GYM (18 decimals)
ROUNDED_DIGITS = 4  # significant digits a rounded amount under 1,000 GYM keeps
ROUNDED_DECIMALS = 4  # decimals a rounded amount keeps at most: less reads <0.0001 GYM


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
    """Token base units as GYM, never in scientific notation.

    Exact (the default): every decimal the amount has, ``12.5 GYM``, ``0.000000000000000001
    GYM``, ``1000000 GYM``. ``rounded`` for tables and tallies, as people write amounts: from
    1,000 GYM up whole GYM with thousands separators (``12,345 GYM``, ``1,234,567 GYM``, at any
    size); below that four significant digits and at most four decimals (``999.5 GYM``,
    ``12.5 GYM``, ``0.1235 GYM``, ``0.0012 GYM``); a non-zero amount under 0.0001 GYM reads
    ``<0.0001 GYM``, never ``0 GYM``. Both round half up and work on integers, so they are
    exact at every size (a uint256 included). A negative amount reads with a minus sign.
    """
    sign, units = ("-" if amount < 0 else ""), abs(amount)
    if not rounded:
        whole, fraction = divmod(units, GYM)
        decimals = f"{fraction:018d}".rstrip("0")
        return f"{sign}{whole}{'.' + decimals if decimals else ''} GYM"
    if units == 0:
        return "0 GYM"
    if units < GYM // 10**ROUNDED_DECIMALS:
        return f"{sign}<0.{'0' * (ROUNDED_DECIMALS - 1)}1 GYM"
    if units >= 1_000 * GYM:
        return f"{sign}{(2 * units + GYM) // (2 * GYM):,} GYM"
    digits = len(str(units // GYM)) if units >= GYM else 0  # of the whole part: 0 to 3
    places = min(ROUNDED_DECIMALS, ROUNDED_DIGITS - digits)
    scaled = (2 * units * 10**places + GYM) // (2 * GYM)  # half up
    whole, fraction = divmod(scaled, 10**places)
    decimals = f"{fraction:0{places}d}".rstrip("0") if places else ""
    return f"{sign}{whole:,}{'.' + decimals if decimals else ''} GYM"


__all__ = ["GYM", "format_gym", "parse_gym"]
