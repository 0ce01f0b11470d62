"""Streaming reader of torch.profiler (Kineto) Chrome-trace JSON files, plain or gzip.

A Kineto trace is one JSON object whose ``traceEvents`` array holds every event; real traces of
a few training steps reach gigabytes. :func:`read_events` never holds the file: it decodes the
text in chunks of :data:`CHUNK_CHARS` characters, decodes one event at a time with
:meth:`json.JSONDecoder.raw_decode`, hands each event to a filter that keeps what the importer
needs in a compact form, and drops the rest. Memory is bounded by the events kept plus one
chunk; a single event or top-level value larger than :data:`MAX_VALUE_CHARS` is refused, and so
is a file whose (decompressed) text exceeds ``max_bytes`` (:data:`MAX_TRACE_BYTES` by default).
"""

from __future__ import annotations

import codecs
import gzip
import json
import stat
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from schedopt.errors import SchedoptError

__all__ = ["CHUNK_CHARS", "MAX_TRACE_BYTES", "MAX_VALUE_CHARS", "read_events"]

#: Largest (decompressed) trace file read, in bytes.
MAX_TRACE_BYTES = 4 * 2**30
#: Largest single event or top-level value, in characters.
MAX_VALUE_CHARS = 64 * 2**20
#: Characters decoded per read.
CHUNK_CHARS = 1 << 20

_WS = " \t\r\n"
_DECODER = json.JSONDecoder()


class _Text:
    """A growing window on the decoded text of a file, read chunk by chunk."""

    def __init__(self, raw: IO[bytes], where: str, max_bytes: int) -> None:
        self.raw = raw
        self.where = where
        self.max_bytes = max_bytes
        self.read_bytes = 0
        self.decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="strict")
        self.buf = ""
        self.pos = 0
        self.eof = False

    def more(self) -> bool:
        """Append one chunk; False at the end of the file."""
        if self.eof:
            return False
        try:
            data = self.raw.read(CHUNK_CHARS)
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise SchedoptError(f"truncated or corrupt gzip data ({exc})", "file",
                                self.where) from None
        except OSError as exc:
            raise SchedoptError(f"cannot read file: {exc.strerror or exc}", "file",
                                self.where) from None
        self.read_bytes += len(data)
        if self.read_bytes > self.max_bytes:
            raise SchedoptError(f"larger than the {self.max_bytes:,}-byte limit of a trace file",
                                "file", self.where)
        try:
            text = self.decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            at = self.read_bytes - len(data) + exc.start
            raise SchedoptError(f"not UTF-8 text near byte {at}",
                                "file", self.where) from None
        if self.pos:
            self.buf = self.buf[self.pos:]
            self.pos = 0
        self.buf += text
        if not data:
            self.eof = True
        return True

    def skip_ws(self) -> str:
        """The next non-blank character (not consumed); '' at the end of the file."""
        while True:
            n = len(self.buf)
            while self.pos < n and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < n:
                return self.buf[self.pos]
            if not self.more():
                return ""

    def expect(self, chars: str, what: str) -> str:
        c = self.skip_ws()
        if not c or c not in chars:
            found = repr(c) if c else "the end of the file"
            raise SchedoptError(f"not a torch.profiler trace: expected {what}, found {found}",
                                "file", self.where)
        self.pos += 1
        return c

    def value(self) -> Any:
        """Decode the next JSON value, reading more text until it is complete."""
        self.skip_ws()
        while True:
            try:
                obj, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if len(self.buf) - self.pos > MAX_VALUE_CHARS:
                    raise SchedoptError(f"one JSON value is larger than {MAX_VALUE_CHARS:,}"
                                        " characters, or malformed", "file", self.where) from None
                if not self.more():
                    raise SchedoptError(f"truncated or malformed JSON ({exc.msg})", "file",
                                        self.where) from None
                continue
            if end == len(self.buf) and not self.eof and not isinstance(obj, dict | list | str):
                self.more()  # a number or literal may go on in the next chunk
                continue
            self.pos = end
            return obj


def _open(path: Path) -> IO[bytes]:
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise SchedoptError("cannot read: not a regular file", "file", str(path))
        fh: IO[bytes] = path.open("rb")
    except OSError as exc:
        raise SchedoptError(f"cannot read file: {exc.strerror or exc}", "file", str(path)) from None
    head = fh.read(2)
    fh.seek(0)
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[return-value]
    return fh


def read_events(path: str | Path, keep: Callable[[dict[str, Any]], None], *,
                max_bytes: int | None = None) -> dict[str, Any]:
    """Stream the ``traceEvents`` of a Kineto trace through ``keep``.

    Parameters
    ----------
    path
        A ``.json`` or gzip-compressed (``.json.gz``) Chrome trace written by
        ``torch.profiler`` (``export_chrome_trace`` or ``tensorboard_trace_handler``).
    keep
        Called with every event (a dict) in file order; it keeps what it needs.
    max_bytes
        Largest decompressed size read (default :data:`MAX_TRACE_BYTES`).

    Returns
    -------
    dict
        The trace's other top-level fields (``distributedInfo``, ``deviceProperties``, ...).

    Raises
    ------
    SchedoptError
        Unreadable file, truncated gzip or JSON, a JSON document that is not a Kineto trace
        (no ``traceEvents`` array), or a file over the size limit.
    """
    p = Path(path)
    limit = MAX_TRACE_BYTES if max_bytes is None else int(max_bytes)
    meta: dict[str, Any] = {}
    with _open(p) as raw:
        text = _Text(raw, str(p), limit)
        text.expect("{", "a JSON object with traceEvents")
        found = False
        c = text.skip_ws()
        if c == "}":
            text.pos += 1
        while c != "}":
            key = text.value()
            if not isinstance(key, str):
                raise SchedoptError("not a torch.profiler trace: malformed top-level object",
                                    "file", str(p))
            text.expect(":", "':'")
            if key == "traceEvents":
                found = True
                _stream_array(text, keep)
            else:
                meta[key] = text.value()
            c = text.expect(",}", "',' or '}'")
        if not found:
            raise SchedoptError("not a torch.profiler trace: no traceEvents array", "file", str(p))
        if text.skip_ws():
            raise SchedoptError("not a torch.profiler trace: text after the JSON object",
                                "file", str(p))
    return meta


def _stream_array(text: _Text, keep: Callable[[dict[str, Any]], None]) -> None:
    text.expect("[", "the traceEvents array")
    if text.skip_ws() == "]":
        text.pos += 1
        return
    while True:
        ev = text.value()
        if isinstance(ev, dict):
            keep(ev)
        if text.expect(",]", "',' or ']' in traceEvents") == "]":
            return

