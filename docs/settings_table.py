"""Every setting as a Markdown table, generated from the classes that read them: `python docs/settings_table.py >
docs/settings.md` writes docs/settings.md, and tests/test_settings_table.py keeps the file true."""
from __future__ import annotations

import typing
from typing import Any

from pydantic_settings import BaseSettings

import methods  # noqa: F401  (registers every method folder, whose settings the table lists)
from core import registry
from core.settings import Settings
from core.settings_groups import GROUPS

HEADER = ("# Settings\n\nEvery setting, read from its environment variable (a list or an object as JSON). Generated "
          "from the classes that read them: `python docs/settings_table.py > docs/settings.md`.\n")


def shown(value: Any) -> str:
    """A default as a reader writes it in the environment."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | dict) and not value:
        return "empty"
    return f"`{value}`"


def kind(annotation: Any) -> str:
    """A field's type, short: `int`, `float`, `one of a, b`, `path or none`."""
    if typing.get_origin(annotation) is typing.Literal:
        return "one of " + ", ".join(map(str, typing.get_args(annotation)))
    text = getattr(annotation, "__name__", None) if typing.get_origin(annotation) is None else None
    return (text or str(annotation).replace("typing.", "").replace("pathlib.", "")).replace(" | None", " or none")


def table(cls: type[BaseSettings], prefix: str, skip: set[str] = frozenset()) -> list[str]:
    lines = ["| variable | type | default | what it does |", "|---|---|---|---|"]
    for name, field in cls.model_fields.items():
        if name in skip:
            continue
        default = field.default_factory() if field.default_factory else field.default
        description = (field.description or "").replace("|", "\\|")
        lines.append(f"| `{prefix}{name.upper()}` | {kind(field.annotation)} | {shown(default)} | {description} |")
    return lines


def markdown() -> str:
    """The top-level settings, each group's, and each registered method's own."""
    parts = [HEADER, "## Top-level (`CKL_*`)\n", *table(Settings, "CKL_", skip=set(GROUPS))]
    for group, cls in GROUPS.items():
        described = Settings.model_fields[group].description
        parts += ["", f"## {group} (`CKL_{group.upper()}_*`)\n", described, "", *table(cls, f"CKL_{group.upper()}_")]
    for spec in registry.registered():
        parts += ["", f"## The {spec.name} method (`CKL_{spec.name.upper()}_*`)\n",
                  *table(spec.config, f"CKL_{spec.name.upper()}_")]
    return "\n".join(parts) + "\n"



if __name__ == "__main__":
    print(markdown(), end="")
