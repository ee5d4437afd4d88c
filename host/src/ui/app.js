// The DM's page. Every piece of data is rendered with textContent (tool
// names, descriptions and audit text come from plugins and callers: never
// innerHTML). Writes carry X-Toolhost-UI: 1; with server.tokens, the
// operator token is kept in sessionStorage and sent as a bearer token.
'use strict';

const POLL_MS = 1500;
const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function ms(v) { return v === null || v === undefined ? '–' : (v < 10 ? v.toFixed(2) : v.toFixed(0)) + ' ms'; }
function pct(v) { return v === null || v === undefined ? '–' : (v * 100).toFixed(1) + ' %'; }
function tierBadge(t) { return el('span', t || 'over budget', 'tier ' + (t || 'none')); }

function headers(extra) {
  const h = Object.assign({}, extra || {});
  const t = sessionStorage.getItem('toolhost-token');
  if (t) h['Authorization'] = 'Bearer ' + t;
  return h;
}

async function api(method, path, body, extra) {
  const opts = { method, headers: headers(extra), cache: 'no-store', credentials: 'omit' };
  if (method !== 'GET') opts.headers['X-Toolhost-UI'] = '1';
  if (body !== undefined) opts.body = body;
  const r = await fetch('/ui/api/' + path, opts);
  let data = null;
  try { data = await r.json(); } catch (_) { data = null; }
  if (r.status === 401) { showLogin('The token was refused.'); throw new Error('unauthorized'); }
  if (!r.ok) {
    const msg = data && data.error && data.error.message ? data.error.message : ('HTTP ' + r.status);
    const e = new Error(msg); e.status = r.status; throw e;
  }
  return data;
}

function showLogin(message) {
  $('main').hidden = true;
  $('login').hidden = false;
  $('login-error').textContent = message || '';
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function renderTools(tools) {
  fill($('tools').tBodies[0], tools.map((t) => {
    const b = t.budget;
    const tr = el('tr'); tr.dataset.tool = t.name;
    const name = el('td'); name.append(el('span', t.name, 'mono')); name.title = t.description || '';
    tr.append(name, el('td', t.provider + ' (' + t.kind + ')'));
    const tier = el('td'); tier.append(tierBadge(b.tier)); tr.append(tier);
    tr.append(el('td', b.badge || '–'));
    const declared = (t.estimated_duration_ms != null ? t.estimated_duration_ms + ' ms' : '–') + ' · ' +
      (t.max_duration_ms != null ? t.max_duration_ms + ' ms' : '–');
    tr.append(el('td', declared, 'num'));
    const calls = el('td', b.calls, 'num'); calls.dataset.field = 'calls'; tr.append(calls);
    tr.append(el('td', ms(b.real_p50_ms !== null ? b.real_p50_ms : b.probe_p50_ms), 'num'));
    tr.append(el('td', ms(b.real_p99_ms !== null ? b.real_p99_ms : b.probe_p99_ms), 'num'));
    tr.append(el('td', pct(b.error_rate), 'num'));
    tr.append(b.demoted ? el('td', 'demoted from ' + (b.base_tier || '?'), 'demoted')
      : b.demoted_for ? el('td', 'demoted for ' + b.demoted_for + (b.demoted_for === 1 ? ' caller' : ' callers'), 'demoted')
      : el('td', '–', 'muted'));
    return tr;
  }));
}

// Agent rows are kept (their override controls must survive refreshes).
const agentRows = new Map();

function agentRow(name) {
  let row = agentRows.get(name);
  if (row) return row;
  const tr = el('tr'); tr.dataset.agent = name;
  const cells = {};
  for (const k of ['name', 'ceiling', 'tier', 'override', 'sees']) { cells[k] = el('td'); tr.append(cells[k]); }
  cells.sees.className = 'seen mono';
  const controls = el('td', null, 'controls');
  const sel = el('select'); sel.name = 'tier';
  for (const t of ['fast', 'standard', 'deep']) { const o = el('option', t); o.value = t; sel.append(o); }
  const mins = el('input'); mins.type = 'number'; mins.min = '1'; mins.max = '1440'; mins.value = '10'; mins.name = 'minutes';
  const set = el('button', 'Set'); set.type = 'button'; set.name = 'set';
  const clear = el('button', 'Clear'); clear.type = 'button'; clear.name = 'clear';
  controls.append(sel, ' for ', mins, ' min', set, clear);
  tr.append(controls);
  set.addEventListener('click', () => override('overrides', { agent: name, tier: sel.value, for_secs: Math.round(Number(mins.value) * 60) }));
  clear.addEventListener('click', () => override('overrides/clear', { agent: name }));
  row = { tr, cells };
  agentRows.set(name, row);
  return row;
}

function renderAgents(agents) {
  $('agents-none').hidden = agents.length > 0;
  const rows = agents.map((a) => {
    const r = agentRow(a.name);
    r.cells.name.textContent = a.name;
    r.cells.ceiling.replaceChildren(tierBadge(a.budget_tier));
    r.cells.tier.replaceChildren(tierBadge(a.tier));
    r.cells.override.textContent = a.dm_override
      ? a.dm_override.tier + ' (' + Math.ceil(a.dm_override.remaining_s) + ' s left)' : '–';
    r.cells.sees.textContent = a.visible.length ? a.visible.join(', ') : '(nothing)';
    return r.tr;
  });
  fill($('agents').tBodies[0], rows);
}

async function override(path, body) {
  const out = $('override-result');
  try {
    const a = await api('POST', path, JSON.stringify(body), { 'Content-Type': 'application/json' });
    out.className = 'result ok';
    out.textContent = a.dm_override
      ? a.name + ': ' + a.dm_override.tier + ' for ' + Math.ceil(a.dm_override.remaining_s) + ' s'
      : a.name + ': override cleared, back to its ceiling (' + a.tier + ')';
    refresh();
  } catch (e) {
    out.className = 'result error';
    out.textContent = 'Refused: ' + e.message;
  }
}

function renderPlugins(plugins) {
  fill($('plugins').tBodies[0], plugins.map((p) => {
    const tr = el('tr'); tr.dataset.plugin = p.plugin;
    tr.append(el('td', p.plugin, 'mono'));
    const prov = p.provenance || {};
    const cls = prov.kind === 'signed' ? 'signed' : (prov.kind === 'unsigned' ? 'unsigned' : '');
    tr.append(el('td', p.origin || '–', cls));
    tr.append(el('td', prov.kind === 'signed' && prov.manifest ? prov.manifest.version : (prov.kind === 'builtin' ? 'built in' : '–')));
    tr.append(el('td', (p.sha256 || '').slice(0, 12), 'mono'));
    const g = el('td');
    for (const line of p.allows) g.append(el('div', line));
    for (const f of p.findings || []) g.append(el('div', f, 'error'));
    const l = p.limits;
    if (l && l.own.length) {
      const own = (k) => (l.own.includes(k) ? ' (own)' : '');
      g.append(el('div', 'limits: memory ' + l.memory_mib + ' MiB' + own('memory_mib') +
        ', fuel ' + (l.fuel === null ? 'unmetered' : l.fuel) + own('fuel') +
        ', deadline at most ' + l.timeout_ceiling_ms + ' ms' + own('timeout_ceiling_ms') +
        ', output ' + l.max_output_bytes + ' bytes' + own('max_output_bytes') +
        ', ' + l.plugin_concurrency + ' calls at once' + own('plugin_concurrency'), 'limits'));
    }
    tr.append(g);
    tr.append(el('td', p.tools.join(', '), 'mono'));
    return tr;
  }));
}

function renderServers(servers) {
  $('servers-none').hidden = servers.length > 0;
  fill($('servers').tBodies[0], servers.map((s) => {
    const tr = el('tr'); tr.dataset.server = s.name;
    const detail = s.transport + ' · ' + s.tools.length + ' tools · ' + s.connections + ' connection(s)' +
      (s.last_error ? ' · last error: ' + s.last_error : '');
    tr.append(el('td', s.name, 'mono'), el('td', s.state, s.state === 'up' ? 'signed' : 'unsigned'), el('td', detail));
    return tr;
  }));
}

function renderAudit(audit) {
  $('audit-path').textContent = audit.path ? 'From ' + audit.path + (audit.error ? ' (unreadable: ' + audit.error + ')' : '')
    : 'This host writes no audit file.';
  const recs = audit.records.slice().reverse();
  fill($('audit').tBodies[0], recs.map((r) => {
    const tr = el('tr'); tr.dataset.event = r.event || '';
    tr.append(el('td', (r.time || '').replace('T', ' ').replace('Z', ''), 'mono'));
    tr.append(el('td', r.event || ''));
    tr.append(el('td', r.event === 'call' ? (r.agent || '(operator)') : ''));
    tr.append(el('td', r.tool || r.plugin || '', 'mono'));
    tr.append(el('td', r.error ? (r.outcome ? r.outcome + ': ' : '') + r.error : (r.outcome || r.origin || ''), r.error ? 'error' : ''));
    tr.append(el('td', r.duration_ms !== undefined ? r.duration_ms.toFixed(1) : '', 'num'));
    return tr;
  }));
}

let timer = null;
let busy = false;

async function refresh() {
  if (busy) return;
  busy = true;
  try {
    const s = await api('GET', 'state');
    $('login').hidden = true;
    $('main').hidden = false;
    renderTools(s.tools);
    renderAgents(s.agents);
    renderPlugins(s.plugins);
    renderServers(s.servers);
    renderAudit(s.audit);
    $('drop').hidden = !s.uploads;
    document.body.dataset.maxUpload = s.max_upload_bytes;
    const live = $('live');
    live.className = 'live';
    live.textContent = 'pid ' + s.pid + ' · ' + s.tools.length + ' tools · updated ' + new Date().toLocaleTimeString();
    document.body.dataset.loaded = '1';
  } catch (e) {
    if (e.message !== 'unauthorized') {
      const live = $('live');
      live.className = 'live down';
      live.textContent = 'not updating: ' + e.message;
    }
  } finally {
    busy = false;
  }
}

async function upload(file) {
  const out = $('upload-result');
  out.className = 'result';
  const max = Number(document.body.dataset.maxUpload || 0);
  if (max && file.size > max) {
    out.className = 'result error';
    out.textContent = 'Refused: ' + file.name + ' is ' + file.size + ' bytes, over the ' + max + ' byte limit';
    return;
  }
  out.textContent = 'Installing ' + file.name + '…';
  try {
    const r = await api('POST', 'plugins', file, { 'Content-Type': 'application/wasm', 'X-Toolhost-File-Name': file.name });
    out.className = 'result ok';
    out.textContent = 'Installed ' + r.name + (r.replaced ? ' (replacing ' + r.replaced.slice(0, 12) + ')' : '') +
      ': ' + r.tools.join(', ') + ' · ' + r.provenance_text;
    refresh();
  } catch (e) {
    out.className = 'result error';
    out.textContent = 'Refused: ' + e.message;
  }
}

function start() {
  $('login').addEventListener('submit', (ev) => {
    ev.preventDefault();
    sessionStorage.setItem('toolhost-token', $('token').value.trim());
    $('token').value = '';
    refresh();
  });
  const drop = $('drop');
  drop.addEventListener('dragover', (ev) => { ev.preventDefault(); drop.classList.add('over'); });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (ev) => {
    ev.preventDefault(); drop.classList.remove('over');
    if (ev.dataTransfer.files.length) upload(ev.dataTransfer.files[0]);
  });
  $('file').addEventListener('change', (ev) => {
    if (ev.target.files.length) upload(ev.target.files[0]);
    ev.target.value = '';
  });
  refresh();
  timer = setInterval(() => { if (!document.hidden) refresh(); }, POLL_MS);
}

document.addEventListener('DOMContentLoaded', start);
