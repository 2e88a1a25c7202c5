package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/zishang520/socket.io/parsers/socket/v3/parser"
	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/adapter"
	"github.com/presenced/presenced/admin"

	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/metrics"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/server"
	"github.com/presenced/presenced/store"
)

// parseRedisURL reads the three REDIS_URL forms of CONTRACT §4.
func parseRedisURL(raw string) (*redis.UniversalOptions, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, errors.New("not a URL")
	}
	switch scheme {
	case "redis", "rediss":
		o, err := redis.ParseURL(raw)
		if err != nil {
			return nil, errors.New("bad redis URL (redis://[user:pass@]host:port[/db])")
		}
		return universal(o), nil
	case "redis+cluster", "redis+sentinel":
	default:
		return nil, errors.New("scheme must be redis, rediss, redis+cluster or redis+sentinel")
	}
	// The host list (a,b,c) is not a valid URL host: split by hand.
	var user, pass string
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		info := rest[:at]
		rest = rest[at+1:]
		u, p, _ := strings.Cut(info, ":")
		var err1, err2 error
		user, err1 = url.PathUnescape(u)
		pass, err2 = url.PathUnescape(p)
		if err1 != nil || err2 != nil {
			return nil, errors.New("bad user info")
		}
	}
	hosts, path, _ := strings.Cut(rest, "/")
	addrs, err := hostList(hosts)
	if err != nil {
		return nil, err
	}
	if scheme == "redis+cluster" {
		if path != "" {
			return nil, errors.New("redis+cluster:// takes no path")
		}
		return &redis.UniversalOptions{Addrs: addrs, Username: user, Password: pass, IsClusterMode: true}, nil
	}
	if path == "" || strings.Contains(path, "/") {
		return nil, errors.New("redis+sentinel:// needs /<master name> after the sentinel addresses")
	}
	return &redis.UniversalOptions{Addrs: addrs, MasterName: path, Username: user, Password: pass}, nil
}

// clusterStateReload is how old a Redis Cluster client's slot map may get
// before a command reloads it (CLUSTER SLOTS, in the background). The
// client reloads it on a MOVED reply, but not when a master cannot be
// reached: with its default (60 s) the nodes kept sending to a master
// that had died for up to a minute after its replica took over (4 s), every
// command failed meanwhile, and a node that came back first reaped the
// other, live one (failover audit). A reload is one small command.
const clusterStateReload = time.Second

// newRedisClient is redis.NewUniversalClient, with a Redis Cluster
// client whose slot map follows a failover within clusterStateReload.
func newRedisClient(opts *redis.UniversalOptions) redis.UniversalClient {
	if opts.MasterName == "" && (opts.IsClusterMode || len(opts.Addrs) > 1) {
		co := opts.Cluster()
		co.ClusterStateReloadInterval = clusterStateReload
		return redis.NewClusterClient(co)
	}
	return redis.NewUniversalClient(opts)
}

// redisAnswers is the readiness check of Redis: a PING answered, by every
// master of a Redis Cluster (a PING goes to any one node: with the master
// of the node leases down, /readyz said ok while every command failed).
func redisAnswers(ctx context.Context, rdb redis.UniversalClient) error {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() })
	}
	return rdb.Ping(ctx).Err()
}

// universal carries every option redis.ParseURL reads into the options of
// a universal client: the address, credentials, database and TLS, and the
// query options (pool_size, dial_timeout, read_timeout, max_retries, …).
func universal(o *redis.Options) *redis.UniversalOptions {
	return &redis.UniversalOptions{
		Addrs:                   []string{o.Addr},
		ClientName:              o.ClientName,
		Protocol:                o.Protocol,
		Username:                o.Username,
		Password:                o.Password,
		DB:                      o.DB,
		TLSConfig:               o.TLSConfig,
		MaxRetries:              o.MaxRetries,
		MinRetryBackoff:         o.MinRetryBackoff,
		MaxRetryBackoff:         o.MaxRetryBackoff,
		DialTimeout:             o.DialTimeout,
		ReadTimeout:             o.ReadTimeout,
		WriteTimeout:            o.WriteTimeout,
		PoolFIFO:                o.PoolFIFO,
		PoolSize:                o.PoolSize,
		PoolTimeout:             o.PoolTimeout,
		MinIdleConns:            o.MinIdleConns,
		MaxIdleConns:            o.MaxIdleConns,
		MaxActiveConns:          o.MaxActiveConns,
		MaxConcurrentDials:      o.MaxConcurrentDials,
		PipelinePoolSize:        o.PipelinePoolSize,
		PipelineReadBufferSize:  o.PipelineReadBufferSize,
		PipelineWriteBufferSize: o.PipelineWriteBufferSize,
		ConnMaxIdleTime:         o.ConnMaxIdleTime,
		ConnMaxLifetime:         o.ConnMaxLifetime,
		ConnMaxLifetimeJitter:   o.ConnMaxLifetimeJitter,
	}
}

func hostList(h string) ([]string, error) {
	var out []string
	for _, a := range listItems(h) {
		if !strings.Contains(a, ":") {
			a += ":6379"
		}
		if _, p, _ := strings.Cut(a, ":"); p == "" {
			return nil, fmt.Errorf("bad address %q", a)
		} else if _, err := strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("bad port in %q", a)
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, errors.New("no host")
	}
	return out, nil
}

// app is one wired server process.
type app struct {
	cfg      Config
	log      *slog.Logger
	metrics  *metrics.Metrics
	store    store.Store
	rdb      redis.UniversalClient
	engine   presence.Engine
	pipeline *lastseen.Pipeline
	events   *presence.AsyncSink // the engine's events, delivered off the operations' path
	rooms    *handlers.Rooms
	sockets  *handlers.Sockets
	bus      presence.StatusBus
	subs     *handlers.Subscriptions
	srv      *server.Server
	admin    *admin.Panel // nil: no admin token
	closers  []func() error
}

// openStore opens PostgreSQL (DATABASE_URL) or the embedded file. The
// server's open (serving) migrates, and holds the embedded file for this
// process alone (a second server on it fails to start).
func openStore(ctx context.Context, cfg Config, log *slog.Logger, serving bool) (store.Store, error) {
	migrate := serving
	if cfg.DatabaseURL != "" {
		pg, err := store.OpenPostgres(ctx, cfg.DatabaseURL, store.PostgresConfig{SkipMigrate: !migrate, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("open PostgreSQL: %w", err)
		}
		return pg, nil
	}
	lite, err := store.OpenSQLite(ctx, cfg.DataPath, store.SQLiteConfig{SkipMigrate: !migrate, Exclusive: serving, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("open embedded store %s: %w", cfg.DataPath, err)
	}
	return lite, nil
}

// build wires every component; nothing listens yet.
func build(ctx context.Context, cfg Config, log *slog.Logger) (a *app, err error) {
	a = &app{cfg: cfg, log: log, metrics: metrics.New()}
	built := a // a is nil by the time an error return runs the defer
	defer func() {
		if err != nil {
			built.close()
		}
	}()

	verifier, _, err := newVerifier(ctx, cfg, log)
	if err != nil {
		return nil, err
	}

	st, err := openStore(ctx, cfg, log.With("component", "store"), true)
	if err != nil {
		return nil, err
	}
	a.store = st
	a.closers = append(a.closers, st.Close)
	ready := []server.Check{{Name: "store", Check: st.Ping}}

	a.rooms = handlers.NewRooms(cfg.TypingTTL, log.With("component", "rooms"))
	pcfg := presence.Config{
		NodeID:           cfg.NodeID,
		TTL:              cfg.TTL,
		TypingTTL:        cfg.TypingTTL,
		FlapGrace:        zeroOff(cfg.FlapGrace),
		AwayAfter:        cfg.AwayAfter,
		MaxConversations: cfg.MaxConversations,
		LeaseTTL:         cfg.NodeLease,
	}
	lcfg := lastseen.Config{
		Coarse:        cfg.LastSeenCoarse,
		FlushInterval: cfg.LastSeenFlush,
		FlushBatch:    cfg.LastSeenBatch,
		Retention:     cfg.LastSeenRetention,
		Log:           log.With("component", "lastseen"),
	}
	var buf lastseen.Buffer
	var perr error // Redis unreachable at start
	if cfg.RedisURL != "" {
		opts, _ := parseRedisURL(cfg.RedisURL)
		// Context deadlines bound each command: a stalled Redis fails fast.
		opts.ContextTimeoutEnabled = true
		// An outage shows at once instead of after retries: the adapter and
		// the engine fail fast and recover when Redis is back.
		opts.MaxRetries, opts.DialerRetries = 1, 1
		// Bursts of joins run many short commands at once: more
		// connections than the default 10 per CPU keep them from queueing
		// for one.
		opts.PoolSize = max(opts.PoolSize, 64)
		redis.SetLogger(newRedisLogger(log.With("component", "redis")))
		a.rdb = newRedisClient(opts)
		a.closers = append(a.closers, a.rdb.Close)
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		perr = a.rdb.Ping(pctx).Err()
		cancel()
		switch {
		case perr != nil && redisRefusedCredentials(perr):
			// reachable, but it refuses this node: the URL's user or
			// password (a docs audit, 2026-12-08: "not reachable" sent
			// the operator to the network)
			log.Error("redis refused this node's credentials at start (check the user and password in REDIS_URL); will retry", "err", perr)
		case perr != nil:
			log.Warn("redis not reachable at start; will retry", "err", perr)
		}
		ready = append(ready, server.Check{Name: "redis", Check: func(ctx context.Context) error { return redisAnswers(ctx, a.rdb) }})
		// (each node keeps the times it recorded past three flushes, to
		// record them again if Redis loses the buffer)
		buf = lastseen.NewRedis(a.rdb, lastseen.RedisConfig{Prefix: cfg.RedisPrefix, Keep: max(2*time.Minute, 3*cfg.LastSeenFlush), Log: log})
		lcfg.DirectActivity = true // activity costs Redis no entry (see DirectActivity)
	} else {
		buf = lastseen.NewMemory()
		// one node: its presence is in its memory, so it keeps the list
		// of its online users in the store for a crash (RecoverOnline)
		if k, ok := st.(store.OnlineKeeper); ok {
			lcfg.Online = k
		}
	}
	a.pipeline = lastseen.NewPipeline(buf, st, lcfg)
	a.metrics.Registry.MustRegister(a.pipeline.Collectors()...)

	// Room events (presence:join / leave, typing) go to the room as it is
	// when they happen, as Socket.IO's emit to a room does: a socket that
	// joins later has the user in its roster and must not be told again.
	// So they are emitted on the operation's path; that costs a join
	// little since a broadcast is encoded once and only queued on each
	// connection (transport.LocalAdapter). Deferred, they reached sockets
	// that had joined since: in a burst of joins, every member heard of
	// every other, twice the fan-out. Status publication and last-seen
	// records (store and Redis work) run after the operation has answered,
	// in order per user.
	sink, events := eventSinks(a.rooms.Sink(), a.pipeline.HandleEvents)
	a.events = events
	pcfg.Sink = sink
	a.closers = append(a.closers, func() error { // when serve did not run
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return events.Close(ctx)
	})
	if a.rdb != nil {
		eng := presence.NewRedisEngine(a.rdb, pcfg, presence.RedisConfig{Prefix: cfg.RedisPrefix, Log: log.With("component", "presence")})
		a.metrics.Registry.MustRegister(eng.Collectors()...)
		a.engine = eng
		if err := claimNodeID(ctx, eng, cfg, log, perr); err != nil {
			return nil, err
		}
		if err := checkPubSubMode(ctx, a.rdb, cfg, perr); err != nil {
			return nil, err
		}
	} else {
		a.engine = presence.NewMemoryEngine(presence.NewMemory(), pcfg)
	}

	var membership presence.Membership = presence.Open{}
	if cfg.Membership == "store" {
		membership = presence.NewCachedMembership(st, 5*time.Second, 0)
	}

	var versions lastseen.PrivacyVersions = lastseen.NewLocalVersions()
	if a.rdb != nil {
		rv := lastseen.NewRedisVersions(a.rdb, cfg.RedisPrefix)
		// the versions a new deployment lacks, made early (lookups cannot
		// keep the settings of buckets without one); in the background: a
		// node starts while Redis is unreachable, and lookups create them
		// then
		go func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = rv.Create(cctx, lastseen.AllPrivacyBuckets())
		}()
		versions = rv
	}
	reader := lastseen.NewReader(lastseen.ReaderDeps{Status: a.engine, Buffer: buf, Store: store.Coalesced(st),
		StoredMaxAge: min(30*time.Second, cfg.LastSeenRetention/4), Versions: versions})
	settings := lastseen.NewSettings(st, lastseen.SettingsConfig{})
	a.rooms.UseSettings(settings)
	if a.rdb != nil {
		a.bus = presence.NewRedisBus(a.rdb, cfg.RedisPrefix, log.With("component", "statusbus"))
	} else {
		a.bus = presence.NewLocalBus()
	}
	a.subs = handlers.NewSubscriptions(a.bus, reader, log.With("component", "subscriptions"))
	a.metrics.Registry.MustRegister(a.subs.Collectors()...)
	a.rooms.OnStatus(func(ctx context.Context, e presence.Event) {
		if err := a.bus.Publish(ctx, e); err != nil {
			log.Warn("status change not published", "user_id", e.UserID, "err", err)
		}
	})

	a.sockets = handlers.NewSockets(handlers.SessionConfig{
		NodeID:            cfg.NodeID,
		HeartbeatInterval: cfg.HeartbeatInterval,
		HeartbeatJitter:   zeroOff(cfg.HeartbeatJitter),
		TypingTTL:         cfg.TypingTTL,
		Limits:            cfg.EventLimits,
		MaxSocketsPerUser: zeroOff(cfg.MaxSocketsPerUser),
	}, handlers.SocketDeps{
		Log:           log.With("component", "sockets"),
		Metrics:       a.metrics,
		Engine:        a.engine,
		Membership:    membership,
		Rooms:         a.rooms,
		Viewers:       reader,
		Subscriptions: a.subs,
		Activity:      func(ctx context.Context, user string, at time.Time) { _ = a.pipeline.Record(ctx, user, at) },
	})
	a.closers = append(a.closers, func() error { a.sockets.Close(); return nil })
	var ioAdapter socket.AdapterConstructor
	if a.rdb != nil {
		// room events from other nodes can be lost (Regained): follow
		// what this node's sockets are shown
		a.rooms.FollowShown()
		// The adapter outlives the signal: the shutdown's disconnect work
		// still broadcasts through it; a.close() closes it at the end.
		b, err := adapter.New(context.WithoutCancel(ctx), a.rdb, adapter.Config{
			Prefix:               cfg.RedisPrefix,
			Sharded:              cfg.RedisSharded,
			Name:                 cfg.NodeID,
			AcceptClassicEmitter: true,
			Log:                  log,
			Observer:             metrics.AdapterObserver{M: a.metrics},
			Delivered:            func(origin string, p *parser.Packet) { a.sockets.RemoteBroadcast(origin, p.Data) },
			// presenced's own events (handlers.tellNodes) are answered by
			// presenced nodes alone: those holding a lease
			OwnEvents: handlers.OwnEvents,
			Peers: func(ctx context.Context) (int64, error) {
				leases, err := a.engine.(*presence.RedisEngine).Leases(ctx)
				return int64(len(leases)), err
			},
			// the notices sent while this node's subscription was lost
			// never come: check what they change against the store
			Regained: func(nsp string) {
				if nsp == "/" {
					a.sockets.ResyncAfterGap()
				}
			},
		})
		if err != nil {
			return nil, fmt.Errorf("cluster adapter: %w", err)
		}
		ioAdapter = b
		a.closers = append(a.closers, b.Close)
	}
	api := handlers.NewREST(handlers.RESTDeps{
		Log:          log.With("component", "rest"),
		Verifier:     verifier,
		ServiceToken: cfg.ServiceToken,
		Presences:    reader,
		Rosters:      a.engine,
		Store:        st,
		Membership:   membership,
		Settings:     settings,
		SettingSaved: reader.SettingChanged,
		PrivacyChanged: func(ctx context.Context, user string, v store.Visibility) {
			a.sockets.PrivacyChanged(ctx, user, v)
		},
		ContactsChanged: func(ctx context.Context, user string) {
			a.sockets.ContactsChanged(ctx, user)
		},
		Evict: func(ctx context.Context, conv string, users []string) error {
			return a.sockets.Evict(ctx, conv, users)
		},
		RateLimit:  cfg.RESTLimit,
		RateWindow: cfg.RESTWindow,
	})
	var adminHandler http.Handler
	if cfg.AdminToken != "" {
		if a.admin, err = newAdmin(cfg, a, reader, buf, ready); err != nil {
			return nil, err
		}
		adminHandler = a.admin.Handler()
	}
	a.srv, err = server.New(server.Config{
		PingInterval:    cfg.PingInterval,
		PingTimeout:     cfg.PingTimeout,
		MaxBuffer:       cfg.MaxBuffer,
		AllowEIO3:       cfg.AllowEIO3,
		CORSOrigins:     cfg.CORSOrigins,
		HandshakeLimit:  cfg.HandshakeLimit,
		HandshakeWindow: cfg.HandshakeWindow,
		TrustedProxies:  cfg.TrustedProxies,
		Parser:          cfg.Parser,
		MaxUnread:       cfg.MaxUnread,
		MaxUnreadAge:    cfg.MaxUnreadAge,
		ShutdownTimeout: cfg.ShutdownTimeout,
		Adapter:         ioAdapter,
	}, server.Deps{Log: log, Metrics: a.metrics, Verifier: verifier, Sockets: a.sockets, Ready: ready, API: api.Routes(), Admin: adminHandler})
	if err != nil {
		return nil, err
	}
	a.rooms.Bind(a.srv.IO())
	a.sockets.ListenEvictions()
	a.sockets.ListenAdmin()
	return a, nil
}

// claimNodeID takes the node id's lease before the node serves: a live node
// holding the id is a configuration error (exit 2). With Redis unreachable
// the claim waits for the first connection (the engine's Run then ends
// with presence.ErrNodeIDTaken if the id is taken).
func claimNodeID(ctx context.Context, eng *presence.RedisEngine, cfg Config, log *slog.Logger, pingErr error) error {
	if pingErr != nil {
		return nil
	}
	// a crashed previous process of this node holds the id until its lease lapses
	cctx, cancel := context.WithTimeout(ctx, cfg.NodeLease+5*time.Second)
	defer cancel()
	err := eng.Claim(cctx)
	switch {
	case errors.Is(err, presence.ErrNodeIDTaken):
		return nodeIDTaken(cfg)
	case err != nil:
		log.Warn("node id not claimed yet; claiming it at the first connection to redis", "err", err)
	}
	return nil
}

// redisRefusedCredentials reports whether err is Redis refusing the
// client's user or password (AUTH failed, or none given where one is
// needed).
func redisRefusedCredentials(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") ||
		strings.Contains(msg, "invalid username-password pair")
}

// checkPubSubMode refuses to start a node whose Pub/Sub mode
// (PRESENCE_REDIS_SHARDED) is not that of a live node of the cluster: the
// two would share the presence data and never hear each other's room
// events. A node started while Redis was unreachable is not checked here;
// its adapter logs an error once it finds such a node.
func checkPubSubMode(ctx context.Context, rdb redis.UniversalClient, cfg Config, pingErr error) error {
	if pingErr != nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	other, err := adapter.OtherMode(cctx, rdb, cfg.RedisPrefix, cfg.RedisSharded)
	if err != nil || other == "" {
		return nil // (unreachable now: the adapter checks again)
	}
	mode, theirs := adapter.ModeName(cfg.RedisSharded), adapter.ModeName(!cfg.RedisSharded)
	return &ConfigError{Setting: "PRESENCE_REDIS_SHARDED (--redis-sharded)", Value: strconv.FormatBool(cfg.RedisSharded),
		Err: fmt.Errorf("node %s of this cluster (PRESENCE_REDIS_PREFIX %q) uses %s pub/sub, this one %s: every node must use the same mode, or room events do not cross between them", other, cfg.RedisPrefix, theirs, mode)}
}

// nodeIDTaken is the configuration error of a duplicate node id.
func nodeIDTaken(cfg Config) error {
	return &ConfigError{Setting: "PRESENCE_NODE_ID (--node-id)", Value: cfg.NodeID,
		Err: fmt.Errorf("%w: give every node its own id", presence.ErrNodeIDTaken)}
}

func (a *app) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		if err := a.closers[i](); err != nil {
			a.log.Warn("close failed", "err", err)
		}
	}
	a.closers = nil
}

// zeroOff maps a setting whose 0 turns it off (PRESENCE_MAX_SOCKETS_PER_USER:
// no cap; PRESENCE_FLAP_GRACE, PRESENCE_HEARTBEAT_JITTER: none) to the
// packages' form of it, where 0 is unset (their default) and a negative
// value is off.
func zeroOff[T ~int | ~int64](v T) T {
	if v == 0 {
		return -1
	}
	return v
}

// eventSinks returns the engine's Sink (see build): room events go to
// rooms on the caller's path, right after the operation's ack
// (presence.AfterReply); status events go to rooms and to records (the
// last-seen pipeline, which reads nothing else) through the returned
// AsyncSink. Room events don't visit the workers: a typing change or a
// join woke one for nothing, a goroutine switch on every event's path.
func eventSinks(rooms, records presence.Sink) (presence.Sink, *presence.AsyncSink) {
	events := presence.NewAsyncSink(func(ctx context.Context, ev []presence.Event) {
		rooms(ctx, ev)
		records(ctx, ev)
	}, 0, 0)
	deferred := events.Sink()
	roomsAfterAck := presence.HeldForReply(rooms)
	return func(ctx context.Context, ev []presence.Event) {
		if room := roomEvents(ev); len(room) > 0 {
			roomsAfterAck(ctx, room)
		}
		if status := statusEvents(ev); len(status) > 0 {
			deferred(ctx, status)
		}
	}, events
}

// roomEvents are the events for conversation rooms (join, leave, typing);
// statusEvents the others. Each returns ev itself when all of it is of its
// kind.
func roomEvents(ev []presence.Event) []presence.Event {
	return eventsWhere(ev, func(e presence.Event) bool { return e.Kind != presence.EventStatus })
}

func statusEvents(ev []presence.Event) []presence.Event {
	return eventsWhere(ev, func(e presence.Event) bool { return e.Kind == presence.EventStatus })
}

func eventsWhere(ev []presence.Event, keep func(presence.Event) bool) []presence.Event {
	n := 0
	for _, e := range ev {
		if keep(e) {
			n++
		}
	}
	if n == len(ev) {
		return ev
	}
	out := make([]presence.Event, 0, n)
	for _, e := range ev {
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}
