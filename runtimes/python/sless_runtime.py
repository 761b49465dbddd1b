"""sless Python runtime: serves one handler by the sless runtime contract.

Environment (docs/runtimes.md):
  PORT           port to listen on, at 127.0.0.1
  SLESS_SOURCE   directory of the handler's code (default: working directory)
  SLESS_HANDLER  module.function (default: main.handle)

The handler is loaded before the port is opened, so GET /healthz answers
only once it is. Every other request is one call handler(event); the
return value becomes the response. A handler that cannot be loaded is a
crash: the traceback and a line naming it go to stderr, and the exit code
is 1. Standard library only.
"""

import base64
import http.client
import http.server
import importlib
import json
import os
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


def fail(message):
    print(f"sless: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def load_handler(source, handler):
    module_name, _, function_name = handler.rpartition(".")
    if not module_name or not function_name:
        fail(f"handler {handler!r} is not module.function")
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


def encode_result(result):
    """Returns (status, content type, payload) for a handler's return value."""
    if result is None:
        return 204, None, b""
    if isinstance(result, str):
        kind = "text/html" if result.startswith("<") else "text/plain"
        return 200, kind + "; charset=utf-8", result.encode("utf-8")
    if isinstance(result, (bytes, bytearray, memoryview)):
        return 200, "application/octet-stream", bytes(result)
    return 200, "application/json", json.dumps(result, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def error_payload(message):
    return json.dumps({"error": message}).encode("utf-8")


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
            self.respond(200, "text/plain; charset=utf-8", b"ok")
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
            self.respond(400, "application/json", error_payload(f"bad request body: {e}"))
            return
        try:
            result = self.server.handler(make_event(self, body))
            if isinstance(result, types.CoroutineType):
                import asyncio  # imported by async handlers only: it costs start-up time

                result = asyncio.run(result)
            status, content_type, payload = encode_result(result)
        except SystemExit as e:  # the handler asked the process to stop
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(e.code if isinstance(e.code, int) else int(e.code is not None))
        except Exception as e:
            traceback.print_exc()
            status, content_type, payload = 500, "application/json", error_payload(f"{type(e).__name__}: {e}")
        self.respond(status, content_type, payload)

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

    def respond(self, status, content_type, payload):
        self.send_response(status)
        if status != 204:
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if status != 204 and self.command != "HEAD":
            self.wfile.write(payload)


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
    port = os.environ.get("PORT", "")
    if not port.isdigit():
        fail(f"PORT must be a port number, not {port!r}")
    source = os.path.abspath(os.environ.get("SLESS_SOURCE") or os.getcwd())
    name = os.environ.get("SLESS_HANDLER") or DEFAULT_HANDLER
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
