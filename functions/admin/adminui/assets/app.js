// tollgate's admin page: the admin API's rules, budgets and keys with their
// live usage. No framework and no build step; everything the page shows is
// put in with textContent or as SVG attributes, never as HTML, and the
// Content-Security-Policy allows no inline script or style.
'use strict';

// The master key lives in this tab's sessionStorage only: never in a URL,
// a cookie, the other storages or a log.
const KEY = 'tollgate.masterKey';
// The admin API is the page's parent path (/admin/ behind any stage prefix).
const API = location.pathname.replace(/\/ui\/?$/, '/');
// How often the live usage is read, and how many of those reads also read
// the charts' numbers (which change per minute).
const REFRESH_MS = 3000;
const STATS_EVERY = 3;

const state = { overview: null, stats: null, keys: null, migrations: null, alerts: null, audit: null, auditCursor: '', who: null, tab: 'limits', tick: 0, timer: 0, noticeTimer: 0, busy: false, again: false, editing: { rule: null, budget: null } };

// --- DOM helpers ---

const $ = (sel) => document.querySelector(sel);

function el(tag, props, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k === 'on') for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
    else if (k.startsWith('data-')) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === undefined || kid === null || kid === false) continue;
    e.append(typeof kid === 'string' ? document.createTextNode(kid) : kid);
  }
  return e;
}

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const kid of kids.flat(Infinity)) if (kid) e.append(kid);
  return e;
}

function show(node, on) { node.hidden = !on; }
const fmt = new Intl.NumberFormat('en-US');
const n = (v) => fmt.format(v || 0);

// notice says how an action went, for a few seconds (a failure until the
// next action).
function notice(text, bad) {
  const p = $('#notice');
  p.textContent = text;
  p.className = bad ? 'notice bad' : 'notice';
  show(p, !!text);
  clearTimeout(state.noticeTimer);
  if (text && !bad) state.noticeTimer = setTimeout(() => show(p, false), 6000);
}

// --- the admin API ---

class HTTPError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || ('HTTP ' + status));
    this.status = status;
    this.body = body;
  }
}

async function call(method, path, body) {
  const key = sessionStorage.getItem(KEY);
  const headers = { Authorization: 'Bearer ' + key };
  const init = { method, headers, cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(API + path, init);
  let data = null;
  try { data = await res.json(); } catch (_) { data = null; }
  if (res.status === 401) {
    signOut('The master key was refused: sign in again.');
    throw new HTTPError(res.status, data);
  }
  if (!res.ok) throw new HTTPError(res.status, data);
  return data;
}

// A rule's canonical id as a URL path (its slashes kept).
const idPath = (id) => encodeURI(id).replace(/#/g, '%23').replace(/\?/g, '%3F');

// --- signing in ---

async function signIn(ev) {
  ev.preventDefault();
  const input = $('#master-key');
  const err = $('#login-error');
  show(err, false);
  sessionStorage.setItem(KEY, input.value);
  input.value = '';
  try {
    await call('GET', 'overview');
    state.who = await call('GET', 'whoami');
  } catch (e) {
    sessionStorage.removeItem(KEY);
    err.textContent = e.status === 403 ? 'That is a managed key without admin: the admin pages need the master key, or a partner key (admin: true).' : e.message;
    show(err, true);
    show($('#login-panel'), true);
    show($('#app'), false);
    return;
  }
  start();
}

function signOut(message) {
  sessionStorage.removeItem(KEY);
  state.who = null;
  state.stats = state.alerts = state.audit = state.keys = state.migrations = null;
  clearTimeout(state.timer);
  state.timer = 0;
  show($('#app'), false);
  show($('#logout'), false);
  show($('#login-panel'), true);
  const err = $('#login-error');
  err.textContent = message || '';
  show(err, !!message);
  $('#status').textContent = '';
}

async function start() {
  show($('#login-panel'), false);
  show($('#app'), true);
  show($('#logout'), true);
  state.tick = 0;
  if (!state.who) {
    try {
      state.who = await call('GET', 'whoami');
    } catch (e) {
      return;
    }
  }
  applyWho();
  refresh();
}

// applyWho fits the page to who signed in: a partner key sees its own
// subtree, makes user-path rules beneath its path, and has no provider
// view.
function applyWho() {
  const w = state.who;
  const partner = !!(w && w.delegated);
  const badge = $('#who');
  badge.textContent = partner ? 'partner ' + w.actor + ' · ' + w.user_path : '';
  show(badge, partner);
  // The provider view and the migrations are the master key's.
  show($('#tabs [data-tab=applies]'), !partner);
  show($('#tabs [data-tab=migrations]'), !partner);
  if (partner && (state.tab === 'applies' || state.tab === 'migrations')) selectTab('limits');
  for (const f of [$('#rule-form'), $('#budget-form')]) {
    for (const o of f.elements.scope.options) o.disabled = partner && o.value !== 'user_path';
    f.elements.subject.placeholder = partner ? w.user_path + '/…' : '/team, openai, gpt-4o, feature=x, key id';
  }
}

// --- refreshing ---

// refresh reads what the page shows, then again after REFRESH_MS. One
// read at a time: a refresh asked for during one follows it.
async function refresh() {
  if (state.busy) {
    state.again = true;
    return;
  }
  clearTimeout(state.timer);
  if (!sessionStorage.getItem(KEY)) return;
  state.busy = true;
  try {
    const reads = [call('GET', 'overview')];
    if (state.tick % STATS_EVERY === 0 || !state.stats) reads.push(call('GET', 'stats').catch((e) => (e.status === 404 ? null : Promise.reject(e))));
    else reads.push(undefined);
    // The tab in sight reads its own data; the others read nothing.
    const tabRead = { keys: () => call('GET', 'keys'), applies: () => call('GET', 'providers'), migrations: () => call('GET', 'migrations'), alerts: () => call('GET', 'alerts').catch((e) => (e.status === 404 ? null : Promise.reject(e))),
      audit: () => call('GET', 'audit?since=168h&limit=50&cursor=' + encodeURIComponent(state.auditCursor) + '&subject=' + encodeURIComponent($('#audit-subject').value.trim())) }[state.tab];
    reads.push(tabRead ? tabRead() : undefined);
    const [overview, stats, tabData] = await Promise.all(reads);
    state.overview = overview;
    if (stats !== undefined) state.stats = stats;
    if (tabData !== undefined) {
      if (state.tab === 'keys') state.keys = tabData.keys;
      if (state.tab === 'applies') state.providers = tabData;
      if (state.tab === 'migrations') state.migrations = tabData.migrations;
      if (state.tab === 'alerts') state.alerts = tabData;
      if (state.tab === 'audit') state.audit = tabData;
    }
    state.tick++;
    render();
    $('#status').textContent = 'configuration version ' + overview.version + ' · read ' + new Date().toLocaleTimeString();
  } catch (e) {
    if (e.status !== 401) $('#status').textContent = 'could not read the admin API: ' + e.message;
  } finally {
    state.busy = false;
  }
  if (state.again) {
    state.again = false;
    refresh();
  } else if (sessionStorage.getItem(KEY) && !document.hidden) {
    // A tab out of sight reads nothing (each read costs store reads); it
    // reads again when it is shown.
    state.timer = setTimeout(refresh, REFRESH_MS);
  }
}

function render() {
  renderRules();
  renderBudgets();
  renderApplies();
  renderKeys();
  renderMigrations();
  renderCharts();
  renderOps();
  renderAlerts();
  renderAudit();
}

// --- usage bars ---

function bar(dim, label, used, limit, text) {
  const pct = limit > 0 ? Math.min(100, (100 * used) / limit) : 0;
  const fill = el('div', { class: 'fill' });
  fill.style.width = pct.toFixed(1) + '%';
  const cls = 'bar' + (pct >= 100 ? ' full' : pct >= 80 ? ' near' : '');
  return el('div', { class: cls, 'data-dim': dim, 'data-used': String(used), 'data-limit': String(limit) },
    el('span', { text: label }), el('div', { class: 'track' }, fill), el('span', { class: 'num', text }));
}

const DIMS = [['requests', 'requests'], ['tokens', 'tokens'], ['input_tokens', 'input tokens'], ['output_tokens', 'output tokens'], ['in_flight', 'in flight']];

function usageBars(r) {
  const u = r.usage;
  if (!u) return el('span', { class: 'muted', text: r.note || 'not in force' });
  const bars = [];
  for (const [dim, label] of DIMS) {
    const d = u[dim];
    if (!d) continue;
    let text = n(d.used) + ' / ' + n(d.limit);
    if (d.previous_window) text += ' (' + n(d.limit - d.remaining) + ' sliding)';
    // The bar shows what weighs on the limit: the sliding estimate.
    bars.push(bar(dim, label, d.limit - d.remaining, d.limit, text));
  }
  return el('div', {}, bars);
}

function limitText(r) {
  const p = r.limit_key.period || (r.limit_key.period_seconds + ' s');
  const parts = [];
  if (r.capacity) parts.push('bucket of ' + n(r.capacity) + ' ' + r.unit + ', ' + r.refill_per_second + '/s');
  if (r.max_requests) parts.push(n(r.max_requests) + ' requests');
  if (r.max_tokens) parts.push(n(r.max_tokens) + ' tokens');
  if (r.max_input_tokens) parts.push(n(r.max_input_tokens) + ' input tokens');
  if (r.max_output_tokens) parts.push(n(r.max_output_tokens) + ' output tokens');
  return parts.join(', ') + (r.capacity ? '' : p === 'concurrent' ? ' at once' : ' a ' + p) + (r.window ? ' (fixed window)' : '');
}

function refusedLastHour(id) {
  const s = state.stats && state.stats.refusals && state.stats.refusals[id];
  return s ? s.reduce((a, b) => a + b, 0) : 0;
}

function badges(r) {
  const out = [el('span', { class: 'badge ' + r.source, text: r.source === 'config' ? 'config · read-only' : 'manual v' + r.version })];
  if (r.shadow) out.push(el('span', { class: 'badge', text: 'shadow' }));
  if (r.per_child) out.push(el('span', { class: 'badge', text: 'per child' }));
  if (r.fair_share) out.push(el('span', { class: 'badge', text: 'fair share by ' + r.fair_share.by }));
  if (r.ramp) out.push(el('span', { class: 'badge', text: 'ramp' }));
  for (const p of (state.overview && state.overview.pauses) || []) {
    if (p.scope === r.scope && p.subject === r.subject) out.push(el('span', { class: 'badge paused', text: 'paused' }));
  }
  return out;
}

function ruleCell(r) {
  return el('td', {}, el('span', { class: 'rule-id', text: r.id }), badges(r));
}

// --- rate limits ---

function renderRules() {
  const body = $('#limits tbody');
  const rows = state.overview.rate_limits.map((r) => el('tr', { 'data-rule': r.id, 'data-version': String(r.version || 0) },
    ruleCell(r),
    el('td', { text: limitText(r) }),
    el('td', {}, usageBars(r)),
    el('td', { class: 'refused', text: n(refusedLastHour(r.id)) }),
    el('td', { class: 'row-actions' }, actions(r, 'rule'))));
  body.replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colSpan: 5, class: 'empty', text: 'No rate limits.' }))]));
}

// mine says whether the signed-in key may write rule r: the master any
// manual rule; a partner key those beneath its path (or per child of it).
function mine(r) {
  const w = state.who;
  if (!w || !w.delegated) return true;
  const p = w.user_path.toLowerCase();
  const s = r.subject.toLowerCase();
  return r.scope === 'user_path' && ((s.startsWith(p + '/') || p === '/') && s !== p || (s === p && r.per_child));
}

function actions(r, kind) {
  const collection = kind === 'rule' ? 'rate-limits' : 'budgets';
  if (!mine(r)) return [el('span', { class: 'muted', text: 'binds you · read-only' })];
  const reset = el('button', { class: 'small quiet', 'data-action': 'reset', title: 'Start new counters for this ' + kind, text: 'Reset',
    on: { click: () => act(() => call('POST', collection + '/reset-one', { id: r.id }), r.id + ': counters reset') } });
  if (r.source === 'config') return [reset];
  const edit = el('button', { class: 'small quiet', 'data-action': 'edit', text: 'Edit', on: { click: () => (kind === 'rule' ? editRule(r) : editBudget(r)) } });
  const del = el('button', { class: 'small danger', 'data-action': 'delete', text: 'Delete',
    on: { click: () => confirm('Delete ' + r.id + '?') && act(() => call('DELETE', collection + '/' + idPath(r.id), { version: r.version }), r.id + ': deleted') } });
  return [edit, ' ', reset, ' ', del];
}

async function act(f, done) {
  try {
    await f();
    notice(done);
  } catch (e) {
    notice(e.message, true);
  }
  refresh();
}

const NUMS = ['max_requests', 'max_tokens', 'max_input_tokens', 'max_output_tokens', 'capacity'];

function editRule(r) {
  const f = $('#rule-form');
  state.editing.rule = r;
  f.reset();
  $('#rule-form-title').textContent = r ? 'Edit ' + r.id : 'New rate limit';
  $('#rule-version').textContent = r ? String(r.version) : 'new';
  show($('#rule-conflict'), false);
  show($('#rule-error'), false);
  for (const name of ['scope', 'subject', 'period', 'per_child']) f.elements[name].disabled = !!r;
  if (r) {
    f.elements.scope.value = r.scope;
    f.elements.subject.value = r.subject;
    f.elements.period.value = r.limit_key.period || 'minute';
    for (const k of NUMS) f.elements[k].value = r[k] || '';
    f.elements.refill_per_second.value = r.refill_per_second || '';
    f.elements.unit.value = r.unit || 'requests';
    f.elements.shadow.checked = !!r.shadow;
    f.elements.per_child.checked = !!r.per_child;
  }
  showPeriodFields(f);
  show(f, true);
  f.elements[r ? (r.capacity ? 'capacity' : 'max_requests') : 'subject'].focus();
}

// showPeriodFields shows a bucket's fields for a bucket, a window's for a
// window.
function showPeriodFields(f) {
  const bucket = f.elements.period.value === 'bucket';
  for (const l of f.querySelectorAll('[data-for]')) show(l, (l.dataset.for === 'bucket') === bucket);
}

// ruleBody is the form's limits: a bucket's capacity and refill, or a
// window's maxima (an empty field is no limit).
function ruleBody(f) {
  const num = (k) => (f.elements[k].value === '' ? 0 : Number(f.elements[k].value));
  const b = { shadow: f.elements.shadow.checked };
  if (f.elements.period.value === 'bucket') {
    b.capacity = num('capacity');
    b.refill_per_second = num('refill_per_second');
  } else {
    for (const k of NUMS) if (k !== 'capacity') b[k] = num(k);
  }
  return b;
}

async function saveRule(ev) {
  ev.preventDefault();
  const f = ev.target;
  const r = state.editing.rule;
  const b = ruleBody(f);
  try {
    if (r) {
      // A change is conditional on the version the form was filled from.
      b.version = r.version;
      await call('PATCH', 'rate-limits/' + idPath(r.id), b);
    } else {
      b.scope = f.elements.scope.value;
      b.subject = f.elements.subject.value.trim();
      b.per_child = f.elements.per_child.checked;
      if (f.elements.period.value === 'bucket') {
        b.limit_key = { period: 'bucket' };
        b.unit = f.elements.unit.value;
      } else {
        b.limit_key = { period: f.elements.period.value };
      }
      await call('POST', 'rate-limits', b);
    }
  } catch (e) {
    formError('rule', e);
    return;
  }
  show(f, false);
  notice(r ? r.id + ': saved' : 'rate limit created');
  refresh();
}

// formError shows a refused save: a 409 as the conflict it is, with what
// is there now, else the API's message.
function formError(kind, e) {
  const box = $('#' + kind + '-conflict');
  const err = $('#' + kind + '-error');
  show(box, false);
  show(err, false);
  const current = e.body && e.body.error && e.body.error.current;
  if (e.status === 409 && current) {
    refresh(); // the table shows what is there now
    const reload = el('button', { type: 'button', class: 'small', 'data-action': 'load-current', text: 'Load version ' + current.version,
      on: { click: () => (kind === 'rule' ? editRule(current) : editBudget(current)) } });
    box.replaceChildren(el('strong', { text: 'Conflict (409): not saved. ' }), e.message + ' ', reload);
    show(box, true);
    return;
  }
  err.textContent = (e.status ? e.status + ': ' : '') + e.message;
  show(err, true);
}

// --- budgets ---

function renderBudgets() {
  const body = $('#budgets tbody');
  const rows = state.overview.budgets.map((b) => el('tr', { 'data-rule': b.id, 'data-version': String(b.version || 0) },
    ruleCell(b),
    el('td', { text: '$' + b.amount_usd + ' a ' + b.period }),
    el('td', {}, budgetBars(b)),
    el('td', { class: 'refused', text: n(refusedLastHour(b.id)) }),
    el('td', { class: 'row-actions' }, actions(b, 'budget'))));
  body.replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colSpan: 5, class: 'empty', text: 'No budgets.' }))]));
}

function budgetBars(b) {
  const u = b.usage;
  if (!u) return el('span', { class: 'muted', text: b.note || 'not in force' });
  const amount = Number(b.amount_usd);
  const spent = Number(u.spent_usd);
  const reserved = Number(u.reserved_usd);
  return el('div', {},
    bar('dollars', 'used', spent + reserved, amount, '$' + u.spent_usd + ' spent, $' + u.reserved_usd + ' reserved'),
    el('div', { class: 'muted', text: '$' + u.remaining_usd + ' left until ' + new Date(u.period_end).toLocaleString() }));
}

function editBudget(b) {
  const f = $('#budget-form');
  state.editing.budget = b;
  f.reset();
  $('#budget-form-title').textContent = b ? 'Edit ' + b.id : 'New budget';
  $('#budget-version').textContent = b ? String(b.version) : 'new';
  show($('#budget-conflict'), false);
  show($('#budget-error'), false);
  for (const name of ['scope', 'subject', 'period', 'per_child']) f.elements[name].disabled = !!b;
  if (b) {
    f.elements.scope.value = b.scope;
    f.elements.subject.value = b.subject;
    f.elements.period.value = b.period;
    f.elements.amount_usd.value = b.amount_usd;
    f.elements.shadow.checked = !!b.shadow;
    f.elements.per_child.checked = !!b.per_child;
  }
  show(f, true);
}

async function saveBudget(ev) {
  ev.preventDefault();
  const f = ev.target;
  const cur = state.editing.budget;
  const b = { amount_usd: f.elements.amount_usd.value.trim(), shadow: f.elements.shadow.checked };
  try {
    if (cur) {
      b.version = cur.version;
      await call('PATCH', 'budgets/' + idPath(cur.id), b);
    } else {
      Object.assign(b, { scope: f.elements.scope.value, subject: f.elements.subject.value.trim(), period: f.elements.period.value, per_child: f.elements.per_child.checked });
      await call('POST', 'budgets', b);
    }
  } catch (e) {
    formError('budget', e);
    return;
  }
  show(f, false);
  notice(cur ? cur.id + ': saved' : 'budget created');
  refresh();
}

// --- the rules that apply to one provider or model ---

function renderApplies() {
  const sel = $('#applies-target');
  const providers = state.overview.providers;
  const options = [];
  for (const p of providers) {
    options.push(['p:' + p.name, p.name + ' (' + p.type + ')']);
    for (const m of p.models || []) options.push(['m:' + p.name + '/' + m, '  ' + p.name + '/' + m]);
  }
  const sig = options.map((o) => o[0]).join('|');
  if (sel.dataset.sig !== sig) {
    const keep = sel.value;
    sel.replaceChildren(...options.map(([v, t]) => el('option', { value: v, text: t })));
    sel.dataset.sig = sig;
    if (options.some((o) => o[0] === keep)) sel.value = keep;
  }
  const typed = $('#applies-model').value.trim();
  const target = typed ? targetOf('m:' + typed) : targetOf(sel.value);
  const all = state.overview.rate_limits.concat(state.overview.budgets);
  const always = [];
  const caller = [];
  for (const r of all) {
    const a = applies(r, target);
    if (a === 'always') always.push(r);
    else if (a === 'caller') caller.push(r);
  }
  fillApplies('#applies-always tbody', always);
  fillApplies('#applies-caller tbody', caller);
  renderProviderFacts(target);
}

// renderProviderFacts shows, for the chosen provider (or a model's),
// what its models can do (the capabilities table fallbacks are checked
// against) and what its upstream last reported of its own limits.
function renderProviderFacts(target) {
  const known = (state.providers && state.providers.providers) || [];
  $('#capabilities-date').textContent = state.providers ? '(built-in table of ' + state.providers.capabilities_date + ', with the configuration over it)' : '';
  const caps = [];
  const reports = [];
  for (const p of known) {
    if (!target.providers.includes(p.name)) continue;
    for (const c of p.capabilities || []) {
      if (target.model && c.model !== target.model) continue;
      caps.push(el('tr', { 'data-model': p.name + '/' + c.model }, el('td', { text: p.name + '/' + c.model }),
        el('td', { text: c.context_window ? c.context_window.toLocaleString() : 'unknown' }),
        el('td', { text: c.max_output_tokens ? c.max_output_tokens.toLocaleString() : 'unknown' }),
        el('td', { text: c.tools }), el('td', { text: c.vision }), el('td', { text: c.audio }), el('td', { text: c.structured_output }),
        el('td', { text: (c.regions || []).join(', ') || 'unknown' })));
    }
    for (const [m, r] of Object.entries(p.upstream_reports || {})) {
      if (target.model && m !== target.model && m !== '*') continue;
      const left = [r.remaining_requests != null ? r.remaining_requests + ' requests' : '', r.remaining_tokens != null ? r.remaining_tokens + ' tokens' : ''].filter(Boolean).join(', ');
      reports.push(el('tr', { 'data-report': p.name + '/' + m }, el('td', { text: m === '*' ? p.name + ' (any model)' : p.name + '/' + m }),
        el('td', { text: r.limit_requests != null ? String(r.limit_requests) : '' }), el('td', { text: r.limit_tokens != null ? String(r.limit_tokens) : '' }),
        el('td', { text: left }), el('td', { text: new Date(r.at).toLocaleTimeString() })));
    }
  }
  $('#applies-capabilities tbody').replaceChildren(...(caps.length ? caps : [el('tr', {}, el('td', { colSpan: 8, class: 'empty', text: 'No listed models.' }))]));
  $('#applies-reports tbody').replaceChildren(...(reports.length ? reports : [el('tr', {}, el('td', { colSpan: 5, class: 'empty', text: 'Nothing reported yet.' }))]));
}

// targetOf reads a choice: "p:<provider>", "m:<provider>/<model>" or
// "m:<model>" (on whichever provider serves it).
function targetOf(v) {
  if (!v) return { providers: [], model: '' };
  const providers = state.overview.providers;
  if (v.startsWith('p:')) return { providers: [v.slice(2)], model: '' };
  const id = v.slice(2);
  const slash = id.indexOf('/');
  if (slash > 0 && providers.some((p) => p.name === id.slice(0, slash))) return { providers: [id.slice(0, slash)], model: id.slice(slash + 1) };
  const serving = providers.filter((p) => !p.models || p.models.length === 0 || p.models.includes(id)).map((p) => p.name);
  return { providers: serving, model: id };
}

// applies says whether a rule limits every request to the target
// ("always"), some depending on who sends them ("caller"), or none.
function applies(r, t) {
  switch (r.scope) {
    case 'provider':
      return t.providers.includes(r.subject) ? 'always' : '';
    case 'model': {
      const slash = r.subject.indexOf('/');
      const onProvider = slash > 0 && t.providers.includes(r.subject.slice(0, slash));
      const model = onProvider ? r.subject.slice(slash + 1) : r.subject;
      if (!t.model) return onProvider || slash < 0 ? 'caller' : ''; // a provider: some of its models
      return model === t.model && (onProvider || slash < 0) ? 'always' : '';
    }
    case 'user_path':
      return r.subject === '/' ? 'always' : 'caller';
    default:
      return 'caller';
  }
}

function fillApplies(sel, rs) {
  const rows = rs.map((r) => el('tr', { 'data-rule': r.id }, ruleCell(r),
    el('td', { text: r.amount_usd ? '$' + r.amount_usd + ' a ' + r.period : limitText(r) }),
    el('td', {}, r.amount_usd ? budgetBars(r) : usageBars(r))));
  $(sel).replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colSpan: 3, class: 'empty', text: 'None.' }))]));
}

// --- keys ---

function renderKeys() {
  if (!state.keys) return;
  const rows = state.keys.map((k) => el('tr', { 'data-key': k.id },
    el('td', {}, el('span', { class: 'rule-id', text: k.id }), el('div', { class: 'muted', text: k.prefix + '…' }),
      k.revoked ? el('span', { class: 'badge paused', text: 'revoked' }) : null),
    el('td', { text: k.name || '' }), el('td', { class: 'rule-id', text: k.user_path }), el('td', { text: k.tags || '' }),
    el('td', { text: (k.class || '') }, k.admin ? el('span', { class: 'badge manual', text: 'partner admin' }) : null), el('td', { text: new Date(k.created_at).toLocaleString() }),
    el('td', { text: k.expires_at ? new Date(k.expires_at).toLocaleString() : 'never' }),
    el('td', {}, k.revoked ? null : el('button', { class: 'small danger', 'data-action': 'revoke', text: 'Revoke',
      on: { click: () => confirm('Revoke ' + k.id + '? Requests with it are refused within seconds.') && act(() => call('DELETE', 'keys/' + encodeURIComponent(k.id)), k.id + ': revoked') } }))));
  $('#keys tbody').replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colSpan: 8, class: 'empty', text: 'No managed keys.' }))]));
}

async function createKey(ev) {
  ev.preventDefault();
  const f = ev.target;
  const b = {};
  for (const k of ['name', 'user_path', 'tags', 'class', 'expires_in']) if (f.elements[k].value.trim()) b[k] = f.elements[k].value.trim();
  if (f.elements.admin.checked) b.admin = true;
  show($('#key-error'), false);
  let made;
  try {
    made = await call('POST', 'keys', b);
  } catch (e) {
    $('#key-error').textContent = e.message;
    show($('#key-error'), true);
    return;
  }
  f.reset();
  $('#secret-value').textContent = made.key;
  show($('#secret'), true);
  refresh();
}

// --- migrations ---

const MIGRATION_STATES = { pending: 'pending', running: 'running', holding: 'holding', paused: 'paused', rolled_back: 'rolled back', complete: 'complete' };

// nextStep says when a migration steps next, or why it does not.
function nextStep(m) {
  const every = 'every ' + m.every + ', +' + m.step + ' points up to ' + m.max + ' %';
  switch (m.state) {
    case 'running':
    case 'holding':
      return [new Date(m.next_step_at).toLocaleTimeString() + (m.state === 'holding' ? ' (if the next interval answers well)' : ''), every];
    case 'pending': return ['when an instance first sees it (then at ' + m.share + ' %)', every];
    case 'paused': return ['none while paused: Resume lets it step', every];
    case 'rolled_back': return ['none: everything goes to ' + m.from + '; Resume starts again at the start', every];
    default: return ['none: at its maximum', ''];
  }
}

// migrationShare is a bar of the share on the new model, out of 100 %.
function migrationShare(m) {
  const fill = el('div', { class: 'fill' });
  fill.style.width = Math.min(100, m.share).toFixed(1) + '%';
  return el('div', { class: 'bar share', 'data-dim': 'share', 'data-used': String(m.share), 'data-limit': '100' },
    el('span', { text: m.to }), el('div', { class: 'track' }, fill), el('span', { class: 'num', text: m.share + ' % (max ' + m.max + ' %)' }));
}

function migrationActions(m) {
  const path = 'migrations/' + encodeURIComponent(m.name) + '/';
  const out = [];
  if (m.state === 'paused' || m.state === 'rolled_back') {
    out.push(el('button', { class: 'small quiet', 'data-action': 'resume', text: 'Resume',
      on: { click: () => act(() => call('POST', path + 'resume'), m.name + ': resumed') } }));
  } else {
    out.push(el('button', { class: 'small quiet', 'data-action': 'pause', text: 'Pause', title: 'Keep the share where it is',
      on: { click: () => act(() => call('POST', path + 'pause'), m.name + ': paused') } }));
  }
  if (m.state !== 'rolled_back') {
    out.push(' ', el('button', { class: 'small danger', 'data-action': 'rollback', text: 'Roll back',
      on: { click: () => confirm('Roll back ' + m.name + '? Every request goes to ' + m.from + ' at once, on every instance within seconds.') &&
        act(() => call('POST', path + 'rollback'), m.name + ': rolled back') } }));
  }
  return out;
}

function renderMigrations() {
  if (!state.migrations) return;
  const rows = state.migrations.map((m) => {
    const [next, every] = nextStep(m);
    const steps = (m.history || []).slice(-5).reverse().map((s) => el('li', { text: new Date(s.at).toLocaleTimeString() + ' · ' + s.share + ' % · ' + s.why }));
    return el('tr', { 'data-migration': m.name, 'data-state': m.state, 'data-share': String(m.share) },
      el('td', {}, el('span', { class: 'rule-id', text: m.name }), el('div', { class: 'muted', text: m.from + ' → ' + m.to }),
        el('div', { class: 'muted', text: 'scope ' + m.scope })),
      el('td', {}, migrationShare(m)),
      el('td', {}, el('span', { class: 'badge state ' + m.state, text: MIGRATION_STATES[m.state] || m.state }),
        m.holding ? el('div', { class: 'holding', text: 'holds: ' + m.holding }) : null),
      el('td', { class: 'next-step' }, next, el('div', { class: 'muted', text: every })),
      el('td', {}, steps.length ? el('ul', { class: 'steps' }, steps) : el('span', { class: 'muted', text: 'none yet' })),
      el('td', { class: 'row-actions' }, migrationActions(m)));
  });
  table('#migrations', rows, 6, 'No migrations are configured.');
}

// --- charts ---

const PALETTE = ['#3456d1', '#d1423f', '#2e9d63', '#d48a06', '#7a4cc2', '#128a9a', '#b5477d', '#5d6b82'];

function renderCharts() {
  const s = state.stats;
  if (!s) {
    $('#chart-refusals').replaceChildren(el('p', { class: 'empty', text: 'This store keeps no stats.' }));
    $('#chart-estimate').replaceChildren();
    return;
  }
  $('#chart-refusals').replaceChildren(...refusalChart(s));
  $('#chart-estimate').replaceChildren(...estimateChart(s));
}

const W = 900, H = 220, L = 44, R = 10, T = 10, B = 28;

function frame(maxY, labelY) {
  const g = [];
  for (let i = 0; i <= 4; i++) {
    const y = T + ((H - T - B) * i) / 4;
    g.push(svg('line', { class: 'grid', x1: L, x2: W - R, y1: y, y2: y }));
    g.push(svg('text', { x: L - 6, y: y + 3, 'text-anchor': 'end', text: labelY(maxY * (1 - i / 4)) }));
  }
  g.push(svg('line', { class: 'axis', x1: L, x2: W - R, y1: H - B, y2: H - B }));
  return g;
}

function minuteLabels(minutes) {
  const g = [];
  const step = (W - L - R) / minutes.length;
  minutes.forEach((m, i) => {
    if (i % 10 === 0 || i === minutes.length - 1) {
      const d = new Date(m);
      g.push(svg('text', { x: L + step * (i + 0.5), y: H - 10, 'text-anchor': 'middle', text: d.toTimeString().slice(0, 5) }));
    }
  });
  return g;
}

function legend(names, total) {
  return el('div', { class: 'legend' }, names.map((name, i) => {
    const sw = el('span', { class: 'swatch' });
    sw.style.background = PALETTE[i % PALETTE.length];
    return el('span', { 'data-series': name }, sw, name + (total ? ' · ' + n(total(name)) : ''));
  }));
}

function refusalChart(s) {
  const names = Object.keys(s.refusals).sort();
  if (!names.length) return [el('p', { class: 'empty', text: 'No refusals in the last hour.' })];
  const minutes = s.minutes;
  const totals = minutes.map((_, i) => names.reduce((a, k) => a + s.refusals[k][i], 0));
  const maxY = Math.max(4, Math.ceil(Math.max(...totals) / 4) * 4); // whole ticks
  const step = (W - L - R) / minutes.length;
  const plot = H - T - B;
  const bars = [];
  minutes.forEach((m, i) => {
    let y = H - B;
    names.forEach((k, j) => {
      const v = s.refusals[k][i];
      if (!v) return;
      const h = (plot * v) / maxY;
      y -= h;
      bars.push(svg('rect', { x: L + step * i + 1, y, width: Math.max(1, step - 2), height: h, fill: PALETTE[j % PALETTE.length] },
        svg('title', { text: k + ': ' + v + ' at ' + new Date(m).toTimeString().slice(0, 5) })));
    });
  });
  const chart = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': 'refusals by rule per minute' },
    frame(maxY, (v) => n(Math.round(v))), minuteLabels(minutes), bars);
  return [chart, legend(names, (k) => s.refusals[k].reduce((a, b) => a + b, 0))];
}

function estimateChart(s) {
  const names = Object.keys(s.estimate_error).sort();
  if (!names.length) return [el('p', { class: 'empty', text: 'No settled requests in the last hour.' })];
  const minutes = s.minutes;
  let maxY = 1.2;
  for (const k of names) for (const v of s.estimate_error[k]) if (v !== null && v > maxY) maxY = v;
  const step = (W - L - R) / minutes.length;
  const plot = H - T - B;
  const yOf = (v) => H - B - (plot * v) / maxY;
  const series = names.map((k, j) => {
    const color = PALETTE[j % PALETTE.length];
    const pts = [];
    const dots = [];
    s.estimate_error[k].forEach((v, i) => {
      if (v === null) return;
      const x = L + step * (i + 0.5);
      pts.push(x.toFixed(1) + ',' + yOf(v).toFixed(1));
      dots.push(svg('circle', { cx: x, cy: yOf(v), r: 3, fill: color }, svg('title', { text: k + ': ' + v.toFixed(3) + ' at ' + new Date(minutes[i]).toTimeString().slice(0, 5) })));
    });
    return [svg('polyline', { points: pts.join(' '), fill: 'none', stroke: color, 'stroke-width': 2 }), dots];
  });
  const unity = svg('line', { class: 'unity', x1: L, x2: W - R, y1: yOf(1), y2: yOf(1) }, svg('title', { text: 'used = reserved' }));
  const chart = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': 'estimate error by route' },
    frame(maxY, (v) => v.toFixed(2)), minuteLabels(minutes), unity, series);
  return [chart, legend(names)];
}

// --- operations: seed 001's questions ---

// table fills a table's body with rows, or says there are none.
function table(sel, rows, cols, none) {
  $(sel + ' tbody').replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colSpan: cols, class: 'empty', text: none || 'None in the last hour.' }))]));
}

function namedText(list) {
  return list && list.length ? list.map((x) => x.name + ' ' + n(x.value)).join(' · ') : '—';
}

const OUTCOME_WORDS = { refused: 'refused', waited: 'waited', upstream_429: 'upstream 429 after admission', fallback: 'fell back (not counted yet)', downgraded: 'downgraded (not counted yet)' };

function renderOps() {
  const s = state.stats;
  if (!s || !s.top_user_paths) {
    $('#stats-cost').textContent = s ? '' : 'This store keeps no stats.';
    return;
  }
  $('#stats-cost').textContent = 'Each refresh of these numbers reads ' + s.store_cost + '.';
  for (const [sel, dim] of [['#top-requests', 'requests'], ['#top-input', 'input_tokens'], ['#top-output', 'output_tokens']]) {
    table(sel, s.top_user_paths[dim].map((x) => el('tr', { 'data-path': x.name }, el('td', { class: 'rule-id', text: x.name }), el('td', { text: n(x.value) }))), 2);
  }
  const outcomes = Object.keys(OUTCOME_WORDS).filter((o) => s.outcomes[o]);
  table('#outcomes', outcomes.map((o) => el('tr', { 'data-outcome': o }, el('td', { text: OUTCOME_WORDS[o] }),
    el('td', { class: 'by-class', text: namedText(s.outcomes[o].class) }), el('td', { class: 'by-model', text: namedText(s.outcomes[o].model) }))), 3);
  table('#bottlenecks', s.bottlenecks.map((b) => el('tr', { 'data-provider': b.provider }, el('td', { text: b.provider }),
    el('td', { class: 'rule-id', text: b.rule }), el('td', { class: 'num', text: n(b.refusals) }), el('td', { class: 'muted', text: namedText(b.rules) }))), 4);
  const buckets = s.retry_buckets;
  $('#retry-after thead').replaceChildren(el('tr', {}, el('th', { text: 'Provider' }), el('th', { text: 'Limiter' }), buckets.map((b) => el('th', { text: b }))));
  const retryRows = [];
  for (const lim of ['local', 'upstream']) {
    for (const p of Object.keys(s.retry_after[lim] || {}).sort()) {
      const counts = s.retry_after[lim][p];
      retryRows.push(el('tr', { 'data-provider': p, 'data-limiter': lim }, el('td', { text: p }), el('td', { text: lim }),
        buckets.map((b) => el('td', { class: 'num', text: n(counts[b]) }))));
    }
  }
  table('#retry-after', retryRows, 2 + buckets.length);
  table('#cache-headroom', Object.keys(s.cache_headroom).sort().map((p) => el('tr', { 'data-provider': p }, el('td', { text: p }), el('td', { text: n(s.cache_headroom[p]) }))), 2);
  $('#fair-note').textContent = s.fair_share.note;
  table('#fair-members', Object.keys(s.fair_share.members).sort().map((r) => el('tr', { 'data-rule': r }, el('td', { class: 'rule-id', text: r }),
    el('td', { text: namedText(s.fair_share.members[r]) }))), 2);
}

// --- alerts ---

function alertValue(a) {
  if (a.kind === 'use' || a.kind === 'forecast') return Math.round(100 * a.value) + ' %';
  if (a.kind === 'upstream_429') return (100 * a.value).toFixed(1) + ' %';
  return Number(a.value).toFixed(2);
}

function renderAlerts() {
  const a = state.alerts;
  if (!a) return;
  const when = (t) => (t ? new Date(t).toLocaleString() : '');
  table('#alerts-active', a.active.map((x) => el('tr', { 'data-alert': x.id },
    el('td', {}, el('span', { class: 'rule-id', text: x.subject }), el('span', { class: 'badge paused', text: x.kind + (x.threshold ? ' ≥ ' + x.threshold : '') })),
    el('td', { class: 'status-firing', text: alertValue(x) }), el('td', { text: when(x.fired_at) }), el('td', { text: x.message }))), 4, 'No alert firing.');
  table('#alerts-recent', a.recent.map((x) => el('tr', { 'data-alert': x.id },
    el('td', {}, el('span', { class: 'rule-id', text: x.subject }), el('span', { class: 'badge', text: x.kind })),
    el('td', { text: when(x.fired_at) }), el('td', { text: when(x.resolved_at) }), el('td', { text: x.message }))), 4, 'None resolved this week.');
  $('#alerts-config').textContent = a.config ? JSON.stringify(a.config, null, 2) : 'A partner key sees the alerts on its own subtree\'s rules and budgets.';
}

// --- audit ---

function short(v) {
  const t = JSON.stringify(v);
  return t.length > 240 ? t.slice(0, 240) + '…' : t;
}

function renderAudit() {
  const a = state.audit;
  if (!a) return;
  table('#audit', a.entries.map((e) => el('tr', { 'data-audit': e.id, 'data-target': e.target },
    el('td', { text: new Date(e.at).toLocaleString() }),
    el('td', {}, el('span', { class: 'rule-id', text: e.actor }), e.actor_user_path ? el('div', { class: 'muted', text: e.actor_user_path }) : null),
    el('td', { class: 'rule-id', text: e.action }),
    el('td', {}, el('span', { class: 'rule-id', text: e.target }), e.user_path ? el('div', { class: 'muted', text: e.user_path }) : null),
    el('td', {}, el('code', { class: 'json', text: 'before ' + short(e.before) }), el('code', { class: 'json', text: 'after ' + short(e.after) })))), 5, 'No admin writes in this page.');
  show($('#audit-older'), !!a.next_cursor);
}

// --- wiring ---

function selectTab(name) {
  state.tab = name;
  for (const b of document.querySelectorAll('#tabs .tab')) b.classList.toggle('active', b.dataset.tab === name);
  for (const p of document.querySelectorAll('.tabpane')) show(p, p.id === 'tab-' + name);
  if (['keys', 'applies', 'migrations', 'charts', 'ops', 'alerts', 'audit'].includes(name)) refresh();
}

document.addEventListener('DOMContentLoaded', () => {
  $('#login').addEventListener('submit', signIn);
  $('#logout').addEventListener('click', () => signOut(''));
  for (const b of document.querySelectorAll('#tabs .tab')) b.addEventListener('click', () => selectTab(b.dataset.tab));
  $('#new-rule').addEventListener('click', () => editRule(null));
  $('#new-budget').addEventListener('click', () => editBudget(null));
  $('#rule-form').addEventListener('submit', saveRule);
  $('#rule-form').elements.period.addEventListener('change', () => showPeriodFields($('#rule-form')));
  $('#budget-form').addEventListener('submit', saveBudget);
  $('#key-form').addEventListener('submit', createKey);
  $('#audit-newest').addEventListener('click', () => { state.auditCursor = ''; refresh(); });
  $('#audit-older').addEventListener('click', () => { if (state.audit && state.audit.next_cursor) { state.auditCursor = state.audit.next_cursor; refresh(); } });
  $('#audit-subject').addEventListener('change', () => { state.auditCursor = ''; refresh(); });
  $('#secret-done').addEventListener('click', () => { $('#secret-value').textContent = ''; show($('#secret'), false); });
  for (const b of document.querySelectorAll('[data-cancel]')) b.addEventListener('click', () => show(b.closest('form'), false));
  $('#applies-target').addEventListener('change', () => { $('#applies-model').value = ''; if (state.overview) renderApplies(); });
  $('#applies-model').addEventListener('input', () => state.overview && renderApplies());
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden && sessionStorage.getItem(KEY) && !$('#app').hidden) refresh();
  });
  if (sessionStorage.getItem(KEY)) start();
});
