"""Loading and calling a user's pipeline function.

A pipeline is named ``package.module:function`` (imported from ``sys.path``) or
``path/to/file.py:function`` (a file path, relative to a base folder such as the spec's
folder). It is called with the input's fields as keyword arguments. An ``async def``
pipeline's coroutine runs in one event loop the process shares (:func:`run_shared`), on a
thread of its own, whatever thread calls it: an async client that a library keeps for
the whole process (the ``openai-agents`` and ``pydantic-ai`` SDKs' default clients) binds
its connections and locks to the loop it first ran in, and would fail with "bound to a
different event loop" when traces ran in loops of their own on several threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import importlib
import importlib.util
import inspect
import sys
import threading
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from quiver._errors import PipelineError

__all__ = ["load_pipeline", "call_pipeline", "check_pipeline_inputs", "run_shared"]


def load_pipeline(ref: str, base_dir: Path | None = None) -> Callable[..., Any]:
    """Import the pipeline function named by ``ref``."""
    module_part, sep, attr = ref.rpartition(":")
    if not sep or not module_part or not attr:
        raise PipelineError(
            f"pipeline {ref!r} must be 'package.module:function' or 'path/to/file.py:function'"
        )
    module = _import(module_part, base_dir)
    fn: object = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            public = sorted(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n)))
            raise PipelineError(
                f"pipeline {ref!r}: {module_part} has no attribute {attr!r}; "
                f"its callables are {', '.join(public) or 'none'}"
            )
        fn = getattr(fn, part)
    if not callable(fn):
        raise PipelineError(f"pipeline {ref!r} is not callable (it is a {type(fn).__name__})")
    return fn


def _import(module_part: str, base_dir: Path | None) -> Any:
    if module_part.endswith(".py") or "/" in module_part or "\\" in module_part:
        path = Path(module_part)
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        if not path.is_file():
            raise PipelineError(f"pipeline file {path} does not exist")
        name = f"quiver_pipeline_{path.stem}_{abs(hash(str(path.resolve()))) % 10**8}"
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise PipelineError(f"pipeline file {path} cannot be imported")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        sys.path.insert(0, str(path.parent))
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[name]
            raise PipelineError(f"importing pipeline file {path} failed: {type(exc).__name__}: {exc}") from exc
        return module
    try:
        return importlib.import_module(module_part)
    except ImportError as exc:
        raise PipelineError(f"cannot import pipeline module {module_part!r}: {exc}") from exc


def check_pipeline_inputs(fn: Callable[..., Any], inputs: Mapping[str, Any]) -> None:
    """Fail early, with the reason, when ``fn`` cannot take ``inputs`` as keywords."""
    try:
        inspect.signature(fn).bind(**inputs)
    except TypeError as exc:
        params = ", ".join(inspect.signature(fn).parameters)
        raise PipelineError(
            f"pipeline {getattr(fn, '__name__', fn)}({params}) cannot take inputs "
            f"{{{', '.join(inputs)}}}: {exc}"
        ) from None


def call_pipeline(fn: Callable[..., Any], inputs: Mapping[str, Any]) -> Any:
    """Call ``fn(**inputs)``; an awaitable result runs to completion in the shared event
    loop (:func:`run_shared`)."""
    result = fn(**inputs)
    if inspect.isawaitable(result):
        return run_shared(_await(result))
    return result


async def _await(aw: Any) -> Any:
    return await aw


_loop_lock = threading.Lock()
_loop: list[asyncio.AbstractEventLoop] = []


def _shared_loop() -> asyncio.AbstractEventLoop:
    """The process's shared event loop, started on a daemon thread the first time."""
    with _loop_lock:
        if not _loop:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="quiver-event-loop", daemon=True).start()
            _loop.append(loop)
        return _loop[0]


def run_shared(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coro`` to completion in the shared event loop, in a task that carries the
    calling thread's context (the trace being recorded), and return its result; the
    calling thread waits. Called from the loop's own thread, it runs ``coro`` in a loop
    of its own instead (nothing can wait on the loop it runs in)."""
    loop = _shared_loop()
    if threading.current_thread().name == "quiver-event-loop":
        return asyncio.run(coro)
    context = contextvars.copy_context()
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()
    tasks: list[asyncio.Task[Any]] = []

    def start() -> None:
        task = loop.create_task(coro, context=context)
        tasks.append(task)
        task.add_done_callback(lambda t: _settle(t, done))

    loop.call_soon_threadsafe(start)
    try:
        return done.result()
    except BaseException:
        if not done.done():  # interrupted while waiting: the task is not left running
            loop.call_soon_threadsafe(lambda: [t.cancel() for t in tasks])
        raise


def _settle(task: asyncio.Task[Any], done: concurrent.futures.Future[Any]) -> None:
    if task.cancelled():
        done.set_exception(asyncio.CancelledError())
    elif task.exception() is not None:
        done.set_exception(task.exception())
    else:
        done.set_result(task.result())
