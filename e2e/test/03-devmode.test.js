// Dev mode: no secret configured. The server generates one beside --data,
// prints a banner with a token, `presenced token` signs with the same
// secret, and the secret survives a restart.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { startServer, runCli } from '../lib/server.js';
import { connect, closeClient, waitUntil } from '../lib/client.js';
import { request, pollingUrl } from '../lib/http.js';

const JWT = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

function tmpdir(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'presenced-e2e-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

async function connectBoth(url, token, userId) {
  for (const transport of ['websocket', 'polling']) {
    const { socket, session } = await connect(url, { transports: [transport], token });
    try {
      assert.equal(session.userId, userId, `userId over ${transport}`);
      assert.equal(session.socketId, socket.id);
    } finally {
      closeClient(socket);
    }
  }
}

test('dev mode: generated secret, banner, `presenced token`, kept across restarts', { timeout: 60000 }, async (t) => {
  const dir = tmpdir(t);
  const data = path.join(dir, 'presenced.db');
  const secretFile = path.join(dir, 'presenced.dev-secret');

  const first = await startServer({ t, secret: null, args: ['--data', data] });

  // The banner goes to stdout, mentions the secret file and carries a token.
  const banner = await waitUntil(() => (first.stdout.includes(secretFile) && /\beyJ[\w-]+\.[\w-]+\.[\w-]+/.test(first.stdout) ? first.stdout : null), {
    timeoutMs: 5000, message: 'the dev-mode banner on stdout',
  }).catch((err) => assert.fail(`${err.message}\nstdout was:\n${first.stdout}`));
  assert.match(banner, /dev mode/i);
  assert.ok(fs.existsSync(secretFile), 'the dev secret file exists');
  const mode = fs.statSync(secretFile).mode & 0o777;
  assert.equal(mode, 0o600, `dev secret file mode ${mode.toString(8)}`);
  const secret = fs.readFileSync(secretFile, 'utf8').trim();
  assert.ok(secret.length >= 16, 'dev secret has at least 16 bytes');
  // CONTRACT §5: the generated secret is printed at start, with a way to
  // mint a token: with --data not the default, the command carries it.
  assert.ok(banner.includes(secret), 'the banner prints the dev secret');
  assert.ok(banner.includes(`token alice --data ${data}`) || banner.includes(`token alice --data '${data}'`),
    `the banner's mint command names --data ${data}:\n${banner}`);

  // The banner's example token works.
  const bannerToken = /\b(eyJ[\w-]+\.[\w-]+\.[\w-]+)/.exec(banner)[1];
  await connectBoth(first.url, bannerToken, 'alice');

  // `presenced token alice --data ...` prints exactly one line: the JWT.
  const minted = await runCli(['token', 'alice', '--data', data]);
  assert.equal(minted.code, 0, `exit code (stderr: ${minted.stderr})`);
  assert.match(minted.stdout, /^[^\n]+\n$/, `exactly one line on stdout: ${JSON.stringify(minted.stdout)}`);
  assert.ok(minted.stderr.includes(secretFile), `stderr names the dev secret file: ${minted.stderr}`);
  const token = minted.stdout.trim();
  assert.match(token, JWT);
  const payload = JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString('utf8'));
  assert.equal(payload.sub, 'alice');
  const header = JSON.parse(Buffer.from(token.split('.')[0], 'base64url').toString('utf8'));
  assert.equal(header.alg, 'HS256');

  await connectBoth(first.url, token, 'alice');

  const stopped = await first.stop('SIGTERM');
  assert.equal(stopped.code, 0);

  // Restart on the same data: the secret is kept, the token still works.
  const second = await startServer({ t, secret: null, args: ['--data', data] });
  assert.equal(fs.readFileSync(secretFile, 'utf8').trim(), secret, 'secret unchanged by the restart');
  await connectBoth(second.url, token, 'alice');
  const stopped2 = await second.stop('SIGTERM');
  assert.equal(stopped2.code, 0);
});


/** A dev-mode server, and zoe connected to it over transport from a localhost dev port's page. */
async function devPageConnects(t, transport) {
  const dir = tmpdir(t);
  const server = await startServer({ t, secret: null, args: ['--data', path.join(dir, 'presenced.db')] });
  const { stdout: token } = await runCli(['token', 'zoe', '--data', path.join(dir, 'presenced.db')]);
  const { socket, session } = await connect(server.url, { transports: [transport], extraHeaders: { origin: 'http://localhost:5173' }, token: token.trim() });
  closeClient(socket);
  assert.equal(session.userId, 'zoe');
  return server;
}

test('dev mode: a page on a localhost dev port may connect (polling)', { timeout: 30000 }, async (t) => {
  const server = await devPageConnects(t, 'polling');
  const evil = await request(pollingUrl(server.url), { headers: { Origin: 'http://evil.example' } });
  assert.equal(evil.status, 403, 'other origins are still refused in dev mode');
});

test('dev mode: a page on a localhost dev port may connect (websocket)', { timeout: 30000 }, async (t) => {
  await devPageConnects(t, 'websocket');
});
