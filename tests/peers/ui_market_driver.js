// Drives the DM's page's marketplace panel in Debian's headless Chromium
// with playwright-core (tests/e2e/marketplace_page.rs runs it).
//
//   node ui_market_driver.js URL QUERY PLUGIN
//
// Opens URL/ui, searches QUERY in the marketplace panel, reads the rows,
// opens PLUGIN's details, clicks install, and reads the result and the
// plugins held back. Prints one JSON object. Every wait is bounded; exits
// 1 (with the error) when one runs out.
'use strict';
const { chromium } = require('playwright-core');
const fs = require('fs');
const os = require('os');
const path = require('path');

const [url, query, plugin] = process.argv.slice(2);
const WAIT = 20000;

(async () => {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'toolhost-ui-chromium-'));
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    timeout: 90000,
    viewport: { width: 1280, height: 1000 },
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
  const out = { console_errors: [] };
  try {
    const page = await browser.newPage();
    page.setDefaultTimeout(WAIT);
    page.on('console', (m) => { if (m.type() === 'error') out.console_errors.push(m.text()); });
    page.on('pageerror', (e) => out.console_errors.push(String(e)));
    await page.goto(url + '/ui', { waitUntil: 'load' });
    await page.waitForSelector('body[data-loaded="1"]');
    out.panel_shown = await page.isVisible('#market-section');
    await page.fill('#market-q', query);
    await page.click('#market-form button[type=submit]');
    await page.waitForSelector('#market tbody tr');
    out.rows = await page.$$eval('#market tbody tr', (rows) => rows.map((r) => r.dataset.plugin));
    out.row_text = await page.$$eval('#market tbody tr', (rows) => rows.map((r) => r.textContent));
    await page.click(`#market tbody tr[data-plugin="${plugin}"] button`);
    await page.waitForSelector('#market-detail:not([hidden])');
    out.detail = await page.textContent('#market-detail');
    await page.click('#market-install');
    await page.waitForFunction(() => {
      const t = document.getElementById('market-result').textContent;
      return t.startsWith('Installed') || t.startsWith('Not installed');
    });
    out.result = await page.textContent('#market-result');
    await page.waitForSelector(`#withheld li[data-plugin="${plugin}"]`);
    out.withheld = await page.$$eval('#withheld li', (ls) => ls.map((l) => l.textContent));
  } catch (e) {
    console.error(String(e && e.stack || e));
    console.log(JSON.stringify(out));
    await browser.close();
    process.exit(1);
  }
  await browser.close();
  console.log(JSON.stringify(out));
})();
