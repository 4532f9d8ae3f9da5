// The context-relay console: reads the admin routes of the gateway that served it. Every
// value from the gateway is set as text (never as HTML): handoff summaries and session ids
// come from clients and models.
'use strict';

const CHANGE = { 'x-context-relay-console': '1' };
const POLL_MS = 2000;
const ACTIVITY_KEPT = 200;

/** An element with attributes and children (strings become text nodes). */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') node.className = v;
    else if (k.startsWith('data-')) node.setAttribute(k, String(v));
    else if (k === 'title') node.title = String(v);
    else node.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

async function getJSON(path) {
  const res = await fetch(path, { credentials: 'same-origin', cache: 'no-store' });
  if (res.status === 401) {
    // The login ended: the page shows the form again.
    location.reload();
    throw new Error('signed out');
  }
  if (!res.ok) throw new Error(`${path}: ${res.status}`);
  return res.json();
}

const fmt = new Intl.NumberFormat();

function ago(iso) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '';
  let s = Math.max(0, Math.round((Date.now() - t) / 1000));
  if (s < 60) return `${s} s`;
  const m = Math.round(s / 60);
  if (m < 60) return `${m} min`;
  const h = Math.round(m / 60);
  if (h < 48) return `${h} h`;
  return `${Math.round(h / 24)} d`;
}

function until(iso) {
  if (!iso) return '';
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  const s = Math.round((t - Date.now()) / 1000);
  if (s <= 0) return 'now';
  if (s < 90) return `in ${s} s`;
  if (s < 5400) return `in ${Math.round(s / 60)} min`;
  return `in ${Math.round(s / 3600)} h`;
}

function clock(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? '' : d.toLocaleTimeString();
}

function bytes(n) {
  if (n < 1024) return `${n} B`;
  return `${(n / 1024).toFixed(1)} KB`;
}

// ---- accounts ----------------------------------------------------------------------------

function renderAccounts(data) {
  const box = document.getElementById('accounts');
  const byProvider = new Map();
  for (const a of data.accounts || []) {
    if (!byProvider.has(a.provider)) byProvider.set(a.provider, []);
    byProvider.get(a.provider).push(a);
  }
  const parts = [];
  for (const [provider, accounts] of byProvider) {
    const rows = accounts.map((a) => {
      const ratio = typeof a.used_ratio === 'number' ? a.used_ratio : null;
      const pct = ratio === null ? null : Math.round(ratio * 100);
      const cls = pct === null ? '' : pct >= 95 ? 'full' : pct >= 80 ? 'high' : '';
      const bar = el('span', { class: cls });
      bar.style.width = `${Math.min(100, pct || 0)}%`;
      return el('tr', { 'data-provider': provider, 'data-account': a.account, 'data-state': a.state },
        el('td', { class: 'mono' }, a.account),
        el('td', {}, el('div', { class: 'used' }, el('div', { class: 'bar' }, bar),
          el('span', { class: 'ratio' }, pct === null ? '—' : `${pct} %`))),
        el('td', { title: a.resets_at || '' }, until(a.resets_at)),
        el('td', {}, el('span', { class: `pill state-${a.state}` }, a.state)),
        el('td', { class: 'num sessions' }, fmt.format(a.sessions)));
    });
    parts.push(el('h3', { class: 'provider' }, provider));
    parts.push(el('div', { class: 'scroll' }, el('table', { class: 'accounts' },
      el('thead', {}, el('tr', {}, el('th', {}, 'Account'), el('th', {}, 'Used'),
        el('th', {}, 'Resets'), el('th', {}, 'State'), el('th', { class: 'num' }, 'Sessions'))),
      el('tbody', {}, rows))));
  }
  if (parts.length === 0) parts.push(el('p', { class: 'empty' }, 'No account configured.'));
  box.replaceChildren(...parts);
}

// ---- handoffs ----------------------------------------------------------------------------

let handoffs = [];
// Deletions asked for once and waiting for their confirmation, by handoff: the table is
// rebuilt on every refresh, and a confirmation must survive it.
const armed = new Set();

function handoffId(h) {
  return JSON.stringify([h.tenant, h.session, h.combo, h.generated_at]);
}

function renderHandoffs(data) {
  handoffs = data.handoffs || [];
  const live = new Set(handoffs.map(handoffId));
  for (const id of armed) if (!live.has(id)) armed.delete(id);
  const body = document.querySelector('#handoffs tbody');
  const rows = handoffs.map((h, i) => {
    const del = el('button', { type: 'button', class: 'delete danger' }, 'Delete');
    if (armed.has(handoffId(h))) arm(del);
    del.addEventListener('click', () => removeHandoff(h, del));
    const view = el('button', { type: 'button', class: 'view' }, 'View');
    view.addEventListener('click', () => showHandoff(i));
    return el('tr', { 'data-session': h.session, 'data-kind': h.kind },
      el('td', { class: 'mono', title: `tenant ${h.tenant}` }, h.session),
      el('td', {}, el('span', { class: `badge event-${h.kind}` }, h.kind)),
      el('td', { title: h.generated_at }, ago(h.generated_at)),
      el('td', { class: 'num' }, bytes(h.size || 0)),
      el('td', {}, h.combo),
      el('td', { class: 'mono' }, `${h.from_provider}/${h.from_account}`),
      el('td', {}, view, ' ', del));
  });
  body.replaceChildren(...rows);
  document.getElementById('handoffs-empty').hidden = rows.length > 0;
}

function showHandoff(i) {
  const h = handoffs[i];
  if (!h) return;
  document.getElementById('hv-title').textContent = `Handoff of session ${h.session}`;
  const meta = [
    ['Tenant', h.tenant], ['Combo', h.combo], ['Kind', h.kind],
    ['Written by', `${h.from_provider}/${h.from_account} (${h.model})`],
    ['Messages', h.message_count], ['Written', h.generated_at], ['Expires', h.expires_at],
  ];
  document.getElementById('hv-meta').replaceChildren(
    ...meta.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
  document.getElementById('hv-summary').textContent = h.summary;
  document.getElementById('hv-progress').textContent = h.task_progress;
  document.getElementById('hv-decisions').replaceChildren(...(h.key_decisions || []).map((d) => el('li', {}, d)));
  document.getElementById('hv-entities').replaceChildren(...(h.active_entities || []).map((d) => el('li', { class: 'mono' }, d)));
  document.getElementById('handoff-view').showModal();
}

function arm(button) {
  button.dataset.armed = '1';
  button.textContent = 'Confirm delete';
  button.classList.add('armed');
}

async function removeHandoff(h, button) {
  // Two clicks: the first asks.
  if (!button.dataset.armed) {
    armed.add(handoffId(h));
    arm(button);
    return;
  }
  armed.delete(handoffId(h));
  button.disabled = true;
  const q = new URLSearchParams({ tenant: h.tenant, combo: h.combo });
  const res = await fetch(`/admin/handoffs/${encodeURIComponent(h.session)}?${q}`, {
    method: 'DELETE', credentials: 'same-origin', headers: CHANGE,
  });
  if (res.status === 401) location.reload();
  await refresh();
}

// ---- usage -------------------------------------------------------------------------------

function renderUsage(data) {
  const rows = (data.usage || []).map((u) =>
    el('tr', { 'data-account': u.account, 'data-kind': u.kind, 'data-model': u.model },
      el('td', {}, u.client),
      el('td', { class: 'mono' }, `${u.provider}/${u.account}`),
      el('td', { class: 'mono' }, u.model),
      el('td', {}, el('span', { class: 'badge' }, u.kind)),
      el('td', { class: 'num responses' }, fmt.format(u.responses)),
      el('td', { class: 'num input' }, fmt.format(u.input)),
      el('td', { class: 'num cached muted' }, fmt.format(u.cached_input)),
      el('td', { class: 'num output' }, fmt.format(u.output)),
      el('td', { class: 'num reasoning muted' }, fmt.format(u.reasoning_output))));
  document.querySelector('#usage tbody').replaceChildren(...rows);
  document.getElementById('usage-empty').hidden = rows.length > 0;
}

// ---- activity ----------------------------------------------------------------------------

function describe(e) {
  const bits = [];
  if (e.session) bits.push(el('span', { class: 'mono session' }, e.session));
  if (e.from && e.account) bits.push(el('span', { class: 'mono' }, `${e.from} → ${e.account}`));
  else if (e.account) bits.push(el('span', { class: 'mono' }, e.provider ? `${e.provider}/${e.account}` : e.account));
  for (const a of e.actions || []) bits.push(el('span', { class: `badge event-${a}` }, a));
  if (e.handoff && e.handoff !== e.event) bits.push(el('span', { class: 'muted' }, `${e.handoff} handoff`));
  if (e.reason) bits.push(el('span', { class: 'reason muted' }, e.reason.replace(/_/g, ' ')));
  if (e.until) bits.push(el('span', { class: 'muted', title: e.until }, `until ${clock(e.until)}`));
  if (e.combo) bits.push(el('span', { class: 'muted' }, e.combo));
  return bits;
}

let lastSeq = 0;

function addActivity(e) {
  if (!e || typeof e.seq !== 'number' || e.seq <= lastSeq) return;
  lastSeq = e.seq;
  const list = document.getElementById('activity');
  const item = el('li', { 'data-event': e.event, 'data-seq': e.seq },
    el('time', { datetime: e.at, title: e.at }, clock(e.at)),
    el('span', { class: `badge event event-${e.event}` }, e.event),
    describe(e));
  list.prepend(item);
  while (list.children.length > ACTIVITY_KEPT) list.lastElementChild.remove();
  document.getElementById('activity-empty').hidden = true;
}

// Entries the event stream brings while the list is read again: added after it.
let arriving = null;

async function reloadActivity() {
  arriving = [];
  try {
    const data = await getJSON('/admin/activity');
    document.getElementById('activity').replaceChildren();
    lastSeq = 0;
    for (const e of data.activity || []) addActivity(e);
    for (const e of arriving) addActivity(e);
  } finally {
    arriving = null;
  }
}

function listen() {
  const live = document.getElementById('live');
  const source = new EventSource('/admin/events');
  let dropped = false;
  source.onopen = () => {
    live.textContent = 'live'; live.className = 'pill on';
    // Back after a drop: what was missed is read again, and a restarted gateway numbers its
    // entries from 1 (its entries would all look older than the last one shown).
    if (dropped) { dropped = false; reloadActivity().catch(() => {}); refresh(); }
  };
  source.onmessage = (m) => {
    try {
      const e = JSON.parse(m.data);
      if (arriving) arriving.push(e); else addActivity(e);
    } catch (_) { /* a partial entry: skipped */ }
    // Something happened: the tables follow at once.
    refresh();
  };
  source.addEventListener('lagged', () => reloadActivity().catch(() => {}));
  source.onerror = () => { dropped = true; live.textContent = 'reconnecting…'; live.className = 'pill off'; };
}

// ---- refresh -----------------------------------------------------------------------------

let refreshing = null;

function refresh() {
  if (refreshing) return refreshing;
  refreshing = Promise.all([
    getJSON('/admin/accounts').then(renderAccounts),
    getJSON('/admin/handoffs').then(renderHandoffs),
    getJSON('/admin/usage').then(renderUsage),
  ]).catch((err) => console.warn(err)).finally(() => { refreshing = null; });
  return refreshing;
}

document.getElementById('logout').addEventListener('click', async () => {
  await fetch('/admin/logout', { method: 'POST', credentials: 'same-origin', headers: CHANGE });
  location.reload();
});

refresh();
listen();
setInterval(refresh, POLL_MS);
