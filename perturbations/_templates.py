"""Template references: which prompt template a spec or a command line names.

A ``prompt_swap`` variant, a replay's template change and a ``quiver gate`` candidate all
name a replacement template the same way, a registered template id or a template file,
and :func:`resolve_template_ref` is the one rule that tells them apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from quiver.perturbations._registry import OperatorError

__all__ = ["TemplateRef", "resolve_template_ref", "TEMPLATE_FILE_SUFFIXES"]

TEMPLATE_FILE_SUFFIXES = (".txt", ".md", ".prompt")
"""Endings that make a template reference a file (with a path separator, any name is one)."""


@dataclass(frozen=True)
class TemplateRef:
    """A replacement prompt template as a spec or a command line names it.

    Attributes:
        ref: The reference as written.
        path: The template file, absolute, when ``ref`` names a file; None when it is the
            id of a registered template.
    """

    ref: str
    path: Path | None = None

    @property
    def template_id(self) -> str | None:
        """The registered template id, when the reference is not a file."""
        return None if self.path is not None else self.ref


def resolve_template_ref(ref: str, base_dir: Path | None = None) -> TemplateRef:
    """What a template reference names: a template file or a registered template id.

    The one rule for ``prompt_swap`` variants, replay template changes and gate
    candidates: a reference names a file when it holds a path separator or ends in
    ``.txt``, ``.md`` or ``.prompt`` (any case); anything else is a registered template id,
    dots included (``support_bot.rewriter.v2`` is an id). A file resolves against
    ``base_dir`` (default: the working directory), with ``~`` expanded, and must exist.

    Raises:
        OperatorError: An empty reference, or a file that does not exist.
    """
    if not ref or not ref.strip():
        raise OperatorError("a template reference must be a non-empty template id or file path")
    if not ("/" in ref or "\\" in ref or ref.lower().endswith(TEMPLATE_FILE_SUFFIXES)):
        return TemplateRef(ref)
    path = Path(ref).expanduser()
    if not path.is_absolute():
        path = (base_dir or Path.cwd()) / path
    path = path.resolve()
    if not path.is_file():
        raise OperatorError(
            f"template file {path} (from {ref!r}) does not exist; a relative path resolves against "
            f"{base_dir or 'the working directory'}"
        )
    return TemplateRef(ref, path)
