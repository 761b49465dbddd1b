"""sless Python runtime: serves one handler by the sless runtime contract.

Environment (docs/runtimes.md):
  PORT           port to listen on, at 127.0.0.1
  SLESS_SOURCE   directory of the handler's code (default: working directory)
  SLESS_HANDLER  module.function (default: main.handle)
  SLESS_LOAD_ONLY  set: load the handler and exit (0 when it loads), a build's check

The handler is loaded before the port is opened, so GET /healthz answers
only once it is. Every other request is one call handler(event); the
return value becomes the response: a sless.Response chooses its status and
headers, and a generator is streamed. A handler that cannot be loaded is a
crash: the traceback and a line naming it go to stderr, and the exit code
is 1. Standard library only.
"""

import base64
import http.client
import http.server
import importlib
import itertools
import json
import os
import re
import signal
import sys
import threading
import traceback
import types
import urllib.parse

DEFAULT_HANDLER = "main.handle"
MAX_LINE = 65537  # longest chunk-size or trailer line read from a request

# The platform's activator bounds a request's head (100 fields, 16 KiB:
# docs/activator.md) and answers beyond it; behind it the runtime takes
# that and the fields the platform adds. http.server's own bound, 100
# fields, refused those with an HTML page of its own.
http.client._MAXHEADERS = 1000


class Response:
    """A handler's answer when it chooses its status or headers, or streams.

    body is encoded as a handler's return value is (str as text, bytes as
    bytes, None as no body, a generator or iterator streamed as it yields,
    anything else as JSON); status is 200 to 599, by default 200 (204
    without a body); headers is a dict (a list value repeats the field, as
    Set-Cookie does) or a list of (name, value) pairs, kept in order. A
    Content-Type there wins over the one the body's type gives.
    """

    __slots__ = ("body", "status", "headers")

    def __init__(self, body=None, status=None, headers=None):
        self.body, self.status, self.headers = body, status, headers

    def __repr__(self):
        return f"Response(status={self.status!r}, headers={self.headers!r}, body={self.body!r})"


# Handlers import the runtime's API as the module sless: `from sless import
# Response`. The runtime runs as __main__, so the module is made here, with
# the classes this file compares against.
sless = types.ModuleType("sless", "The sless runtime's API for handlers.")
sless.Response = Response

TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")  # a header name (RFC 9110 5.6.2)
# Fields the runtime writes itself: how the body is framed, and the
# connection's own, which no hop passes on.
FRAMING = {"content-length", "transfer-encoding", "connection", "keep-alive"}


def fail(message):
    print(f"sless: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def load_handler(source, handler):
    module_name, _, function_name = handler.rpartition(".")
    if not module_name or not function_name:
        fail(f"handler {handler!r} is not module.function")
    sys.modules.setdefault("sless", sless)
    sys.path.insert(0, source)
    try:
        module = importlib.import_module(module_name)
    except BaseException:  # a module may raise anything, SystemExit included
        traceback.print_exc()
        fail(f"cannot import module {module_name!r} of handler {handler} from {source}")
    function = getattr(module, function_name, None)
    if not callable(function):
        fail(f"module {module_name!r} ({getattr(module, '__file__', source)}) "
             f"has no function {function_name!r} (handler {handler})")
    return function


def decode_path(raw):
    try:
        return urllib.parse.unquote(raw, errors="strict")
    except UnicodeDecodeError:
        return raw


def make_event(request, body):
    raw_path, _, raw_query = request.path.partition("?")
    query = {}
    for key, value in urllib.parse.parse_qsl(raw_query, keep_blank_values=True):
        query.setdefault(key, value)  # a repeated key's first value
    headers = {}
    for key, value in request.headers.items():
        key = key.lower()
        headers[key] = headers[key] + ", " + value if key in headers else value
    try:
        text, encoded = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode("ascii"), True
    return {"method": request.command, "path": decode_path(raw_path), "query": query,
            "headers": headers, "body": text, "isBase64Encoded": encoded}


def encode_body(body):
    """Returns (content type, payload) for a body that is not streamed."""
    if isinstance(body, str):
        kind = "text/html" if body.startswith("<") else "text/plain"
        return kind + "; charset=utf-8", body.encode("utf-8")
    if isinstance(body, (bytes, bytearray, memoryview)):
        return "application/octet-stream", bytes(body)
    return "application/json", json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def is_stream(body):
    """A generator, async generator or other iterator is streamed; a list,
    a dict or a string is not: they are values."""
    return isinstance(body, types.AsyncGeneratorType) or (
        hasattr(body, "__next__") and not isinstance(body, (str, bytes, bytearray, memoryview, dict, list, tuple)))


def reply(result):
    """Returns (status, headers, body) for a handler's return value: body is
    bytes, or an iterator of chunks to stream. Raises ValueError for a
    Response that cannot be answered."""
    response = result if isinstance(result, Response) else Response(result)
    body, headers = response.body, header_pairs(response.headers)
    status = response.status
    if status is None:
        status = 204 if body is None else 200
    if isinstance(status, bool) or not isinstance(status, int) or not 200 <= status <= 599:
        raise ValueError(f"response status {status!r}: want an int from 200 to 599")
    if body is None:
        return status, headers, b""
    if is_stream(body):
        return status, headers, chunks(body)
    content_type, payload = encode_body(body)
    if not any(name.lower() == "content-type" for name, _ in headers):
        headers.append(("Content-Type", content_type))
    return status, headers, payload


def header_pairs(headers):
    """The (name, value) pairs of a Response's headers, in order, checked:
    a name that is not a token or a value with a line break would split the
    answer's head."""
    if headers is None:
        return []
    items = headers.items() if hasattr(headers, "items") else headers
    pairs = []
    for name, value in items:
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if not isinstance(name, str) or not TOKEN.match(name):
                raise ValueError(f"response header name {name!r} is not a token")
            v = str(v)
            if "\r" in v or "\n" in v or "\0" in v:
                raise ValueError(f"response header {name} has a line break in its value")
            if name.lower() not in FRAMING:
                pairs.append((name, v))
    return pairs


def chunks(body):
    """Iterates a streamed body, an async generator's too: each chunk a str
    or bytes."""
    if isinstance(body, types.AsyncGeneratorType):
        body = from_async(body)
    for chunk in body:
        if not isinstance(chunk, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"a streamed body yielded a {type(chunk).__name__}: want str or bytes")
        yield chunk


def chunk_bytes(chunk):
    return chunk.encode("utf-8") if isinstance(chunk, str) else bytes(chunk)


def from_async(agen):
    import asyncio  # imported by async handlers only: it costs start-up time

    loop = asyncio.new_event_loop()
    try:
        while True:
            try:
                yield loop.run_until_complete(agen.__anext__())
            except StopAsyncIteration:
                return
    finally:
        loop.run_until_complete(agen.aclose())
        loop.close()


def error_payload(message):
    return json.dumps({"error": message}).encode("utf-8")


def exit_now(e):
    """Ends the process as a handler's SystemExit asked."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(e.code if isinstance(e.code, int) else int(e.code is not None))


class RequestHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: every response has a length
    server_version = "sless-python"
    disable_nagle_algorithm = True  # headers and body are two writes

    def log_message(self, format, *args):
        pass  # access logs are the queue-proxy's; stderr is the user's

    def handle(self):
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the platform aborted the call (timeout, client gone): no traceback

    def serve(self):
        if self.command == "GET" and self.path.partition("?")[0] == "/healthz":
            self.respond(200, [("Content-Type", "text/plain; charset=utf-8")], b"ok")
            return
        with self.server.in_flight:
            self.server.active += 1
        try:
            self.call()
        finally:
            with self.server.in_flight:
                self.server.active -= 1
                self.server.in_flight.notify_all()

    def call(self):
        try:
            body = self.read_body()
        except ValueError as e:
            self.close_connection = True
            self.respond(400, [("Content-Type", "application/json")], error_payload(f"bad request body: {e}"))
            return
        try:
            result = self.server.handler(make_event(self, body))
            if isinstance(result, types.CoroutineType):
                import asyncio  # imported by async handlers only: it costs start-up time

                result = asyncio.run(result)
            status, headers, payload = reply(result)
        except SystemExit as e:  # the handler asked the process to stop
            exit_now(e)
        except Exception as e:
            traceback.print_exc()
            status, headers, payload = 500, [("Content-Type", "application/json")], error_payload(f"{type(e).__name__}: {e}")
        if isinstance(payload, bytes):
            self.respond(status, headers, payload)
        else:
            self.stream(status, headers, payload)

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self.read_chunked()
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0:
            raise ValueError(f"negative Content-Length {length}")
        return self.rfile.read(length)

    def read_chunked(self):
        chunks = []
        while True:
            size = int(self.rfile.readline(MAX_LINE).split(b";", 1)[0].strip(), 16)
            if size == 0:
                break
            chunks.append(self.rfile.read(size))
            self.rfile.readline(MAX_LINE)  # the CRLF ending the chunk
        while self.rfile.readline(MAX_LINE).strip():
            pass  # trailers are not passed on
        return b"".join(chunks)

    def send_response(self, code, message=None):
        """As http.server's, without its Server field: the function's
        answer says nothing of the runtime's version."""
        self.log_request(code)
        self.send_response_only(code, message)
        self.send_header("Date", self.date_time_string())

    def respond(self, status, headers, payload):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if status not in (204, 304):
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if status not in (204, 304) and self.command != "HEAD":
            self.wfile.write(payload)

    def stream(self, status, headers, body):
        """Sends body as it yields, a chunk each: the head at once, then each
        chunk as it comes. A body that fails cuts the answer (no last chunk,
        the connection closed), so the caller never takes a part for the
        whole."""
        first = b""
        try:
            first = next(body, b"")  # its type gives the Content-Type
        except SystemExit as e:
            exit_now(e)
        except Exception as e:
            traceback.print_exc()
            self.respond(500, [("Content-Type", "application/json")], error_payload(f"{type(e).__name__}: {e}"))
            return
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if not any(name.lower() == "content-type" for name, _ in headers):
            text = isinstance(first, str)
            self.send_header("Content-Type", "text/plain; charset=utf-8" if text else "application/octet-stream")
        bodiless = status in (204, 304) or self.command == "HEAD"
        if not bodiless:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if bodiless:
            body.close()
            return
        try:
            for chunk in itertools.chain((first,), body):
                if chunk:
                    data = chunk_bytes(chunk)
                    self.wfile.write(b"%X\r\n%s\r\n" % (len(data), data))
        except (BrokenPipeError, ConnectionResetError):
            raise  # the caller left: handle() ends quietly
        except SystemExit as e:
            exit_now(e)
        except Exception:
            traceback.print_exc()
            self.close_connection = True
            return
        finally:
            body.close()
        self.wfile.write(b"0\r\n\r\n")


for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
    setattr(RequestHandler, "do_" + method, RequestHandler.serve)


class Server(http.server.ThreadingHTTPServer):
    request_queue_size = 1024  # the default backlog of 5 drops bursts

    def __init__(self, address, handler):
        self.handler = handler
        self.active = 0  # requests being answered
        self.in_flight = threading.Condition()
        super().__init__(address, RequestHandler)

    def stop(self, signum, frame):
        # serve_forever runs in this (the main) thread, and shutdown waits
        # for it to return: it must be called from another.
        threading.Thread(target=self.shutdown, daemon=True).start()

    def drain(self):
        """Closes the listener and waits for the requests in flight; idle
        keep-alive connections are not waited for."""
        self.server_close()
        with self.in_flight:
            self.in_flight.wait_for(lambda: self.active == 0)


def main():
    source = os.path.abspath(os.environ.get("SLESS_SOURCE") or os.getcwd())
    name = os.environ.get("SLESS_HANDLER") or DEFAULT_HANDLER
    if os.environ.get("SLESS_LOAD_ONLY"):  # a build's check: load, and say no more
        load_handler(source, name)
        return
    port = os.environ.get("PORT", "")
    if not port.isdigit():
        fail(f"PORT must be a port number, not {port!r}")
    server = Server(("127.0.0.1", int(port)), load_handler(source, name))
    # SIGTERM, the platform stopping the instance, ends serving: the
    # requests in flight finish and the process exits 0. Without a handler,
    # a runtime that is PID 1 of a container would ignore it, and its pod
    # would wait out its whole grace period.
    signal.signal(signal.SIGTERM, server.stop)
    print(f"sless: serving {name} from {source} on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    server.serve_forever()
    server.drain()


if __name__ == "__main__":
    main()
