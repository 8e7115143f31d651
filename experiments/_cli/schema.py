"""``quiver schema``: the JSON Schemas of the trace format, the specs and the graph file."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import EXIT_OK

__all__ = ["add_parser", "command"]


def add_parser(sub: Any) -> None:
    """Register ``quiver schema``."""
    schema = sub.add_parser(
        "schema",
        help="print a JSON Schema (trace format, campaign spec, recording spec, graph file)",
        description=(
            "Print the JSON Schema of the trace format, the campaign spec (`quiver run`), the "
            "recording spec (`quiver record`) or the graph YAML, for editors and other tools."
        ),
    )
    schema.add_argument("what", choices=["trace", "spec", "record", "graph"],
                        help="trace, spec (campaigns), record (recordings) or graph")

    schema.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    """Print the JSON Schema asked for."""
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
