"""OTLP protobuf span files: the body an OTLP/HTTP exporter sends, read without a protobuf library.

An ``ExportTraceServiceRequest`` (``opentelemetry/proto/collector/trace/v1``) is decoded
into the OTLP/JSON shape (``resourceSpans``, ``scopeSpans``, hex ids, ``AnyValue``
attributes) that :mod:`quiver._importers.otel` reads, so both spellings import the same.
Only the fields of the trace schema are read; unknown fields are skipped as the wire
format allows.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["OtlpDecodeError", "decode_export", "looks_like_otlp"]


class OtlpDecodeError(ValueError):
    """Bytes that are not a well-formed OTLP protobuf message."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise OtlpDecodeError("a varint runs past the end of the message")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of one message: ints for varints and fixed numbers, bytes
    for length-delimited fields."""
    pos = 0
    value: int | bytes
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            if pos + 8 > len(data):
                raise OtlpDecodeError("a 64-bit field runs past the end of the message")
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise OtlpDecodeError("a length-delimited field runs past the end of the message")
            value, pos = data[pos:pos + size], pos + size
        elif wire == 5:
            if pos + 4 > len(data):
                raise OtlpDecodeError("a 32-bit field runs past the end of the message")
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise OtlpDecodeError(f"wire type {wire} of field {number} is not protobuf's")
        if number == 0:
            raise OtlpDecodeError("field number 0")
        yield number, wire, value


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="replace")


def _u64(value: Any) -> int:
    return int(struct.unpack("<Q", value)[0]) if isinstance(value, bytes) else int(value)


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _any(data: bytes) -> dict[str, Any]:
    for number, _, value in _fields(data):
        if number == 1:
            return {"stringValue": _text(value)}
        if number == 2:
            return {"boolValue": bool(value)}
        if number == 3:
            return {"intValue": str(_signed(value))}
        if number == 4:
            return {"doubleValue": struct.unpack("<d", value)[0]}
        if number == 5:
            return {"arrayValue": {"values": [_any(v) for n, _, v in _fields(value) if n == 1]}}
        if number == 6:
            return {"kvlistValue": {"values": [_kv(v) for n, _, v in _fields(value) if n == 1]}}
        if number == 7:
            return {"bytesValue": value.hex()}
    return {}


def _kv(data: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {"key": "", "value": {}}
    for number, _, value in _fields(data):
        if number == 1:
            out["key"] = _text(value)
        elif number == 2:
            out["value"] = _any(value)
    return out


Schema = Mapping[int, tuple[str, Callable[[Any], Any], bool]]


def _message(data: bytes, schema: Schema) -> dict[str, Any]:
    """A message as a dict: ``schema`` maps field numbers to (JSON name, decoder, repeated)."""
    out: dict[str, Any] = {}
    for number, _, value in _fields(data):
        if number not in schema:
            continue
        name, decode, repeated = schema[number]
        if repeated:
            out.setdefault(name, []).append(decode(value))
        else:
            out[name] = decode(value)
    return out


def _hex(value: bytes) -> str:
    return value.hex()


_STATUS: Schema = {2: ("message", _text, False), 3: ("code", int, False)}
_EVENT: Schema = {1: ("timeUnixNano", lambda v: str(_u64(v)), False), 2: ("name", _text, False),
          3: ("attributes", _kv, True)}
_LINK: Schema = {1: ("traceId", _hex, False), 2: ("spanId", _hex, False), 3: ("traceState", _text, False),
         4: ("attributes", _kv, True)}
_SPAN: Schema = {
    1: ("traceId", _hex, False), 2: ("spanId", _hex, False), 3: ("traceState", _text, False),
    4: ("parentSpanId", _hex, False), 5: ("name", _text, False), 6: ("kind", int, False),
    7: ("startTimeUnixNano", lambda v: str(_u64(v)), False), 8: ("endTimeUnixNano", lambda v: str(_u64(v)), False),
    9: ("attributes", _kv, True), 11: ("events", lambda v: _message(v, _EVENT), True),
    13: ("links", lambda v: _message(v, _LINK), True), 15: ("status", lambda v: _message(v, _STATUS), False),
}
_SCOPE: Schema = {1: ("name", _text, False), 2: ("version", _text, False), 3: ("attributes", _kv, True)}
_SCOPE_SPANS: Schema = {1: ("scope", lambda v: _message(v, _SCOPE), False),
                        2: ("spans", lambda v: _message(v, _SPAN), True), 3: ("schemaUrl", _text, False)}
_RESOURCE: Schema = {1: ("attributes", _kv, True)}
_RESOURCE_SPANS: Schema = {1: ("resource", lambda v: _message(v, _RESOURCE), False),
                   2: ("scopeSpans", lambda v: _message(v, _SCOPE_SPANS), True), 3: ("schemaUrl", _text, False),
                   1000: ("scopeSpans", lambda v: _message(v, _SCOPE_SPANS), True)}
_REQUEST: Schema = {1: ("resourceSpans", lambda v: _message(v, _RESOURCE_SPANS), True)}


def decode_export(data: bytes) -> dict[str, Any]:
    """An OTLP ``ExportTraceServiceRequest`` in its OTLP/JSON shape.

    Raises:
        OtlpDecodeError: The bytes are not a well-formed protobuf message.
    """
    try:
        return _message(data, _REQUEST)
    except (struct.error, RecursionError) as exc:
        raise OtlpDecodeError(str(exc)) from None


def looks_like_otlp(data: bytes, suffix: str) -> bool:
    """True for a protobuf span file: a ``.pb``/``.protobuf``/``.bin`` name, or bytes that start with
    the request's first field (``resource_spans``) and are not text."""
    if suffix in (".pb", ".protobuf", ".bin", ".binpb"):
        return True
    if not data or data[0] != 0x0A:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False
