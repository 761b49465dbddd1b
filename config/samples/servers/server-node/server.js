// A Function that brings its own server: Node's http module, no runtime and
// no dependencies. It keeps the container contract: listen on $PORT, answer
// GET /healthz once ready. GET / tells what the platform said of the call
// (its route's prefix, the caller's scheme and host); /ws is a WebSocket
// that echoes each message, its handshake and frames written here by hand
// (RFC 6455) where a real server would use a library such as ws.
'use strict';
const http = require('node:http');
const crypto = require('node:crypto');

const port = Number(process.env.PORT || 8080);
const maxMessage = 1 << 20; // a longer frame is refused: close code 1009

const server = http.createServer((req, res) => {
  const path = new URL(req.url, 'http://x').pathname;
  if (path === '/healthz') {
    res.end('ok');
    return;
  }
  if (path === '/') {
    res.setHeader('Content-Type', 'application/json');
    res.end(JSON.stringify({
      server: 'node',
      method: req.method,
      prefix: req.headers['x-forwarded-prefix'] || '',
      proto: req.headers['x-forwarded-proto'] || '',
      host: req.headers.host || '',
    }));
    return;
  }
  res.statusCode = path === '/ws' ? 426 : 404; // /ws without the upgrade
  res.end(path === '/ws' ? 'a WebSocket: send Upgrade: websocket\n' : 'not found\n');
});

server.on('upgrade', (req, socket) => {
  const key = req.headers['sec-websocket-key'];
  if (new URL(req.url, 'http://x').pathname !== '/ws' || (req.headers.upgrade || '').toLowerCase() !== 'websocket' || !key) {
    socket.end('HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
    return;
  }
  const accept = crypto.createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
  socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
    `Sec-WebSocket-Accept: ${accept}\r\n\r\n`);
  echo(socket);
});

// echo answers each frame a client sends with its payload, unmasked: a
// text or binary frame (or a fragment) is sent back as it came, a ping is
// ponged, a close is returned and the connection ends.
function echo(socket) {
  let buf = Buffer.alloc(0);
  socket.on('data', (chunk) => {
    buf = Buffer.concat([buf, chunk]);
    for (;;) {
      const frame = parse(buf);
      if (frame === null) return;
      if (frame.error) {
        socket.end(frameOf(0x8, true, Buffer.from([0x03, 0xf1]))); // 1009: too big
        return;
      }
      buf = buf.subarray(frame.size);
      if (frame.opcode === 0x8) {
        socket.end(frameOf(0x8, true, frame.payload));
        return;
      }
      const opcode = frame.opcode === 0x9 ? 0xa : frame.opcode;
      if (frame.opcode !== 0xa) socket.write(frameOf(opcode, frame.fin, frame.payload));
    }
  });
  socket.on('error', () => socket.destroy());
}

// parse reads one frame from buf: null until it is whole.
function parse(buf) {
  if (buf.length < 2) return null;
  const fin = (buf[0] & 0x80) !== 0;
  const opcode = buf[0] & 0x0f;
  const masked = (buf[1] & 0x80) !== 0;
  let len = buf[1] & 0x7f;
  let at = 2;
  if (len === 126) {
    if (buf.length < 4) return null;
    len = buf.readUInt16BE(2);
    at = 4;
  } else if (len === 127) {
    if (buf.length < 10) return null;
    const long = buf.readBigUInt64BE(2);
    if (long > BigInt(maxMessage)) return { error: true };
    len = Number(long);
    at = 10;
  }
  if (len > maxMessage) return { error: true };
  const mask = masked ? buf.subarray(at, at + 4) : null;
  if (masked) at += 4;
  if (buf.length < at + len) return null;
  const payload = Buffer.from(buf.subarray(at, at + len));
  if (mask) for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i & 3];
  return { fin, opcode, payload, size: at + len };
}

// frameOf frames payload as a server does: unmasked.
function frameOf(opcode, fin, payload) {
  const len = payload.length;
  let head;
  if (len < 126) {
    head = Buffer.from([(fin ? 0x80 : 0) | opcode, len]);
  } else if (len < 65536) {
    head = Buffer.alloc(4);
    head[0] = (fin ? 0x80 : 0) | opcode;
    head[1] = 126;
    head.writeUInt16BE(len, 2);
  } else {
    head = Buffer.alloc(10);
    head[0] = (fin ? 0x80 : 0) | opcode;
    head[1] = 127;
    head.writeBigUInt64BE(BigInt(len), 2);
  }
  return Buffer.concat([head, payload]);
}

// SIGTERM: no new connections; Node exits once the open ones end, and the
// platform's drain bounds how long that may take.
process.on('SIGTERM', () => server.close());

server.listen(port, '127.0.0.1', () => console.log(`listening on 127.0.0.1:${port}`));
