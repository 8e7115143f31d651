"""MkDocs hooks: the reference pages are generated when the site is built, never copied.

* ``<!-- quiver:cli -->`` becomes the help of ``quiver`` and of every command, from the
  argument parsers (``quiver.experiments._cli.build_parser``);
* ``<!-- quiver:schema NAME -->`` (``spec``, ``record``, ``graph``, ``trace``) becomes a table
  of every key of that JSON Schema (``quiver schema NAME``), with its type, default and the
  docstring the schema carries.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
from typing import Any

from mkdocs.plugins import event_priority

_CLI = "<!-- quiver:cli -->"
_ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
_FOLDERS = {"perturbations": "perturbations", "replay": "replay", "experiments": "experiments",
            "integrations": "integrations"}
"""The subpackages pyproject.toml maps into ``quiver`` (``package-dir``), beside engine/'s own modules."""


@event_priority(100)
def on_config(config: Any, **_: Any) -> Any:
    """Lay out ``.mkdocs-src/quiver`` (the ``paths`` mkdocstrings reads, in mkdocs.yml) as
    ``pip install .`` lays the package out: engine/'s modules and the four mapped folders, as
    links.

    It runs before every plugin's ``on_config`` (priority 100): mkdocstrings drops a path that
    does not exist when it starts its handler, so on a clean checkout the folder must be there
    first."""
    import shutil

    tree = _ROOT / ".mkdocs-src" / "quiver"
    if tree.parent.exists():
        shutil.rmtree(tree.parent)
    tree.mkdir(parents=True)
    for item in (_ROOT / "engine").iterdir():
        (tree / item.name).symlink_to(item)
    for name, folder in _FOLDERS.items():
        (tree / name).symlink_to(_ROOT / folder)
    return config
_SCHEMA = re.compile(r"<!-- quiver:schema (\w+) -->")


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Fill the markers of a page (see the module docstring)."""
    if _CLI in markdown:
        markdown = markdown.replace(_CLI, cli_reference())
    return _SCHEMA.sub(lambda m: schema_reference(m.group(1)), markdown)


def cli_reference() -> str:
    """Every command's ``--help``, under a heading of its own."""
    from quiver.experiments._cli import build_parser

    parser = build_parser()
    parts = ["## quiver\n", _help(parser)]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        parts += [f"## quiver {name}\n", _help(command)]
    return "\n".join(parts)


def _help(parser: argparse.ArgumentParser) -> str:
    text = parser.format_help().replace("```", "'''")
    return f"```text\n{text.rstrip()}\n```\n"


def schema_reference(name: str) -> str:
    """The keys of the JSON Schema ``quiver schema NAME`` prints, as a table."""
    from quiver.experiments._cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["schema", name])
    if code != 0:
        raise RuntimeError(f"quiver schema {name} exited {code}")
    schema = json.loads(out.getvalue())
    rows = ["| key | type | default | what it is |", "|---|---|---|---|"]
    rows += list(_rows(schema, schema, "", set()))
    return "\n".join(rows) + "\n"


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        node = {**root.get("$defs", {}).get(name, {}), **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _type(node: dict[str, Any], root: dict[str, Any]) -> str:
    node = _resolve(node, root)
    if "enum" in node:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in node["enum"])
    if "const" in node:
        return f"`{json.dumps(node['const'])}`"
    for key in ("anyOf", "oneOf"):
        if key in node:
            return " or ".join(_type(n, root) for n in node[key])
    kind = node.get("type", "object" if "properties" in node else "any")
    if kind == "array" and "items" in node:
        return f"list of {_type(node['items'], root)}"
    if kind == "object" and "additionalProperties" in node and isinstance(node["additionalProperties"], dict):
        return f"mapping of {_type(node['additionalProperties'], root)}"
    return str(kind)


def _objects(node: dict[str, Any], root: dict[str, Any]) -> list[dict[str, Any]]:
    """The object schemas ``node`` may be (through anyOf, lists and mappings)."""
    node = _resolve(node, root)
    if "properties" in node:
        return [node]
    found: list[dict[str, Any]] = []
    for key in ("anyOf", "oneOf"):
        for item in node.get(key, []):
            found += _objects(item, root)
    if node.get("type") == "array" and "items" in node:
        found += _objects(node["items"], root)
    if isinstance(node.get("additionalProperties"), dict):
        found += _objects(node["additionalProperties"], root)
    return found


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _rows(node: dict[str, Any], root: dict[str, Any], prefix: str, seen: set[str]) -> Any:
    for obj in _objects(node, root):
        title = obj.get("title", "")
        if title in seen:
            continue
        for key, prop in obj.get("properties", {}).items():
            path = f"{prefix}{key}"
            resolved = _resolve(prop, root)
            default = f"`{json.dumps(resolved['default'])}`" if "default" in resolved else ""
            yield (f"| `{path}` | {_type(prop, root)} | {_cell(default)} | "
                   f"{_cell(resolved.get('description', ''))} |")
            yield from _rows(prop, root, f"{path}.", seen | {title})
