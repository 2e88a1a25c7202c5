// Helpers for the admin panel tests (test/5x-admin-*.test.js): the token,
// a browser page with a record of page errors and CSP violations, and the
// screenshot folder.

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { launchBrowser } from './browser.js';

const here = path.dirname(fileURLToPath(import.meta.url));

/** The admin token every admin test starts its servers with. */
export const ADMIN_TOKEN = 'e2e-admin-token-0123456789';

/**
 * The test's output folder (E2E_OUT, default e2e/out/<name>), created;
 * screenshots go there.
 */
export function outDir(name) {
  const dir = path.join(process.env.E2E_OUT ?? path.join(here, '..', 'out'), name);
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

/**
 * A new page of a headless Chromium (closed after the test) with
 * page.problems: page errors, console errors (CSP violations are logged
 * there) and failed requests other than the ones a test expects.
 */
export async function adminPage(t, { width = 1280, height = 800 } = {}) {
  const browser = await launchBrowser(t);
  const context = await browser.newContext({ viewport: { width, height } });
  const page = await context.newPage();
  page.problems = [];
  page.on('pageerror', (e) => page.problems.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/401|Unauthorized/.test(m.text())) page.problems.push(`console: ${m.text()}`);
  });
  return page;
}

/** Logs in through the form; resolves once the cluster page shows. */
export async function logIn(page, base, token = ADMIN_TOKEN) {
  await page.goto(base + '/admin/');
  await page.waitForURL(/\/admin\/login/);
  await page.fill('#token', token);
  await Promise.all([page.waitForNavigation(), page.click('button[type=submit]')]);
}
