"""The layout holds: one family per subpackage, private insides, one-way layers.

Read from the source with ``ast`` (nothing is imported), over every module of the five
packages:

* **Layers.** ``quiver`` (the core) <- ``quiver.perturbations`` <- ``quiver.replay`` <-
  ``quiver.integrations`` (the frameworks) <-
  ``quiver.experiments``: no module imports from a package above its own. Imports under
  ``if TYPE_CHECKING:`` never run and are not counted (the facade names the
  instrumentation API of ``quiver.replay`` there for type checkers; at run time it
  resolves it lazily by name).
* **Families.** A family is a subpackage (``quiver._trace``) or a module of its own
  (``quiver._graph``, ``quiver.replay._record``) directly under one of the five
  packages. Across families a module imports only from the family itself (its
  ``__init__``), never from one of its modules (``quiver._trace.io``), and never a name
  that starts with an underscore. Inside a family anything goes.
* **Packaging.** Every folder with an ``__init__.py`` is listed in ``pyproject.toml``
  (an editable install finds an unlisted one; a wheel would not ship it).
"""

from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGES = {"engine": "quiver", "perturbations": "quiver.perturbations", "replay": "quiver.replay",
            "integrations": "quiver.integrations", "experiments": "quiver.experiments"}
LAYERS = {"quiver": 0, "quiver.perturbations": 1, "quiver.replay": 2, "quiver.integrations": 3,
          "quiver.experiments": 4}


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool


def modules() -> list[Module]:
    out = []
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            out.append(Module(".".join([package, *parts]), path, is_package))
    return out


def top_package(module: str) -> str:
    """The one of the five packages a module belongs to."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and ".".join(parts[:2]) in LAYERS else "quiver"


def family(module: str) -> str:
    """``quiver._trace.io`` -> ``quiver._trace``; ``quiver.replay._llm.client`` -> ``quiver.replay._llm``."""
    top = top_package(module)
    rest = module[len(top):].lstrip(".").split(".") if module != top else []
    return ".".join([top, rest[0]]) if rest and rest[0] else top


def absolute(module: Module, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, except those under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def violations(mods: list[Module]) -> list[str]:
    known = {m.name for m in mods}
    problems = []
    for module in mods:
        tree = ast.parse(module.path.read_text(encoding="utf-8"))
        where = module.path.relative_to(ROOT) if module.path.is_relative_to(ROOT) else module.path
        for node in runtime_imports(tree):
            if isinstance(node, ast.ImportFrom):
                target = absolute(module, node)
                # ``from quiver.replay import _llm``: the names are modules
                targets = [(f"{target}.{a.name}", None) if f"{target}.{a.name}" in known else (target, a.name)
                           for a in node.names]
            else:
                targets = [(a.name, None) for a in node.names]
            for target, name in targets:
                if not target.startswith("quiver"):
                    continue
                line = f"{where}:{node.lineno}"
                if LAYERS[top_package(target)] > LAYERS[top_package(module.name)]:
                    problems.append(f"{line}: {module.name} imports {target}, a layer above "
                                    f"{top_package(module.name)}")
                if family(target) == family(module.name):
                    continue
                if target != family(target):
                    problems.append(f"{line}: {module.name} reaches into {target}; import from {family(target)}")
                elif name is not None and is_private(name):
                    problems.append(f"{line}: {module.name} imports the private name {name} from {target}")
    return problems


def test_no_import_crosses_a_family_boundary_or_runs_up_the_layers() -> None:
    problems = violations(modules())
    assert not problems, "\n".join(problems)


def test_the_boundary_check_catches_what_it_should(tmp_path: Path) -> None:
    """A negative control: each kind of violation, written into a scratch package, is found."""
    cases = {
        "up_the_layers": "from quiver.replay import node\n",
        "into_a_module": "from quiver._trace.io import iter_traces\n",
        "private_name": "from quiver._stats import _secret\n",
        "private_module_import": "import quiver.replay._llm.client\n",
    }
    for label, code in cases.items():
        path = tmp_path / f"{label}.py"
        path.write_text(code, encoding="utf-8")
        found = violations([Module(f"quiver._graph_{label}", path, False)])
        assert found, label
    allowed = tmp_path / "allowed.py"
    allowed.write_text("from typing import TYPE_CHECKING\nfrom quiver._trace import Trace\n"
                       "if TYPE_CHECKING:\n    from quiver.replay import node\n", encoding="utf-8")
    assert violations([Module("quiver._graph", allowed, False)]) == []


@pytest.mark.parametrize("module,expected", [
    ("quiver._trace.io", "quiver._trace"), ("quiver._graph", "quiver._graph"), ("quiver", "quiver"),
    ("quiver.replay._llm.client", "quiver.replay._llm"), ("quiver.replay", "quiver.replay"),
    ("quiver.experiments.support_bot.pipeline", "quiver.experiments.support_bot"),
])
def test_families_are_the_first_level_below_a_package(module: str, expected: str) -> None:
    assert family(module) == expected


def test_every_package_folder_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    on_disk = {m.name for m in modules() if m.is_package}
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages"
    assert listed - on_disk == set(), "these are listed but have no __init__.py"
