// Drives toolhost's DM's page in Debian's headless Chromium with
// playwright-core (tests/e2e/ui.rs runs it; installed by scripts/install-peers).
//
//   node ui_driver.js URL SCREENSHOT UNSIGNED_WASM AGENT SLOW_SIGNED_WASM
//
// Opens URL/ui, reads what the page shows, sets a DEEP override for AGENT
// by clicking, mints and revokes a pairing code for AGENT, uploads
// UNSIGNED_WASM through the file input, then
// SLOW_SIGNED_WASM (its compile shown while it runs), takes a
// screenshot, and prints one JSON object with what it read. Every wait is
// bounded; exits 1 (with the error) when one runs out.
'use strict';
const { chromium } = require('playwright-core');
const fs = require('fs');
const os = require('os');
const path = require('path');

const [url, shot, unsigned, agent, slow] = process.argv.slice(2);
const WAIT = 20000;

(async () => {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'toolhost-ui-chromium-'));
  // A fresh, empty profile (--user-data-dir) for every run.
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    // Starting Chromium is the slowest step on a loaded 2-core CI machine
    // (it once took over 20 s there): a bound on a hang, not a measure.
    timeout: 90000,
    viewport: { width: 1280, height: 1000 },
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
  const out = { console_errors: [], csp_violations: [] };
  try {
    const page = await browser.newPage();
    page.setDefaultTimeout(WAIT);
    page.on('console', (m) => { if (m.type() === 'error') out.console_errors.push(m.text()); });
    page.on('pageerror', (e) => out.console_errors.push(String(e)));
    const resp = await page.goto(url + '/ui', { waitUntil: 'load' });
    out.status = resp.status();
    out.csp = resp.headers()['content-security-policy'] || null;
    await page.waitForSelector('body[data-loaded="1"]');
    out.title = await page.title();
    out.tools = await page.$$eval('#tools tbody tr', (rows) => rows.map((r) => r.dataset.tool));
    // What a DM acts on comes first; the tools show those with a problem,
    // every one when asked.
    out.sections = await page.$$eval('main h2', (hs) => hs.map((h) => h.textContent));
    out.tools_summary = await page.textContent('#tools-summary');
    out.tools_shown = await page.$$eval('#tools tbody tr', (rows) => rows.filter((r) => !r.hidden).map((r) => r.dataset.tool));
    out.tools_problem = await page.$$eval('#tools tbody tr[data-problem]', (rows) => rows.map((r) => r.dataset.tool));
    await page.check('#tools-all');
    await page.waitForFunction(() => [...document.querySelectorAll('#tools tbody tr')].every((r) => !r.hidden));
    out.tools_shown_all = await page.$$eval('#tools tbody tr', (rows) => rows.filter((r) => !r.hidden).length);
    await page.uncheck('#tools-all');
    out.plugins = await page.$$eval('#plugins tbody tr', (rows) => rows.map((r) => ({
      name: r.dataset.plugin, origin: r.cells[1].textContent, version: r.cells[2].textContent })));
    // The call made over MCP before the page opened: its row and the audit.
    await page.waitForFunction(() => {
      const c = document.querySelector('#tools tr[data-tool="roll"] td[data-field="calls"]');
      return c && Number(c.textContent) >= 1;
    });
    out.roll_row = await page.$eval('#tools tr[data-tool="roll"]', (r) => [...r.cells].map((c) => c.textContent));
    out.audit = await page.$$eval('#audit tbody tr', (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
    const row = `#agents tr[data-agent="${agent}"]`;
    out.agent_before = await page.$eval(row, (r) => [...r.cells].slice(0, 5).map((c) => c.textContent));
    await page.waitForFunction((sel) => /rate [1-9]/.test(document.querySelector(sel).cells[7].textContent), row);
    out.agent_activity = await page.$eval(row, (r) => [...r.cells].slice(5, 8).map((c) => c.textContent));
    out.picker_before = await page.$eval(`${row} select[name="tier"]`, (s) => s.value);
    out.unusable = await page.$$eval('#tools tbody tr.unusable', (rows) =>
      Object.fromEntries(rows.map((r) => [r.dataset.tool, r.dataset.unusable])));
    out.roll_picture = await page.$eval('#tools tr[data-tool="roll"] svg.latency', (s) => ({ p50: s.dataset.p50, ceiling: s.dataset.ceiling }));
    // Probes are filtered out by default, and shown when asked for.
    out.probe_rows_default = await page.$$eval('#audit tbody tr[data-kind="probes"]', (rows) => rows.length);
    await page.check('#audit-filters input[value="probes"]');
    await page.waitForFunction(() => document.querySelectorAll('#audit tbody tr[data-kind="probes"]').length > 0);
    out.probe_rows_shown = await page.$$eval('#audit tbody tr[data-kind="probes"]', (rows) => rows.length);
    await page.uncheck('#audit-filters input[value="probes"]');
    // The "Only" fields: the agent's calls alone, then the failed ones.
    await page.fill('#audit-match input[name="agent"]', agent);
    out.audit_agent_only = await page.$$eval('#audit tbody tr', (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
    await page.fill('#audit-match input[name="agent"]', '');
    await page.fill('#audit-match input[name="outcome"]', 'error');
    out.audit_errors_only = await page.$$eval('#audit tbody tr', (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
    await page.fill('#audit-match input[name="outcome"]', '');
    // Set an override on the page.
    await page.selectOption(`${row} select[name="tier"]`, 'deep');
    await page.fill(`${row} input[name="minutes"]`, '5');
    await page.click(`${row} button[name="set"]`);
    await page.waitForFunction((sel) => document.querySelector(sel).cells[3].textContent.startsWith('deep'), row);
    out.override_result = await page.textContent('#override-result');
    out.agent_after = await page.$eval(row, (r) => [...r.cells].slice(0, 5).map((c) => c.textContent));
    // Mint a pairing code for the agent on the page, then revoke it.
    await page.selectOption('#pair-agent', agent);
    await page.fill('#pair-mins', '5');
    await page.click('#pair-form button[type="submit"]');
    await page.waitForFunction(() => /code /.test(document.getElementById('pair-result').textContent));
    out.pair_result = await page.textContent('#pair-result');
    await page.waitForSelector('#pairings tbody tr[data-pairing]');
    out.pair_rows = await page.$$eval('#pairings tbody tr', (rows) => rows.map((r) => [...r.cells].slice(0, 4).map((c) => c.textContent)));
    await page.click('#pairings tbody tr[data-pairing] button');
    await page.waitForFunction(() => /^revoked/.test(document.getElementById('pair-result').textContent));
    await page.waitForFunction(() => !document.querySelector('#pairings tbody tr[data-pairing]'));
    out.pair_revoked = await page.textContent('#pair-result');
    // Upload an unsigned file.
    await page.setInputFiles('#file', unsigned);
    await page.waitForFunction(() => /^(Installed|Refused)/.test(document.getElementById('upload-result').textContent));
    out.upload_result = await page.textContent('#upload-result');
    out.upload_class = await page.getAttribute('#upload-result', 'class');
    // The refusal reaches the audit on the next refresh.
    await page.waitForFunction(() => [...document.querySelectorAll('#audit tbody tr')].some((r) => r.dataset.event === 'plugin_refused'));
    out.audit_after = await page.$$eval('#audit tbody tr', (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
    out.plugins_after = await page.$$eval('#plugins tbody tr', (rows) => rows.map((r) => r.dataset.plugin));
    // A signed plugin slow to compile, uploaded on the page: the page shows
    // its compile while the upload waits for it, then the install.
    await page.setInputFiles('#file', slow);
    await page.waitForSelector('#compiling div[data-plugin="npcnames"]', { timeout: 120000 });
    out.compiling = await page.$$eval('#compiling div[data-plugin]', (ds) => ds.map((d) => d.dataset.plugin));
    await page.waitForFunction(() => /^(Installed|Refused)/.test(document.getElementById('upload-result').textContent),
      null, { timeout: 300000 });
    out.slow_upload = await page.textContent('#upload-result');
    await page.screenshot({ path: shot, fullPage: true });
    console.log(JSON.stringify(out));
  } finally {
    await browser.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
})().catch((e) => {
  console.error(String(e && e.stack || e));
  process.exit(1);
});
