"""One chat call as the trace records it: the replay contract (QUIVER.md §12).

Inside a recorded trace each chat call records, on the current ``llm`` node call or on
a child ``llm`` call it opens when there is none: the model name, the version the
endpoint reported and the sampling parameters; the template id and hash, the assembled
messages and the fragment hashes; the raw response, usage and logprobs. Its sample key
derives from the trace's key and the call's path. A replay that serves the call from the
recording answers it here, without a request.
"""

from __future__ import annotations

import difflib
import json
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from quiver._canonical import to_jsonable
from quiver._errors import InstrumentationError, LLMError
from quiver._trace import LLMResponse, ModelInfo, PromptInfo
from quiver._wire import Answer, format_named, logprob_entry
from quiver.replay._instrument import (
    CallRecord,
    OpenCall,
    Template,
    child_call,
    current_builder,
    current_call,
    get_template,
)
from quiver.replay._keys import derive_sample_key

from .current import message_swaps

__all__ = ["ChatResult", "PendingChat", "CallCounter", "PARAM_NAMES", "OPTION_NAMES", "WIRE_TAGS", "build_prompt",
           "wants_json", "parse_json", "logprob_entry"]


class CallCounter(Protocol):
    """What counts a chat call's served answers and retries: an :class:`LLMClient`, or the
    transport capture's counter."""

    _lock: threading.Lock
    stats: Counter[str]


@dataclass
class ChatResult:
    """What :meth:`LLMClient.chat` returns."""

    content: str
    """The raw text of the first choice."""
    data: Any = None
    """The parsed JSON, when a JSON response format was requested."""
    model: str | None = None
    """The model the endpoint reported."""
    usage: dict[str, int] = field(default_factory=dict)
    logprobs: list[dict[str, Any]] | None = None
    attempts: int = 1

    @property
    def value(self) -> Any:
        """``data`` when the response is JSON, else ``content``."""
        return self.data if self.data is not None else self.content


WIRE_TAGS = ("tool_calls", "system_fingerprint", "wire", "stream")
"""The tags an LLM call keeps of its answer beside the response (its tool calls, the
endpoint's fingerprint, its wire format and response id, the timing of its stream): a
served call carries the recorded ones."""

PARAM_NAMES = ("temperature", "top_p", "seed", "max_tokens", "response_format", "logprobs", "top_logprobs")
OPTION_NAMES = (*PARAM_NAMES, "messages", "model", "name")

_claim_lock = threading.Lock()


def build_prompt(template: str | Template | None, messages: Any, variables: Mapping[str, Any],
            extra: Mapping[str, Any]) -> PromptInfo:
    """The prompt of a chat call; ``extra`` holds the keywords that are not request options."""
    if (template is None) == (messages is None):
        raise InstrumentationError("chat() needs either a template (id or Template) or messages=, not both")
    if template is None:
        for name in extra:
            raise InstrumentationError(
                f"chat() got the keyword {name!r}, which is not a request parameter{_did_you_mean(name)}; with "
                f"messages= the keywords are {', '.join(OPTION_NAMES)} (template variables need a template)"
            )
        return PromptInfo.model_validate({"assembled": [m if isinstance(m, dict) else dict(m) for m in messages]})
    resolved = get_template(template.id if isinstance(template, Template) else template)
    used = set(resolved.variables) if extra else set()
    for name in (n for n in extra if n not in used):
        # A variable the template does not use is allowed (a prompt variant swapped in by
        # a replay may use fewer than the template it replaces), unless it reads like a
        # misspelt request parameter, which would otherwise be dropped without a word.
        hint = _did_you_mean(name)
        if hint:
            raise InstrumentationError(
                f"chat({resolved.id!r}) got the keyword {name!r}, which is neither a variable of the template "
                f"({', '.join(resolved.variables) or 'none'}) nor a request parameter{hint}"
            )
    return resolved.render(variables)


def swapped_prompt(prompt: PromptInfo) -> PromptInfo:
    """``prompt`` with the inline prompt swaps in force applied (a replay's ``prompt_swap``
    of a selected message: :func:`~quiver.replay._llm.swapped_messages`)."""
    swaps = message_swaps()
    if not swaps:
        return prompt
    messages = [m.model_dump() for m in prompt.assembled]
    for swap in swaps:
        index = swap.find([(m["role"], m["content"]) for m in messages], prompt.fragments)
        if index is not None:
            messages[index]["content"] = swap.text
    return PromptInfo.model_validate({**prompt.model_dump(), "assembled": messages})


def _did_you_mean(name: str) -> str:
    """``; did you mean 'temperature'?`` for a keyword close to a request option, else empty."""
    close = difflib.get_close_matches(name, OPTION_NAMES, n=1, cutoff=0.8)
    return f"; did you mean {close[0]!r}?" if close else ""


def wants_json(params: Mapping[str, Any]) -> bool:
    fmt = params.get("response_format")
    return isinstance(fmt, dict) and fmt.get("type") in ("json_schema", "json_object")


def parse_json(content: str, call: PendingChat) -> Any:
    try:
        return json.loads(content)
    except json.JSONDecodeError as exc:
        raise LLMError(
            f"model {call.model!r} answered {call.label} with text that is not JSON "
            f"({exc.msg} at column {exc.colno}) although a JSON response format was requested"
        ) from None


def _json_data(content: str, call: PendingChat) -> Any:
    """A reply's parsed JSON when the call asked for a JSON response format, else None.

    The engine's own calls (``strict_json``) fail on a reply that is not JSON; a
    captured call's caller reads the body itself (the SDK parses it, or reports a
    refusal), so its reply stays text. Recording and serving both go through here, so a
    call's output is the same value in a recording and in its replay.
    """
    if not wants_json(call.params):
        return None
    if call.strict_json:
        return parse_json(content, call)
    try:
        return json.loads(content)
    except json.JSONDecodeError:
        return None


class PendingChat:
    """One chat call in flight and the trace record it writes to."""

    def __init__(
        self,
        client: CallCounter,
        model: str,
        params: dict[str, Any],
        prompt: PromptInfo,
        record: CallRecord | None,
        opened: OpenCall | None,
        *,
        strict_json: bool = True,
    ) -> None:
        self.client = client
        self.strict_json = strict_json
        self.model = model
        self.params = params
        self.prompt = prompt
        self.record = record
        self.opened = opened
        builder = current_builder.get()
        self.builder = builder
        self.sample_key = (
            derive_sample_key(builder.sample_key, record.call_path)
            if builder is not None and builder.sample_key and record is not None
            else None
        )

    @property
    def label(self) -> str:
        return f"call {self.record.call_path}" if self.record else "a call"

    @classmethod
    def open(
        cls, client: CallCounter, model: str, params: dict[str, Any], prompt: PromptInfo, name: str | None,
        *, strict_json: bool = True,
    ) -> PendingChat:
        """The chat call, on the current ``llm`` call when it holds none yet, else on a
        child ``llm`` call. ``strict_json=False`` keeps a reply that should be JSON and
        is not as text instead of failing (a captured call: its caller reads the body)."""
        record = current_call.get()
        info = ModelInfo(name=model, params=to_jsonable(params))
        if current_builder.get() is None:
            return cls(client, model, params, prompt, None, None, strict_json=strict_json)
        with _claim_lock:
            claimable = record is not None and record.kind == "llm" and record.model is None
            if claimable:
                assert record is not None
                record.model = info
        if claimable:
            record.prompt = prompt  # type: ignore[union-attr]
            return cls(client, model, params, prompt, record, None, strict_json=strict_json)
        node_name = name or prompt.template_id or "llm"
        opened = child_call(node_name, "llm", {"messages": [m.content for m in prompt.assembled], "params": params})
        opened.enter()
        assert opened.record is not None
        opened.record.model = info
        opened.record.prompt = prompt
        return cls(client, model, params, prompt, opened.record, opened, strict_json=strict_json)

    def served(self) -> ChatResult | None:
        """The recorded response, when a replay serves this call from the recording.

        The record's directive says: ``serve`` (the model and prompt are frozen: the
        recorded response and prompt stand, provided the model and parameters asked
        for are the recorded ones), ``serve_if_same`` (only when the request, prompt
        included, equals the recorded one) or ``live``; ``resend``, ``resend_model`` and
        ``resend_prompt`` go live with parts of the recorded request (:meth:`resend`).
        """
        directive = self.record.replay if self.record is not None else None
        recorded = getattr(directive, "recorded", None)
        if directive is not None and directive.llm.startswith("resend"):
            self.resend(directive.llm, recorded)
            return None
        if directive is None or directive.llm == "live" or recorded is None or recorded.response is None:
            return None
        model = recorded.model
        if model is None or model.name != self.model or model.params != to_jsonable(self.params):
            return None
        if directive.llm == "serve_if_same" and (
            recorded.prompt is None or recorded.prompt.assembled != self.prompt.assembled
        ):
            return None
        response = recorded.response
        result = ChatResult(
            content=response.content, data=_json_data(response.content, self),
            model=model.version, usage=dict(response.usage), logprobs=response.logprobs,
            attempts=response.attempts,
        )
        assert self.record is not None
        if recorded.prompt is not None:
            self.prompt = recorded.prompt
            self.record.prompt = recorded.prompt
        self.record.tags.update({k: v for k, v in recorded.tags.items() if k in WIRE_TAGS})
        self.succeed(result, response.finish_reason, recorded.tags.get("system_fingerprint"))
        with self.client._lock:
            self.client.stats["served"] += 1
        return result

    def resend(self, what: str, recorded: Any) -> None:
        """Send this call with parts of the recorded request (``ReplayMode.resample``):
        the recorded assembled messages for ``resend`` and ``resend_prompt``, the recorded
        model name and parameters for ``resend`` and ``resend_model``; the rest is
        today's. A part the recording lacks (an imported call without messages) stays
        today's."""
        if recorded is None or self.record is None:
            return
        if what in ("resend", "resend_prompt") and recorded.prompt is not None and recorded.prompt.assembled:
            self.prompt = recorded.prompt
        if what in ("resend", "resend_model") and recorded.model is not None:
            self.model, self.params = recorded.model.name, dict(recorded.model.params)
        self.record.prompt = self.prompt
        self.record.model = ModelInfo(name=self.model, params=to_jsonable(self.params))

    def note_retry(self, reason: str) -> None:
        with self.client._lock:
            self.client.stats[f"retry_{reason}"] += 1
        if self.builder is not None:
            with self.builder._lock:
                self.builder.retries[reason] += 1

    def succeed(self, result: ChatResult, finish_reason: str | None, fingerprint: str | None) -> None:
        if self.record is not None:
            self.record.model = ModelInfo(name=self.model, version=result.model, params=to_jsonable(self.params))
            self.record.response = LLMResponse(
                content=result.content, finish_reason=finish_reason, usage=result.usage,
                logprobs=result.logprobs, attempts=result.attempts,
            )
            if fingerprint:
                self.record.tags["system_fingerprint"] = fingerprint
        if self.opened is not None:
            self.opened.exit(result.value, None)

    def finish(self, answer: Answer, attempts: int) -> ChatResult:
        """Record an answer the endpoint gave (``attempts`` HTTP attempts; 0 when the
        response cache answered) and count it: the result the caller gets. A JSON reply
        is parsed as :meth:`served` parses the recorded one, so that a child ``llm``
        call's output (``ChatResult.value``) is the same in both."""
        result = ChatResult(
            content=answer.text, data=_json_data(answer.text, self), model=answer.model, usage=dict(answer.usage),
            logprobs=answer.logprobs, attempts=max(attempts, 1),
        )
        if answer.tool_calls and self.record is not None:
            self.record.tags["tool_calls"] = answer.tool_calls
        self.succeed(result, answer.finish_reason, answer.extra.get("system_fingerprint"))
        if attempts == 0:  # answered from the response cache
            return result
        with self.client._lock:
            self.client.stats["calls"] += 1
            self.client.stats["attempts"] += attempts
        if self.builder is not None and self.record is not None:
            wire = self.record.tags.get("wire")
            tokens = format_named(wire.get("format") if isinstance(wire, dict) else None).total_tokens(answer.usage)
            with self.builder._lock:
                self.builder.llm_tokens += tokens
        return result

    def fail(self, exc: BaseException) -> None:
        if self.opened is not None:
            self.opened.exit(None, exc)
            self.opened = None

