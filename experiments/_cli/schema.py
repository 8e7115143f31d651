"""``quiver schema``: the JSON Schemas of the trace format, the specs and the graph file;
with ``--check FILE``, a spec or graph file checked against its schema (nothing runs)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .common import EXIT_OK, EXIT_PROBLEMS

__all__ = ["add_parser", "command"]


def add_parser(sub: Any) -> None:
    """Register ``quiver schema``."""
    schema = sub.add_parser(
        "schema",
        help="print a JSON Schema (trace format, campaign spec, recording spec, graph file)",
        description=(
            "Print the JSON Schema of the trace format, the campaign spec (`quiver run`), the "
            "recording spec (`quiver record`) or the graph YAML, for editors and other tools. "
            "With --check FILE, read FILE as that kind of file and report its first problem as "
            "FILE:LINE: FIELD: REASON instead (exit 0 when it is valid, 1 when it is not); "
            "nothing is imported, started or run."
        ),
    )
    schema.add_argument("what", choices=["trace", "spec", "record", "graph"],
                        help="trace, spec (campaigns), record (recordings) or graph")
    schema.add_argument("--check", type=Path, metavar="FILE",
                        help="check a spec or graph file against the schema instead of printing it")

    schema.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    """Print the JSON Schema asked for, or check a file against it."""
    if args.check is not None:
        return check(args.what, args.check)
    if args.what == "trace":
        from quiver._trace import trace_json_schema

        schema = trace_json_schema()
    elif args.what == "graph":
        from quiver._graph import PipelineGraph

        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **PipelineGraph.model_json_schema()}
    elif args.what == "record":
        from quiver.experiments._config import RecordSpec

        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **RecordSpec.model_json_schema()}
    else:
        from quiver.experiments._config import CampaignSpec

        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **CampaignSpec.model_json_schema()}
    print(json.dumps(schema, indent=2))
    return EXIT_OK


def check(what: str, path: Path) -> int:
    """Check a spec (``spec``, ``record``) or graph file: 0 when valid, 1 with its first
    problem on stderr (one line: file, line, field, reason)."""
    import sys

    from quiver._errors import QuiverError, SpecError

    if what == "trace":
        raise QuiverError("--check reads specs and graph files; check trace files with `quiver validate FILE`")
    try:
        if what == "graph":
            from quiver._graph import load_graph

            load_graph(path)
        else:
            from quiver._yamlspec import load_spec
            from quiver.experiments._config import CampaignSpec, RecordSpec

            load_spec(CampaignSpec if what == "spec" else RecordSpec, path)
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return EXIT_PROBLEMS
    print(f"{path}: a valid {'campaign spec' if what == 'spec' else 'recording spec' if what == 'record' else 'graph'}")
    return EXIT_OK
