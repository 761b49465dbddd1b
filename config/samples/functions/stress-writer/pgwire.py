"""pgwire: a minimal PostgreSQL client in pure Python, written for this sample.

The sless Python runtime is standard library only, so instead of a driver
from PyPI this sample carries its own small client of the PostgreSQL
frontend/backend protocol, version 3. It does what stress-writer needs and
no more:
- startup over plain TCP (no TLS), with client_encoding UTF8;
- authentication: trust, cleartext password, md5, and SCRAM-SHA-256 without
  channel binding (the password is used as given, without SASLprep, which
  is the same for ASCII passwords);
- the simple query protocol: one or more statements as text, rows as text;
- ErrorResponse as PgError, with the SQLSTATE code.
Values go into statements as literals made by Connection.literal, which is
safe because the server must have standard_conforming_strings on (checked
at connect).
"""

import base64
import hashlib
import hmac
import math
import os
import socket
import struct

PROTOCOL_VERSION = 3 << 16
# MAX_MESSAGE bounds what one server message may make us allocate.
MAX_MESSAGE = 64 << 20


class PgError(Exception):
    """An error the server reported: severity, SQLSTATE code and message."""

    def __init__(self, fields):
        self.code = fields.get("C", "")
        super().__init__(f"{fields.get('S', 'ERROR')} {self.code}: {fields.get('M', '')}")


class Connection:
    """One session with a PostgreSQL server; not safe for concurrent use."""

    def __init__(self, host, port, user, database, password="", timeout=30.0):
        self.address = f"{host}:{port}"
        self.params = {}
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise ConnectionError(f"PostgreSQL at {self.address} is unreachable: {e}") from None
        self.reader = self.sock.makefile("rb")
        try:
            self._startup(user, database, password)
        except BaseException:
            self._close_socket()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Says goodbye to the server (Terminate) and closes the socket."""
        try:
            self._send(b"X", b"")
        except OSError:
            pass
        self._close_socket()

    def query(self, sql):
        """Runs sql, one or more statements, by the simple query protocol.

        Returns (rows, tag): the rows of the last statement that returned
        rows, each a list of str or None, and the last command tag, such as
        "INSERT 0 3". Raises PgError when a statement fails; the statements
        of one call run in one transaction unless they say otherwise.
        """
        self._send(b"Q", sql.encode("utf-8") + b"\0")
        rows, tag, error = [], "", None
        while True:
            kind, data = self._receive()
            if kind == b"T":
                rows = []
            elif kind == b"D":
                rows.append(_parse_row(data))
            elif kind == b"C":
                tag = data.rstrip(b"\0").decode("utf-8")
            elif kind == b"E":
                error = PgError(_parse_fields(data))
            elif kind == b"Z":  # ReadyForQuery: the server is done with this query
                if error is not None:
                    raise error
                return rows, tag
            # Anything else (notices, empty queries, parameter changes) holds nothing we keep.

    @staticmethod
    def literal(value):
        """value (None, bool, int, finite float or str) as an SQL literal."""
        if value is None:
            return "NULL"
        if isinstance(value, bool):
            return "TRUE" if value else "FALSE"
        if isinstance(value, int):
            return str(value)
        if isinstance(value, float) and math.isfinite(value):
            return repr(value)
        if isinstance(value, str):
            if "\0" in value:
                raise ValueError("PostgreSQL text cannot hold a NUL character")
            return "'" + value.replace("'", "''") + "'"
        raise TypeError(f"no SQL literal for {type(value).__name__} {value!r}")

    def _startup(self, user, database, password):
        params = {"user": user, "database": database, "client_encoding": "UTF8"}
        body = struct.pack("!i", PROTOCOL_VERSION)
        body += b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in params.items()) + b"\0"
        self.sock.sendall(struct.pack("!i", len(body) + 4) + body)
        scram = None
        while True:
            kind, data = self._receive()
            if kind == b"R":
                scram = self._authenticate(data, user, password, scram)
            elif kind == b"S":
                name, value = data.split(b"\0")[:2]
                self.params[name.decode()] = value.decode()
            elif kind == b"E":
                raise PgError(_parse_fields(data))
            elif kind == b"Z":
                break
            # BackendKeyData and notices are not needed.
        if self.params.get("standard_conforming_strings") != "on":
            raise ConnectionError(f"PostgreSQL at {self.address} has standard_conforming_strings off, "
                                  "which this client's literals do not support")

    def _authenticate(self, data, user, password, scram):
        """Answers one Authentication message; returns the SCRAM state."""
        (code,) = struct.unpack_from("!i", data)
        if code == 0:  # AuthenticationOk
            return scram
        if code == 3:  # cleartext password
            self._send(b"p", password.encode() + b"\0")
        elif code == 5:  # md5: md5(md5(password + user) + salt), in hex
            inner = hashlib.md5((password + user).encode()).hexdigest().encode()
            self._send(b"p", b"md5" + hashlib.md5(inner + data[4:8]).hexdigest().encode() + b"\0")
        elif code == 10:  # SASL: the server lists its mechanisms
            if b"SCRAM-SHA-256" not in data[4:].split(b"\0"):
                raise ConnectionError(f"PostgreSQL at {self.address} offers no SASL mechanism this client knows")
            scram = _Scram(password)
            first = scram.client_first()
            self._send(b"p", b"SCRAM-SHA-256\0" + struct.pack("!i", len(first)) + first)
        elif code == 11 and scram is not None:  # SASLContinue: server-first-message
            self._send(b"p", scram.client_final(data[4:]))
        elif code == 12 and scram is not None:  # SASLFinal: server-final-message
            scram.verify(data[4:])
        else:
            raise ConnectionError(f"PostgreSQL at {self.address} asks for authentication method {code}, "
                                  "which this client does not support")
        return scram

    def _send(self, kind, payload):
        self.sock.sendall(kind + struct.pack("!i", len(payload) + 4) + payload)

    def _receive(self):
        head = self._read(5)
        kind, (length,) = head[:1], struct.unpack("!i", head[1:])
        if not 4 <= length <= MAX_MESSAGE:
            raise ConnectionError(f"PostgreSQL at {self.address} sent a message of {length} bytes")
        return kind, self._read(length - 4)

    def _read(self, n):
        data = self.reader.read(n)
        if len(data) != n:
            raise ConnectionError(f"PostgreSQL at {self.address} closed the connection")
        return data

    def _close_socket(self):
        self.reader.close()
        self.sock.close()


class _Scram:
    """The client side of SCRAM-SHA-256 (RFC 5802, RFC 7677)."""

    def __init__(self, password):
        self.password = password.encode()
        self.nonce = base64.b64encode(os.urandom(18)).decode()
        # PostgreSQL takes the user from the startup message, so n= is empty.
        self.first_bare = f"n=,r={self.nonce}"
        self.server_signature = b""

    def client_first(self):
        return ("n,," + self.first_bare).encode()

    def client_final(self, server_first):
        server_first = server_first.decode()
        attrs = _scram_attributes(server_first)
        nonce = attrs.get("r", "")
        if not nonce.startswith(self.nonce) or len(nonce) == len(self.nonce):
            raise ConnectionError("SCRAM: the server's nonce does not extend ours")
        salted = hashlib.pbkdf2_hmac("sha256", self.password, base64.b64decode(attrs["s"]), int(attrs["i"]))
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        without_proof = f"c=biws,r={nonce}"  # biws is base64 of "n,,": no channel binding
        auth_message = f"{self.first_bare},{server_first},{without_proof}".encode()
        signature = hmac.digest(hashlib.sha256(client_key).digest(), auth_message, "sha256")
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self.server_signature = hmac.digest(hmac.digest(salted, b"Server Key", "sha256"), auth_message, "sha256")
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final):
        attrs = _scram_attributes(server_final.decode())
        if "e" in attrs:
            raise ConnectionError(f"SCRAM: the server refused: {attrs['e']}")
        if not hmac.compare_digest(base64.b64decode(attrs.get("v", "")), self.server_signature):
            raise ConnectionError("SCRAM: the server's signature does not match: not the server we asked")


def _scram_attributes(message):
    return dict(part.split("=", 1) for part in message.split(",") if "=" in part)


def _parse_row(data):
    (count,) = struct.unpack_from("!h", data)
    pos, row = 2, []
    for _ in range(count):
        (length,) = struct.unpack_from("!i", data, pos)
        pos += 4
        if length < 0:
            row.append(None)
        else:
            row.append(data[pos:pos + length].decode("utf-8"))
            pos += length
    return row


def _parse_fields(data):
    return {chr(part[0]): part[1:].decode("utf-8", "replace") for part in data.split(b"\0") if part}
