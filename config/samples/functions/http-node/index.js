'use strict';
// A Node function that chooses its answers with a WHATWG Response and
// streams events from an async generator: the twin of http-go and
// http-python.

const { Readable } = require('node:stream');

const PIXEL = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==', 'base64');

function json(status, value, headers = new Headers()) {
  headers.set('content-type', 'application/json');
  return new Response(JSON.stringify(value), { status, headers });
}

exports.handle = async (event) => {
  const path = event.path;
  if (path === '/orders/7') return { id: '7', item: 'tea' };
  if (path.startsWith('/orders/')) {
    const headers = new Headers();
    headers.append('set-cookie', 'a=1; Path=/');
    headers.append('set-cookie', 'b=2; Path=/');
    return json(404, { error: `no order ${path.slice('/orders/'.length)}` }, headers);
  }
  if (path === '/pixel.png') return new Response(PIXEL, { headers: { 'content-type': 'image/png' } });
  if (path === '/events') return events(event.query);
  return json(404, { error: `no route ${path}` });
};

function events(query) {
  const n = Number(query.n);
  const every = /^(\d+(?:\.\d+)?)(ms|s)$/.exec(query.every || '');
  const ms = every ? Number(every[1]) * (every[2] === 's' ? 1000 : 1) : NaN;
  if (!Number.isInteger(n) || n < 1 || n > 100 || !(ms >= 0 && ms <= 60000)) {
    return json(400, { error: 'want ?n= from 1 to 100 and ?every= up to 60s, such as ?n=3&every=1s' });
  }
  async function* stream() {
    for (let i = 0; i < n; i++) {
      if (i) await new Promise((resolve) => setTimeout(resolve, ms));
      yield `data: ${i}\n\n`; // reaches the caller now
    }
  }
  return new Response(Readable.toWeb(Readable.from(stream())), { headers: { 'content-type': 'text/event-stream' } });
}
