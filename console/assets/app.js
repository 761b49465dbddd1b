// The sless console: two views over the admin API, the functions list
// (#/) and one function (#/fn/<namespace>/<name>). Every read and action is
// a call a script could make; the session cookie carries the token.
'use strict';

const app = document.getElementById('app');
const statusLine = document.getElementById('status');
let timers = [];
let charts = [];

// h builds an element: h('a', {href: '#/'}, 'text', child...).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c !== undefined && c !== null) el.append(c);
  }
  return el;
}

async function api(path, opts = {}) {
  const init = { method: opts.method || 'GET', credentials: 'same-origin', headers: {} };
  if (opts.body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(opts.body);
  }
  const res = await fetch(path, init);
  if (res.status === 401) {
    location.reload(); // the page then asks for the token
    throw new Error('signed out');
  }
  const data = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = new Error(data.error || res.status + ' ' + res.statusText);
    err.status = res.status;
    throw err;
  }
  return data;
}

// every runs f now and then every ms while the view lasts, skipping
// while the tab is hidden: at most one call of each in flight.
function every(ms, f) {
  let stopped = false;
  const tick = async () => {
    if (stopped) return;
    if (!document.hidden) {
      try {
        await f();
        statusLine.textContent = '';
      } catch (e) {
        statusLine.textContent = 'update failed: ' + e.message;
      }
    }
    if (!stopped) timer.id = setTimeout(tick, ms);
  };
  const timer = { id: 0, stop() { stopped = true; clearTimeout(this.id); } };
  f.stop = () => timer.stop();
  timers.push(timer);
  tick();
}

function fnPath(ns, name) {
  return '/v1/namespaces/' + encodeURIComponent(ns) + '/functions/' + encodeURIComponent(name);
}

const fmt = {
  rate: (v) => (v === undefined ? '—' : v >= 10 ? v.toFixed(0) : v.toFixed(2)),
  pct: (v) => (v === undefined ? '—' : (v * 100).toFixed(v > 0 && v < 0.01 ? 2 : 1) + '%'),
  ms: (v) => (v === undefined || v === null ? '—' : v >= 100 ? v.toFixed(0) + ' ms' : v.toFixed(1) + ' ms'),
  time: (t) => new Date(t).toLocaleTimeString(),
};

function badge(state) {
  return h('span', { class: 'state state-' + state, text: state });
}

function set(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

// route shows the view the hash names.
function route() {
  for (const t of timers) t.stop();
  timers = [];
  for (const c of charts) c.destroy();
  charts = [];
  app.replaceChildren();
  const m = location.hash.match(/^#\/fn\/([^/]+)\/([^/]+)$/);
  if (m) showFunction(decodeURIComponent(m[1]), decodeURIComponent(m[2]));
  else showFunctions();
  app.focus({ preventScroll: true });
}

// ---- the functions list ----

const columns = ['Function', 'Runtime', 'State', 'Instances', 'Req/s', 'Errors', 'p99', 'Cold starts', 'Triggers'];

function showFunctions() {
  document.title = 'functions · sless console';
  const nsSelect = h('select', { id: 'filter-namespace' }, h('option', { value: '', text: 'all' }));
  const nameInput = h('input', { id: 'filter-name', type: 'search', placeholder: 'part of a name' });
  const tbody = h('tbody');
  const count = h('p', { class: 'muted', id: 'count' });
  const banner = h('section', { class: 'banner', id: 'manifest-errors', role: 'alert', hidden: true });
  app.append(
    h('h1', { text: 'Functions' }),
    banner,
    h('div', { class: 'filters' },
      h('label', { for: 'filter-namespace' }, 'Namespace', nsSelect),
      h('label', { for: 'filter-name' }, 'Name', nameInput)),
    h('table', { id: 'functions' },
      h('caption', { class: 'muted', text: 'Rates, errors, p99 and cold starts over the last 5 minutes' }),
      h('thead', {}, h('tr', {}, columns.map((c, i) => h('th', { scope: 'col', class: i >= 3 && i <= 7 ? 'num' : null, text: c })))),
      tbody),
    count);
  const rows = new Map();
  let last = [];
  const render = () => {
    const ns = nsSelect.value, q = nameInput.value.trim().toLowerCase();
    const shown = last.filter((f) => (!ns || f.namespace === ns) && (!q || f.name.toLowerCase().includes(q)));
    const keep = new Set();
    let prev = null;
    for (const f of shown) {
      const key = f.namespace + '/' + f.name;
      keep.add(key);
      let row = rows.get(key);
      if (!row) {
        row = functionRow(f);
        rows.set(key, row);
      }
      updateRow(row, f);
      const want = prev ? prev.nextSibling : tbody.firstChild;
      if (want !== row.tr) tbody.insertBefore(row.tr, want);
      prev = row.tr;
    }
    for (const [key, row] of rows) {
      if (!keep.has(key)) {
        row.tr.remove();
        rows.delete(key);
      }
    }
    set(count, shown.length + ' of ' + last.length + ' functions');
  };
  nsSelect.addEventListener('change', render);
  nameInput.addEventListener('input', render);
  every(1000, async () => {
    const list = await api('/v1/functions');
    last = list.functions;
    renderManifestErrors(banner, list.errors || []);
    const namespaces = [...new Set(last.map((f) => f.namespace))].sort();
    if (namespaces.join() !== [...nsSelect.options].slice(1).map((o) => o.value).join()) {
      const chosen = nsSelect.value;
      nsSelect.replaceChildren(h('option', { value: '', text: 'all' }), namespaces.map((n) => h('option', { value: n, text: n })));
      nsSelect.value = namespaces.includes(chosen) ? chosen : '';
    }
    render();
  });
}

// renderManifestErrors shows the manifests sless dev could not load: their
// functions run as last loaded, or not at all, and nothing else says so.
function renderManifestErrors(el, errors) {
  const key = JSON.stringify(errors);
  if (el.dataset.key === key) return;
  el.dataset.key = key;
  el.hidden = errors.length === 0;
  el.replaceChildren(
    h('h2', { text: errors.length === 1 ? 'A manifest did not load' : errors.length + ' manifests did not load' }),
    h('p', { text: 'Their functions run as last loaded, or not at all, until the manifests are fixed.' }),
    h('ul', {}, errors.map((e) => h('li', { text: (e.file ? e.file + ': ' : '') + e.error }))));
}

function functionRow(f) {
  const cells = columns.map((_, i) => h('td', { class: i >= 3 && i <= 7 ? 'num' : null }));
  cells[0].append(h('a', { href: '#/fn/' + encodeURIComponent(f.namespace) + '/' + encodeURIComponent(f.name), text: f.namespace + '/' + f.name }));
  return { tr: h('tr', { 'data-function': f.namespace + '/' + f.name }, cells), cells, state: '', triggers: '' };
}

function updateRow(row, f) {
  const c = row.cells, s = f.stats || {};
  set(c[1], f.runtime || '—');
  const state = f.state || (f.instances > 0 ? 'ready' : 'idle');
  if (row.state !== state) {
    c[2].replaceChildren(badge(state));
    row.state = state;
  }
  c[2].title = [f.reason, f.error, f.updateError && 'update failed: ' + f.updateError].filter(Boolean).join('\n');
  set(c[3], f.ready !== undefined ? f.ready + ' / ' + f.desired : String(f.instances ?? '—'));
  set(c[4], fmt.rate(s.requestsPerSecond));
  set(c[5], fmt.pct(s.errorRate));
  set(c[6], fmt.ms(s.p99Ms));
  set(c[7], s.coldStarts === undefined ? '—' : String(s.coldStarts));
  const triggers = (f.triggers || []).map((t) => t.name + ':' + t.kind + ':' + t.state).join(' ');
  if (row.triggers !== triggers) {
    c[8].replaceChildren(...(f.triggers || []).map((t) =>
      h('span', { class: 'trigger', title: t.error || '' }, (t.name === t.kind ? t.name : t.name + ' (' + t.kind + ')') + ' ', badge(t.state))));
    row.triggers = triggers;
  }
}

// ---- one function ----

function showFunction(ns, name) {
  document.title = ns + '/' + name + ' · sless console';
  const base = fnPath(ns, name);
  const head = h('div');
  const problems = h('div', { id: 'problems' });
  app.append(
    h('p', {}, h('a', { href: '#/', text: '← all functions' })),
    head, problems,
    h('h2', { text: 'Last 15 minutes' }),
    chartsPanel(base),
    h('div', { class: 'grid' }, triggersPanel(base), scalePanel(base)),
    invokePanel(base),
    invocationsPanel(base),
    runsPanel(base),
    logsPanel(base),
    manifestPanel(base),
    sourcePanel(base));
  every(1000, async () => {
    const f = await api(base);
    renderHead(head, f);
    renderProblems(problems, f);
    updateTriggers(f);
    updateScale(f);
  });
}

function renderHead(head, f) {
  const key = JSON.stringify([f.state, f.ready, f.desired, f.starting, f.crashes, f.lastStartupMs, f.url, f.runtime]);
  if (head.dataset.key === key) return;
  head.dataset.key = key;
  // Crashes, startup and file are sless dev's; the cluster has kubectl.
  const facts = [
    ['Runtime', f.runtime], ['URL', f.url], ['Instances', f.ready + ' ready, ' + f.starting + ' starting, ' + f.desired + ' desired'],
    ['Crashes', f.crashes], ['Last startup', f.lastStartupMs ? fmt.ms(f.lastStartupMs) : undefined], ['Manifest', f.file],
  ].filter(([, v]) => v !== undefined && v !== '');
  head.replaceChildren(
    h('h1', {}, f.namespace + '/' + f.name + ' ', badge(f.state)),
    h('dl', { class: 'facts' }, facts.flatMap(([k, v]) => [h('dt', { text: k }), h('dd', { text: String(v) })])));
}

function renderProblems(el, f) {
  const items = [
    ['Error', f.reason ? f.reason + ': ' + f.error : f.error], ['Update failed', f.updateError], ['Build error', f.buildError], ['Last crash', f.lastCrash],
  ].filter(([, v]) => v);
  const key = JSON.stringify(items);
  if (el.dataset.key === key) return;
  el.dataset.key = key;
  el.replaceChildren(...items.map(([title, text]) =>
    h('section', { class: 'panel', 'aria-label': title }, h('h2', { class: 'error', text: title }), h('pre', { text }))));
}

// ---- charts ----

function chartsPanel(base) {
  const defs = [
    { id: 'chart-requests', title: 'Requests and errors per second', series: [['requestsPerSecond', 'requests/s', '#0b5fd0'], ['errorsPerSecond', 'errors/s', '#b3261e']] },
    { id: 'chart-latency', title: 'Latency (ms)', points: true, series: [['p50Ms', 'p50', '#16794a'], ['p90Ms', 'p90', '#9a6200'], ['p99Ms', 'p99', '#b3261e']] },
    { id: 'chart-instances', title: 'Instances and buffered requests', series: [['desired', 'desired', '#9a6200'], ['ready', 'ready', '#16794a'], ['buffered', 'buffered', '#7b3fb8']] },
    { id: 'chart-queue', title: 'Queue depth and cold starts', series: [['queueDepth', 'messages ready', '#0b5fd0'], ['coldStarts', 'cold starts', '#b3261e']] },
  ];
  const grid = h('div', { class: 'grid' });
  const boxes = defs.map((d) => {
    const box = h('div', { class: 'chart', id: d.id, role: 'img', 'aria-label': d.title });
    grid.append(h('section', { class: 'panel' }, h('h2', { text: d.title }), box));
    return box;
  });
  if (!window.uPlot) {
    grid.replaceChildren(h('p', { class: 'muted', text: 'Charts need uPlot: build with `make build` (it copies it from npm).' }));
    return grid;
  }
  let made = null;
  every(5000, async () => {
    const s = await api(base + '/timeline');
    const data = defs.map((d) => [s.time, ...d.series.map(([k]) => s[k])]);
    if (!made) {
      made = defs.map((d, i) => {
        const width = Math.max(boxes[i].clientWidth, 300);
        const u = new uPlot({ width, height: 180, series: [{}, ...d.series.map(([, label, stroke]) => ({ label, stroke, width: 1.5, points: { show: d.points || undefined } }))],
          axes: [{}, { size: 50 }], legend: { live: false } }, data[i], boxes[i]);
        charts.push(u);
        return u;
      });
    } else {
      made.forEach((u, i) => u.setData(data[i]));
    }
  });
  return grid;
}

// ---- triggers and scale (actions) ----

let triggerBody = null;
function triggersPanel(base) {
  triggerBody = h('tbody');
  triggerBody.dataset.base = base;
  return h('section', { class: 'panel', id: 'triggers' }, h('h2', { text: 'Triggers' }),
    h('table', {}, h('thead', {}, h('tr', {}, ['Trigger', 'Kind', 'State', ''].map((c) => h('th', { scope: 'col', text: c })))), triggerBody));
}

function updateTriggers(f) {
  const key = JSON.stringify(f.triggers);
  if (triggerBody.dataset.key === key) return;
  triggerBody.dataset.key = key;
  const base = triggerBody.dataset.base;
  triggerBody.replaceChildren(...f.triggers.map((t) => {
    const enable = t.state === 'disabled';
    const button = h('button', {
      type: 'button', 'data-trigger': t.name, text: enable ? 'Enable' : 'Disable',
      'aria-label': (enable ? 'Enable' : 'Disable') + ' trigger ' + t.name,
      onclick: async () => {
        button.disabled = true;
        try {
          const st = await api(base + '/triggers/' + encodeURIComponent(t.name), { method: 'PATCH', body: { enabled: enable } });
          updateTriggers(st);
        } catch (e) {
          statusLine.textContent = e.message;
          button.disabled = false;
        }
      },
    });
    return h('tr', {}, h('td', { text: t.name }), h('td', { text: [t.kind, t.queue, t.schedule, t.timezone].filter(Boolean).join(' ') }),
      h('td', { title: t.error || '' }, badge(t.state), t.error ? h('div', { class: 'error', text: t.error }) : null), h('td', {}, button));
  }));
}

let scaleForm = null;
function scalePanel(base) {
  const min = h('input', { id: 'scale-min', type: 'number', min: 0 });
  const max = h('input', { id: 'scale-max', type: 'number', min: 1 });
  const note = h('p', { class: 'muted', id: 'scale-note' });
  const form = h('form', { class: 'form' },
    h('div', { class: 'row' }, h('label', { for: 'scale-min' }, 'Min instances', min), h('label', { for: 'scale-max' }, 'Max instances', max),
      h('button', { type: 'submit', class: 'primary', text: 'Apply' })), note);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      updateScale(await api(base + '/scale', { method: 'PATCH', body: { min: Number(min.value), max: Number(max.value) } }), true);
    } catch (e) {
      note.textContent = e.message;
      note.className = 'error';
    }
  });
  scaleForm = { min, max, note, edited: false };
  min.addEventListener('input', () => (scaleForm.edited = true));
  max.addEventListener('input', () => (scaleForm.edited = true));
  return h('section', { class: 'panel' }, h('h2', { text: 'Scale' }), form);
}

function updateScale(f, applied) {
  if (!f.spec || !f.spec.scale) return;
  if (applied) scaleForm.edited = false;
  if (!scaleForm.edited) {
    scaleForm.min.value = f.spec.scale.min ?? 0;
    scaleForm.max.value = f.spec.scale.max ?? '';
  }
  scaleForm.note.className = 'muted';
  set(scaleForm.note, f.overrides ? 'Changed for this session; the manifest is unchanged.' : 'As in the manifest.');
}

// ---- invoke ----

function invokePanel(base) {
  const method = h('select', { id: 'invoke-method' }, ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'].map((m) => h('option', { text: m })));
  const path = h('input', { id: 'invoke-path', value: '/', size: 40 });
  const headers = h('textarea', { id: 'invoke-headers', rows: 3, cols: 40, placeholder: 'Content-Type: application/json' });
  const body = h('textarea', { id: 'invoke-body', rows: 3, cols: 40 });
  const out = h('div', { id: 'invoke-result', 'aria-live': 'polite' });
  const form = h('form', { class: 'form' },
    h('div', { class: 'row' }, h('label', { for: 'invoke-method' }, 'Method', method), h('label', { for: 'invoke-path' }, 'Path', path)),
    h('div', { class: 'row' }, h('label', { for: 'invoke-headers' }, 'Headers, one per line', headers), h('label', { for: 'invoke-body' }, 'Body', body)),
    h('div', {}, h('button', { type: 'submit', class: 'primary', text: 'Invoke' })), out);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const hs = {};
    for (const line of headers.value.split('\n')) {
      const i = line.indexOf(':');
      if (i > 0) hs[line.slice(0, i).trim()] = line.slice(i + 1).trim();
    }
    out.replaceChildren(h('p', { class: 'muted', text: 'waiting for the answer…' }));
    try {
      const r = await api(base + '/invoke', { method: 'POST', body: { method: method.value, path: path.value, headers: hs, body: body.value } });
      out.replaceChildren(
        h('p', {}, h('strong', { id: 'invoke-status', text: String(r.status) }), ' in ' + fmt.ms(r.durationMs)),
        h('pre', { text: Object.entries(r.headers).map(([k, v]) => k + ': ' + v).join('\n') }),
        h('pre', { id: 'invoke-body-out', text: r.body + (r.truncated ? '\n… (cut)' : '') }));
    } catch (e) {
      out.replaceChildren(h('p', { class: 'error', text: e.message }));
    }
  });
  return h('section', { class: 'panel', id: 'invoke' }, h('h2', { text: 'Invoke' }), form);
}

// syncRows shows items in tbody in their order, a row each, keyed by id:
// rowFor(item, row) is the row to show for an item given its row now
// (undefined for a new one); the rows of items gone are removed.
function syncRows(tbody, rows, items, rowFor) {
  const keep = new Set();
  let prev = null;
  for (const it of items) {
    keep.add(it.id);
    const old = rows.get(it.id);
    const tr = rowFor(it, old);
    if (old && tr !== old) old.replaceWith(tr);
    rows.set(it.id, tr);
    const want = prev ? prev.nextSibling : tbody.firstChild;
    if (want !== tr) tbody.insertBefore(tr, want);
    prev = tr;
  }
  for (const [id, tr] of rows) {
    if (!keep.has(id)) {
      tr.remove();
      rows.delete(id);
    }
  }
}

// ---- invocations ----

function invocationsPanel(base) {
  const status = h('input', { id: 'inv-status', type: 'number', min: 100, max: 599, placeholder: 'any' });
  const trigger = h('select', { id: 'inv-trigger' }, ['', 'http', 'cron', 'rabbitmq'].map((t) => h('option', { value: t, text: t || 'any' })));
  const tbody = h('tbody');
  const rows = new Map();
  const load = async () => {
    const q = new URLSearchParams({ limit: '50' });
    if (status.value) q.set('status', status.value);
    if (trigger.value) q.set('trigger', trigger.value);
    const page = await api(base + '/invocations?' + q);
    syncRows(tbody, rows, page.invocations, (r, tr) => tr || invocationRow(r));
  };
  const reload = () => {
    rows.clear();
    tbody.replaceChildren();
    load().catch((e) => (statusLine.textContent = e.message));
  };
  status.addEventListener('change', reload);
  trigger.addEventListener('change', reload);
  every(1000, load);
  return h('section', { class: 'panel', id: 'invocations' }, h('h2', { text: 'Recent invocations' }),
    h('div', { class: 'filters' }, h('label', { for: 'inv-status' }, 'Status', status), h('label', { for: 'inv-trigger' }, 'Trigger', trigger)),
    h('table', {}, h('thead', {}, h('tr', {}, ['Started', 'Status', 'Duration', 'Trigger', 'Cold start', 'Details'].map((c) => h('th', { scope: 'col', text: c })))), tbody));
}

function invocationRow(r) {
  return h('tr', { 'data-id': String(r.id), 'data-request-id': r.requestId || '' },
    h('td', { text: fmt.time(r.start) }), h('td', { text: String(r.status) }), h('td', { class: 'num', text: fmt.ms(r.durationNs / 1e6) }),
    h('td', { text: r.trigger + (r.triggerName ? ' ' + r.triggerName : '') }), h('td', { text: r.coldStart ? 'yes' : '' }),
    h('td', {}, h('details', {}, h('summary', { text: 'all fields' }), h('pre', { text: JSON.stringify(r, null, 2) }))));
}

// ---- runs ----

// runsPanel lists the function's runs (asynchronous invocations), the
// newest first, each row kept as it is while its run does not change; a
// row opened shows the run's answer.
function runsPanel(base) {
  const state = h('select', { id: 'runs-state' },
    ['', 'queued', 'running', 'succeeded', 'failed', 'cancelled', 'expired'].map((s) => h('option', { value: s, text: s || 'any' })));
  const tbody = h('tbody');
  const rows = new Map();
  const section = h('section', { class: 'panel', id: 'runs' }, h('h2', { text: 'Runs' }),
    h('div', { class: 'filters' }, h('label', { for: 'runs-state' }, 'State', state)),
    h('table', {}, h('thead', {}, h('tr', {}, ['Created', 'Run', 'State', 'Attempts', 'Status', 'Took', 'Details'].map((c) => h('th', { scope: 'col', text: c })))), tbody));
  const load = async () => {
    const q = new URLSearchParams({ limit: '50' });
    if (state.value) q.set('state', state.value);
    let list;
    try {
      list = await api(base + '/runs?' + q);
    } catch (e) {
      if (e.status === 501) {
        section.replaceChildren(h('h2', { text: 'Runs' }), h('p', { class: 'muted', text: e.message }));
        return;
      }
      throw e;
    }
    syncRows(tbody, rows, list.runs, (r, tr) => {
      const key = JSON.stringify([r.state, r.attempts, r.status, r.completedAt]);
      if (tr && (tr.dataset.key === key || tr.querySelector('details[open]'))) return tr;
      const fresh = runRow(r);
      fresh.dataset.key = key;
      return fresh;
    });
  };
  state.addEventListener('change', () => {
    rows.clear();
    tbody.replaceChildren();
    load().catch((e) => (statusLine.textContent = e.message));
  });
  every(2000, load);
  return section;
}

function runRow(r) {
  const took = r.completedAt ? fmt.ms(new Date(r.completedAt) - new Date(r.createdAt)) : '—';
  const details = h('details', {}, h('summary', { text: r.error ? r.error : 'answer' }));
  details.addEventListener('toggle', async () => {
    if (!details.open || details.dataset.loaded) return;
    details.dataset.loaded = '1';
    const v = await api('/v1/runs/' + r.id).catch((e) => ({ error: e.message }));
    details.append(h('pre', { text: runText(v) }));
  });
  return h('tr', { 'data-run': r.id, 'data-state': r.state },
    h('td', { text: fmt.time(r.createdAt) }), h('td', { class: 'mono', text: r.id }), h('td', {}, badge(r.state)),
    h('td', { class: 'num', text: String(r.attempts) }), h('td', { text: r.status ? String(r.status) : '—' }),
    h('td', { class: 'num', text: took }), h('td', {}, details));
}

// runText is a run's answer as the details of its row show it.
function runText(v) {
  if (v.error && !v.id) return v.error;
  const res = v.result;
  if (!res) return 'no answer' + (v.state === 'queued' || v.state === 'running' ? ' yet' : '');
  const head = res.status + ' ' + (res.contentType || 'no Content-Type') + ', ' + res.size + ' bytes';
  if (res.binary) return head + '\n(binary: GET /runs/' + v.id + '/result on the invocation port serves it)';
  return head + '\n\n' + res.body + (res.truncated ? '\n(truncated)' : '');
}

// ---- logs, manifest, source ----

// unkept answers a route only sless dev has: on Kubernetes the output
// and the source are the cluster's (kubectl logs, the image).
function unkept(e, el, what) {
  if (e.status !== 404 || !/no such route/.test(e.message)) return false;
  el.replaceWith(h('p', { class: 'muted', text: what }));
  return true;
}

function logsPanel(base) {
  const pre = h('pre', { id: 'logs', tabindex: '0', 'aria-label': 'log lines' });
  const poll = async () => {
    let lines;
    try {
      ({ lines } = await api(base + '/logs?tail=200'));
    } catch (e) {
      if (unkept(e, pre, 'The platform keeps no output here: use kubectl logs.')) return poll.stop();
      throw e;
    }
    const text = lines.map((l) => fmt.time(l.time) + ' ' + l.instance + ' ' + l.line).join('\n') || '(no output yet)';
    if (pre.textContent !== text) {
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent = text;
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    }
  };
  every(2000, poll);
  return h('section', { class: 'panel' }, h('h2', { text: 'Output of its instances' }), pre);
}

function lazyPanel(title, id, load) {
  const body = h('div');
  const d = h('details', { id }, h('summary', {}, h('h2', { style: 'display:inline', text: title })), body);
  d.addEventListener('toggle', () => {
    if (d.open && !body.hasChildNodes()) {
      load(body).catch((e) => {
        const note = h('p', { class: 'error', text: e.message });
        body.replaceChildren(note);
        unkept(e, note, 'The platform has no source here: the function runs from its image.');
      });
    }
  });
  return h('section', { class: 'panel' }, d);
}

function manifestPanel(base) {
  return lazyPanel('Manifest', 'manifest', async (body) => {
    const m = await api(base + '/manifest');
    body.replaceChildren(h('p', { class: 'muted', text: m.file }), h('pre', { text: m.yaml }));
  });
}

function sourcePanel(base) {
  return lazyPanel('Source', 'source', async (body) => {
    const s = await api(base + '/source');
    const view = h('pre', { id: 'source-view', tabindex: '0', 'aria-label': 'file content' });
    const buttons = s.files.map((f) => {
      const b = h('button', { type: 'button', 'aria-pressed': 'false', text: f.path });
      b.addEventListener('click', () => {
        for (const o of buttons) o.setAttribute('aria-pressed', String(o === b));
        view.textContent = f.content || '(' + f.omitted + ', ' + f.size + ' bytes)';
      });
      return b;
    });
    body.replaceChildren(h('p', { class: 'muted', text: s.dir + (s.truncated ? ' (the first files only)' : '') }),
      h('div', { class: 'source-files', role: 'group', 'aria-label': 'files' }, buttons), view);
    if (buttons.length) buttons[0].click();
  });
}

window.addEventListener('hashchange', route);
route();
