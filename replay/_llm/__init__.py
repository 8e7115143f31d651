"""The LLM client: the OpenAI SDK with the engine's retries and the replay contract.

* ``client``: :class:`LLMClient` (transport, retries, the response cache);
* ``contract``: one chat call as the trace records it, and as a replay serves it;
* ``current``: the client, request overrides and cache switch in force in a context;
* ``cache``: responses cached on disk by request and sample key;
* ``health``: an endpoint that stopped answering, noticed within seconds;
* ``pacing``: a run's requests paced to the endpoint's rate limits, all workers at once.
"""

from __future__ import annotations

from .cache import ResponseCache
from .client import LLMClient, MalformedCompletion, RetryPolicy
from .contract import PARAM_NAMES, CallCounter, ChatResult, PendingChat
from .current import (
    configure_llm,
    current_cache,
    current_overrides,
    engine_request,
    engine_request_node,
    in_engine_request,
    llm,
    message_swaps,
    request_overrides,
    swapped_messages,
    use_llm,
    use_response_cache,
)
from .health import (
    EndpointDown,
    SeenEndpoints,
    endpoints,
    is_connection_failure,
    origin_of,
    trace_scope,
    trace_verdict,
)
from .pacing import (
    Pacer,
    RateLimits,
    RemoteBackend,
    Ticket,
    async_wait as pacing_wait,
    remote_owner,
    ticket as pacing_ticket,
    use_remote,
)

__all__ = [
    "Pacer",
    "RateLimits",
    "RemoteBackend",
    "Ticket",
    "remote_owner",
    "use_remote",
    "pacing_wait",
    "pacing_ticket",
    "ResponseCache",
    "EndpointDown",
    "SeenEndpoints",
    "endpoints",
    "is_connection_failure",
    "origin_of",
    "trace_scope",
    "trace_verdict",
    "engine_request_node",
    "LLMClient",
    "MalformedCompletion",
    "RetryPolicy",
    "ChatResult",
    "CallCounter",
    "PendingChat",
    "PARAM_NAMES",
    "current_cache",
    "current_overrides",
    "engine_request",
    "in_engine_request",
    "configure_llm",
    "llm",
    "request_overrides",
    "message_swaps",
    "swapped_messages",
    "use_llm",
    "use_response_cache",
]
