"""The points of a sweep: ``--vary PATH=V1,V2,…`` or ``--vary PATH=START..STOP xFACTOR``, their Cartesian product."""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import Any

import yaml

from .paths import parse_path

_RANGE = re.compile(r"\s*([^.\s][^\s]*?)\s*\.\.\s*([^\s]+?)\s*[x×]\s*([^\s]+)\s*")
MAX_RANGE_VALUES = 10_000


@dataclass(frozen=True)
class Axis:
    """One varied field and its values, in the order given."""

    path: str
    values: tuple[Any, ...]


def _scalar(text: str) -> Any:
    """A value as YAML reads it (``1600`` int, ``1e3`` / ``2.5`` float, ``true`` bool, ``B200`` string)."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str) and re.fullmatch(r"[-+]?(\d+(\.\d*)?|\.\d+)[eE][-+]?\d+", value):
        return float(value)  # YAML 1.1 reads 1e3 as a string; instance files accept it as a number
    return value if isinstance(value, int | float | str | bool) or value is None else text


def _number(text: str, what: str) -> int | float:
    value = _scalar(text)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{what} {text!r} is not a number")
    return value


def geometric(start: int | float, stop: int | float, factor: int | float) -> list[int | float]:
    """``start, start·factor, …`` up to ``stop`` (included up to rounding); integers when start and factor are."""
    if start <= 0 or stop < start or factor <= 1:
        raise ValueError(f"range {start}..{stop}x{factor} needs 0 < START ≤ STOP and FACTOR > 1")
    count = math.floor(math.log(stop / start) / math.log(factor) + 1e-9) + 1
    if count > MAX_RANGE_VALUES:
        raise ValueError(f"range {start}..{stop}x{factor} has {count} values (at most {MAX_RANGE_VALUES})")
    exact = isinstance(start, int) and isinstance(factor, int)
    return [start * factor**i if exact else start * float(factor) ** i for i in range(count)]


def parse_axis(spec: str) -> Axis:
    """``PATH=V1,V2,…`` or ``PATH=START..STOPxFACTOR``; ValueError saying what is wrong."""
    path, sep, values_text = spec.partition("=")
    path = path.strip()
    if not sep or not values_text.strip():
        raise ValueError(f"{spec!r}: expected PATH=V1,V2,… or PATH=START..STOPxFACTOR")
    parse_path(path)
    match = _RANGE.fullmatch(values_text)
    if match:
        start, stop, factor = (_number(text, what) for text, what in zip(match.groups(), ("start", "stop", "factor"),
                                                                           strict=True))
        values: list[Any] = geometric(start, stop, factor)
    else:
        values = [_scalar(text.strip()) for text in values_text.split(",")]
        if any(text.strip() == "" for text in values_text.split(",")):
            raise ValueError(f"{spec!r}: empty value in the list")
    if len(set(map(repr, values))) != len(values):
        raise ValueError(f"{spec!r}: a value is repeated")
    return Axis(path, tuple(values))


def points(axes: list[Axis]) -> list[dict[str, Any]]:
    """The Cartesian product of ``axes`` (distinct paths), each point a ``{path: value}`` mapping (the first axis
    varies slowest)."""
    paths = [axis.path for axis in axes]
    return [dict(zip(paths, combo, strict=True)) for combo in itertools.product(*(axis.values for axis in axes))]
