"""Reference tables of the user documentation, rendered from the code so that they cannot drift
from it: every settings key (the `CrawlConfig` tree, crawler/config.py), every column of the
output datasets (storage/schema.py), and every field of the Python API's crawl summary
(crawlflow/api.py).

The MkDocs hook (docs/hooks.py) puts them where docs/configuration.md, docs/output.md and
docs/python-api.md hold their markers; tests/test_docs.py checks that every key and column is
in them.
"""

from __future__ import annotations

import inspect
import json
import re
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from crawler.config import CrawlConfig
from crawler.section import Section
from crawlflow.api import CrawlSummary, NodeRun, NodeUsage
from storage.schema import DATASETS

CONFIG_MARKER = "<!-- reference:config -->"
SCHEMA_MARKER = "<!-- reference:schema -->"
SUMMARY_MARKER = "<!-- reference:summary -->"

# A bound of a numeric setting as the validator states it, and how the table writes it.
_BOUNDS: tuple[tuple[type, str, str], ...] = (
    (annotated_types.Gt, "gt", "> {}"),
    (annotated_types.Ge, "ge", ">= {}"),
    (annotated_types.Lt, "lt", "< {}"),
    (annotated_types.Le, "le", "<= {}"),
)
_TYPE_NAMES = {bool: "boolean", int: "integer", float: "float", str: "string"}


@dataclass(frozen=True)
class SettingsKey:
    name: str
    type: str  # as a user writes it in TOML, with its bounds: "float > 0"
    default: str  # as TOML would spell it, or "unset"
    description: str


@dataclass(frozen=True)
class SettingsTable:
    name: str  # the TOML table: "rate_control.pid"
    doc: str  # the section's docstring
    keys: list[SettingsKey]


def settings_tables(model: type[Section] = CrawlConfig, prefix: str = "") -> list[SettingsTable]:
    """Every table of the settings tree under `model`, depth first, each with its own keys (a
    field whose type is a section is a sub-table, not a key). The root itself is left out when
    it has keys of its own to show (`CrawlConfig` has none: only tables)."""
    keys: list[SettingsKey] = []
    below: list[SettingsTable] = []
    for name, field in model.model_fields.items():
        section = _section_of(field)
        if section is not None:
            below += settings_tables(section, f"{prefix}.{name}" if prefix else name)
        else:
            keys.append(_key(name, field))
    own = [SettingsTable(prefix, _doc(model), keys)] if prefix else []
    return own + below


def render_config_reference() -> str:
    """Markdown: a heading, the section's description and a table of keys per settings table."""
    parts: list[str] = []
    for table in settings_tables():
        parts += [f"### `[{table.name}]`", ""]
        if table.doc:
            parts += [table.doc, ""]
        if table.keys:
            parts += ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
            parts += [
                f"| `{key.name}` | {_cell(key.type)} | `{_cell(key.default)}` | "
                f"{_cell(key.description)} |"
                for key in table.keys
            ]
            parts.append("")
    return "\n".join(parts)


def render_schema_reference() -> str:
    """Markdown: per dataset, a table of its columns and their Arrow types, in file order."""
    parts: list[str] = []
    for dataset, schema in DATASETS.items():
        parts += [f"### `{dataset}` column types", "", "| column | Arrow type |", "| --- | --- |"]
        parts += [f"| `{column.name}` | `{column.type}` |" for column in schema]
        parts.append("")
    return "\n".join(parts)


def render_summary_reference() -> str:
    """Markdown: per class of the Python API's crawl summary, a table of its fields."""
    parts: list[str] = []
    for model in (CrawlSummary, NodeUsage, NodeRun):
        parts += [f"### `{model.__name__}`", "", _doc(model), ""]
        parts += ["| field | type | meaning |", "| --- | --- | --- |"]
        parts += [
            f"| `{name}` | {_cell(_python_type(field.annotation))} | "
            f"{_cell(field.description or '')} |"
            for name, field in model.model_fields.items()
        ]
        parts.append("")
    return "\n".join(parts)


# Marker -> what replaces it (docs/hooks.py).
MARKERS: dict[str, Callable[[], str]] = {
    CONFIG_MARKER: render_config_reference,
    SCHEMA_MARKER: render_schema_reference,
    SUMMARY_MARKER: render_summary_reference,
}


def _section_of(field: FieldInfo) -> type[Section] | None:
    annotation = field.annotation
    if isinstance(annotation, type) and issubclass(annotation, Section):
        return annotation
    return None


def _doc(model: type[BaseModel]) -> str:
    """The section's docstring without the table name it opens with (the heading shows it)."""
    doc = inspect.cleandoc(model.__doc__ or "")
    doc = " ".join(re.sub(r"^`\[[\w.]+\]`:\s*", "", doc).split())
    return doc[:1].upper() + doc[1:]


def _key(name: str, field: FieldInfo) -> SettingsKey:
    default = field.get_default(call_default_factory=True, validated_data={})
    if default is PydanticUndefined:
        default = None
    return SettingsKey(name, _type(field), _toml(default), field.description or "")


def _type(field: FieldInfo) -> str:
    annotation = field.annotation
    args = get_args(annotation)
    optional = get_origin(annotation) in (Union, types.UnionType) and type(None) in args
    if optional:
        (annotation,) = [arg for arg in args if arg is not type(None)]
    text = _type_name(annotation)
    bounds = [
        template.format(getattr(item, attribute))
        for item in field.metadata
        for kind, attribute, template in _BOUNDS
        if isinstance(item, kind)
    ]
    if bounds:
        text += " " + ", ".join(bounds)
    return f"{text}, or unset" if optional else text


def _type_name(annotation: Any) -> str:
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(json.dumps(choice) for choice in get_args(annotation))
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        return f"list of {_type_name(item)}s"
    return _TYPE_NAMES.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _python_type(annotation: Any) -> str:
    """An annotation as Python code writes it: `datetime | None`, `list[NodeRun]`."""
    if isinstance(annotation, type) and not get_args(annotation):
        return annotation.__name__
    return re.sub(r"\b(?:typing|datetime|crawlflow\.api)\.", "", str(annotation))


def _toml(value: Any) -> str:
    """A default as a TOML value; `unset` for None (leave the key out)."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value)


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "\\|")
