// A Node Socket.IO 4 server with @socket.io/redis-adapter, driven by the Go
// interop tests of package adapter (adapter/interop_test.go).
//
// Environment: REDIS_URL, PREFIX, MODE ("classic" | "sharded").
// stdout: one JSON object per line: {event:"ready", port, uid} once, then
// {event:"sse", name, args} for each server-side emit received, and
// {id, result} / {id, error} answering each command read from stdin
// ({id, cmd, ...params}, one per line). Binary values travel as {$bin: base64}.
// The process exits when stdin closes.
import { createServer } from "node:http";
import readline from "node:readline";
import { Server } from "socket.io";
import { createAdapter, createShardedAdapter } from "@socket.io/redis-adapter";
import { Emitter } from "@socket.io/redis-emitter";
import { createClient } from "redis";
import msgpack from "notepack.io";

const { REDIS_URL, PREFIX, MODE } = process.env;

const out = (obj) => process.stdout.write(JSON.stringify(toWire(obj)) + "\n");

function toWire(v) {
  if (Buffer.isBuffer(v) || v instanceof Uint8Array) return { $bin: Buffer.from(v).toString("base64") };
  if (v instanceof ArrayBuffer) return { $bin: Buffer.from(v).toString("base64") };
  if (Array.isArray(v)) return v.map(toWire);
  if (v instanceof Set) return [...v].map(toWire);
  if (v && typeof v === "object" && !(v instanceof Date)) {
    const o = {};
    for (const [k, e] of Object.entries(v)) o[k] = toWire(e);
    return o;
  }
  return v;
}

function fromWire(v) {
  if (Array.isArray(v)) return v.map(fromWire);
  if (v && typeof v === "object") {
    if (typeof v.$bin === "string") return Buffer.from(v.$bin, "base64");
    if (typeof v.$date === "string") return new Date(v.$date);
    const o = {};
    for (const [k, e] of Object.entries(v)) o[k] = fromWire(e);
    return o;
  }
  return v;
}

const pub = createClient({ url: REDIS_URL });
const sub = pub.duplicate();
pub.on("error", () => {});
sub.on("error", () => {});
await Promise.all([pub.connect(), sub.connect()]);

const adapter =
  MODE === "sharded"
    ? createShardedAdapter(pub, sub, { channelPrefix: PREFIX })
    : createAdapter(pub, sub, { key: PREFIX, requestsTimeout: 3000 });

const httpServer = createServer();
const io = new Server(httpServer, { adapter, serveClient: false });
const emitter = new Emitter(pub, { key: PREFIX });

io.on("connection", (socket) => {
  const auth = socket.handshake.auth || {};
  if (auth.user) socket.join("user:" + auth.user);
  for (const r of auth.rooms || []) socket.join(r);
  socket.data = { user: auth.user, node: "node" };
  socket.on("join", (room, cb) => {
    socket.join(room);
    if (typeof cb === "function") cb("ok");
  });
});

io.on("note", (...args) => out({ event: "sse", name: "note", args }));
io.on("echo", (arg, cb) => cb(arg));
io.on("ping-sse", (arg, cb) => {
  out({ event: "sse", name: "ping-sse", args: [arg] });
  if (typeof cb === "function") cb({ from: "node", got: arg });
});

function operator(base, { rooms = [], except = [] }) {
  let op = base;
  if (rooms.length) op = op.to(rooms);
  if (except.length) op = op.except(except);
  return op;
}

const handlers = {
  uid: async () => io.of("/").adapter.uid,
  serverCount: async () => io.of("/").adapter.serverCount(),
  localRooms: async () => [...io.of("/").adapter.rooms.keys()],
  allRooms: async () => [...(await io.of("/").adapter.allRooms())],
  broadcast: async (p) => {
    operator(io, p).emit(p.event, ...fromWire(p.args || []));
    return true;
  },
  broadcastWithAck: async (p) => operator(io.timeout(p.timeout || 2000), p).emitWithAck(p.event, ...fromWire(p.args || [])),
  fetchSockets: async (p) => {
    const sockets = await operator(p.timeout ? io.timeout(p.timeout) : io, p).fetchSockets();
    return sockets.map((s) => ({ id: s.id, rooms: [...s.rooms], data: s.data, handshake: s.handshake }));
  },
  remoteEmit: async (p) => {
    const sockets = await io.fetchSockets();
    const s = sockets.find((x) => x.id === p.sid);
    if (!s) throw new Error("no socket " + p.sid);
    s.emit(p.event, ...fromWire(p.args || []));
    return true;
  },
  serverSideEmit: async (p) => {
    io.serverSideEmit(p.event, ...fromWire(p.args || []));
    return true;
  },
  serverSideEmitWithAck: async (p) => io.serverSideEmitWithAck(p.event, ...fromWire(p.args || [])),
  socketsJoin: async (p) => {
    io.in(p.target).socketsJoin(p.rooms);
    return true;
  },
  socketsLeave: async (p) => {
    io.in(p.target).socketsLeave(p.rooms);
    return true;
  },
  disconnectSockets: async (p) => {
    io.in(p.target).disconnectSockets(!!p.close);
    return true;
  },
  emitterEmit: async (p) => {
    operator(emitter, p).emit(p.event, ...fromWire(p.args || []));
    return true;
  },
  emitterSocketsJoin: async (p) => {
    emitter.in(p.target).socketsJoin(p.rooms);
    return true;
  },
  emitterServerSideEmit: async (p) => {
    emitter.serverSideEmit(p.event, ...fromWire(p.args || []));
    return true;
  },
  encode: async (p) => msgpack.encode(fromWire(p.value)),
  decode: async (p) => msgpack.decode(Buffer.from(p.b64, "base64")),
};

const rl = readline.createInterface({ input: process.stdin });
rl.on("line", async (line) => {
  let req;
  try {
    req = JSON.parse(line);
  } catch {
    return;
  }
  const fn = handlers[req.cmd];
  try {
    if (!fn) throw new Error("unknown command " + req.cmd);
    const result = await fn(req);
    out({ id: req.id, result: result === undefined ? null : result });
  } catch (e) {
    out({ id: req.id, error: String(e && e.message ? e.message : e) });
  }
});
rl.on("close", async () => {
  io.close();
  try {
    await Promise.all([pub.quit(), sub.quit()]);
  } catch {}
  process.exit(0);
});

httpServer.listen(0, "127.0.0.1", () => {
  out({ event: "ready", port: httpServer.address().port, uid: io.of("/").adapter.uid });
});
