// Package adapter is a Socket.IO adapter over Redis Pub/Sub for
// github.com/zishang520/socket.io/servers/socket/v3: rooms, broadcasts and
// cluster requests across every node of a cluster. It speaks the wire format
// of Node's @socket.io/redis-adapter 8.x byte for byte, classic
// (createAdapter: PUBLISH/PSUBSCRIBE) and sharded (createShardedAdapter:
// SPUBLISH/SSUBSCRIBE, Redis 7+), so Go and Node servers can share a cluster,
// and Emitter speaks the format of @socket.io/redis-emitter, so a backend
// reaches the clients of either.
//
// # Use
//
//	b, err := adapter.New(ctx, client, adapter.Config{Prefix: "presence"})
//	...
//	opts.SetAdapter(b)          // before socket.NewServer, or
//	io.SetAdapter(b)            // after it
//	...
//	io.Close(nil); b.Close()
//
// # Semantics
//
// Local delivery never waits for Redis: a broadcast is encoded, queued for
// Redis and delivered to this node's sockets at once. Messages are published
// in order by one goroutine, in pipelined batches; the queue is bounded
// (Config.MaxPendingPublishes) and a publish that cannot be made (queue full,
// Redis down or slower than Config.PublishTimeout) fails and is reported to
// Config.Observer, never retried. After a failure to reach Redis, publishes
// and cluster requests fail at once for a short, growing pause (up to 1s;
// see the Redis client options below).
// Subscriptions are re-established by the adapter itself when Redis comes
// back. On a Redis Cluster in classic mode, a node publishes through one
// master only, so that its messages keep their order across the cluster.
//
// Each node delivers a broadcast to its own matching sockets only, so a
// socket gets it exactly once; `except` rooms and the `local` flag are
// honoured. FetchSockets, ServerSideEmit with acknowledgements,
// BroadcastWithAck and AllRooms wait for as many answers as the server count
// says (PUBSUB NUMSUB of the request channel, or SHARDNUMSUB of the main
// channel in sharded mode, summed over the nodes of a Redis Cluster), for at
// most Config.RequestsTimeout. A server-side emit reaches the namespace's
// listeners with, when the sender wants an answer, a socket.Ack as last
// argument: call it with the answer as first element (only the first element
// travels, as in Node). Values arriving from other nodes are decoded the way
// encoding/json decodes: numbers are float64, objects map[string]any, arrays
// []any; binary is []byte.
//
// Connection state recovery is not supported across nodes (nor is it by
// Node's Redis adapter).
//
// # Redis client
//
// Any redis.UniversalClient of github.com/redis/go-redis/v9: *redis.Client
// (one server, or Sentinel through redis.NewFailoverClient) or
// *redis.ClusterClient. Options that matter:
//
//   - ContextTimeoutEnabled: true, so that PublishTimeout (and the request
//     timeouts) bound each round trip even when Redis stalls; without it a
//     command waits up to ReadTimeout/WriteTimeout (3s by default). The
//     adapter logs a warning when it is off.
//   - MaxRetries (default 3) and DialerRetries (default 5 dials, 100ms
//     apart): go-redis retries a command, and each dial, before giving up,
//     so with the defaults a publish during an outage fails only at
//     PublishTimeout, as a timeout. Recommended: MaxRetries: 1 and
//     DialerRetries: 1, so that an outage shows as a connection error within
//     milliseconds. A connection error opens the adapter's breaker at once
//     (two timed-out batches in a row do too): publishes and cluster
//     requests then fail at once with ErrRedisUnavailable for a short,
//     growing pause (100ms to 1s), after which Redis is tried again.
//   - DialTimeout bounds each reconnection attempt of the subscriptions.
//   - The subscriptions do not use the command pool (PoolSize): go-redis
//     opens one dedicated connection per subscription set — one per
//     namespace, and on a Redis Cluster in sharded mode one per master node
//     holding a subscribed channel. The adapter does not rely on go-redis's
//     own Pub/Sub reconnection: it replaces a broken connection and
//     subscribes again, channel by slot on a cluster (go-redis would
//     resubscribe all shard channels in one SSUBSCRIBE, which a cluster
//     refuses with CROSSSLOT).
//
// # Interoperability notes
//
// This library's socket ids are 24 characters long, Node's 20. The sharded
// protocol sends a broadcast to a single room on that room's own channel
// unless the room name is 20 characters long (taken for a socket id), so a
// Node server emitting to one socket of a Go server (remoteSocket.emit) uses
// the socket's room channel: in sharded mode this adapter therefore also
// subscribes to the room channel of each of its sockets.
//
// @socket.io/redis-emitter only speaks the classic protocol (PUBLISH). In
// sharded mode, Config.AcceptClassicEmitter makes this adapter listen to it
// too; Emitter with EmitterConfig.Sharded speaks the sharded protocol (with
// the uid "emitter" socket.io-adapter reserves for emitters), which Node's
// sharded adapter accepts.
package adapter
