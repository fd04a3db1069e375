// The console's plumbing: the token, calls to the public APIs, polling
// and a tiny DOM builder. Every view and action is a call any client can
// make with the same token; the server decides what it may do.

// POLL_MS is the pause between the end of one refresh and the start of
// the next: at most one refresh a second, none while the tab is hidden.
export const POLL_MS = 1000;
const TOKEN_KEY = 'surge.token';

export function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }
export function setToken(t) { t ? sessionStorage.setItem(TOKEN_KEY, t) : sessionStorage.removeItem(TOKEN_KEY); }

export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function call(method, path, body, headers = {}) {
  const h = { ...headers };
  const t = token();
  if (t) h['Authorization'] = 'Bearer ' + t;
  if (body !== undefined) h['Content-Type'] = 'application/json';
  const resp = await fetch(path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'omit', cache: 'no-store' });
  const text = await resp.text();
  const json = (resp.headers.get('Content-Type') || '').includes('json');
  if (!resp.ok) {
    let msg = text;
    if (json) { try { const e = JSON.parse(text); msg = e.error || e.message || text; } catch (_) { /* keep the text */ } }
    throw new ApiError(resp.status, `${method} ${path}: ${resp.status} ${msg}`.trim());
  }
  return json ? JSON.parse(text || 'null') : text;
}

export const api = {
  get: (path) => call('GET', path),
  post: (path, body = {}) => call('POST', path, body),
  del: (path) => call('DELETE', path),
  // rpc calls a gRPC procedure with the Connect protocol's unary JSON form.
  rpc: (service, method, body = {}) => call('POST', `/${service}/${method}`, body, { 'Connect-Protocol-Version': '1' }),
};

// h builds an element: h('td', {class: 'num'}, 'text', child...). Text is
// always set as text, never parsed as markup.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// table renders rows of objects under the given columns: [{k, label,
// num, fmt(row)}].
export function table(columns, rows, attrs = {}) {
  const head = h('tr', {}, columns.map(c => h('th', { class: c.num ? 'num' : null }, c.label || c.k)));
  const body = rows.map(r => h('tr', { 'data-key': r.__key }, columns.map(c => {
    const v = c.fmt ? c.fmt(r) : r[c.k];
    return h('td', { class: c.num ? 'num' : null }, v === undefined ? '' : v);
  })));
  return h('table', attrs, h('thead', {}, head), h('tbody', {}, body));
}

export function card(label, value, cls) {
  return h('div', { class: 'card' }, h('div', { class: 'k' }, label), h('div', { class: 'v ' + (cls || '') }, value));
}

export function fmtNum(n, digits = 0) {
  if (n === undefined || n === null || Number.isNaN(n)) return '–';
  return Number(n).toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

export function fmtBytes(n) {
  if (!n && n !== 0) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}

export function fmtTime(t) {
  if (!t) return '';
  const d = new Date(t);
  return Number.isNaN(d.getTime()) ? String(t) : d.toISOString().replace('T', ' ').replace('Z', '');
}

// roles is what GET /v1/auth/whoami said the token may do, per workload.
let roles = {};
const rank = { none: 0, read: 1, write: 2, admin: 3 };
export function setRoles(r) { roles = r || {}; }
// can reports whether the token holds role (read, write, admin) in workload.
export function can(workload, role) { return (rank[roles[workload]] || 0) >= rank[role]; }

// button is an action button shown only to a token that may do it.
export function button(workload, role, label, onclick, attrs = {}) {
  if (!can(workload, role)) return null;
  return h('button', { class: 'act', 'data-action': label, ...attrs, onclick: async (ev) => {
    ev.target.disabled = true;
    try { await onclick(); notice(''); } catch (e) { notice(e.message); } finally { ev.target.disabled = false; }
  } }, label);
}

export function notice(msg) {
  const b = document.getElementById('banner');
  b.textContent = msg || '';
  b.hidden = !msg;
}

// Poller refreshes a view: at most one refresh in flight, POLL_MS between
// them, paused while the tab is hidden and stopped when the view changes.
export class Poller {
  constructor(refresh) { this.refresh = refresh; this.timer = 0; this.stopped = false; this.running = false; }
  start() {
    this.onVis = () => { if (!document.hidden) this.kick(); };
    document.addEventListener('visibilitychange', this.onVis);
    this.kick();
  }
  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    document.removeEventListener('visibilitychange', this.onVis);
  }
  kick() {
    clearTimeout(this.timer);
    if (this.stopped || this.running || document.hidden) return;
    this.running = true;
    this.refresh().then(() => { status('updated ' + new Date().toLocaleTimeString()); },
      (e) => { status(e.message); if (e.status === 401) window.dispatchEvent(new Event('surge-unauthorized')); })
      .finally(() => {
        this.running = false;
        if (!this.stopped && !document.hidden) this.timer = setTimeout(() => this.kick(), POLL_MS);
      });
  }
}

export function status(msg) { document.getElementById('status').textContent = msg; }

// replace swaps el's children for the given nodes.
export function replace(el, ...nodes) { el.replaceChildren(...nodes.flat().filter(n => n)); }

// Pager keeps a cursor-paged list's place (docs/API.md, "Operator
// reads": after is the key of the previous page's last item).
export class Pager {
  constructor() { this.stack = []; this.after = ''; this.next = ''; }
  query() { return this.after ? '&after=' + encodeURIComponent(this.after) : ''; }
  update(next) {
    this.next = next || '';
    if (this.el) { this.prevBtn.disabled = !this.stack.length; this.nextBtn.disabled = !this.next; }
  }
  reset() { this.stack = []; this.after = ''; }
  controls() {
    this.prevBtn = h('button', { onclick: () => { this.after = this.stack.pop() || ''; this.update(this.next); } }, '‹ previous');
    this.nextBtn = h('button', { onclick: () => { if (this.next) { this.stack.push(this.after); this.after = this.next; } } }, 'next ›');
    this.el = h('div', { class: 'controls pager' }, this.prevBtn, this.nextBtn);
    return this.el;
  }
}

// param is a parameter of the page's hash (#jobs?queue=mail): a view a
// person can bookmark or share, never a token.
export function param(name) {
  return new URLSearchParams(location.hash.split('?')[1] || '').get(name) || '';
}
