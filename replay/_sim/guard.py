"""Which requests the simulator serves: those of local processes, not those of web pages.

Listening on loopback keeps other machines out, not the web pages open in the user's
browser, which run on the same machine. A page can reach the simulator in two ways, and
:class:`_Guard` refuses both before any of the request's body is read:

* **DNS rebinding.** A page at ``http://evil.example:PORT`` has its name rebound to
  ``127.0.0.1``; its requests then reach the simulator as same-origin requests whose
  ``Host`` is ``evil.example:PORT``. The simulator serves only a ``Host`` that names it
  by address: ``127.0.0.1:PORT``, ``localhost:PORT``, ``[::1]:PORT``, or the address it
  was bound to (``SimulatorConfig.host``), with its own port (no port means 80); any
  other gets a ``421``. A request in absolute form (``POST http://host:port/...``) is
  judged by its URL's host instead, as HTTP says. An HTTP/1.1 request without a
  ``Host`` gets a ``400``, as HTTP requires; an HTTP/1.0 request without one is served:
  browsers always send ``Host``, so it comes from a local process (the simulator
  listens on loopback only).
* **Cross-origin requests** (CSRF). A page may send a ``POST`` to any URL without asking
  the server first, as long as its content type is ``text/plain``,
  ``application/x-www-form-urlencoded`` or ``multipart/form-data`` (or absent); it cannot
  read the answer, but the request runs. The simulator answers ``403`` to a ``POST``
  whose ``Content-Type`` is not ``application/json`` (parameters such as ``charset``
  allowed), to any request with an ``Origin`` other than its own (``http://`` and a
  ``Host`` it serves), and to any request a browser marks ``Sec-Fetch-Site:
  cross-site`` or ``same-site``. A preflight (``OPTIONS`` with an ``Origin``) gets the
  same ``403``, and no answer of the simulator carries an ``Access-Control-Allow-*``
  header, so a browser never lets a page send a JSON request nor read an answer.

The clients of the engine (the ``openai`` SDK, ``httpx``, LangChain, DSPy through
LiteLLM, llama-index) send ``Host`` from the base URL and ``application/json`` bodies,
and no ``Origin``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from email.message import Message

from .wire import _HTTPError

_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
"""The names of the simulator's address served whatever address it was bound to."""

_DEFAULT_PORT = 80
"""The port of a ``Host`` or ``Origin`` that names none."""

_AUTHORITY = re.compile(r"(\[[0-9a-f:.]+\]|[^\[\]:@/?#\s]+)(?::([0-9]{1,5}))?")
"""A ``Host`` value: a name or IPv4 address, or an IPv6 address in brackets; a port."""

_OTHER_SITES = ("cross-site", "same-site")
"""``Sec-Fetch-Site`` values of requests from another site's pages."""


def _authority(value: str) -> tuple[str, int] | None:
    """``host[:port]`` as a normalized (host, port), or ``None`` when it is not one."""
    match = _AUTHORITY.fullmatch(value.strip().lower())
    if match is None:
        return None
    host, port = match.groups()
    return _host_name(host), _DEFAULT_PORT if port is None else int(port)


def _host_name(host: str) -> str:
    """A host as it is compared: an IP address in its shortest form (IPv6 in brackets)."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host
    return f"[{address}]" if address.version == 6 else str(address)


class _Guard:
    """The ``Host``, ``Origin`` and content-type rules of one listening simulator."""

    def __init__(self, bound: Iterable[str], port: int) -> None:
        """Serve the loopback names and ``bound`` (the host asked for, the address bound)
        with ``port``."""
        names = {_host_name(name.lower()) for name in (*_LOOPBACK_NAMES, *bound)}
        self._served = frozenset((name, port) for name in names)
        self._own = f"127.0.0.1:{port}"

    def refusal(self, command: str, path: str, version: str, headers: Message) -> _HTTPError | None:
        """Why a request must be refused (its status and body), or ``None`` to serve it."""
        return self._host_refusal(path, version, headers) or self._browser_refusal(command, headers)

    def _host_refusal(self, path: str, version: str, headers: Message) -> _HTTPError | None:
        hosts = headers.get_all("Host") or []
        if not path.startswith("/") and "://" in path:  # absolute form: the URL names the host
            hosts = [path.partition("://")[2].partition("/")[0]]
        if len(hosts) > 1:
            return _HTTPError(400, f"the request has {len(hosts)} Host headers; HTTP allows one")
        if not hosts:
            if version == "HTTP/1.0":
                return None
            return _HTTPError(400, f"an HTTP/1.1 request must carry a Host header; the simulator is {self._own}")
        if _authority(hosts[0]) in self._served:
            return None
        return _HTTPError(
            421, f"the simulator serves requests for its own address ({self._own}, or localhost with its port); "
            f"Host {hosts[0].strip()!r:.80} is not it (a web page whose name resolves to 127.0.0.1?)",
            code="misdirected_request",
        )

    def _browser_refusal(self, command: str, headers: Message) -> _HTTPError | None:
        origins = headers.get_all("Origin") or []
        if origins and not (len(origins) == 1 and self._is_own_origin(origins[0])):
            return _cross_origin(f"Origin {', '.join(origins)!r:.80} is not the simulator's own "
                                 f"(http://{self._own})")
        site = (headers.get("Sec-Fetch-Site") or "").strip().lower()
        if site in _OTHER_SITES:
            return _cross_origin(f"the browser marked it Sec-Fetch-Site: {site}")
        if command == "POST":
            content_type = headers.get("Content-Type")
            media = (content_type or "").partition(";")[0].strip().lower()
            if media != "application/json":
                got = "none" if content_type is None else repr(content_type.strip())
                return _cross_origin(f"a POST body must be Content-Type: application/json; got {got:.80} "
                                     "(a type a web page may send without asking)")
        return None

    def _is_own_origin(self, origin: str) -> bool:
        scheme, sep, rest = origin.strip().partition("://")
        return bool(sep) and scheme.lower() == "http" and "/" not in rest and _authority(rest) in self._served


def _cross_origin(reason: str) -> _HTTPError:
    return _HTTPError(
        403, f"cross-origin request refused: {reason}; the simulator serves local processes, not web pages",
        code="cross_origin_refused",
    )
