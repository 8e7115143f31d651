"""The bundled OpenAI-compatible simulator: seeded stochastic models over HTTP on loopback.

* ``request``, ``registry``, ``models``, ``jsonfill``: requests, the model registry and
  the loading of the modules that fill it, sampling, the built-in models;
* ``formats``: the endpoints (:func:`endpoints`) and the wire format each speaks;
* ``wire``, ``guard``, ``handler``, ``server``: the wire format, who may ask (the
  simulator's own address, no web pages), the HTTP connections and their limits, the
  server;
* ``process``: the simulator as a subprocess.
"""

from __future__ import annotations

from .formats import endpoints
from .limits import LimitsConfig, ModelLimits
from .models import (
    Fields,
    Fixed,
    ModelOutput,
    SimChoice,
    SimModelFn,
    Text,
    ToolCall,
    complete,
    get_sim_model,
    load_model_modules,
    register_sim_model,
    request_digest,
    sim_model,
    sim_model_names,
)
from .process import SimulatorProcess, main, serve
from .request import SimRequest, SimRequestError
from .server import FaultConfig, LatencyConfig, Simulator, SimulatorConfig, check_loopback

__all__ = [
    "SimRequest",
    "SimRequestError",
    "Fields",
    "Fixed",
    "Text",
    "ToolCall",
    "SimChoice",
    "ModelOutput",
    "SimModelFn",
    "sim_model",
    "register_sim_model",
    "get_sim_model",
    "sim_model_names",
    "load_model_modules",
    "endpoints",
    "complete",
    "request_digest",
    "LatencyConfig",
    "FaultConfig",
    "LimitsConfig",
    "ModelLimits",
    "SimulatorConfig",
    "check_loopback",
    "Simulator",
    "serve",
    "SimulatorProcess",
    "main",
]
