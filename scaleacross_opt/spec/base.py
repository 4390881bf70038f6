"""Base class of every schema: strict (unknown keys are errors), immutable, documented."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, ValidatorFunctionWrapHandler, model_validator
from pydantic_core import PydanticCustomError

from .bounds import WHY

# pydantic's range-error types -> (context key, how the value relates to the bound)
_RANGE_ERRORS = {
    "less_than_equal": ("le", "exceeds the maximum"),
    "less_than": ("lt", "must be less than"),
    "greater_than_equal": ("ge", "is below the minimum"),
    "greater_than": ("gt", "must be greater than"),
}


def _number(value: Any) -> str:
    """``1024`` for 1024.0 and 1e9, otherwise the value as written in Python."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


def _range_message(err: Any) -> str | None:
    """``99999 exceeds the maximum 1048576 (why)`` for a pydantic range error, else None."""
    kind = _RANGE_ERRORS.get(err["type"])
    if kind is None or not err["msg"].startswith("Input should be") or "input" not in err:
        return None
    key, relation = kind
    bound = (err.get("ctx") or {}).get(key)
    if bound is None:
        return None
    message = f"{_number(err['input'])} {relation} {_number(bound)}"
    field = next((part for part in reversed(err["loc"]) if isinstance(part, str)), "")
    if key in ("le", "lt") and field in WHY:
        message += f" ({WHY[field]})"
    return message


class StrictModel(BaseModel):
    """A pydantic model that forbids unknown fields and cannot be mutated after validation."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False, allow_inf_nan=False)

    @model_validator(mode="wrap")
    @classmethod
    def _explain_range_errors(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """Range errors say the offending value, the bound and why it is there (see ``bounds``)."""
        try:
            return handler(data)
        except ValidationError as error:
            errors = error.errors(include_url=False)
            rewritten = [_range_message(err) for err in errors]
            if not any(rewritten):
                raise
            line_errors: list[Any] = []
            for err, message in zip(errors, rewritten, strict=True):
                if message is not None:
                    err = {"type": PydanticCustomError(err["type"], message),
                           "loc": err["loc"], "input": err["input"]}
                line_errors.append(err)
            try:
                new_error = ValidationError.from_exception_data(error.title, line_errors)
            except Exception:  # an error type that cannot be rebuilt: keep pydantic's own messages
                raise error from None
            raise new_error from None
