"""Pipeline schedules, one module each; importing this package registers all of them."""

from . import crosspipe, dualpipe, gpipe, interleaved, one_f_one_b, registry, zb_h1, zb_v
from .base import Op, OpKind, PipelineSchedule
from .registry import get_schedule, register, schedule_names

__all__ = [
    "Op", "OpKind", "PipelineSchedule", "crosspipe", "dualpipe", "get_schedule", "gpipe", "interleaved",
    "one_f_one_b", "register", "registry", "schedule_names", "zb_h1", "zb_v",
]
