// Command line: bad configuration exits 2 naming the setting; --help
// prints every setting.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { runCli, SECRET } from '../lib/server.js';

test('a bad setting exits 2 and names it', { timeout: 30000 }, async () => {
  const res = await runCli(['--ping-interval', 'abc', '--jwt-secret', SECRET, '--addr', '127.0.0.1:0']);
  assert.equal(res.code, 2, `exit code (stderr: ${res.stderr})`);
  assert.match(res.stderr, /PRESENCE_PING_INTERVAL/);
  assert.doesNotMatch(res.stderr, /"msg":"listening"/);
});

test('a bad environment variable exits 2 and names it', { timeout: 30000 }, async () => {
  const res = await runCli(['--jwt-secret', SECRET, '--addr', '127.0.0.1:0'], { env: { PRESENCE_MAX_BUFFER: 'lots' } });
  assert.equal(res.code, 2, `exit code (stderr: ${res.stderr})`);
  assert.match(res.stderr, /PRESENCE_MAX_BUFFER/);
});

test('a too-short secret exits 2 and names it', { timeout: 30000 }, async () => {
  const res = await runCli(['--jwt-secret', 'tiny-s3cr3t', '--addr', '127.0.0.1:0']);
  assert.equal(res.code, 2, `exit code (stderr: ${res.stderr})`);
  assert.match(res.stderr, /PRESENCE_JWT_SECRET/);
  assert.doesNotMatch(res.stderr, /tiny-s3cr3t/, 'the secret itself is not printed');
});

for (const name of ['PRESENCE_JWT_SECRET', 'PRESENCE_JWKS_URL', 'REDIS_URL', 'DATABASE_URL']) {
  test(`${name} present but empty exits 2 instead of starting dev mode`, { timeout: 30000 }, async () => {
    const res = await runCli(['--addr', '127.0.0.1:0'], { env: { [name]: '' } });
    assert.equal(res.code, 2, `exit code (stderr: ${res.stderr})`);
    assert.match(res.stderr, new RegExp(name));
    assert.match(res.stderr, /present but empty/);
    assert.doesNotMatch(res.stderr + res.stdout, /running in dev mode|"msg":"listening"/);
  });
}

test('--help exits 0 and lists the settings', { timeout: 30000 }, async () => {
  const res = await runCli(['--help']);
  assert.equal(res.code, 0, `exit code (stderr: ${res.stderr})`);
  assert.match(res.stdout, /--typing-ttl/);
  assert.match(res.stdout, /PRESENCE_MAX_BUFFER/);
  assert.match(res.stdout, /--ping-interval/);
  assert.match(res.stdout, /presenced token/);
});
