'use strict';
// sless Node runtime: serves one handler by the sless runtime contract.
//
// Environment (docs/runtimes.md):
//   PORT           port to listen on, at 127.0.0.1
//   SLESS_SOURCE   directory of the handler's code (default: working directory)
//   SLESS_HANDLER  module.function (default: index.handle)
//
// The handler is loaded with require before the port is opened, so GET
// /healthz answers only once it is. Every other request is one call
// handler(event), awaited when it returns a Promise; the value becomes the
// response. A handler that cannot be loaded is a crash: the error and a line
// naming it go to stderr, and the exit code is 1. Node's http module only.

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

// encodeResult returns [status, content type, payload] for a handler's value.
function encodeResult(result) {
  if (result === undefined || result === null) return [204, null, null];
  if (typeof result === 'string') {
    const kind = result.startsWith('<') ? 'text/html' : 'text/plain';
    return [200, `${kind}; charset=utf-8`, Buffer.from(result, 'utf8')];
  }
  if (result instanceof Uint8Array) {
    return [200, 'application/octet-stream', Buffer.from(result.buffer, result.byteOffset, result.byteLength)];
  }
  const json = JSON.stringify(result);
  if (json === undefined) throw new TypeError(`a ${typeof result} cannot be encoded as JSON`);
  return [200, 'application/json', Buffer.from(json, 'utf8')];
}

function describe(err) {
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}

// stopping is set by SIGTERM: answers then close their connection, so that
// the server's close does not wait for idle keep-alive ones.
let stopping = false;

function send(res, status, contentType, payload) {
  if (stopping) res.shouldKeepAlive = false;
  if (status === 204) {
    res.writeHead(204).end();
    return;
  }
  res.writeHead(status, { 'content-type': contentType, 'content-length': payload.length });
  res.end(payload);
}

async function serve(handler, req, res) {
  if (req.method === 'GET' && req.url.split('?', 1)[0] === '/healthz') {
    send(res, 200, 'text/plain; charset=utf-8', Buffer.from('ok'));
    return;
  }
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  let response;
  try {
    response = encodeResult(await handler(makeEvent(req, Buffer.concat(chunks))));
  } catch (err) {
    console.error(err);
    response = [500, 'application/json', Buffer.from(JSON.stringify({ error: describe(err) }), 'utf8')];
  }
  send(res, ...response);
}

function main() {
  const port = process.env.PORT || '';
  if (!/^\d+$/.test(port)) fail(`PORT must be a port number, not ${JSON.stringify(port)}`);
  const source = path.resolve(process.env.SLESS_SOURCE || process.cwd());
  const name = process.env.SLESS_HANDLER || DEFAULT_HANDLER;
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
