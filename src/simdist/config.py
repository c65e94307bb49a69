"""YAML configuration loaded into typed dataclasses, with strict `--set key=value` overrides.

Every problem is a `ConfigError` with one line naming the bad key and the valid choices.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from simdist.errors import ConfigError
from simdist.paths import config_dir

T = TypeVar("T")


def read_yaml(path: Path) -> dict[str, Any]:
    """Read one YAML mapping; a missing file or a non-mapping is a ConfigError."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


def available(kind: str) -> list[str]:
    """Names of the YAML files under config/<kind>/ (tasks, presets/model, planner, ...)."""
    return sorted(p.stem for p in (config_dir() / kind).glob("*.yaml"))


def load_named(kind: str, name: str) -> dict[str, Any]:
    """Load config/<kind>/<name>.yaml, or fail naming the valid names."""
    path = config_dir() / kind / f"{name}.yaml"
    if not path.is_file():
        valid = ", ".join(available(kind)) or "none"
        label = kind.rstrip("s") if kind in ("tasks", "planner") else f"{kind} preset"
        raise ConfigError(f"unknown {label} '{name}' (valid: {valid})")
    return read_yaml(path)


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """Turn ['a.b=1', 'c=[1, 2]'] into {'a.b': 1, 'c': [1, 2]}; values are parsed as YAML."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"bad override '{item}': expected key=value")
        try:
            out[key.strip()] = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise ConfigError(f"bad override '{item}': value is not valid YAML") from None
    return out


def apply_overrides(
    data: dict[str, Any], overrides: Mapping[str, Any], *, open_keys: Iterable[str] = ()
) -> dict[str, Any]:
    """Return a deep copy of `data` with dotted-key overrides applied.

    A key must already exist, except under a section matching one of `open_keys` (fnmatch patterns of dotted
    paths, e.g. "profiles" or "profiles.*", whose entries are free and checked later by `build`); an existing
    value keeps its type family (number, string, list, mapping, bool).
    """
    result = json.loads(json.dumps(data))
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        node: Any = result
        for depth, part in enumerate(parts):
            prefix = ".".join(parts[:depth])
            last = depth == len(parts) - 1
            if not isinstance(node, dict):
                raise ConfigError(f"unknown key '{dotted}': '{prefix}' is not a section")
            if part not in node:
                if not any(fnmatch.fnmatchcase(prefix, pattern) for pattern in open_keys):
                    valid = ", ".join(sorted(node)) or "none"
                    where = f" in '{prefix}'" if prefix else ""
                    raise ConfigError(f"unknown key '{dotted}'{where} (valid: {valid})")
                node[part] = value if last else {}
            elif last:
                _check_same_kind(dotted, node[part], value)
                node[part] = value
            node = node[part]
    return result


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if value is None:
        return "null"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    return type(value).__name__


def _check_same_kind(key: str, old: Any, new: Any) -> None:
    if old is None or new is None:
        return
    if _kind(old) != _kind(new):
        raise ConfigError(f"wrong type for '{key}': expected {_kind(old)}, got {_kind(new)} ({new!r})")


def build(cls: type[T], data: Mapping[str, Any], where: str = "") -> T:
    """Build dataclass `cls` from a mapping, checking unknown keys, missing keys and types recursively."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"'{where or cls.__name__}' must be a mapping, got {_kind(data)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        key = f"{where}.{unknown[0]}" if where else unknown[0]
        raise ConfigError(f"unknown key '{key}' (valid: {', '.join(sorted(fields))})")
    kwargs: dict[str, Any] = {}
    for name, field in fields.items():
        key = f"{where}.{name}" if where else name
        if name in data:
            kwargs[name] = _coerce(hints[name], data[name], key)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ConfigError(f"missing key '{key}'")
    return cls(**kwargs)


def _coerce(hint: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"wrong type for '{key}'")
    if dataclasses.is_dataclass(hint):
        return build(hint, value, key)  # type: ignore[arg-type]
    if origin is list or origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"wrong type for '{key}': expected list, got {_kind(value)} ({value!r})")
        inner = args[0] if args else Any
        items = [_coerce(inner, v, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"wrong type for '{key}': expected mapping, got {_kind(value)}")
        vt = args[1] if len(args) > 1 else Any
        return {str(k): _coerce(vt, v, f"{key}.{k}") for k, v in value.items()}
    if hint is Any:
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"wrong type for '{key}': expected bool, got {_kind(value)} ({value!r})")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"wrong type for '{key}': expected number, got {_kind(value)} ({value!r})")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"wrong type for '{key}': expected integer, got {_kind(value)} ({value!r})")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"wrong type for '{key}': expected string, got {_kind(value)} ({value!r})")
        return value
    return value


def config_hash(data: Any) -> str:
    """Stable short hash of a config mapping or dataclass (for manifests and checkpoints)."""
    if dataclasses.is_dataclass(data):
        data = dataclasses.asdict(data)  # type: ignore[arg-type]
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
