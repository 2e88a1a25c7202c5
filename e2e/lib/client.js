// socket.io-client helpers: connecting, awaiting events with timeouts, and
// generic polling/sleeping utilities.

import { io } from 'socket.io-client';

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Resolves with the args array of the next `event` on emitter (anything
 * with .on/.off, e.g. a socket.io-client Socket, Manager or engine).
 * Rejects after timeoutMs, or when one of `failOn` events comes first.
 * Start waiting before the action that causes the event, await after it.
 */
export function waitFor(emitter, event, { timeoutMs = 10000, failOn = [], label = event } = {}) {
  const promise = new Promise((resolve, reject) => {
    const handlers = [];
    const cleanup = () => {
      clearTimeout(timer);
      for (const [ev, fn] of handlers) emitter.off(ev, fn);
    };
    const on = (ev, fn) => { handlers.push([ev, fn]); emitter.on(ev, fn); };
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`timed out after ${timeoutMs} ms waiting for "${label}"`));
    }, timeoutMs);
    on(event, (...args) => { cleanup(); resolve(args); });
    for (const ev of failOn) {
      on(ev, (...args) => {
        cleanup();
        const detail = args.map((a) => (a instanceof Error ? `${a.message} ${JSON.stringify(a.data ?? a.description ?? '')}` : JSON.stringify(a))).join(', ');
        reject(new Error(`got "${ev}" (${detail}) while waiting for "${label}"`));
      });
    }
  });
  // Tests often start waiting before they await (to miss nothing): an early
  // rejection must not count as an unhandled one; the awaiter still gets it.
  promise.catch(() => {});
  return promise;
}

/** Polls fn (may be async) until it returns a truthy value; resolves with it. */
export async function waitUntil(fn, { timeoutMs = 10000, intervalMs = 50, message = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
      last = v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${message} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
    }
    await sleep(intervalMs);
  }
}

/**
 * Creates a socket.io-client socket for url. Defaults: a new Manager per
 * socket, no reconnection, 10 s connect timeout. With `t`, the socket (and
 * its Manager) is closed after the test.
 *   token       shortcut for auth: {token}
 *   other keys  socket.io-client options
 */
export function client(url, { token, t, ...opts } = {}) {
  const options = { forceNew: true, reconnection: false, timeout: 10000, ...opts };
  if (token !== undefined && options.auth === undefined) options.auth = { token };
  const socket = io(url, options);
  t?.after(() => closeClient(socket));
  return socket;
}

/** Closes the socket and its Manager (and so its transport). */
export function closeClient(socket) {
  try {
    socket.io.reconnection(false);
    socket.disconnect();
    socket.io.engine?.close();
  } catch { /* already closed */ }
}

/**
 * Connects and resolves with {socket, session} once both 'connect' and the
 * 'session' event arrived. Rejects on connect_error (with its message and
 * data) or after timeoutMs.
 */
export async function connect(url, { timeoutMs = 10000, ...opts } = {}) {
  const socket = client(url, opts);
  try {
    const sessionP = waitFor(socket, 'session', { timeoutMs, failOn: ['connect_error', 'disconnect'] });
    const [session] = await sessionP;
    if (!socket.connected) await waitFor(socket, 'connect', { timeoutMs, failOn: ['connect_error', 'disconnect'] });
    return { socket, session };
  } catch (err) {
    closeClient(socket);
    throw err;
  }
}

/**
 * Connects expecting a refusal; resolves with the connect_error Error.
 * Rejects if the socket connects (or a session arrives) instead.
 */
export async function connectError(url, { timeoutMs = 10000, ...opts } = {}) {
  const socket = client(url, opts);
  try {
    const [err] = await waitFor(socket, 'connect_error', { timeoutMs, failOn: ['connect', 'session'] });
    return err;
  } finally {
    closeClient(socket);
  }
}

/** Counts engine-level pings the socket receives while ms pass. */
export async function countPings(socket, ms) {
  let pings = 0;
  const onPing = () => { pings++; };
  socket.io.engine.on('ping', onPing);
  await sleep(ms);
  socket.io.engine.off('ping', onPing);
  return pings;
}
