"""What every command shares: the exit codes and the errors that end a command."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["EXIT_OK", "EXIT_PROBLEMS", "EXIT_CANNOT_RUN", "EXIT_INTERRUPTED", "LazyChoices", "checked_override"]

EXIT_OK = 0
"""Done."""
EXIT_PROBLEMS = 1
"""Done, with problems found: failed traces or pairs, bad lines, a failed negative
control, a budget reached, a gate that fails."""
EXIT_CANNOT_RUN = 2
"""Could not run: a bad spec or argument, a pipeline that does not import, an endpoint down."""
EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C)."""


class LazyChoices:
    """An argparse ``choices`` read from a registry only when an argument is checked or
    listed, so that building the parser (``quiver --help``) imports no registry.

    Args:
        names: Returns the registered names.
    """

    def __init__(self, names: Any) -> None:
        self._names = names

    def _list(self) -> list[str]:
        return list(self._names())

    def __contains__(self, item: object) -> bool:
        return item in self._list()

    def __iter__(self) -> Iterator[str]:
        return iter(self._list())

    def __len__(self) -> int:
        return len(self._list())

    def __repr__(self) -> str:
        return ", ".join(self._list())


def checked_override(model: Any, field: str, value: Any, flag: str) -> Any:
    """A command-line value that overrides the spec field ``model.field``, checked as the
    spec checks that field (its type, strictly, and its range); None passes through.

    Raises:
        QuiverError: One line naming the flag, the value and what would be right.
    """
    if value is None:
        return None
    from typing import Annotated, cast

    from pydantic import TypeAdapter, ValidationError

    from quiver._errors import QuiverError

    info = model.model_fields[field]
    constrained = cast(Any, Annotated[info.annotation, *info.metadata])  # a type built at run time
    try:
        return TypeAdapter(constrained).validate_python(value, strict=True)
    except ValidationError as exc:
        raise QuiverError(f"{flag} {value}: {exc.errors()[0]['msg']} (as the spec's {field!r})") from None
