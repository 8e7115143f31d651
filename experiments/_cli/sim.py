"""``quiver sim``: the bundled OpenAI-compatible simulator, served on loopback."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import EXIT_OK

if TYPE_CHECKING:
    from quiver.replay import SimulatorConfig

__all__ = ["add_parser", "command", "simulator_config"]

_FLAGS = {"read_timeout_s": "--read-timeout", "max_connections": "--max-connections",
          "max_body_bytes": "--max-body-bytes", "nondeterminism": "--nondeterminism", "port": "--port",
          "request_timeout_s": "--request-timeout", "max_pending_connections": "--max-pending-connections",
          "limits.requests_per_minute": "--requests-per-minute", "limits.tokens_per_minute": "--tokens-per-minute",
          "limits.window_s": "--limit-window"}
"""The flag that sets a SimulatorConfig field, for error messages."""


class _EndpointsHelp(argparse.HelpFormatter):
    """Writes the endpoints the simulator serves into ``{endpoints}`` of the description,
    read from the code that serves them when the help is printed (the simulator's
    modules are not imported to build the parser)."""

    def add_text(self, text: str | None) -> None:
        if text is not None and "{endpoints}" in text:
            from quiver.replay._sim import endpoints

            text = text.replace("{endpoints}", endpoints())
        super().add_text(text)


def add_parser(sub: Any) -> None:
    """Register ``quiver sim``."""
    sim = sub.add_parser(
        "sim",
        help="serve the OpenAI-compatible LLM simulator on loopback",
        formatter_class=_EndpointsHelp,
        description=(
            "Serve the bundled simulator on loopback until interrupted: {endpoints} (chat completions, the "
            "Responses API, Anthropic's Messages API and embeddings; an answer streamed as server-sent events "
            "when the request asks). Rate limits per API key and model when asked (x-ratelimit-* headers, "
            "429 with retry-after past them). It refuses any non-loopback address, and requests for another host "
            "(421) or from a web page (403: another Origin, a cross-site fetch, a POST that is not JSON)."
        ),
    )
    sim.add_argument("--host", default="127.0.0.1", help="loopback address (default 127.0.0.1)")
    sim.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 = any free port)")
    sim.add_argument("--models", nargs="*", default=[], metavar="MODULE",
                     help="what registers the simulated models (@sim_model): module names on the Python path, or "
                          ".py files (relative to the working directory), as a spec's llm.simulator.models")
    sim.add_argument("--nondeterminism", type=float, default=0.0, help="temperature-0 runner-up rate")
    sim.add_argument("--faults", type=Path, help="YAML or JSON file of fault settings (FaultConfig)")
    sim.add_argument("--read-timeout", type=float, default=30.0, metavar="SECONDS",
                     help="close a connection that sends nothing for this long (default 30)")
    sim.add_argument("--max-connections", type=int, default=1024, metavar="N",
                     help="connections served at once; one more gets 503 with Retry-After (default 1024)")
    sim.add_argument("--max-body-bytes", type=int, default=8 * 1024 * 1024, metavar="BYTES",
                     help="larger request bodies get 413 before they are read (default 8 MiB)")
    sim.add_argument("--request-timeout", type=float, default=10.0, metavar="SECONDS",
                     help="close a connection whose request is not whole this long after it began, however "
                          "steadily it trickles in (default 10)")
    sim.add_argument("--max-pending-connections", type=int, default=1024, metavar="N",
                     help="connections still sending their first request kept at most; the oldest is closed "
                          "to make room (default 1024)")
    sim.add_argument("--requests-per-minute", type=int, metavar="N",
                     help="rate limit: requests a minute per API key and model; past it 429 with retry-after "
                          "(default: none)")
    sim.add_argument("--tokens-per-minute", type=int, metavar="N",
                     help="rate limit: tokens a minute (prompt and completion) per API key and model (default: none)")
    sim.add_argument("--limit-window", type=float, default=60.0, metavar="SECONDS",
                     help="the sliding window the rate limits are counted over (default 60); every answer "
                          "carries x-ratelimit-* headers when a limit is set")

    sim.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    """Serve the simulator until interrupted."""
    from quiver.replay import check_loopback
    from quiver.replay._sim import serve

    check_loopback(args.host)
    serve(simulator_config(args))
    return EXIT_OK


def simulator_config(args: argparse.Namespace) -> SimulatorConfig:
    """The simulator's configuration from ``quiver sim``'s arguments.

    Raises:
        QuiverError: A value is out of range (the message names its flag).
    """
    from pydantic import ValidationError

    from quiver._errors import QuiverError
    from quiver.replay import FaultConfig, SimulatorConfig

    faults = FaultConfig()
    if args.faults is not None:
        from quiver._yamlspec import load_spec

        faults = load_spec(FaultConfig, args.faults)
    try:
        return SimulatorConfig.model_validate({  # one validation: an error's field path names its flag
            "host": args.host, "port": args.port, "models": args.models, "nondeterminism": args.nondeterminism,
            "faults": faults, "read_timeout_s": args.read_timeout, "max_connections": args.max_connections,
            "max_body_bytes": args.max_body_bytes, "request_timeout_s": args.request_timeout,
            "max_pending_connections": args.max_pending_connections,
            "limits": {"requests_per_minute": args.requests_per_minute,
                       "tokens_per_minute": args.tokens_per_minute, "window_s": args.limit_window},
        })
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(p) for p in error["loc"])
        flag = _FLAGS.get(field, field)
        raise QuiverError(f"{flag}: {str(error['msg']).removeprefix('Value error, ')}") from None
