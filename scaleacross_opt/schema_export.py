"""JSON Schema of the input and output files, generated from the pydantic models."""

from __future__ import annotations

from typing import Any

from .spec import Instance, ModelSpec, Plan

SCHEMAS = {"instance": Instance, "plan": Plan, "model": ModelSpec}


def _schedule_enums(schema: dict[str, Any]) -> None:
    """Pipeline schedule names are a registry (a schedule is one module), not a Python enum: list the
    registered names as the JSON Schema ``enum`` of ``Plan.schedule`` and ``SearchSpace.schedules``."""
    from .schedules import schedule_names

    names = schedule_names()
    definitions = schema.get("$defs", {})
    plan = definitions.get("Plan", schema if "schedule" in schema.get("properties", {}) else None)
    if plan is not None:
        plan["properties"]["schedule"]["enum"] = names
    search = definitions.get("SearchSpace")
    if search is not None:
        for option in search["properties"]["schedules"].get("anyOf", []):
            if option.get("type") == "array":
                option["items"]["enum"] = names


def json_schema(kind: str) -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of ``kind`` ∈ {instance, plan, model}."""
    schema = SCHEMAS[kind].model_json_schema()
    _schedule_enums(schema)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema
