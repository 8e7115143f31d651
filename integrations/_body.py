"""The protocol of one wrapped node call, shared by the sync and async wrappers of both
integrations: the wrapper opens the call, returns the recording's output when the replay
serves it, else runs the framework's body inside :meth:`Body.running` (entered, the
replay's change to the target in force, closed with the error if the body raises) and
closes it with :meth:`Body.done`. Only the body's own call (``fn(...)`` or
``await fn(...)``) differs between the twins."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Body", "perturbed"]


def perturbed(directive: Any) -> contextlib.AbstractContextManager[Any]:
    """A replay target's execution change (prompt swap, parameter change), entered around its body."""
    if directive is not None and directive.context is not None:
        return directive.context()  # type: ignore[no-any-return]
    return contextlib.nullcontext()


class Body:
    """Running one opened call's body.

    Args:
        enter: Enters the call (before the body runs).
        close: Closes the call with the body's result or its error; returns what the
            wrapper returns (the result, or what the integration makes of it).
        directive: The call's replay directive (its execution change, if any).
    """

    def __init__(self, enter: Callable[[], None], close: Callable[[Any, BaseException | None], Any],
                 directive: Any) -> None:
        self._enter, self._close, self._directive = enter, close, directive

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Enter the call and put the replay's change in force around the body; close the
        call with the error when the body raises."""
        self._enter()
        try:
            with perturbed(self._directive):
                yield
        except BaseException as exc:
            self._close(None, exc)
            raise

    def done(self, result: Any) -> Any:
        """Close the call with the body's ``result``; what the wrapper returns."""
        return self._close(result, None)
