"""Loading instance, plan and model files (YAML or JSON) into validated spec objects.

Every problem becomes an ``InputIssue`` naming the file, the field path and the reason; the
loader collects all of them (schema errors first, semantic checks when the schema is valid).
"""

from __future__ import annotations

import collections.abc
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .catalog.gpus import GPUS
from .errors import InputError, InputIssue
from .spec import Instance, ModelSpec, Plan

_PACKAGE_DIR = Path(__file__).resolve().parent
# The shipped model files: inside the installed package (the wheel maps the top-level models/ to
# scaleacross_opt/models/, see pyproject.toml); in an editable install or a plain checkout that folder
# does not exist and the top-level models/ beside the package is used.
MODELS_DIR = (_PACKAGE_DIR / "models" if (_PACKAGE_DIR / "models").is_dir()
              else _PACKAGE_DIR.parent / "models")
# Union-branch tags pydantic inserts into error locations; they are not field names.
_UNION_TAGS = {"str", "int", "float", "GpuSpec", "ModelSpec"}

_MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_MAX_MODEL_NAME = 200  # characters; a file name (with .yaml) must stay under the 255-byte limit

SpecT = TypeVar("SpecT", bound=BaseModel)


class _UniqueKeyLoader(yaml.SafeLoader):
    """Safe YAML loader that rejects a key repeated in one mapping (YAML would keep the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, collections.abc.Hashable):
                raise yaml.constructor.ConstructorError(None, None, "found unhashable key", key_node.start_mark)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 (PyYAML) reads 1e9 as a string (it wants 1.0e+9); accept exponents without a dot as floats,
# as YAML 1.2 and JSON do.
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


class _DuplicateKeyError(ValueError):
    """A JSON object repeats a key."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """JSON object from ``pairs``, rejecting a repeated key (json would keep the last silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(f"duplicate key {key!r}")
        out[key] = value
    return out


def read_document(path: Path) -> Any:
    """Parse a YAML or JSON file (JSON is YAML, but JSON files get JSON's clearer messages); an empty one (only
    whitespace, comments or a null) is an InputError saying so."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise InputError([InputIssue(str(path), "", f"cannot read file: {err.strerror or err}")]) from None
    except UnicodeDecodeError as err:
        raise InputError([InputIssue(str(path), "", f"cannot read file: not UTF-8 text ({err.reason} at "
                                                    f"byte {err.start})")]) from None
    try:
        if not text.strip():
            data = None
        elif path.suffix.lower() == ".json":
            data = json.loads(text, object_pairs_hook=_unique_keys)
        else:
            data = yaml.load(text, Loader=_UniqueKeyLoader)
    except _DuplicateKeyError as err:
        raise InputError([InputIssue(str(path), "", f"not valid JSON: {err}")]) from None
    except json.JSONDecodeError as err:
        raise InputError([InputIssue(str(path), "", f"not valid JSON: {err.msg} (line {err.lineno}, "
                                                    f"column {err.colno})")]) from None
    except (ValueError, TypeError) as err:  # a value an explicit tag (!!int, !!timestamp, …) cannot construct
        raise InputError([InputIssue(str(path), "", f"not valid YAML: {err}")]) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise InputError([InputIssue(str(path), "", f"not valid YAML: {problem}{where}")]) from None
    if data is None:
        raise InputError([InputIssue(str(path), "", "the file is empty: expected a JSON/YAML object (a mapping of "
                                                    "fields)")])
    return data


def field_path(loc: tuple[int | str, ...]) -> str:
    """Render a pydantic location as ``cluster.buildings[0].num_gpus``, dropping union-branch tags."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part not in _UNION_TAGS and not part.startswith("function-"):
            out += f".{part}" if out else part
    return out


def validation_issues(file: str, error: ValidationError) -> list[InputIssue]:
    """One issue per distinct field, skipping the noise of union branches the input did not take."""
    issues: dict[str, InputIssue] = {}
    for err in error.errors(include_url=False):
        path = field_path(err["loc"])
        took_other_branch = "str" in err["loc"] and err["type"] == "string_type"
        if took_other_branch and any(p.startswith(path) for p in issues):
            continue
        message = err["msg"].removeprefix("Value error, ")  # a validator's own message says what is wrong
        issues.setdefault(path, InputIssue(file, path, message))
    return [
        issue for path, issue in issues.items()
        if not (issue.message.startswith("Input should be a valid string") and any(
            other != path and other.startswith(path) for other in issues))
    ]


def parse_spec(cls: type[SpecT], data: Any, file: str) -> SpecT:
    """Validate ``data`` (parsed YAML/JSON) as ``cls`` or raise InputError naming ``file``.

    Strict JSON-mode validation: no coercion of "8", 8.0 or true into an integer, nor 1 or "on" into
    a Boolean (a file says what it means); enum values are read from their strings."""
    if not isinstance(data, dict):
        raise InputError([InputIssue(file, "", f"expected a mapping at the top level, got {type(data).__name__}")])
    try:
        return cls.model_validate_json(json.dumps(data, default=str), strict=True)
    except ValidationError as err:
        raise InputError(validation_issues(file, err)) from None


def _model_dirs(base_dir: Path) -> list[Path]:
    """Where a model named in a file is looked up: models/ beside the file, beside its folder, the shipped ones."""
    return [base_dir / "models", base_dir.parent / "models", MODELS_DIR]


def known_models(base_dir: Path = MODELS_DIR) -> list[str]:
    """Names of the model files a file in ``base_dir`` can refer to."""
    return sorted({path.stem for folder in _model_dirs(base_dir) if folder.is_dir()
                   for path in folder.glob("*.yaml")})


def resolve_references(data: Any, file: str, base_dir: Path) -> tuple[Any, list[InputIssue]]:
    """Replace a job's model name by the model file's content and GPU names by catalog specs."""
    issues: list[InputIssue] = []
    if not isinstance(data, dict):
        return data, issues
    job = data.get("job")
    if isinstance(job, dict) and "model" in job and not isinstance(job["model"], str | dict):
        issues.append(InputIssue(file, "job.model", f"expected a model name or an inline model, got "
                                                    f"{type(job['model']).__name__} {job['model']!r}"))
    elif isinstance(job, dict) and isinstance(job.get("model"), str):
        name = job["model"]
        valid = _MODEL_NAME.fullmatch(name) is not None and len(name) <= _MAX_MODEL_NAME
        found = None if not valid else next(
            (p for p in (d / f"{name}.yaml" for d in _model_dirs(base_dir)) if p.is_file()), None)
        if not valid:
            issues.append(InputIssue(file, "job.model", f"model name {name[:80]!r} must be a file name in models/ "
                                                        f"(letters, digits, '.', '-', '_'; no path; at most "
                                                        f"{_MAX_MODEL_NAME} characters)"))
        elif found is None:
            issues.append(InputIssue(file, "job.model", f"unknown model {name!r}: no {name}.yaml in models/; "
                                                        f"known: {', '.join(known_models(base_dir))}"))
        else:
            model = load_model(found)
            job["model"] = model.model_dump(mode="json")
    cluster = data.get("cluster")
    buildings = cluster.get("buildings") if isinstance(cluster, dict) else None
    if isinstance(buildings, list):
        for i, building in enumerate(buildings):
            if isinstance(building, dict) and isinstance(building.get("gpu"), str):
                gpu = GPUS.get(building["gpu"])
                if gpu is None:
                    issues.append(InputIssue(
                        file, f"cluster.buildings[{i}].gpu",
                        f"unknown GPU {building['gpu']!r}; known: {', '.join(sorted(GPUS))}"))
                else:
                    building["gpu"] = gpu.model_dump(mode="json")
    return data, issues


def load_model(path: str | Path) -> ModelSpec:
    """Load and check a model file."""
    path = Path(path)
    model = parse_spec(ModelSpec, read_document(path), str(path))
    from .validation.instance_checks import check_model

    issues = [InputIssue(str(path), field, msg) for field, msg in check_model(model, prefix="")]
    if issues:
        raise InputError(issues)
    return model


def load_instance(path: str | Path) -> Instance:
    """Load an instance file, resolve model/GPU names, and run the semantic checks."""
    path = Path(path)
    data, issues = resolve_references(read_document(path), str(path), path.parent)
    if issues:
        raise InputError(issues)
    return check_loaded_instance(parse_spec(Instance, data, str(path)), str(path))


def check_loaded_instance(instance: Instance, file: str) -> Instance:
    """Run the semantic checks on an already-parsed instance; raise InputError listing all problems."""
    from .validation.instance_checks import check_instance

    issues = [InputIssue(file, field, msg) for field, msg in check_instance(instance)]
    if issues:
        raise InputError(issues)
    return instance


def _with_network_defaults(data: Any) -> Any:
    """A plan document whose partial ``network`` (a traffic class, or some of a class's settings) is completed
    with the catalog defaults (``catalog.network.DEFAULT_NETWORK``); anything else is left to validation."""
    if not isinstance(data, dict) or not isinstance(data.get("network"), dict):
        return data
    from .catalog.network import DEFAULT_NETWORK

    defaults = DEFAULT_NETWORK.model_dump(mode="json")
    network = dict(data["network"])
    for name, settings in defaults.items():
        given = network.get(name, {})
        if isinstance(given, dict):
            network[name] = {**settings, **given}
    return {**data, "network": network}


def load_plan(path: str | Path, instance: Instance | None = None) -> Plan:
    """Load a plan file (JSON or YAML; a `solve --json` output's "plan" key is accepted too).

    With ``instance``, defaults are filled and the plan is checked against it.
    """
    path = Path(path)
    data = read_document(path)
    if isinstance(data, dict) and "plan" in data and isinstance(data["plan"], dict):
        data = data["plan"]
    plan = parse_spec(Plan, _with_network_defaults(data), str(path))
    if instance is None:
        return plan
    from .plan_defaults import fill_defaults
    from .validation.plan_checks import check_plan

    problems = check_plan(plan, instance)
    if not problems:
        try:
            plan = fill_defaults(instance, plan)
        except ValueError as err:
            raise InputError([InputIssue(str(path), "placement", str(err))]) from None
        problems = check_plan(plan, instance)
    if problems:
        raise InputError([InputIssue(str(path), field, msg) for field, msg in problems])
    return plan


def _new_file_mode(path: Path) -> int:
    """The replaced file's permission bits, or 0666 less the umask for a new file."""
    try:
        return path.stat().st_mode & 0o777 | 0o200  # keep it writable by its owner
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory, renamed when complete;
    on failure (OSError re-raised) neither a partial ``path`` nor the temporary file remains."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        tmp.chmod(_new_file_mode(path))  # mkstemp creates 0600; give the mode a plain open() would
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
