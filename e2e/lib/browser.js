// Headless Chromium (Debian's `chromium`) driven with playwright-core, and
// a small static HTTP server for test pages. .ci/run installs chromium.

import http from 'node:http';
import fs from 'node:fs';
import { chromium } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM_BIN
  ?? ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => fs.existsSync(p));

/** Launches headless Chromium; closed after the test when t is given. */
export async function launchBrowser(t) {
  if (!CHROMIUM) throw new Error('chromium is not installed (apt-get install -y chromium)');
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
  t?.after(() => browser.close());
  return browser;
}

/**
 * Serves files on 127.0.0.1: routes maps a path to {type, body}.
 * Resolves with {url, close()}; closed after the test when t is given.
 */
export function staticServer(routes, t) {
  return new Promise((resolve) => {
    const srv = http.createServer((req, res) => {
      const r = routes[new URL(req.url, 'http://x').pathname];
      if (!r) { res.writeHead(404).end(); return; }
      res.writeHead(200, { 'Content-Type': r.type, 'Cache-Control': 'no-store' }).end(r.body);
    });
    srv.listen(0, '127.0.0.1', () => {
      const close = () => new Promise((done) => { srv.closeAllConnections?.(); srv.close(() => done()); });
      t?.after(close);
      resolve({ url: `http://127.0.0.1:${srv.address().port}`, close });
    });
  });
}
