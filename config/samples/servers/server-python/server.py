"""A Function that brings its own server: Python's http.server, no runtime
and no dependencies. It keeps the container contract: listen on $PORT,
answer GET /healthz once ready. GET / tells what the platform said of the
call (its route's prefix, the caller's scheme and host); /ws is a WebSocket
that echoes each message, its handshake and frames written here by hand
(RFC 6455) where a real server would use a library such as websockets."""

import base64
import hashlib
import json
import os
import signal
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_MESSAGE = 1 << 20  # a longer frame is refused: close code 1009
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the queue-proxy's pool expects
    server_version, sys_version = "server-python", ""

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            return self.answer(200, "text/plain", b"ok")
        if path == "/":
            body = json.dumps({
                "server": "python",
                "method": self.command,
                "prefix": self.headers.get("X-Forwarded-Prefix", ""),
                "proto": self.headers.get("X-Forwarded-Proto", ""),
                "host": self.headers.get("Host", ""),
            }).encode()
            return self.answer(200, "application/json", body)
        if path == "/ws":
            return self.websocket()
        return self.answer(404, "text/plain", b"not found\n")

    def answer(self, code, ctype, body):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def websocket(self):
        key = self.headers.get("Sec-WebSocket-Key")
        if self.headers.get("Upgrade", "").lower() != "websocket" or not key:
            return self.answer(426, "text/plain", b"a WebSocket: send Upgrade: websocket\n")
        accept = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        self.echo()

    def echo(self):
        """Answers each frame with its payload, unmasked: a text or binary
        frame (or a fragment) as it came, a ping with a pong, a close with a
        close, which ends the connection."""
        while True:
            frame = self.read_frame()
            if frame is None:
                return
            fin, opcode, payload = frame
            if opcode == 0x8:
                self.wfile.write(frame_of(0x8, True, payload))
                return
            if opcode == 0x9:
                self.wfile.write(frame_of(0xA, True, payload))
            elif opcode != 0xA:
                self.wfile.write(frame_of(opcode, fin, payload))
            self.wfile.flush()

    def read_frame(self):
        head = self.rfile.read(2)
        if len(head) < 2:
            return None
        fin, opcode = head[0] & 0x80 != 0, head[0] & 0x0F
        masked, length = head[1] & 0x80 != 0, head[1] & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", self.rfile.read(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", self.rfile.read(8))
        if length > MAX_MESSAGE:
            self.wfile.write(frame_of(0x8, True, struct.pack("!H", 1009)))
            return None
        mask = self.rfile.read(4) if masked else None
        payload = bytearray(self.rfile.read(length))
        if len(payload) < length:
            return None
        if mask:
            for i in range(length):
                payload[i] ^= mask[i & 3]
        return fin, opcode, bytes(payload)

    def log_message(self, fmt, *args):
        pass  # the platform records every call


def frame_of(opcode, fin, payload):
    """Frames payload as a server does: unmasked."""
    first = (0x80 if fin else 0) | opcode
    n = len(payload)
    if n < 126:
        return struct.pack("!BB", first, n) + payload
    if n < 65536:
        return struct.pack("!BBH", first, 126, n) + payload
    return struct.pack("!BBQ", first, 127, n) + payload


def main():
    port = int(os.environ.get("PORT", "8080"))
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    # SIGTERM: stop accepting and exit; the platform has drained the
    # instance's requests and connections before it sends it.
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"listening on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
