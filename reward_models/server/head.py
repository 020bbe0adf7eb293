"""The request head as its bytes arrive: answered at once when they cannot begin an HTTP/1.x request.

The accept loop holds a connection without a thread until its head (request line and header lines,
up to the blank line) is complete, for at most ``--header_timeout`` seconds. That timeout is what
bounds a slow client (slowloris), so it must stay long enough for a slow link. It should not apply
to a client that does not speak HTTP at all (a TLS ClientHello sent to an http:// port, a telnet
"hello", random bytes): such a client would wait the whole timeout for nothing. So every chunk is
checked against the rule below, and the first byte that breaks it is answered (400, 414 or 431
with a JSON body) and the connection closed, within one round trip:

  * request line: ``METHOD SP TARGET SP HTTP/d.d``, then LF or CRLF; METHOD is 1-20 upper-case
    letters, ``-`` or ``_`` (so ``hello`` fails at its first byte, a TLS record at its first byte,
    0x16); TARGET is printable ASCII without spaces; at most ``MAX_REQUEST_LINE`` bytes (414);
  * header lines: ``Name: value`` with Name an RFC 9110 token (or a continuation line starting
    with a space or tab), no control bytes other than tab; the whole head at most
    ``MAX_HEADER_BYTES`` (431).

What "looks like HTTP" is checked as a prefix: ``P``, ``POST /sc`` and ``POST /score HTTP/1.1``
followed by CRLF and ``Ho`` all may still become a valid head, so a client sending them slowly is
bounded by the header timeout only, as before. A chunk costs its own length plus at most
``MAX_REQUEST_LINE`` bytes re-read (the line still arriving, from its start; a header line only up to
its colon), so a client sending one byte at a time cannot make the check quadratic in the head's size.
"""

from __future__ import annotations

import re

from .limits import MAX_HEADER_BYTES, MAX_REQUEST_LINE, HTTPError

_METHOD = re.compile(rb"[A-Z][A-Z_-]{0,19}")
_TARGET = re.compile(rb"[!-~]*")
_VERSION = re.compile(rb"HTTP/\d\.\d")
_VERSION_PREFIX = re.compile(rb"H(?:T(?:T(?:P(?:/(?:\d(?:\.(?:\d\r?)?)?)?)?)?)?)?")
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]*")
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # in a line without its LF / CRLF (a CR alone is refused)
_MAX_NAME = 1024  # bytes of a header name (RFC 9110 sets none; the longest registered ones are ~40)
_EXAMPLE = "send e.g. 'POST /score HTTP/1.1' and headers"


def request_line_problem(line: bytes, complete: bool) -> str | None:
    """Why ``line`` (without its LF; ``complete`` = its LF arrived) cannot be an HTTP/1.x request line, or None."""
    if complete:
        line = line.removesuffix(b"\r")
    method = _METHOD.match(line)
    if method is None or (method.end() < len(line) and line[method.end()] != 0x20):
        return "it does not start with a method such as POST or GET"
    start = method.end() + 1
    if start > len(line):
        return "the request line has no target and version" if complete else None
    end = _TARGET.match(line, start).end()
    if end == len(line) or (not complete and line[end:] == b"\r"):
        return "the request line has no HTTP version" if complete else None
    if line[end] != 0x20 or end == start:
        return "the request target is not printable ASCII without spaces"
    version = line[end + 1 :]
    if (_VERSION if complete else _VERSION_PREFIX).fullmatch(version) is None and version:
        return "the request line does not end with an HTTP version such as HTTP/1.1"
    if complete and not version:
        return "the request line has no HTTP version"
    return None


class RequestHead:
    """The head of one connection, checked as it arrives; ``data`` holds every byte received so far."""

    __slots__ = ("_line", "_lines", "_scanned", "data")

    def __init__(self) -> None:
        self.data = bytearray()
        self._line = 0  # where the line still arriving starts
        self._lines = 0  # complete lines so far (0: the request line is arriving)
        self._scanned = 0  # bytes before this offset were looked at for control bytes

    def feed(self, chunk: bytes) -> bool:
        """Add ``chunk``; True once the head is complete (its blank line arrived; what follows is body).

        Raises :class:`HTTPError` (400, 414 or 431) as soon as the bytes so far cannot begin an HTTP/1.x
        request, with the reason in its message.
        """
        data = self.data
        searched = max(self._line, len(data))  # no LF in [self._line, searched)
        data += chunk
        if self._lines == 0 and data[:1] == b"\x16":  # a TLS record of type handshake
            raise HTTPError(400, "this server speaks plain HTTP, not TLS: use an http:// URL (or a TLS proxy)")
        while (end := data.find(b"\n", searched)) >= 0:
            self._check(end, complete=True)
            blank = end - self._line <= 1 and data[self._line : end] in (b"", b"\r")
            self._line = searched = end + 1
            self._lines += 1
            if blank:  # the request line itself is never blank: _check refused that
                return True
        self._check(len(data), complete=False)
        if len(data) > MAX_HEADER_BYTES:
            raise HTTPError(431, f"request headers larger than {MAX_HEADER_BYTES} bytes")
        return False

    def _check(self, end: int, complete: bool) -> None:
        """Check the line from ``self._line`` to ``end`` (exclusive; ``complete``: ``end`` is its LF)."""
        data, start = self.data, self._line
        stop = end - 1 if data[end - 1 : end] == b"\r" and end > start else end  # a CR waits for its LF
        if self._lines == 0:
            if end - start > MAX_REQUEST_LINE:
                raise HTTPError(414, f"request line longer than {MAX_REQUEST_LINE} bytes")
            problem = request_line_problem(bytes(data[start:end]), complete)
            if problem:
                raise HTTPError(400, f"not an HTTP/1.x request: {problem}; {_EXAMPLE}")
        elif data[start : start + 1] not in (b" ", b"\t"):  # a continuation line has no name
            colon = data.find(b":", start, min(stop, start + _MAX_NAME + 1))
            name_end = colon if colon >= 0 else min(stop, start + _MAX_NAME + 1)
            named = colon > start or stop == start or (colon < 0 and not complete and name_end - start <= _MAX_NAME)
            if not (named and _TOKEN.fullmatch(data, start, name_end)):
                raise HTTPError(400, f"not an HTTP/1.x request: header line {self._lines} is not 'Name: value'")
        if _CONTROL.search(data, max(start, self._scanned), stop):
            where = "the request line" if self._lines == 0 else f"header line {self._lines}"
            raise HTTPError(400, f"not an HTTP/1.x request: {where} holds control bytes")
        self._scanned = max(self._scanned, stop)
