"""What every extension point's registry does: names to entries, and the third-party ones.

Four registries own the names of the engine's extension points: field types (distance
kernels), import formats, perturbation operators and executors. Each keeps its own
checks of what may be registered; this is what they share:

* a name is a non-empty string without surrounding spaces, given to one entry only
  (registering the same entry again is a no-op, another one under a taken name is an
  error that names both);
* third-party entries come in through an entry-point group, loaded once, the first time
  a name is not found or the whole registry is listed; an entry point names the entry
  itself (then ``adopt`` registers it under the entry point's name) or a module whose
  import registers it; a broken one is reported when its name is asked for and does not
  hide the others;
* an unknown name is an error that lists the registered names and says how a new one
  registers.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from quiver._errors import QuiverError

__all__ = ["Registry", "qualified_name", "adopt_class"]

T = TypeVar("T")


def qualified_name(entry: object) -> str:
    """``module.QualName`` of a class or function, else of the object's class: how an
    entry is named in a clash."""
    named = entry if isinstance(entry, type) or callable(entry) and hasattr(entry, "__qualname__") else type(entry)
    return f"{getattr(named, '__module__', '?')}.{getattr(named, '__qualname__', repr(named))}"


def adopt_class(register: Callable[[str, type[Any]], None], error: type[QuiverError], what: str, base: str,
                decorator: str) -> Callable[[str, Any], None]:
    """An ``adopt`` for registries of classes: an entry point that names a class registers
    it under the entry point's name; anything else is an ``error`` that says what it must
    name (``base``: "an Operator subclass"; ``decorator``: "@operator")."""

    def adopt(name: str, loaded: Any) -> None:
        if not isinstance(loaded, type):
            raise error(
                f"it loaded {type(loaded).__name__} {getattr(loaded, '__name__', loaded)!r}, which registered no "
                f"{what} named '{name}'; it must name {base} or a module that registers one with {decorator}"
            )
        register(name, loaded)

    return adopt


class Registry(Generic[T]):
    """Entries of one extension point, by name.

    Args:
        what: What an entry is, in messages (``"import format"``).
        plural: What several are, in messages (``"formats"``).
        group: The entry-point group third-party entries are published under.
        error: The error class of this extension point (a :class:`QuiverError`).
        how: How a new entry registers, for the message about an unknown name
            (``"with @quiver.import_format"``).
        adopt: Registers what an entry point loaded, under the entry point's name;
            raises ``error`` when it is not an entry of this registry.
        builtins: Imports the modules that register the built-in entries (called before
            the first lookup), when they are not imported with the registry.
        same: Whether an entry registered again is the one already there (default:
            identity).
        sort: List names in alphabetical order (else in registration order).
    """

    def __init__(
        self,
        what: str,
        plural: str,
        group: str,
        *,
        error: type[QuiverError] = QuiverError,
        how: str = "",
        adopt: Callable[[str, Any], None] | None = None,
        builtins: Callable[[], None] | None = None,
        same: Callable[[T, T], bool] | None = None,
        sort: bool = True,
    ) -> None:
        self.what = what
        self.plural = plural
        self.sort = sort
        self.group = group
        self.error = error
        self.how = how
        self._adopt = adopt
        self._builtins = builtins
        self._same = same or (lambda a, b: a is b)
        self._entries: dict[str, T] = {}
        self._from_entry_points: set[str] = set()
        self._failed: dict[str, str] = {}
        self._loaded = False

    # -- registering ---------------------------------------------------------------------
    def check_name(self, name: object) -> str:
        """``name`` if it can name an entry; raises ``error`` otherwise."""
        if not isinstance(name, str) or not name.strip() or name != name.strip():
            raise self.error(f"a {self.what} name must be a non-empty string without surrounding spaces; got {name!r}")
        return name

    def add(self, name: str, entry: T, *, describe: Callable[[T], str] = qualified_name) -> bool:
        """Register ``entry`` as ``name``; False when that very entry is there already.

        Raises:
            error: ``name`` is not a valid name, or another entry has it (both described).
        """
        self.check_name(name)
        known = self._entries.get(name)
        if known is not None:
            if self._same(known, entry):
                return False
            raise self.error(
                f"{self.what} name '{name}' is already registered by {describe(known)}; "
                f"{describe(entry)} needs another name"
            )
        self._entries[name] = entry
        return True

    def remove(self, name: str) -> T:
        """Forget ``name`` and return its entry.

        Raises:
            error: No entry has that name.
        """
        entry = self.get(name)
        del self._entries[name]
        self._from_entry_points.discard(name)
        return entry

    # -- looking up ----------------------------------------------------------------------
    def get(self, name: str) -> T:
        """The entry registered as ``name``.

        Raises:
            error: No entry has that name (the message lists the registered ones), or the
                entry point that should provide it failed to load.
        """
        if name not in self._entries:
            self.load_entry_points()
        found = self._entries.get(name)
        if found is not None:
            return found
        if name in self._failed:
            raise self.error(f"{self.what} '{name}' could not be loaded from {self._failed[name]}")
        how = f"{self.how} or " if self.how else ""
        raise self.error(
            f"unknown {self.what} {name!r}; the registered {self.plural} are {', '.join(self.names()) or 'none'} "
            f"(a new one registers {how}in the entry-point group '{self.group}')"
        )

    def find(self, name: str) -> T | None:
        """The entry registered as ``name`` so far, or None; loads nothing (a fast path for
        lookups made once per value)."""
        return self._entries.get(name)

    def names(self) -> list[str]:
        """The registered names (entry points loaded), sorted or in registration order."""
        return list(self.items())

    def items(self) -> dict[str, T]:
        """Every entry by name (entry points loaded), sorted or in registration order."""
        self.load_entry_points()
        return dict(sorted(self._entries.items())) if self.sort else dict(self._entries)

    # -- entry points --------------------------------------------------------------------
    def load_entry_points(self) -> None:
        """Import the built-in entries and the group's entry points, once."""
        if self._loaded:
            return
        self._loaded = True
        if self._builtins is not None:
            self._builtins()
        for ep in entry_points(group=self.group):
            before = set(self._entries)
            try:
                loaded = ep.load()
                if ep.name not in self._entries:
                    if self._adopt is None:
                        raise self.error(f"importing it registered no {self.what} named '{ep.name}'")
                    self._adopt(ep.name, loaded)
            except Exception as exc:  # a broken plugin must not hide the other entries
                self._failed[ep.name] = f"entry point '{ep.name} = {ep.value}': {type(exc).__name__}: {exc}"
            self._from_entry_points.update(set(self._entries) - before)

    def forget_entry_points(self) -> None:
        """Forget what the entry points registered; they are read again the next time a
        name is not found (tests install and remove plugins)."""
        for name in self._from_entry_points:
            self._entries.pop(name, None)
        self._from_entry_points.clear()
        self._failed.clear()
        self._loaded = False

    def reload_entry_points(self) -> None:
        """Forget what the entry points registered and load them again now."""
        self.forget_entry_points()
        self.load_entry_points()
