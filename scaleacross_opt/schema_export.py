"""JSON Schema of the input and output files, generated from the pydantic models."""

from __future__ import annotations

from typing import Any

from .spec import Instance, ModelSpec, Plan

SCHEMAS = {"instance": Instance, "plan": Plan, "model": ModelSpec}


def json_schema(kind: str) -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of ``kind`` ∈ {instance, plan, model}."""
    schema = SCHEMAS[kind].model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema
