"""The engine's exception tree.

Every error the engine raises on purpose is a :class:`QuiverError`. Errors from the
file system, YAML, pydantic, the OpenAI client and Ray are mapped to this tree at the
boundary where they are caught, so callers only need to know these classes::

    QuiverError
     ├── TraceFormatError      a trace file line that cannot be read (file, line, field)
     ├── SpecError             an experiment spec that is not valid (file, line, field path)
     ├── InstrumentationError  the instrumentation API used in a way that cannot be recorded
     ├── LLMError              an LLM call that failed for good
     │    ├── LLMRequestError  the endpoint refused the request (4xx other than 429)
     │    └── LLMUnavailable   retries exhausted on 429 / 5xx / timeouts / malformed bodies
     ├── SimulatorError        the bundled simulator could not start or was misconfigured
     │    └── SimRequestError        a request the simulator cannot answer (quiver.replay._sim)
     ├── PipelineError         a user pipeline could not be loaded or called
     ├── OutputError           an output folder that cannot be written: a link that leaves it,
     │                         in use by another command, holding what the command did not
     │                         write, or a disk that refuses the write (quiver._outdir)
     │
     │   defined beside the code that raises them:
     ├── FieldTypeError        a value of the wrong kind for its field type (quiver._distance)
     ├── KernelError           a field type that cannot be registered or found (quiver._distance)
     ├── EmbeddingError        an embedding model that cannot load or run (quiver._distance)
     ├── NoPairsError          a corpus with no input group of two traces (quiver._stats)
     ├── ImportFormatError     an import format that cannot be registered or found (quiver._importers)
     ├── CampaignFormatError   a campaign.json or pair row that cannot be read back (quiver._interventional)
     ├── UnknownPerturbationError  no perturbation of that id in a campaign (quiver._interventional)
     ├── OperatorError         an operator that cannot be built or applied (quiver.perturbations)
     ├── ReplayError           a replay that cannot be set up (quiver.replay)
     ├── LedgerError           a campaign ledger that is damaged or cannot be read (quiver.experiments)
     └── StoreError            a cache file that cannot be opened, read or written (quiver._sqlite)
          ├── ResponseCacheError   the LLM response cache (quiver.replay)
          └── EmbeddingCacheError  the embedding cache (quiver._distance; also an EmbeddingError)

Messages follow one pattern: what was wrong, where, and what would be right.
"""

from __future__ import annotations

__all__ = [
    "QuiverError",
    "TraceFormatError",
    "SpecError",
    "InstrumentationError",
    "LLMError",
    "LLMRequestError",
    "LLMUnavailable",
    "SimulatorError",
    "PipelineError",
    "OutputError",
]


class QuiverError(Exception):
    """Base class of every error the engine raises on purpose."""


class TraceFormatError(QuiverError):
    """A line of a trace file that cannot be read as a v1 trace.

    Attributes:
        file: The file the line came from.
        line: The 1-based line number.
        field: The field path inside the trace (``calls[3].occurrence``), or ``None``
            when the line is not JSON at all.
        reason: What was wrong with it.
    """

    def __init__(self, file: str, line: int, field: str | None, reason: str) -> None:
        self.file = file
        self.line = line
        self.field = field
        self.reason = reason
        where = f"{file}:{line}"
        super().__init__(f"{where}: {field}: {reason}" if field else f"{where}: {reason}")


class SpecError(QuiverError):
    """An experiment spec that is not valid.

    Attributes:
        file: The spec file (``None`` for a spec built in Python).
        line: The 1-based line of the offending key or value, when known.
        path: The field path (``perturbations[2].params.set``), when known.
        reason: What was wrong and what would be valid.
    """

    def __init__(
        self, file: str | None, line: int | None, path: str | None, reason: str
    ) -> None:
        self.file = file
        self.line = line
        self.path = path
        self.reason = reason
        where = file or "<spec>"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {path}: {reason}" if path else f"{where}: {reason}")


class InstrumentationError(QuiverError):
    """The instrumentation API was used in a way that cannot be recorded."""


class LLMError(QuiverError):
    """An LLM call failed for good (after the engine's own retries)."""


class LLMRequestError(LLMError):
    """The endpoint refused the request (a 4xx status other than 429)."""


class LLMUnavailable(LLMError):
    """Retries were exhausted on rate limits, server errors, timeouts or bad bodies."""


class SimulatorError(QuiverError):
    """The bundled LLM simulator could not start or was misconfigured."""


class PipelineError(QuiverError):
    """A user pipeline could not be loaded or called."""


class OutputError(QuiverError):
    """A file or folder of an output folder that cannot be written: a link that leaves
    the folder, a folder in use by another command or holding files the command did not
    write, or a disk that refuses the write (full, read-only, over quota, failing).

    Attributes:
        path: The file or folder.
        errno: The operating system's error number when the disk refused the write, else None.
        way_out: What to do, once the command that met the error has said it (a command
            adds it where it catches the error: :meth:`with_way_out`).
    """

    def __init__(self, message: str, *, path: str | None = None, errno: int | None = None,
                 way_out: str | None = None) -> None:
        self.message = message
        self.path = path
        self.errno = errno
        self.way_out = way_out
        super().__init__(f"{message}; {way_out}" if way_out else message)

    def with_way_out(self, way_out: str) -> OutputError:
        """The same error, saying ``way_out`` after what was wrong."""
        return OutputError(self.message, path=self.path, errno=self.errno, way_out=way_out)
