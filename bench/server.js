'use strict';
// A Node peer of presenced for side-by-side benchmarks (docs/benchmarks/side-by-side.md).
//
// It does the contract work (docs/CONTRACT.md §1) for the events presence-load uses, the way a
// straightforward Node implementation would: Socket.IO 4 with @socket.io/redis-adapter for the
// rooms, and Redis for the presence state (online keys with a TTL, connection counts, conversation
// rosters, typing). It is a benchmark peer, not a second implementation of the contract: no
// membership store, no privacy settings (everyone's last-seen is visible), no per-socket rate
// limits, no away status, no flap grace, no node crash recovery, no state:set, no PostgreSQL.
//
// Flags (same names as presenced, so presence-load starts it with the same arguments; unknown
// flags are ignored): --addr host:port, --jwt-secret, --redis-url, --redis-prefix, --typing-ttl,
// --ttl. Environment: PRESENCE_ADDR, PRESENCE_JWT_SECRET, REDIS_URL, PRESENCE_REDIS_PREFIX.
//
//   node bench/server.js --addr 127.0.0.1:3001 --jwt-secret s3cret --redis-url redis://127.0.0.1:6379

const http = require('node:http');
const crypto = require('node:crypto');
const { Server } = require('socket.io');
const { createAdapter } = require('@socket.io/redis-adapter');
const { createClient } = require('redis');

// ---- configuration --------------------------------------------------------------------------

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('--')) continue;
    const eq = a.indexOf('=');
    if (eq > 0) {
      out[a.slice(2, eq)] = a.slice(eq + 1);
    } else if (i + 1 < argv.length && !argv[i + 1].startsWith('--')) {
      out[a.slice(2)] = argv[++i];
    } else {
      out[a.slice(2)] = 'true';
    }
  }
  return out;
}

function durationMs(s, def) {
  if (!s) return def;
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(s);
  if (!m) return def;
  return Number(m[1]) * { ms: 1, s: 1000, m: 60000, h: 3600000 }[m[2]];
}

const args = parseArgs(process.argv.slice(2));
const addr = args.addr || process.env.PRESENCE_ADDR || ':3000';
const secret = args['jwt-secret'] || process.env.PRESENCE_JWT_SECRET;
const redisURL = args['redis-url'] || process.env.REDIS_URL || 'redis://127.0.0.1:6379';
const prefix = args['redis-prefix'] || process.env.PRESENCE_REDIS_PREFIX || 'presence';
const presenceTTL = durationMs(args.ttl, 45000);
const typingTTL = durationMs(args['typing-ttl'], 5000);
const heartbeatInterval = 15000;
const heartbeatJitter = 5000;
const nodeId = args['node-id'] || `node-${process.pid}`;
if (!secret) {
  console.error('bench/server.js: --jwt-secret or PRESENCE_JWT_SECRET is required');
  process.exit(2);
}

// ---- HS256 JWT ----------------------------------------------------------------------------------

function b64urlJSON(s) {
  return JSON.parse(Buffer.from(s, 'base64url').toString('utf8'));
}

function verifyHS256(token) {
  if (typeof token !== 'string') throw new Error('missing token');
  const parts = token.split('.');
  if (parts.length !== 3) throw new Error('malformed token');
  const header = b64urlJSON(parts[0]);
  if (header.alg !== 'HS256') throw new Error('unexpected alg');
  const sig = crypto.createHmac('sha256', secret).update(parts[0] + '.' + parts[1]).digest();
  const got = Buffer.from(parts[2], 'base64url');
  if (got.length !== sig.length || !crypto.timingSafeEqual(got, sig)) throw new Error('bad signature');
  const claims = b64urlJSON(parts[1]);
  if (typeof claims.exp === 'number' && claims.exp * 1000 < Date.now()) throw new Error('expired');
  if (!validId(claims.sub)) throw new Error('bad sub');
  return claims;
}

// ---- helpers ------------------------------------------------------------------------------------

const ID = /^[A-Za-z0-9_.:@-]{1,128}$/;
function validId(s) {
  return typeof s === 'string' && ID.test(s);
}
function minute(ms) {
  return new Date(Math.floor(ms / 60000) * 60000).toISOString();
}
function fail(ack, code, message) {
  if (typeof ack === 'function') ack({ ok: false, error: { code, message } });
}
const k = {
  online: (u) => `${prefix}:online:${u}`, // string, TTL: the user is online
  conns: `${prefix}:conns`, // hash user → live sockets, cluster-wide
  lastSeen: `${prefix}:lastseen`, // hash user → ms
  members: (c) => `${prefix}:conv:${c}:sockets`, // hash user → sockets of the user in the room
  since: (c) => `${prefix}:conv:${c}:since`, // hash user → ms of joining
  typing: (c) => `${prefix}:conv:${c}:typing`, // zset user → expiry ms
};

function presenceOf(userId, onlineVal, lastSeenVal) {
  if (onlineVal) {
    return { userId, status: 'online', lastSeen: null, lastSeenBucket: null, display: 'online' };
  }
  if (!lastSeenVal) {
    return { userId, status: 'offline', lastSeen: null, lastSeenBucket: null, display: 'never seen' };
  }
  const at = Number(lastSeenVal);
  const mins = Math.floor((Date.now() - at) / 60000);
  const display = mins < 1 ? 'last seen just now' : `last seen ${mins} minute${mins === 1 ? '' : 's'} ago`;
  return { userId, status: 'offline', lastSeen: minute(at), lastSeenBucket: null, display };
}

// logError writes a JSON line presence-load counts as a warning (as it does presenced's).
function logError(where, err) {
  console.error(JSON.stringify({ time: new Date().toISOString(), level: 'ERROR', msg: where, error: String(err && err.message) }));
}

// ---- server ---------------------------------------------------------------------------------

async function main() {
  const redis = createClient({ url: redisURL });
  const pub = redis.duplicate();
  const sub = redis.duplicate();
  for (const c of [redis, pub, sub]) c.on('error', (err) => logError('redis', err));
  await Promise.all([redis.connect(), pub.connect(), sub.connect()]);

  const httpServer = http.createServer((req, res) => {
    if (req.url === '/healthz' || req.url === '/readyz') {
      const ready = req.url === '/healthz' || redis.isReady;
      res.writeHead(ready ? 200 : 503, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ ok: ready }));
      return;
    }
    if (req.url.startsWith('/socket.io/')) return; // socket.io answers
    res.writeHead(404);
    res.end();
  });
  const io = new Server(httpServer, {
    adapter: createAdapter(pub, sub, { key: `${prefix}:socket.io` }),
    pingInterval: 25000,
    pingTimeout: 20000,
    maxHttpBufferSize: 100 * 1024,
    cors: { origin: false },
  });

  async function presences(userIds) {
    const m = redis.multi();
    m.mGet(userIds.map(k.online));
    m.hmGet(k.lastSeen, userIds);
    const [online, seen] = await m.exec();
    return userIds.map((u, i) => presenceOf(u, online[i], seen[i]));
  }

  function statusChanged(userId, p) {
    io.to(`presence:${userId}`).emit('presence:update', p);
  }

  io.use((socket, next) => {
    try {
      const claims = verifyHS256(socket.handshake.auth && socket.handshake.auth.token);
      socket.data.userId = claims.sub;
      next();
    } catch (err) {
      const e = new Error('unauthorized');
      e.data = { code: 'unauthorized', reason: err.message };
      next(e);
    }
  });

  io.on('connection', (socket) => {
    const userId = socket.data.userId;
    socket.data.convs = new Set();
    socket.data.typingTimers = new Map();
    socket.join(`user:${userId}`);
    socket.emit('session', {
      userId,
      socketId: socket.id,
      node: nodeId,
      serverTime: new Date().toISOString(),
      heartbeat: { intervalMs: heartbeatInterval, jitterMs: heartbeatJitter },
      typingTtlMs: typingTTL,
    });
    // the handlers below are registered synchronously: an event the client sends right after
    // `session` must find them. The connection's own Redis work runs meanwhile; disconnect waits
    // for it.
    socket.data.registered = (async () => {
      try {
        const [n] = await redis.multi().hIncrBy(k.conns, userId, 1).set(k.online(userId), '1', { PX: presenceTTL }).exec();
        if (n === 1) statusChanged(userId, presenceOf(userId, '1'));
      } catch (err) {
        logError('connect', err);
      }
    })();

    socket.on('conversation:join', async (p, ack) => {
      if (!p || !validId(p.conversationId)) return fail(ack, 'invalid_argument', 'conversationId');
      const c = p.conversationId;
      const room = `conversation:${c}`;
      const fresh = !socket.data.convs.has(c); // a repeated join answers the roster again
      if (fresh) {
        socket.data.convs.add(c);
        socket.join(room);
      }
      try {
        const now = Date.now();
        const [n, , since, typing] = await redis
          .multi()
          .hIncrBy(k.members(c), userId, fresh ? 1 : 0)
          .hSetNX(k.since(c), userId, String(now))
          .hGetAll(k.since(c))
          .zRangeByScore(k.typing(c), now, '+inf')
          .exec();
        if (fresh && n === 1) socket.to(room).emit('presence:join', { conversationId: c, userId, at: minute(now) });
        if (typeof ack === 'function') {
          const online = Object.entries(since).map(([u, t]) => ({ userId: u, status: 'online', since: minute(Number(t)) }));
          ack({ ok: true, conversationId: c, online, typing });
        }
      } catch (err) {
        fail(ack, 'unavailable', err.message);
      }
    });

    async function leave(c, reason) {
      const [n] = await redis.multi().hIncrBy(k.members(c), userId, -1).exec();
      if (n <= 0) {
        await redis.multi().hDel(k.members(c), userId).hDel(k.since(c), userId).zRem(k.typing(c), userId).exec();
        io.to(`conversation:${c}`).emit('presence:leave', { conversationId: c, userId, at: minute(Date.now()), reason });
      }
    }

    socket.on('conversation:leave', async (p, ack) => {
      if (!p || !validId(p.conversationId)) return fail(ack, 'invalid_argument', 'conversationId');
      const c = p.conversationId;
      if (!socket.data.convs.has(c)) return typeof ack === 'function' && ack({ ok: true });
      socket.data.convs.delete(c);
      socket.leave(`conversation:${c}`);
      try {
        await leave(c, 'left');
        if (typeof ack === 'function') ack({ ok: true });
      } catch (err) {
        fail(ack, 'unavailable', err.message);
      }
    });

    socket.on('heartbeat', async (p, ack) => {
      if (typeof p === 'function') [p, ack] = [undefined, p];
      if (p != null && (typeof p !== 'object' || (p.active !== undefined && typeof p.active !== 'boolean'))) {
        return fail(ack, 'invalid_argument', 'active');
      }
      try {
        await redis.set(k.online(userId), '1', { PX: presenceTTL });
        if (typeof ack === 'function') {
          ack({ ok: true, serverTime: new Date().toISOString(), nextInMs: heartbeatInterval + Math.floor(Math.random() * heartbeatJitter) });
        }
      } catch (err) {
        fail(ack, 'unavailable', err.message);
      }
    });

    function typingBroadcast(c, typing) {
      socket.to(`conversation:${c}`).emit('typing', { conversationId: c, userId, typing, ttlMs: typingTTL });
    }

    socket.on('typing:start', async (p, ack) => {
      if (!p || !validId(p.conversationId)) return fail(ack, 'invalid_argument', 'conversationId');
      const c = p.conversationId;
      if (!socket.data.convs.has(c)) return fail(ack, 'forbidden', 'not in the conversation');
      try {
        const now = Date.now();
        const [prev] = await redis.multi().zScore(k.typing(c), userId).zAdd(k.typing(c), { score: now + typingTTL, value: userId }).exec();
        if (prev == null || prev < now) typingBroadcast(c, true);
        clearTimeout(socket.data.typingTimers.get(c));
        socket.data.typingTimers.set(c, setTimeout(async () => {
          socket.data.typingTimers.delete(c);
          try {
            if ((await redis.zRem(k.typing(c), userId)) === 1) typingBroadcast(c, false);
          } catch (err) {
            logError('typing expiry', err);
          }
        }, typingTTL));
        if (typeof ack === 'function') ack({ ok: true });
      } catch (err) {
        fail(ack, 'unavailable', err.message);
      }
    });

    socket.on('typing:stop', async (p, ack) => {
      if (!p || !validId(p.conversationId)) return fail(ack, 'invalid_argument', 'conversationId');
      const c = p.conversationId;
      if (!socket.data.convs.has(c)) return fail(ack, 'forbidden', 'not in the conversation');
      clearTimeout(socket.data.typingTimers.get(c));
      socket.data.typingTimers.delete(c);
      try {
        if ((await redis.zRem(k.typing(c), userId)) === 1) typingBroadcast(c, false);
        if (typeof ack === 'function') ack({ ok: true });
      } catch (err) {
        fail(ack, 'unavailable', err.message);
      }
    });

    function idList(p, min) {
      if (!p || !Array.isArray(p.userIds) || p.userIds.length < min || p.userIds.length > 1000) return null;
      return p.userIds.every(validId) ? p.userIds : null;
    }

    socket.on('presence:query', async (p, ack) => {
      const ids = idList(p, 1);
      if (!ids) return fail(ack, 'invalid_argument', 'userIds');
      try {
        const out = await presences(ids);
        if (typeof ack === 'function') ack({ ok: true, presences: out });
      } catch (err) {
        fail(ack, 'unavailable', err.message);
      }
    });

    socket.on('presence:subscribe', async (p, ack) => {
      const ids = idList(p, 0);
      if (!ids) return fail(ack, 'invalid_argument', 'userIds');
      const want = new Set(ids);
      for (const room of socket.rooms) {
        if (room.startsWith('presence:') && !want.has(room.slice(9))) socket.leave(room);
      }
      for (const u of want) socket.join(`presence:${u}`);
      try {
        const out = want.size ? await presences([...want]) : [];
        if (typeof ack === 'function') ack({ ok: true, presences: out });
      } catch (err) {
        fail(ack, 'unavailable', err.message);
      }
    });

    socket.on('disconnect', async () => {
      for (const t of socket.data.typingTimers.values()) clearTimeout(t);
      await socket.data.registered;
      try {
        await Promise.all([...socket.data.convs].map((c) => leave(c, 'disconnected')));
        const [n] = await redis.multi().hIncrBy(k.conns, userId, -1).exec();
        if (n <= 0) {
          const now = Date.now();
          await redis.multi().hDel(k.conns, userId).del(k.online(userId)).hSet(k.lastSeen, userId, String(now)).exec();
          statusChanged(userId, presenceOf(userId, null, now));
        }
      } catch (err) {
        logError('disconnect', err);
      }
    });
  });

  const i = addr.lastIndexOf(':');
  const host = addr.slice(0, i) || undefined;
  const port = Number(addr.slice(i + 1));
  httpServer.listen(port, host, () => {
    console.log(JSON.stringify({ msg: 'listening', addr, node: nodeId, pid: process.pid, redis: redisURL, prefix }));
  });

  const shutdown = () => {
    io.close();
    Promise.allSettled([redis.quit(), pub.quit(), sub.quit()]).finally(() => process.exit(0));
    setTimeout(() => process.exit(0), 3000).unref();
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
}

main().catch((err) => {
  console.error('bench/server.js:', err);
  process.exit(1);
});
