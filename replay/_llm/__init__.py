"""The LLM client: the OpenAI SDK with the engine's retries and the replay contract.

* ``client``: :class:`LLMClient` and the per-context client;
* ``cache``: responses cached on disk by request and sample key.
"""

from __future__ import annotations

from .cache import ResponseCache
from .client import RetryPolicy, LLMClient, ChatResult, llm, configure_llm, derive_sample_key, use_llm, request_overrides, use_response_cache

__all__ = [
    "ResponseCache",
    "RetryPolicy",
    "LLMClient",
    "ChatResult",
    "llm",
    "configure_llm",
    "derive_sample_key",
    "use_llm",
    "request_overrides",
    "use_response_cache",
]
