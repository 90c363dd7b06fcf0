"""Config typing: each field's docstring, and values checked against its annotation.

Generic over any dataclass (``orin_rl.config`` holds the sections themselves).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml

from orin_rl.errors import OrinError


class ConfigError(OrinError, ValueError):
    """A configuration value or key is invalid; the message names the key."""


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Map each field of dataclass ``cls`` to the docstring written under it."""
    docs: dict[str, str] = {}
    for base in cls.__mro__[1:]:  # inherited fields keep the docs of the class declaring them
        if dataclasses.is_dataclass(base):
            docs.update(field_docs(base))
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    for prev, node in itertools.pairwise(body):
        if (
            isinstance(prev, ast.AnnAssign)
            and isinstance(prev.target, ast.Name)
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            docs[prev.target.id] = inspect.cleandoc(node.value.value)
    return docs


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce(key: str, value: Any, tp: Any) -> Any:
    """Check ``value`` against the annotation ``tp``; return it (ints widen to float)."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        choices = typing.get_args(tp)
        if isinstance(value, bool):  # YAML 1.1 reads off/on/no/yes as booleans
            spelled = ("on", "true", "yes") if value else ("off", "false", "no")
            value = next((c for c in spelled if c in choices), value)
        if value not in choices:
            choices = ", ".join(map(str, typing.get_args(tp)))
            raise ConfigError(f"{key}: {value!r} is not one of {choices}")
        return value
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if arg is type(None):
                if value is None:
                    return None
                continue
            try:
                return coerce(key, value, arg)
            except ConfigError:
                pass
        raise ConfigError(f"{key}: {value!r} does not fit {_type_name(tp)}")
    if tp is Any:
        return value
    if origin is dict:
        key_tp, value_tp = typing.get_args(tp)
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__} {value!r}")
        return {
            coerce(f"{key} key", k, key_tp): coerce(f"{key}.{k}", v, value_tp)
            for k, v in value.items()
        }
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {type(value).__name__} {value!r}")
        return [coerce(f"{key}[{i}]", v, item_tp) for i, v in enumerate(value)]
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads 3e-4 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {type(value).__name__} {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {type(value).__name__} {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true/false, got {type(value).__name__} {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {type(value).__name__} {value!r}")
        return value
    raise ConfigError(f"{key}: unsupported annotation {tp!r}")  # pragma: no cover


def comment_lines(doc: str, indent: str, width: int) -> list[str]:
    """``doc`` as ``# `` lines at ``indent``, wrapped to ``width`` columns."""
    text = " ".join(doc.split())
    wrapped = textwrap.wrap(
        text, width - len(indent) - 2, break_long_words=False, break_on_hyphens=False
    )
    return [f"{indent}# {line}" for line in wrapped]


def check_wrapper(key: str, entry: str | dict[str, Any]) -> None:
    """An env.wrappers entry: "module:Callable" or {wrapper: "module:Callable", kwargs: {...}}."""
    example = '"module:Callable" or {wrapper: "module:Callable", kwargs: {...}}'
    if isinstance(entry, dict):
        unknown = set(entry) - {"wrapper", "kwargs"}
        if unknown or not isinstance(entry.get("wrapper"), str):
            raise ConfigError(f"{key}: expected {example}, got {entry!r}")
        if not isinstance(entry.get("kwargs", {}), dict):
            raise ConfigError(f"{key}.kwargs: expected a mapping, got {entry['kwargs']!r}")
        entry = entry["wrapper"]
    module, sep, name = entry.partition(":")
    if not (module and sep and name):
        raise ConfigError(f"{key}: {entry!r} is not a module:Callable name ({example})")


def read_yaml_mapping(
    path: str | Path, what: str = "config", error: type[Exception] = ConfigError
) -> dict[str, Any]:
    """A YAML file that must hold a mapping (``yaml.safe_load``; empty → {}), with ``error``
    naming the file for unreadable, invalid or wrong-kind content."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise error(f"{path}: not valid YAML ({exc.__class__.__name__})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise error(f"{path}: a {what} file is a mapping, got {type(data).__name__}")
    return data
