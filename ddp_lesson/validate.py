"""Argument checks shared by the public helpers: one clear message per mistake."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def whole_number(name: str, value: object, minimum: int = 0) -> int:
    """Return ``value`` if it is an int of at least ``minimum``; otherwise explain.

    Raises:
        TypeError: not a whole number (``bool`` and ``float`` included).
        ValueError: below ``minimum``.

    >>> whole_number("epoch", 3)
    3
    >>> whole_number("size", 0, minimum=1)
    Traceback (most recent call last):
    ...
    ValueError: size must be a whole number >= 1, got 0
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{name} must be a whole number >= {minimum}, got {value!r} ({type(value).__name__})"
        )
    if value < minimum:
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value}")
    return value


def flag(name: str, value: object) -> bool:
    """Return ``value`` if it is ``True`` or ``False``; otherwise explain."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def rows_of_mappings(name: str, rows: object) -> list[Mapping]:
    """Return ``rows`` as a list if every item is a mapping (a dict); otherwise explain."""
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, (Sequence, list, tuple)):
        try:
            rows = list(rows)  # any other iterable of dicts is fine
        except TypeError:
            raise TypeError(f"{name} must be a list of dicts, got {type(rows).__name__}") from None
    rows = list(rows)
    for row in rows:
        if not isinstance(row, Mapping):
            raise TypeError(f"{name} must be a list of dicts, but one item is {row!r}")
    return rows


def seconds(name: str, value: object) -> float:
    """Return ``value`` if it is a finite number of seconds above 0; otherwise explain.

    >>> seconds("timeout_s", 5)
    5
    >>> seconds("timeout_s", float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: timeout_s must be a positive, finite number of seconds, got nan
    """
    import math

    if isinstance(value, bool) or not isinstance(value, int | float):
        kind = type(value).__name__
        raise TypeError(f"{name} must be a number of seconds, got {value!r} ({kind})")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return value


def between(
    name: str, value: object, low: float, high: float, *, unit: str = "", whole: bool = False,
    fix: str = "",
) -> float:
    """Return ``value`` if it is a number from ``low`` to ``high``, both included; else explain.

    Args:
        name: what the value is called where it was given (``"--timeout"``, ``"timeout_s"``).
        value: the number given.
        low: the smallest value accepted.
        high: the largest value accepted.
        unit: what the number counts, said after the range (``"seconds"``).
        whole: only whole numbers are accepted (``int``, not ``bool``).
        fix: how to give a good value, said last (``"pass e.g. --timeout 60"``).

    Raises:
        TypeError: not a number (a whole one, with ``whole``).
        ValueError: outside the range; ``nan`` and the infinities included.

    >>> between("--timeout", 120, 1, 86400, unit="seconds")
    120
    >>> between("--timeout", 1e-300, 1, 86400, unit="seconds", fix="pass e.g. --timeout 60")
    Traceback (most recent call last):
    ...
    ValueError: --timeout must be between 1 and 86400 seconds, got 1e-300: pass e.g. --timeout 60
    """
    import math

    kind = "a whole number" if whole else "a number"
    span = f"between {low:g} and {high:g}" + (f" {unit}" if unit else "")
    tail = f": {fix}" if fix else ""
    wrong = isinstance(value, bool) or not isinstance(value, int if whole else int | float)
    if wrong:
        raise TypeError(f"{name} must be {kind} {span}, got {value!r}{tail}")
    if not (math.isfinite(value) and low <= value <= high):
        said = f"{value:g}" if isinstance(value, float) else f"{value}"
        raise ValueError(f"{name} must be {span}, got {said}{tail}")
    return value
