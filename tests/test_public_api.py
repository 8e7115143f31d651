"""The public surface is what we meant: nothing missing, nothing private leaking."""

from __future__ import annotations

import quiver
import quiver.replay


def test_top_level_exports_resolve() -> None:
    for name in quiver.__all__:
        assert getattr(quiver, name) is not None, name
    assert not [n for n in quiver.__all__ if n.startswith("_")]


def test_instrumentation_api_is_reexported_from_replay() -> None:
    for name in ("node", "decide", "loop", "iteration", "bind", "gather", "ThreadPoolExecutor",
                 "retrieved", "tool_step", "template", "llm", "configure_llm", "LLMClient"):
        assert getattr(quiver, name) is getattr(quiver.replay, name)


def test_replay_exports_resolve() -> None:
    for name in quiver.replay.__all__:
        assert getattr(quiver.replay, name) is not None, name


def test_core_does_not_import_the_network_stack() -> None:
    import subprocess
    import sys

    code = "import sys, quiver; print(any(m in sys.modules for m in ('openai', 'ray', 'httpx')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_errors_form_one_tree() -> None:
    for name in ("TraceFormatError", "SpecError", "InstrumentationError", "LLMError",
                 "LLMRequestError", "LLMUnavailable", "SimulatorError", "PipelineError"):
        assert issubclass(getattr(quiver, name), quiver.QuiverError)


def _type_checking_names(path: str) -> set[str]:
    """The names a lazy package imports under ``if TYPE_CHECKING:`` (what type checkers see)."""
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).parents[1] / path).read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", None) == "TYPE_CHECKING")
    names = set()
    for node in ast.walk(block):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                assert alias.asname == alias.name, f"{path}: {alias.name} is not re-exported as itself"
                names.add(alias.name)
    return names


def test_lazy_packages_show_type_checkers_exactly_what_they_export() -> None:
    """Each lazy package lists its names once for run time (the family table) and once for
    type checkers (``if TYPE_CHECKING:``): the two lists must agree."""
    import quiver.experiments

    for path, package in (("engine/__init__.py", quiver), ("replay/__init__.py", quiver.replay),
                          ("experiments/__init__.py", quiver.experiments)):
        assert _type_checking_names(path) == set(package.__all__), path


def test_importing_quiver_and_calling_a_node_loads_no_heavy_module() -> None:
    """``import quiver``, ``@quiver.node`` and a call outside a recording stay light: a
    production pipeline pays for the instrumentation alone (timings in the README)."""
    import subprocess
    import sys

    code = (
        "import sys, quiver\n"
        "@quiver.node\n"
        "def f(x):\n"
        "    return x + 1\n"
        "@quiver.node('typed', fields={'a': {'type': 'categorical', 'role': 'routing'}})\n"
        "def g(x):\n"
        "    return {'a': x}\n"
        "assert f(1) == 2 and g('x') == {'a': 'x'}\n"
        "heavy = ('numpy', 'diskcache', 'openai', 'httpx', 'yaml', 'scipy', 'torch')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    plain = "import sys, quiver\nprint('pydantic' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", plain], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_command_line_parser_loads_no_engine_module() -> None:
    """``quiver --help`` builds the parser of every command without importing the engine."""
    import subprocess
    import sys

    code = ("import sys\nfrom quiver.experiments._cli import build_parser\nbuild_parser()\n"
            "print(sorted(m for m in ('numpy', 'pydantic', 'yaml', 'openai', 'diskcache') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_divergence_attribution_is_public() -> None:
    """``quiver diff`` and ``quiver compare`` as a library: the pair diff and its cause,
    the corpus table, the comparison of two corpora."""
    for name in ("diff_traces", "PairDiff", "FirstDivergence", "Evidence", "Cause", "first_divergence_table",
                 "DivergenceTable", "compare_corpora", "Comparison"):
        assert name in quiver.__all__, name
        assert getattr(quiver, name) is not None
