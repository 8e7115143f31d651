"""Requests recorded as calls of their own under the current call: what embeddings and
HTTP tools share.

Such a request opens a child call (``retrieval`` for embeddings, ``tool`` for an HTTP
tool) whose inputs identify it. A replay decides what the child does as for any call of
its kind (:class:`~quiver.replay._replayer.ReplayBuilder`): served from the recording
while its dimension (retrieval, tools) is frozen and its inputs are the recorded ones,
else sent, and recorded again.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from quiver._trace import CallKind
from quiver.replay._instrument import OpenCall, child_call

__all__ = ["ChildAnswer", "CapturedChild"]


@dataclass(frozen=True)
class ChildAnswer:
    """An answer made without a request: status, content type and body."""

    status: int
    content_type: str
    body: bytes


class CapturedChild(ABC):
    """One request recorded as a child call (see the module docstring)."""

    def __init__(self, name: str, kind: CallKind, inputs: Any) -> None:
        self.opened: OpenCall = child_call(name, kind, inputs)
        self.record = self.opened.record
        self._closed = False

    @property
    def node(self) -> str | None:
        """The node of the child call (the wire counts the request there)."""
        return self.record.node if self.record is not None else None

    def served(self) -> ChildAnswer | None:
        """The recorded answer when the replay serves the call, else None (send it)."""
        directive = self.opened.directive
        if directive is None or not directive.skip_body:
            return None
        self.opened.serve()
        self._closed = True
        return self.answer_served()

    @abstractmethod
    def answer_served(self) -> ChildAnswer:
        """The answer the served record holds."""

    @abstractmethod
    def finish(self, status: int, content_type: str | None, content: bytes) -> None:
        """Record what the endpoint answered (and close the call)."""

    def close(self, output: Any, error: BaseException | None = None) -> None:
        """Close the child call once."""
        if not self._closed:
            self._closed = True
            self.opened.exit(output, error)

    def fail(self, exc: BaseException) -> None:
        """Close the call as failed: the request raised."""
        self.close(None, exc)
