// Starting and stopping presenced processes for the end-to-end tests.
//
// Every process started here is tracked: tests register `t.after` hooks to
// stop it, and as a last resort every live process is SIGKILLed when the
// test file's process exits.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));

/** The server binary: $PRESENCED_BIN, else ../bin/presenced of the repo. */
export const BIN = process.env.PRESENCED_BIN
  ? path.resolve(process.env.PRESENCED_BIN)
  : path.resolve(here, '..', '..', 'bin', 'presenced');

/** A secret of more than 16 bytes, so servers started with it are not in dev mode. */
export const SECRET = 'e2e-secret-0123456789abcdef-xyz';

const live = new Set();
process.on('exit', () => {
  for (const child of live) {
    try { child.kill('SIGKILL'); } catch { /* already gone */ }
  }
});

/**
 * The environment of this process without any presenced setting
 * (PRESENCE_*, REDIS_URL, DATABASE_URL), plus `extra`.
 */
export function cleanEnv(extra = {}) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (k.startsWith('PRESENCE_') || k === 'REDIS_URL' || k === 'DATABASE_URL') continue;
    env[k] = v;
  }
  return { ...env, ...extra };
}

/** A TCP port on 127.0.0.1 that was free a moment ago. */
export async function freePort() {
  const srv = net.createServer();
  await new Promise((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', resolve);
  });
  const { port } = srv.address();
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

/**
 * Starts `presenced serve` and resolves once it logged "listening".
 *
 * options:
 *   args      extra command-line arguments (flags)
 *   secret    --jwt-secret (default SECRET; null to leave it unset)
 *   nodeId    --node-id (default "e2e-node")
 *   port      port on 127.0.0.1 (default 0: any free port)
 *   env       extra environment variables (on top of cleanEnv())
 *   t         a test context (or anything with .after): the process is
 *             killed after the test, whatever its outcome
 */
const tempDirs = new Set();
process.on('exit', () => {
  for (const dir of tempDirs) {
    try { fs.rmSync(dir, { recursive: true, force: true }); } catch { /* best effort */ }
  }
});

export async function startServer({
  args = [],
  secret = SECRET,
  nodeId = 'e2e-node',
  port = 0,
  env = {},
  t,
  readyTimeoutMs = 15000,
} = {}) {
  const argv = ['serve', '--addr', `127.0.0.1:${port}`, '--log-format', 'json', '--log-level', 'debug'];
  if (secret != null) argv.push('--jwt-secret', secret);
  if (nodeId != null) argv.push('--node-id', nodeId);
  argv.push(...args);
  // Each server gets its own embedded store file unless the test names one.
  if (!args.includes('--data')) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'presenced-e2e-'));
    tempDirs.add(dir);
    argv.push('--data', path.join(dir, 'presenced.db'));
  }

  const child = spawn(BIN, argv, { env: cleanEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(child);
  const server = new ServerProcess(child, argv);
  t?.after(() => server.kill());

  try {
    const line = await server.waitForLog((l) => l.msg === 'listening', readyTimeoutMs);
    server.addr = line.addr;
    server.port = Number(line.addr.slice(line.addr.lastIndexOf(':') + 1));
    server.url = `http://127.0.0.1:${server.port}`;
  } catch (err) {
    await server.kill();
    throw new Error(`presenced did not start (${err.message})\nargs: ${argv.join(' ')}\nstderr:\n${server.stderr}`);
  }
  return server;
}

class ServerProcess {
  constructor(child, argv) {
    this.child = child;
    this.argv = argv;
    this.pid = child.pid;
    this.logs = []; // parsed JSON log lines
    this.stderr = ''; // raw stderr
    this.stdout = ''; // raw stdout
    this.exit = null; // {code, signal} once exited
    this._waiters = new Set();

    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (d) => { this.stdout += d; });
    readline.createInterface({ input: child.stderr }).on('line', (line) => {
      this.stderr += line + '\n';
      let entry;
      try { entry = JSON.parse(line); } catch { return; }
      this.logs.push(entry);
      for (const w of this._waiters) w();
    });
    this.exited = new Promise((resolve) => {
      child.on('exit', (code, signal) => {
        live.delete(child);
        this.exit = { code, signal };
        resolve(this.exit);
        for (const w of this._waiters) w();
      });
      child.on('error', (err) => {
        live.delete(child);
        this.exit = { code: null, signal: null, error: err };
        resolve(this.exit);
        for (const w of this._waiters) w();
      });
    });
  }

  get running() { return this.exit === null; }

  /** Resolves with the first log line (parsed) for which pred is true. */
  waitForLog(pred, timeoutMs = 10000) {
    return new Promise((resolve, reject) => {
      const check = () => {
        const found = this.logs.find(pred);
        if (found) { done(); resolve(found); return; }
        if (this.exit) { done(); reject(new Error(`server exited (${JSON.stringify(this.exit)}) before the log line`)); }
      };
      const timer = setTimeout(() => { done(); reject(new Error(`no such log line within ${timeoutMs} ms`)); }, timeoutMs);
      const done = () => { clearTimeout(timer); this._waiters.delete(check); };
      this._waiters.add(check);
      check();
    });
  }

  /** The log lines with the given msg. */
  logsWithMsg(msg) { return this.logs.filter((l) => l.msg === msg); }

  /**
   * Sends signal and waits for the exit; SIGKILLs and throws if it takes
   * longer than timeoutMs. Resolves with {code, signal, ms}.
   */
  async stop(signal = 'SIGTERM', timeoutMs = 10000) {
    if (this.exit) return this.exit;
    const start = Date.now();
    this.child.kill(signal);
    let timer;
    const res = await Promise.race([
      this.exited,
      new Promise((resolve) => { timer = setTimeout(() => resolve(null), timeoutMs); }),
    ]);
    clearTimeout(timer);
    if (res === null) {
      await this.kill();
      throw new Error(`presenced did not exit within ${timeoutMs} ms of ${signal}\nstderr:\n${this.stderr}`);
    }
    return { ...res, ms: Date.now() - start };
  }

  /** SIGKILLs the process if it still runs and waits for it. */
  async kill() {
    if (this.exit) return this.exit;
    try { this.child.kill('SIGKILL'); } catch { /* gone */ }
    return this.exited;
  }
}

/**
 * Runs presenced with args to completion (a CLI command, not a server).
 * Resolves with {code, signal, stdout, stderr}.
 */
export function runCli(args, { env = {}, timeoutMs = 15000 } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(BIN, args, { env: cleanEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
    live.add(child);
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8');
    child.stderr.setEncoding('utf8');
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`presenced ${args.join(' ')} did not finish within ${timeoutMs} ms\nstderr:\n${stderr}`));
    }, timeoutMs);
    child.on('error', (err) => { clearTimeout(timer); live.delete(child); reject(err); });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      live.delete(child);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** CPU seconds (user + system) the process has used so far (Linux: /proc). */
export function cpuSeconds(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]); // utime, stime
  return ticks / 100; // USER_HZ is 100 on Linux
}
