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
// A time left as the CLI says it (`toolhost agents`): 45s, 19m 59s, 2h 5m.
function age(secs) {
  const s = Math.max(0, Math.floor(secs));
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm ' + (s % 60) + 's';
  return Math.floor(s / 3600) + 'h ' + Math.floor((s % 3600) / 60) + 'm';
}
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

const SVG = 'http://www.w3.org/2000/svg';

// A bar of the tool's recent p50 against its tier's ceiling (the line),
// on a scale of one and a half ceilings: drawn here, nothing fetched.
function latencyPicture(p50, ceiling) {
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('width', '120'); svg.setAttribute('height', '14');
  svg.setAttribute('viewBox', '0 0 120 14');
  svg.setAttribute('class', 'latency');
  const label = p50 === null || p50 === undefined ? 'no calls yet' : ms(p50) + ' of ' + ceiling + ' ms';
  const title = document.createElementNS(SVG, 'title'); title.textContent = 'p50 ' + label; svg.append(title);
  const track = document.createElementNS(SVG, 'rect');
  track.setAttribute('x', '0'); track.setAttribute('y', '3'); track.setAttribute('width', '120'); track.setAttribute('height', '8');
  track.setAttribute('class', 'track'); svg.append(track);
  if (p50 !== null && p50 !== undefined && ceiling) {
    const w = Math.max(1, Math.min(120, (p50 / (ceiling * 1.5)) * 120));
    const bar = document.createElementNS(SVG, 'rect');
    bar.setAttribute('x', '0'); bar.setAttribute('y', '3'); bar.setAttribute('width', w.toFixed(1)); bar.setAttribute('height', '8');
    bar.setAttribute('class', p50 > ceiling ? 'bar over' : 'bar'); svg.append(bar);
  }
  const line = document.createElementNS(SVG, 'line');
  line.setAttribute('x1', '80'); line.setAttribute('x2', '80'); line.setAttribute('y1', '0'); line.setAttribute('y2', '14');
  line.setAttribute('class', 'ceiling'); svg.append(line);
  svg.dataset.p50 = p50 === null || p50 === undefined ? '' : String(p50);
  svg.dataset.ceiling = String(ceiling || '');
  return svg;
}

// What makes a tool worth the DM's look: it cannot work, it was demoted,
// it failed, or its recent p50 is over its tier's ceiling.
function problem(t, why, ceilings) {
  const b = t.budget;
  const p50 = b.real_p50_ms !== null ? b.real_p50_ms : b.probe_p50_ms;
  const ceiling = ceilings[b.tier] || ceilings.deep;
  return Boolean(why || b.demoted || b.demoted_for || (b.error_rate || 0) > 0 ||
    (p50 !== null && p50 !== undefined && ceiling && p50 > ceiling));
}

let lastTools = null;

// The tools table: by default only the rows with a problem (the DM acts
// on those); every row with "show every tool".
function renderTools(tools, unusable, ceilings) {
  lastTools = [tools, unusable, ceilings];
  const all = $('tools-all').checked;
  const troubled = tools.filter((t) => problem(t, unusable[t.name], ceilings)).length;
  $('tools-summary').textContent = troubled
    ? tools.length + ' tools; ' + troubled + (troubled === 1 ? ' needs' : ' need') + ' a look' + (all ? '' : ' (shown below)')
    : 'All ' + tools.length + ' tools work within their tiers.';
  $('tools').hidden = !all && troubled === 0;
  fill($('tools').tBodies[0], tools.map((t) => {
    const b = t.budget;
    const tr = el('tr'); tr.dataset.tool = t.name;
    if (problem(t, unusable[t.name], ceilings)) tr.dataset.problem = '1'; else tr.hidden = !all;
    const name = el('td'); name.append(el('span', t.name, 'mono')); name.title = t.description || '';
    tr.append(name, el('td', t.provider + ' (' + t.kind + ')'));
    const why = unusable[t.name];
    const tier = el('td');
    if (why) {
      tr.classList.add('unusable'); tr.dataset.unusable = why;
      tier.append(el('span', 'cannot work', 'tier none')); tier.title = why;
    } else {
      tier.append(tierBadge(b.tier));
    }
    tr.append(tier);
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
    const pic = el('td');
    const p50 = b.real_p50_ms !== null ? b.real_p50_ms : b.probe_p50_ms;
    pic.append(latencyPicture(p50, ceilings[b.tier] || ceilings.deep));
    if (why) pic.append(el('div', why, 'error'));
    tr.append(pic);
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
  for (const k of ['name', 'ceiling', 'tier', 'override', 'sees', 'sessions', 'calls', 'hits']) { cells[k] = el('td'); tr.append(cells[k]); }
  cells.calls.className = 'calls';
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
  row = { tr, cells, sel, fresh: true };
  agentRows.set(name, row);
  return row;
}

function renderCalls(cell, calls) {
  cell.replaceChildren(...calls.slice(0, 5).map((c) => {
    const line = el('div', null, c.outcome === 'ok' ? 'call' : 'call error');
    line.append(el('span', c.tool, 'mono'), ' ' + c.outcome + ' · ' + ms(c.duration_ms));
    if (c.error) line.append(el('div', c.error, 'error-text'));
    line.title = c.time;
    return line;
  }));
  if (!calls.length) cell.replaceChildren(el('span', 'no calls yet', 'muted'));
}

function renderAgents(agents, activity) {
  $('agents-none').hidden = agents.length > 0;
  const rows = agents.map((a) => {
    const r = agentRow(a.name);
    // The picker starts at the tier the agent works at now; the DM's
    // choice is left alone after that.
    if (r.fresh) { r.sel.value = a.tier; r.fresh = false; }
    const act = activity[a.name] || { sessions: 0, last_calls: [], rate_limited: 0, capacity_exceeded: 0 };
    r.cells.sessions.textContent = String(act.sessions);
    r.cells.sessions.className = 'num';
    renderCalls(r.cells.calls, act.last_calls);
    r.cells.hits.textContent = 'rate ' + act.rate_limited + ' · capacity ' + act.capacity_exceeded;
    r.cells.hits.className = act.rate_limited || act.capacity_exceeded ? 'num error' : 'num';
    r.cells.name.textContent = a.name;
    r.cells.ceiling.replaceChildren(tierBadge(a.budget_tier));
    r.cells.tier.replaceChildren(tierBadge(a.tier));
    r.cells.override.textContent = a.dm_override
      ? a.dm_override.tier + ' (' + age(a.dm_override.remaining_s) + ' left)' : '–';
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
      ? a.name + ': ' + a.dm_override.tier + ' for ' + age(Math.round(a.dm_override.remaining_s))
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
    // Fast first code: its optimized code compiles in the background.
    if (p.code === 'fast') g.append(el('div', 'running on quick-compiled code (not optimized yet: slower per call)', 'code'));
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

// Plugins held back (until granted, for a secret, revoked), and canaries.
function renderHeld(withheld, canaries) {
  fill($('withheld'), withheld.map((h) => {
    const li = el('li'); li.dataset.plugin = h.name;
    li.append(el('span', h.name, 'mono'), ' held: ' + h.reason);
    return li;
  }));
  fill($('canaries'), canaries.map((c) => {
    const li = el('li'); li.dataset.plugin = c.plugin; li.dataset.state = c.state;
    const state = c.state === 'running' ? 'under way' : c.reason;
    li.append(el('span', c.plugin, 'mono'), ' canary ' + state + ': new ' + c.new_sha256.slice(0, 12) +
      ' failed ' + c.new_failed + ' of ' + c.new_calls + ', old failed ' + c.old_failed + ' of ' + c.old_calls +
      ' (' + c.terms.share_percent + '% to the new)');
    return li;
  }));
}

// The marketplace panel: results, an entry's details, install.
let marketRows = [];
function renderMarket(found) {
  marketRows = found.results;
  $('market-warnings').textContent = found.warnings.join(' · ');
  $('market').hidden = found.results.length === 0;
  $('market-detail').hidden = true;
  if (!found.results.length) {
    $('market-result').className = 'result';
    $('market-result').textContent = 'Nothing in the marketplace matches.';
  }
  fill($('market').tBodies[0], found.results.map((r, i) => {
    const tr = el('tr'); tr.dataset.plugin = r.name;
    tr.append(el('td', r.name + ' ' + r.version, 'mono'));
    tr.append(el('td', r.author + ' (' + r.key_id + ', ' + (r.trusted ? 'trusted here' : 'NOT trusted here') + ')',
      r.trusted ? 'signed' : 'unsigned'));
    tr.append(el('td', r.tiers), el('td', r.asks), el('td', r.tools.map((t) => t.name).join(', '), 'mono'));
    const b = el('button', 'details'); b.type = 'button'; b.dataset.index = i;
    b.addEventListener('click', () => showEntry(i));
    const td = el('td'); td.append(b); tr.append(td);
    return tr;
  }));
}

function showEntry(i) {
  const r = marketRows[i];
  const d = $('market-detail');
  const dl = el('dl');
  const row = (k, v, cls) => { dl.append(el('dt', k)); dl.append(el('dd', v, cls)); };
  row('plugin', r.name + ' ' + r.version + ': ' + r.description);
  row('publisher', r.author + ' (' + r.key_id + ')');
  row('signature', r.trusted ? 'its key is trusted here' : 'its key is NOT trusted here: installing it is refused by the trust policy',
    r.trusted ? 'signed' : 'unsigned');
  row('asks for', r.asks);
  for (const t of r.tools) row('tool ' + t.name, (t.tier || 'undeclared') + ' · ' + t.description);
  row('from', r.reference + ' (listed in ' + r.catalogue + ', published ' + r.published + ')', 'mono');
  const b = el('button', 'Install ' + r.name + ' ' + r.version); b.type = 'button'; b.id = 'market-install';
  b.addEventListener('click', () => installEntry(r));
  d.replaceChildren(dl, b);
  d.hidden = false;
}

async function installEntry(r) {
  const out = $('market-result');
  out.className = 'result';
  out.textContent = 'Installing ' + r.name + ' ' + r.version + '…';
  try {
    const body = JSON.stringify({ plugin: r.name + '@' + r.version, publisher: r.key_id });
    const i = await api('POST', 'market/install', body, { 'Content-Type': 'application/json' });
    out.className = 'result ok';
    out.textContent = 'Installed ' + i.name + ' ' + i.version + ': ' + i.tools.join(', ') + ' · ' + i.origin;
  } catch (e) {
    out.className = 'result error';
    out.textContent = 'Not installed: ' + e.message;
  }
  refresh();
}

async function marketSearch(q) {
  const out = $('market-result');
  out.className = 'result'; out.textContent = 'Searching…';
  try {
    renderMarket(await api('POST', 'market/search', JSON.stringify({ q }), { 'Content-Type': 'application/json' }));
    if (marketRows.length) out.textContent = '';
  } catch (e) {
    out.className = 'result error';
    out.textContent = 'Search failed: ' + e.message;
  }
}

function renderServers(servers) {
  $('servers-none').hidden = servers.length > 0;
  $('servers').hidden = servers.length === 0;
  fill($('servers').tBodies[0], servers.map((s) => {
    const tr = el('tr'); tr.dataset.server = s.name;
    const detail = s.transport + ' · ' + s.tools.length + ' tools · ' + s.connections + ' connection(s)' +
      (s.last_error ? ' · last error: ' + s.last_error : '');
    tr.append(el('td', s.name, 'mono'), el('td', s.state, s.state === 'up' ? 'signed' : 'unsigned'), el('td', detail));
    return tr;
  }));
}

// Which audit records show: calls, refusals, probes, plugin events.
function auditKind(r) {
  const ev = r.event || '';
  if (ev === 'probe') return 'probes';
  if (ev.startsWith('plugin')) return 'plugins';
  if (ev === 'refused' || r.outcome === 'refused' || r.outcome === 'capacity_exceeded' || r.outcome === 'unknown_tool') return 'refusals';
  return 'calls';
}

let lastAudit = null;

// The "Only" fields, as `toolhost audit` reads its flags: an agent
// (`(operator)` for the operator), a tool or plugin, an outcome (`error`:
// every call or refusal that did not end ok). Empty: any.
function auditMatch(r, only) {
  const { agent, what, outcome, actor, trace } = only;
  const ev = r.event || '';
  if (agent && !((ev === 'call' || ev === 'refused' || ev === 'probe') && (r.agent || '(operator)') === agent)) return false;
  if (what && r.tool !== what && r.plugin !== what && r.provider !== what) return false;
  if (actor && r.actor !== actor && r.via !== actor) return false;
  if (trace && (r.trace_id || '').toLowerCase() !== trace.toLowerCase()) return false;
  if (outcome) {
    const o = r.outcome || r.reason || ev;
    const failed = o !== 'ok' && (ev === 'call' || ev === 'refused' || ev === 'probe');
    if (!(o === outcome || ev === outcome || (outcome === 'error' && failed))) return false;
  }
  return true;
}

function renderAudit(audit) {
  lastAudit = audit;
  $('audit-path').textContent = (audit.gate_refusing
    ? 'The audit gate is refusing calls to tools that write: their records cannot be written (disk full or file unwritable). '
    : '') + (audit.path ? 'From ' + audit.path + (audit.error ? ' (unreadable: ' + audit.error + ')' : '')
    : 'This host writes no audit file.');
  $('audit-path').classList.toggle('error', !!audit.gate_refusing);
  const shown = new Set(Array.from(document.querySelectorAll('#audit-filters input:checked')).map((i) => i.value));
  const v = (n) => document.querySelector('#audit-match input[name="' + n + '"]').value.trim();
  const only = { agent: v('agent'), what: v('what'), outcome: v('outcome'), actor: v('actor'), trace: v('trace') };
  const recs = audit.records.slice().reverse().filter((r) => shown.has(auditKind(r)) && auditMatch(r, only));
  fill($('audit').tBodies[0], recs.map((r) => {
    const tr = el('tr'); tr.dataset.event = r.event || ''; tr.dataset.kind = auditKind(r);
    const when = el('td', (r.time || r.last || '').replace('T', ' ').replace('Z', ''), 'mono');
    if (r.event === 'refused') when.title = r.count + ' refused from ' + r.first + ' to ' + r.last;
    tr.append(when);
    tr.append(el('td', r.event || ''));
    const who = r.event === 'call' || r.event === 'refused' ? (r.agent || '(operator)')
      : (r.actor ? r.actor + (r.via ? ' (' + r.via + ')' : '') : '');
    tr.append(el('td', who));
    tr.append(el('td', r.tool || r.plugin || '', 'mono'));
    // A refused record stands for `count` calls refused in one second.
    const outcome = r.event === 'refused' ? r.reason + (r.count > 1 ? ' × ' + r.count : '') : (r.outcome || r.origin || '');
    tr.append(el('td', r.error ? (r.outcome ? r.outcome + ': ' : '') + r.error : outcome, r.error || r.event === 'refused' ? 'error' : ''));
    tr.append(el('td', r.duration_ms !== undefined ? r.duration_ms.toFixed(1) : '', 'num'));
    return tr;
  }));
}

function renderCompiling(compiling, ready) {
  const box = $('compiling');
  box.hidden = compiling.length === 0 && ready;
  box.replaceChildren(...compiling.map((c) => {
    const d = el('div', null, 'compiling'); d.dataset.plugin = c.plugin;
    d.append('Compiling ', el('span', c.plugin, 'mono'), ' · ' + Math.floor(c.seconds) + ' s so far');
    return d;
  }));
  if (!compiling.length && !ready) box.append(el('div', 'Loading plugins and connecting servers…', 'compiling'));
}

let timer = null;
let busy = false;

// Pairing codes: minted, listed, revoked through the admin API.
function renderPairings(list, agents) {
  const sel = $('pair-agent');
  const names = agents.map((a) => a.name);
  if ([...sel.options].map((o) => o.value).join('\n') !== names.join('\n')) {
    const keep = sel.value;
    sel.replaceChildren(...names.map((n) => { const o = el('option', n); o.value = n; return o; }));
    if (names.includes(keep)) sel.value = keep;
  }
  fill($('pairings').tBodies[0], list.map((p) => {
    const tr = el('tr'); tr.dataset.pairing = p.id;
    tr.append(el('td', p.id, 'mono'), el('td', p.agent), el('td', p.state), el('td', p.code || '–', 'mono'),
      el('td', p.expires ? 'until ' + new Date(p.expires).toLocaleTimeString() : 'since ' + new Date(p.created).toLocaleTimeString()));
    const b = el('button', 'Revoke'); b.type = 'button';
    b.addEventListener('click', () => pairing('DELETE', 'pairings/' + encodeURIComponent(p.id)));
    const td = el('td'); td.append(b); tr.append(td);
    return tr;
  }));
}

async function pairing(method, path, body) {
  const out = $('pair-result');
  try {
    const p = await api(method, path, body && JSON.stringify(body), body ? { 'Content-Type': 'application/json' } : {});
    out.className = 'result ok';
    out.textContent = p.code
      ? p.agent + ': code ' + p.code + ' — the player\'s MCP client opens ' + location.origin + '/mcp/pair/' + p.code + ' (works once)'
      : 'revoked ' + p.removed;
    refresh();
  } catch (e) {
    out.className = 'result error';
    out.textContent = 'Refused: ' + e.message;
  }
}

async function refresh() {
  if (busy) return;
  busy = true;
  try {
    const s = await api('GET', 'state');
    $('login').hidden = true;
    $('main').hidden = false;
    renderTools(s.tools, s.unusable || {}, s.ceilings_ms || {});
    renderAgents(s.agents, s.activity || {});
    renderPairings((await api('GET', 'pairings')).pairings, s.agents);
    renderCompiling(s.compiling || [], s.ready);
    renderPlugins(s.plugins);
    renderServers(s.servers);
    renderHeld(s.withheld || [], s.canaries || []);
    $('market-section').hidden = !s.marketplace;
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
  $('market-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const q = $('market-q').value.trim();
    if (q) marketSearch(q);
  });
  $('pair-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    pairing('POST', 'pairings', { agent: $('pair-agent').value, for_secs: Math.round(Number($('pair-mins').value) * 60) });
  });
  $('tools-all').addEventListener('change', () => { if (lastTools) renderTools(...lastTools); });
  for (const field of document.querySelectorAll('#audit-match input')) {
    field.addEventListener('input', () => { if (lastAudit) renderAudit(lastAudit); });
  }
  for (const box of document.querySelectorAll('#audit-filters input')) {
    box.addEventListener('change', () => { if (lastAudit) renderAudit(lastAudit); });
  }
  refresh();
  timer = setInterval(() => { if (!document.hidden) refresh(); }, POLL_MS);
}

document.addEventListener('DOMContentLoaded', start);
