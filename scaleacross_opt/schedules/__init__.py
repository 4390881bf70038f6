"""Pipeline schedules, one module each; importing this package registers all of them."""

from . import registry
from .base import Op, OpKind, PipelineSchedule
from .registry import get_schedule, register, schedule_names

__all__ = ["Op", "OpKind", "PipelineSchedule", "get_schedule", "register", "registry", "schedule_names"]
