// Private Redis and PostgreSQL servers that a fault test may stop and start
// (never the shared ones that other tests use), on free ports of
// 127.0.0.1, in temporary directories removed at exit.

import { spawn, execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';

import { freePort } from './server.js';
import { sleep } from './client.js';

const dirs = new Set();
process.on('exit', () => {
  for (const d of dirs) {
    try { fs.rmSync(d, { recursive: true, force: true }); } catch { /* best effort */ }
  }
});

function tempDir(stem) {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), `presenced-${stem}-`));
  dirs.add(d);
  return d;
}

/** Runs redis-cli against 127.0.0.1:port; resolves with its trimmed output. */
export function redisCli(port, ...args) {
  return new Promise((resolve, reject) => {
    execFile('redis-cli', ['-p', String(port), ...args], { timeout: 30000 }, (err, stdout) => (err ? reject(err) : resolve(stdout.trim())));
  });
}

async function waitPort(port, timeoutMs = 15000) {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    const ok = await new Promise((resolve) => {
      const s = net.connect(port, '127.0.0.1');
      s.once('connect', () => { s.destroy(); resolve(true); });
      s.once('error', () => resolve(false));
    });
    if (ok) return;
    await sleep(50);
  }
  throw new Error(`nothing listens on 127.0.0.1:${port} after ${timeoutMs} ms`);
}

/**
 * A redis-server of its own. aof: append-only file with fsync on every
 * write (what survives a restart is then exactly what was written). The
 * port and directory stay across stop()/start(), so a restart reloads the
 * AOF. Killed after t.
 */
export async function privateRedis(t, { aof = false, port } = {}) {
  port ??= await freePort();
  const dir = tempDir('redis');
  let child = null;
  const r = {
    port,
    url: `redis://127.0.0.1:${port}`,
    async start() {
      const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--daemonize', 'no', '--enable-debug-command', 'local'];
      args.push('--appendonly', aof ? 'yes' : 'no');
      if (aof) args.push('--appendfsync', 'always');
      child = spawn('redis-server', args, { stdio: 'ignore' });
      await waitPort(port);
    },
    /** Stops it hard (SIGKILL): no final save beyond what the AOF has. */
    async stop() {
      if (!child) return;
      const c = child;
      child = null;
      const gone = new Promise((resolve) => c.once('exit', resolve));
      c.kill('SIGKILL');
      await gone;
    },
  };
  t.after(() => r.stop());
  return r;
}

const PG_BIN = fs.existsSync('/usr/lib/postgresql') ? path.join('/usr/lib/postgresql', fs.readdirSync('/usr/lib/postgresql').sort().at(-1), 'bin') : '';

/**
 * A PostgreSQL cluster of its own (initdb into a temporary directory, run
 * as the postgres user when this process is root), with a database
 * `presence`. stop() is an immediate shutdown; start() brings it back
 * with its data. Stopped after t.
 */
export async function privatePostgres(t) {
  const port = await freePort();
  const dir = tempDir('pg');
  const asRoot = process.getuid?.() === 0;
  if (asRoot) execFileSync('chown', ['postgres:postgres', dir]);
  const run = (bin, args) => {
    const cmd = path.join(PG_BIN, bin);
    return asRoot ? execFileSync('runuser', ['-u', 'postgres', '--', cmd, ...args], { stdio: 'pipe' }) : execFileSync(cmd, args, { stdio: 'pipe' });
  };
  const data = path.join(dir, 'data');
  run('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync']);
  const pg = {
    port,
    url: `postgres://postgres@127.0.0.1:${port}/presence?sslmode=disable`,
    running: false,
    async start() {
      run('pg_ctl', ['-D', data, '-l', path.join(dir, 'log'), '-w', '-o', `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off`, 'start']);
      pg.running = true;
    },
    async stop() {
      if (!pg.running) return;
      run('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']);
      pg.running = false;
    },
    /** Runs SQL through psql; resolves with its output. */
    sql(q, db = 'presence') {
      return run('psql', ['-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', '-d', db, '-At', '-c', q]).toString();
    },
  };
  await pg.start();
  pg.sql('CREATE DATABASE presence', 'postgres');
  t.after(() => pg.stop());
  return pg;
}
