"""``quiver sim``: the bundled OpenAI-compatible simulator, served on loopback."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .common import EXIT_OK

__all__ = ["add_parser", "command"]


def add_parser(sub: Any) -> None:
    """Register ``quiver sim``."""
    sim = sub.add_parser(
        "sim",
        help="serve the OpenAI-compatible LLM simulator on loopback",
        description=(
            "Serve the bundled simulator (/v1/chat/completions, /v1/models) on loopback "
            "until interrupted. It refuses any non-loopback address."
        ),
    )
    sim.add_argument("--host", default="127.0.0.1", help="loopback address (default 127.0.0.1)")
    sim.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 = any free port)")
    sim.add_argument("--models", nargs="*", default=[], metavar="MODULE", help="modules registering models")
    sim.add_argument("--nondeterminism", type=float, default=0.0, help="temperature-0 runner-up rate")
    sim.add_argument("--faults", type=Path, help="YAML or JSON file of fault settings (FaultConfig)")

    sim.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    """Serve the simulator until interrupted."""
    from quiver.replay import FaultConfig, SimulatorConfig, check_loopback
    from quiver.replay._sim import serve

    check_loopback(args.host)
    faults = FaultConfig()
    if args.faults is not None:
        from quiver._yamlspec import load_spec

        faults = load_spec(FaultConfig, args.faults)
    config = SimulatorConfig(
        host=args.host, port=args.port, models=args.models, nondeterminism=args.nondeterminism, faults=faults
    )
    serve(config)
    return EXIT_OK
