'use strict';
// sless Node runtime: serves one handler by the sless runtime contract.
//
// Environment (docs/runtimes.md):
//   PORT           port to listen on, at 127.0.0.1
//   SLESS_SOURCE   directory of the handler's code (default: working directory)
//   SLESS_HANDLER  module.function (default: index.handle)
//   SLESS_LOAD_ONLY  set: load the handler and exit (0 when it loads), a build's check
//
// The handler is loaded with require before the port is opened, so GET
// /healthz answers only once it is. Every other request is one call
// handler(event), awaited when it returns a Promise; the value becomes the
// response: a WHATWG Response chooses its status and headers, and a stream
// or async iterable is streamed. A handler that cannot be loaded is a
// crash: the error and a line naming it go to stderr, and the exit code is
// 1. Node's http module only.

const http = require('node:http');
const path = require('node:path');
const { isUtf8 } = require('node:buffer');

const DEFAULT_HANDLER = 'index.handle';

function fail(message) {
  console.error(`sless: ${message}`);
  process.exit(1);
}

function loadHandler(source, handler) {
  const dot = handler.lastIndexOf('.');
  if (dot <= 0 || dot === handler.length - 1) fail(`handler ${JSON.stringify(handler)} is not module.function`);
  const moduleName = handler.slice(0, dot);
  const functionName = handler.slice(dot + 1);
  let mod;
  try {
    mod = require(path.resolve(source, moduleName));
  } catch (err) {
    console.error(err);
    fail(`cannot load module ${JSON.stringify(moduleName)} of handler ${handler} from ${source}`);
  }
  const fn = mod == null ? undefined : mod[functionName];
  if (typeof fn !== 'function') {
    fail(`module ${JSON.stringify(moduleName)} has no function ${JSON.stringify(functionName)} (handler ${handler})`);
  }
  return fn;
}

function decodePath(raw) {
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

function makeEvent(req, body) {
  const q = req.url.indexOf('?');
  const query = new Map();
  for (const [key, value] of new URLSearchParams(q < 0 ? '' : req.url.slice(q + 1))) {
    if (!query.has(key)) query.set(key, value); // a repeated key's first value
  }
  const headers = Object.entries(req.headersDistinct).map(([key, values]) => [key, values.join(', ')]);
  const text = isUtf8(body);
  return {
    method: req.method,
    path: decodePath(q < 0 ? req.url : req.url.slice(0, q)),
    // fromEntries defines own properties, so a key like __proto__ stays a key.
    query: Object.fromEntries(query),
    headers: Object.fromEntries(headers),
    body: body.toString(text ? 'utf8' : 'base64'),
    isBase64Encoded: !text,
  };
}

// OPAQUE are the types JSON would write as {} though their values hold
// something: an answer that loses it is wrong, so it is an error naming the
// type. (Blob and FormData are globals of fetch, which a Node may lack.)
const OPAQUE = [Map, Set, WeakMap, WeakSet, Promise, URLSearchParams, globalThis.Blob, globalThis.FormData].filter(Boolean);

// encodeBody returns [content type, payload] for a body that is not streamed.
function encodeBody(body) {
  if (typeof body === 'string') {
    const kind = body.startsWith('<') ? 'text/html' : 'text/plain';
    return [`${kind}; charset=utf-8`, Buffer.from(body, 'utf8')];
  }
  if (body instanceof Uint8Array) {
    return ['application/octet-stream', Buffer.from(body.buffer, body.byteOffset, body.byteLength)];
  }
  if (body instanceof ArrayBuffer) return ['application/octet-stream', Buffer.from(body)];
  for (const type of OPAQUE) {
    if (body instanceof type) throw new TypeError(`a ${type.name} cannot be encoded as JSON`);
  }
  const json = JSON.stringify(body);
  if (json === undefined) throw new TypeError(`a ${typeof body} cannot be encoded as JSON`);
  return ['application/json', Buffer.from(json, 'utf8')];
}

// isStream tells a body to stream: a Node stream, a web ReadableStream, an
// async iterable or a generator. Strings, arrays and buffers are values.
function isStream(body) {
  if (body === null || typeof body !== 'object' || Array.isArray(body) || body instanceof Uint8Array) return false;
  if (typeof body[Symbol.asyncIterator] === 'function') return true;
  return typeof body.next === 'function' && typeof body[Symbol.iterator] === 'function';
}

// reply returns {status, headers, body} for a handler's value: body is a
// Buffer, null, or an iterable of chunks to stream. headers is a list of
// [name, value] pairs, in order.
function reply(result) {
  if (typeof Response === 'function' && result instanceof Response) {
    return { status: result.status, headers: responseHeaders(result.headers), body: result.body };
  }
  if (result === undefined || result === null) return { status: 204, headers: [], body: null };
  if (isStream(result)) return { status: 200, headers: [], body: result };
  const [type, payload] = encodeBody(result);
  return { status: 200, headers: [['content-type', type]], body: payload };
}

// responseHeaders lists a WHATWG Headers' fields in order, one per
// Set-Cookie (iterating joins the others' values as the Fetch standard
// says, which is what they mean).
function responseHeaders(headers) {
  const out = [];
  for (const [name, value] of headers) {
    if (name !== 'set-cookie') out.push([name, value]);
  }
  for (const cookie of setCookies(headers)) out.push(['set-cookie', cookie]);
  return out;
}

// setCookies is a Headers' Set-Cookie values. Fetch implementations older
// than getSetCookie (Node 18 with Debian's undici 5.15, the runtime image's)
// join them with ", " instead: split there where a new cookie's name=
// follows, which an Expires date's comma never has.
function setCookies(headers) {
  if (typeof headers.getSetCookie === 'function') return headers.getSetCookie();
  const joined = headers.get('set-cookie');
  return joined === null ? [] : joined.split(/,\s*(?=[^;,=\s]+=)/);
}

// FRAMING are the fields the runtime writes itself: how the body is framed,
// and the connection's own, which no hop passes on.
const FRAMING = new Set(['content-length', 'transfer-encoding', 'connection', 'keep-alive']);

function setHeaders(res, headers) {
  const byName = new Map();
  for (const [name, value] of headers) {
    if (FRAMING.has(name.toLowerCase())) continue;
    const values = byName.get(name.toLowerCase()) || [];
    values.push(value);
    byName.set(name.toLowerCase(), values);
  }
  for (const [name, values] of byName) res.setHeader(name, values.length === 1 ? values[0] : values);
}

function describe(err) {
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}

// stopping is set by SIGTERM: answers then close their connection, so that
// the server's close does not wait for idle keep-alive ones.
let stopping = false;

function send(res, { status, headers, body }) {
  if (stopping) res.shouldKeepAlive = false;
  setHeaders(res, headers);
  if (status === 204 || status === 304) {
    res.writeHead(status).end();
    return;
  }
  body ??= Buffer.alloc(0);
  res.setHeader('content-length', body.length);
  res.writeHead(status);
  res.end(body);
}

function failure(err) {
  console.error(err);
  const body = Buffer.from(JSON.stringify({ error: describe(err) }), 'utf8');
  return { status: 500, headers: [['content-type', 'application/json']], body };
}

// stream sends a body as it yields, a chunk each, waiting for the caller
// to take them (back-pressure). The head goes with the first chunk, whose
// type gives the Content-Type; a body that fails cuts the answer (the
// connection destroyed, no last chunk), so the caller never takes a part
// for the whole.
async function stream(res, { status, headers }, body) {
  const chunks = body[Symbol.asyncIterator] ? body[Symbol.asyncIterator]() : body[Symbol.iterator]();
  let first;
  try {
    first = await chunks.next();
  } catch (err) {
    send(res, failure(err));
    return;
  }
  if (stopping) res.shouldKeepAlive = false;
  setHeaders(res, headers);
  if (!res.hasHeader('content-type')) {
    res.setHeader('content-type', typeof first.value === 'string' ? 'text/plain; charset=utf-8' : 'application/octet-stream');
  }
  res.writeHead(status);
  res.flushHeaders();
  try {
    for (let next = first; !next.done; next = await chunks.next()) {
      const chunk = next.value;
      if (typeof chunk !== 'string' && !(chunk instanceof Uint8Array)) {
        throw new TypeError(`a streamed body yielded a ${chunk === null ? 'null' : typeof chunk}: want a string or bytes`);
      }
      if (!res.write(chunk) && !(await drained(res))) {
        await chunks.return?.(); // the caller left
        return;
      }
    }
  } catch (err) {
    console.error(err);
    await chunks.return?.();
    res.destroy(err);
    return;
  }
  res.end();
}

// drained waits until the caller took what was written (true), or left.
function drained(res) {
  return new Promise((resolve) => {
    const done = (ok) => {
      res.off('drain', onDrain);
      res.off('close', onClose);
      resolve(ok);
    };
    const onDrain = () => done(true);
    const onClose = () => done(false);
    res.on('drain', onDrain);
    res.on('close', onClose);
  });
}

async function serve(handler, req, res) {
  if (req.method === 'GET' && req.url.split('?', 1)[0] === '/healthz') {
    send(res, { status: 200, headers: [['content-type', 'text/plain; charset=utf-8']], body: Buffer.from('ok') });
    return;
  }
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  let response;
  try {
    response = reply(await handler(makeEvent(req, Buffer.concat(chunks))));
    checkStatus(response.status);
    if (response.body !== null && isStream(response.body)) {
      await stream(res, response, response.body);
      return;
    }
  } catch (err) {
    response = failure(err);
  }
  send(res, response);
}

function checkStatus(status) {
  if (!Number.isInteger(status) || status < 200 || status > 599) {
    throw new RangeError(`response status ${status}: want an integer from 200 to 599`);
  }
}

function main() {
  const source = path.resolve(process.env.SLESS_SOURCE || process.cwd());
  const name = process.env.SLESS_HANDLER || DEFAULT_HANDLER;
  if (process.env.SLESS_LOAD_ONLY) { // a build's check: load, and say no more
    loadHandler(source, name);
    process.exit(0);
  }
  const port = process.env.PORT || '';
  if (!/^\d+$/.test(port)) fail(`PORT must be a port number, not ${JSON.stringify(port)}`);
  const handler = loadHandler(source, name);
  // The platform's activator bounds a request's head (100 fields, 16 KiB:
  // docs/activator.md) and answers beyond it; behind it the runtime takes
  // that and the fields the platform adds. Node's own bound, 16 KiB,
  // refused those with an answer of its own.
  const server = http.createServer({ maxHeaderSize: 64 << 10 }, (req, res) => {
    serve(handler, req, res).catch((err) => {
      console.error(`sless: request ${req.method} ${req.url} failed: ${describe(err)}`);
      res.destroy();
    });
  });
  server.requestTimeout = 0; // timeouts are the platform's (timeoutSeconds)
  server.listen(Number(port), '127.0.0.1', () => {
    console.error(`sless: serving ${name} from ${source} on 127.0.0.1:${port}`);
  });
  // SIGTERM, the platform stopping the instance, ends serving: the
  // requests in flight finish and the process exits 0. Without a handler,
  // a runtime that is PID 1 of a container would ignore it, and its pod
  // would wait out its whole grace period.
  process.once('SIGTERM', () => {
    stopping = true;
    server.close(() => process.exit(0));
    server.closeIdleConnections();
  });
}

main();
