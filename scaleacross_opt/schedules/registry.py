"""Registry of pipeline schedules keyed by name; importing ``scaleacross_opt.schedules`` fills it."""

from __future__ import annotations

from .base import PipelineSchedule

_SCHEDULES: dict[str, PipelineSchedule] = {}


def register(cls: type[PipelineSchedule]) -> type[PipelineSchedule]:
    """Class decorator: make a schedule available under ``cls.name``."""
    if cls.name in _SCHEDULES:
        raise ValueError(f"schedule {cls.name!r} registered twice")
    _SCHEDULES[cls.name] = cls()
    return cls


def get_schedule(name: str) -> PipelineSchedule:
    """The schedule called ``name``; KeyError lists the known names."""
    try:
        return _SCHEDULES[name]
    except KeyError:
        raise KeyError(f"unknown schedule {name!r}; known: {', '.join(schedule_names())}") from None


def schedule_names() -> list[str]:
    """Registered schedule names, sorted."""
    return sorted(_SCHEDULES)
