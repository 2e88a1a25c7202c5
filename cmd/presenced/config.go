package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/store"
)

// Config is the validated configuration of one process (CONTRACT §4).
type Config struct {
	Addr                string
	JWTSecret           string
	JWKSURL             string
	JWTAudience         []string // accepted aud values; empty: not checked
	JWTIssuer           string   // required iss; empty: not checked
	ServiceToken        string
	AdminToken          string
	AdminTokenGenerated bool // dev mode made AdminToken: the banner may print it
	CORSOrigins         []string
	RedisURL            string
	DatabaseURL         string
	DataPath            string
	NodeID              string
	NodeLease           time.Duration
	PingInterval        time.Duration
	PingTimeout         time.Duration
	HeartbeatInterval   time.Duration
	HeartbeatJitter     time.Duration
	TypingTTL           time.Duration
	TTL                 time.Duration
	FlapGrace           time.Duration
	AwayAfter           time.Duration
	MaxConversations    int
	MaxSocketsPerUser   int    // 0: no cap
	Membership          string // store | open
	RedisPrefix         string
	RedisSharded        bool
	LastSeenCoarse      time.Duration
	LastSeenFlush       time.Duration
	LastSeenBatch       int
	LastSeenRetention   time.Duration
	RESTLimit           int
	RESTWindow          time.Duration
	MaxBuffer           int64
	AllowEIO3           bool
	HandshakeLimit      int
	EventLimits         handlers.EventLimits
	HandshakeWindow     time.Duration
	TrustedProxies      []netip.Prefix
	Parser              string        // json | msgpack
	MaxUnread           int64         // -1: no bound
	MaxUnreadAge        time.Duration // -1: no bound
	ShutdownTimeout     time.Duration
	LogFormat           string // text | json
	LogLevel            string // debug | info | warn | error
	DebugAddr           string // pprof listener; empty: off
	GCHeadroom          int    // percent of the live heap (gc.go); 0: off
	SysmonSteady        bool   // sysmon.go

	// DevMode: none of PRESENCE_JWT_SECRET, PRESENCE_JWKS_URL, REDIS_URL,
	// DATABASE_URL set (CONTRACT §4).
	DevMode bool
}

// setting is one row of the configuration table: an environment variable,
// its flag (the variable's name in kebab case, without PRESENCE_), its
// default and how to store it.
type setting struct {
	env   string
	def   string
	help  string
	apply func(c *Config, v string) error
}

func (s setting) flag() string { return settingFlag(s.env) }

// defaultDataPath is PRESENCE_DATA's default.
const defaultDataPath = "./presenced.db"

// settingFlag is an environment variable's flag: its name in kebab case,
// without PRESENCE_.
func settingFlag(env string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(env, "PRESENCE_")), "_", "-")
}

func str(dst func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *dst(c) = v; return nil }
}

// checkListenAddr checks a listen address's form, host:port (the host may
// be empty; the port a number from 0 to 65535 or a service name), so that
// a typo is a configuration error, not a failure to listen.
func checkListenAddr(v string) error {
	const form = "must be host:port or :port (such as :3000 or 127.0.0.1:3000)"
	host, port, err := net.SplitHostPort(v)
	if err != nil || port == "" {
		return errors.New(form)
	}
	if strings.ContainsAny(host, " /") {
		return errors.New(form)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("%s: port %q is neither a number from 0 to 65535 nor a known service", form, port)
	}
	return nil
}

func dur(dst func(*Config) *time.Duration, min time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("not a duration (use Go syntax such as 45s or 10m)")
		}
		if d < min {
			return fmt.Errorf("must be at least %s", min)
		}
		*dst(c) = d
		return nil
	}
}

func boolean(dst func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New("must be true or false")
		}
		*dst(c) = b
		return nil
	}
}

// whole stores a whole number from min to max; msg says so.
func whole(dst func(*Config) *int, min, max int, msg string) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < min || n > max {
			return errors.New(msg)
		}
		*dst(c) = n
		return nil
	}
}

// oneOf stores one of values ("" among them: the setting may be empty).
func oneOf(dst func(*Config) *string, values ...string) func(*Config, string) error {
	named := slices.DeleteFunc(slices.Clone(values), func(v string) bool { return v == "" })
	msg := "must be " + named[len(named)-1]
	if len(named) > 1 {
		msg = "must be " + strings.Join(named[:len(named)-1], ", ") + " or " + named[len(named)-1]
	}
	return func(c *Config, v string) error {
		if !slices.Contains(values, v) {
			return errors.New(msg)
		}
		*dst(c) = v
		return nil
	}
}

// serverURL stores a URL of one of schemes with a host, or nothing when
// empty; msg says what it must be.
func serverURL(dst func(*Config) *string, msg string, schemes ...string) func(*Config, string) error {
	return func(c *Config, v string) error {
		if v == "" {
			return nil
		}
		u, err := url.Parse(v)
		if err != nil || !slices.Contains(schemes, u.Scheme) || u.Host == "" {
			return errors.New(msg)
		}
		*dst(c) = v
		return nil
	}
}

// listItems are the non-empty items of a comma-separated list, trimmed.
func listItems(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// settings is every setting of this build; later features add rows.
var settings = []setting{
	{"PRESENCE_ADDR", ":3000", "listen address", func(c *Config, v string) error {
		if err := checkListenAddr(v); err != nil {
			return err
		}
		c.Addr = v
		return nil
	}},
	{"PRESENCE_JWT_SECRET", "", "HS256 secret for client tokens (at least 16 bytes); dev mode generates one", str(func(c *Config) *string { return &c.JWTSecret })},
	{"PRESENCE_JWKS_URL", "", "verify RS256/ES256 tokens with keys from this JWKS URL instead",
		serverURL(func(c *Config) *string { return &c.JWKSURL }, "must be an http(s) URL", "http", "https")},
	{"PRESENCE_JWT_AUDIENCE", "", "required aud of client tokens (comma-separated: any one of them); unset: aud is not checked", func(c *Config, v string) error {
		c.JWTAudience = listItems(v)
		return nil
	}},
	{"PRESENCE_JWT_ISSUER", "", "required iss of client tokens; unset: iss is not checked", str(func(c *Config) *string { return &c.JWTIssuer })},
	{"PRESENCE_SERVICE_TOKEN", "", "bearer token for /v1/service/* (routes off without it; at least 16 bytes)", str(func(c *Config) *string { return &c.ServiceToken })},
	{"PRESENCE_ADMIN_TOKEN", "", "admin panel login token (/admin; panel off without it, except in dev mode where one is generated and printed)", str(func(c *Config) *string { return &c.AdminToken })},
	{"PRESENCE_CORS_ORIGINS", "", "comma-separated browser origins allowed (\"*\" for any); default: localhost origins in dev mode, none otherwise", func(c *Config, v string) error {
		c.CORSOrigins = nil
		for _, o := range listItems(v) {
			if o != "*" {
				u, err := url.Parse(o)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
					return fmt.Errorf("%q is not an origin (scheme://host[:port]) or *", o)
				}
			}
			c.CORSOrigins = append(c.CORSOrigins, o)
		}
		return nil
	}},
	{"REDIS_URL", "", "Redis: turns on cluster mode (needs DATABASE_URL). redis://[user:pass@]host:port[/db] (rediss:// for TLS), redis+cluster://host:port[,host:port…], redis+sentinel://host:port[,host:port…]/<master>", func(c *Config, v string) error {
		if v == "" {
			return nil
		}
		if _, err := parseRedisURL(v); err != nil {
			return err
		}
		c.RedisURL = v
		return nil
	}},
	{"PRESENCE_REDIS_PREFIX", "presence", "prefix of every Redis key and channel", func(c *Config, v string) error {
		if v == "" || strings.ContainsAny(v, " {}*?[]") || len(v) > 64 {
			return errors.New("must be 1-64 characters without spaces, braces or glob characters")
		}
		c.RedisPrefix = v
		return nil
	}},
	{"PRESENCE_REDIS_SHARDED", "false", "use sharded pub/sub (SPUBLISH/SSUBSCRIBE, Redis 7+); every node of a cluster the same (a node that finds a live node of the other mode refuses to start)", boolean(func(c *Config) *bool { return &c.RedisSharded })},
	{"DATABASE_URL", "", "PostgreSQL URL (postgres://user:pass@host:port/db); default: the embedded store file PRESENCE_DATA",
		func(c *Config, v string) error {
			if err := serverURL(func(c *Config) *string { return &c.DatabaseURL }, "must be a postgres:// URL", "postgres", "postgresql")(c, v); err != nil || v == "" {
				return err
			}
			return store.CheckPostgresURL(v) // its parameters (sslmode, pool_max_conns, …)
		}},
	{"PRESENCE_DATA", defaultDataPath, "embedded store file (one server per file); the dev-mode secret is kept beside it", func(c *Config, v string) error {
		if v == "" {
			return errors.New("must not be empty")
		}
		c.DataPath = v
		return nil
	}},
	{"PRESENCE_NODE_ID", "", "this node's name (default: hostname + random suffix)", func(c *Config, v string) error {
		if len(v) > 128 {
			return errors.New("longer than 128 characters")
		}
		c.NodeID = v
		return nil
	}},
	{"PRESENCE_NODE_LEASE", "5s", "cluster mode: a node that stops renewing its lease this long is dead and its users are evicted (crash cleanup takes about this plus 1s)", dur(func(c *Config) *time.Duration { return &c.NodeLease }, time.Second)},
	{"PRESENCE_PING_INTERVAL", "25s", "Engine.IO ping interval (with the timeout at most 596h31m23s: clients wait with a JavaScript timer)", dur(func(c *Config) *time.Duration { return &c.PingInterval }, 100*time.Millisecond)},
	{"PRESENCE_PING_TIMEOUT", "20s", "Engine.IO ping timeout (see the interval)", dur(func(c *Config) *time.Duration { return &c.PingTimeout }, 100*time.Millisecond)},
	{"PRESENCE_HEARTBEAT_INTERVAL", "15s", "heartbeat interval hinted to clients", dur(func(c *Config) *time.Duration { return &c.HeartbeatInterval }, 100*time.Millisecond)},
	{"PRESENCE_HEARTBEAT_JITTER", "5s", "random jitter added to the heartbeat hint (0: none)", dur(func(c *Config) *time.Duration { return &c.HeartbeatJitter }, 0)},
	{"PRESENCE_TYPING_TTL", "5s", "typing indicator lifetime", dur(func(c *Config) *time.Duration { return &c.TypingTTL }, 100*time.Millisecond)},
	{"PRESENCE_TTL", "45s", "presence entry lifetime without refresh", dur(func(c *Config) *time.Duration { return &c.TTL }, time.Second)},
	{"PRESENCE_AWAY_AFTER", "5m", "status turns away after this long without activity", dur(func(c *Config) *time.Duration { return &c.AwayAfter }, time.Second)},
	{"PRESENCE_FLAP_GRACE", "3s", "a reconnect within this long emits no leave, join or status change (0: none)", dur(func(c *Config) *time.Duration { return &c.FlapGrace }, 0)},
	{"PRESENCE_MAX_CONVERSATIONS", "100", "conversations one socket may join",
		whole(func(c *Config) *int { return &c.MaxConversations }, 1, 100000, "must be a whole number from 1 to 100000")},
	{"PRESENCE_MAX_SOCKETS_PER_USER", "20", "sockets one user may have open across the cluster; beyond, connect_error unauthorized (too many connections); 0 = no cap",
		whole(func(c *Config) *int { return &c.MaxSocketsPerUser }, 0, 100000, "must be a whole number from 0 (no cap) to 100000")},
	{"PRESENCE_MEMBERSHIP", "", "who may join a conversation: store (members in the store) or open (anyone authenticated); default store, open in dev mode",
		oneOf(func(c *Config) *string { return &c.Membership }, "", "store", "open")},
	{"PRESENCE_LASTSEEN_COARSE", "10m", "at most one activity record per user per interval", dur(func(c *Config) *time.Duration { return &c.LastSeenCoarse }, time.Second)},
	{"PRESENCE_LASTSEEN_FLUSH_INTERVAL", "30s", "how often buffered last-seen times (and, with Redis, each node's activity records) are written to the store", dur(func(c *Config) *time.Duration { return &c.LastSeenFlush }, 100*time.Millisecond)},
	{"PRESENCE_LASTSEEN_FLUSH_BATCH", "1000", "users written per store statement",
		whole(func(c *Config) *int { return &c.LastSeenBatch }, 1, 10000, "must be a whole number from 1 to 10000")},
	{"PRESENCE_LASTSEEN_RETENTION", "168h", "buffered last-seen times older than this are dropped from Redis once stored", dur(func(c *Config) *time.Duration { return &c.LastSeenRetention }, time.Minute)},
	{"PRESENCE_REST_LIMIT", "600/1m", "REST requests per user per window, as N/duration", func(c *Config, v string) error {
		n, d, err := parseLimit(v)
		if err != nil {
			return err
		}
		c.RESTLimit, c.RESTWindow = n, d
		return nil
	}},
	{"PRESENCE_MAX_BUFFER", "100KB", "Engine.IO maxHttpBufferSize (bytes, or with KB/MB suffix; 1KB = 1024 bytes)", func(c *Config, v string) error {
		n, err := parseSize(v)
		if err != nil {
			return err
		}
		if n < 1024 {
			return errors.New("must be at least 1KB")
		}
		c.MaxBuffer = n
		return nil
	}},
	{"PRESENCE_MAX_UNREAD", "1MB", "outbound bytes a socket's client may leave unread before it is disconnected (bytes, or with KB/MB suffix; 0: no bound)", func(c *Config, v string) error {
		if v == "0" {
			c.MaxUnread = -1
			return nil
		}
		n, err := parseSize(v)
		if err != nil {
			return err
		}
		if n < 64<<10 {
			return errors.New("must be at least 64KB, or 0 for no bound")
		}
		c.MaxUnread = n
		return nil
	}},
	{"PRESENCE_MAX_UNREAD_AGE", "30s", "longest a socket's outbound data may wait unread before it is disconnected, whatever the client sends; also each websocket write's deadline (0: no bound)", func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			return errors.New("must be a duration such as 30s")
		case d == 0:
			c.MaxUnreadAge = -1
		case d < time.Second:
			return errors.New("must be at least 1s, or 0 for no bound")
		default:
			c.MaxUnreadAge = d
		}
		return nil
	}},
	{"PRESENCE_PARSER", "json", "Socket.IO parser: json (the default parser) or msgpack (socket.io-msgpack-parser, as in socket.io.msgpack.min.js); every client of the server must use the same",
		oneOf(func(c *Config) *string { return &c.Parser }, "json", "msgpack")},
	{"PRESENCE_ALLOW_EIO3", "false", "also accept Engine.IO v3 clients (socket.io-client 2.x; their token: the query parameter token)", boolean(func(c *Config) *bool { return &c.AllowEIO3 })},
	{"PRESENCE_HANDSHAKE_LIMIT", "100/10s", "new connections allowed per client IP per window, as N/duration; 0 turns the limit off", func(c *Config, v string) error {
		if v == "0" || v == "off" {
			c.HandshakeLimit = 0
			return nil
		}
		n, d, err := parseLimit(v)
		if err != nil {
			return err
		}
		c.HandshakeLimit, c.HandshakeWindow = n, d
		return nil
	}},
	eventLimit("PRESENCE_TYPING_LIMIT", "5/1s:10", "typing:start and typing:stop", func(l *handlers.EventLimits) *handlers.Limit { return &l.Typing }),
	eventLimit("PRESENCE_JOIN_LIMIT", "20/1s:200", "conversation:join and conversation:leave together", func(l *handlers.EventLimits) *handlers.Limit { return &l.Join }),
	eventLimit("PRESENCE_QUERY_LIMIT", "5/1s:10", "presence:query and presence:subscribe together", func(l *handlers.EventLimits) *handlers.Limit { return &l.Query }),
	eventLimit("PRESENCE_STATE_LIMIT", "30/1s:60", "state:set (its broadcasts are coalesced to 10/s)", func(l *handlers.EventLimits) *handlers.Limit { return &l.State }),
	eventLimit("PRESENCE_HEARTBEAT_LIMIT", "10/1s:20", "heartbeat", func(l *handlers.EventLimits) *handlers.Limit { return &l.Heartbeat }),
	eventLimit("PRESENCE_EVENT_LIMIT", "20/1s:50", "any other client event", func(l *handlers.EventLimits) *handlers.Limit { return &l.Other }),
	{"PRESENCE_TRUSTED_PROXIES", "", "comma-separated CIDRs (or addresses) of load balancers whose X-Forwarded-For is believed for per-IP limits and logs; from anyone else the header is ignored", func(c *Config, v string) error {
		c.TrustedProxies = nil
		for _, part := range listItems(v) {
			p, err := netip.ParsePrefix(part)
			if err != nil {
				a, aerr := netip.ParseAddr(part)
				if aerr != nil {
					return fmt.Errorf("%q is neither a CIDR nor an IP address", part)
				}
				p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
			}
			c.TrustedProxies = append(c.TrustedProxies, p.Masked())
		}
		return nil
	}},
	{"PRESENCE_SHUTDOWN_TIMEOUT", "20s", "longest graceful shutdown before exiting", dur(func(c *Config) *time.Duration { return &c.ShutdownTimeout }, time.Second)},
	{"PRESENCE_LOG_FORMAT", "", "text or json (default: text on a terminal, else json)",
		oneOf(func(c *Config) *string { return &c.LogFormat }, "", "text", "json")},
	{"PRESENCE_LOG_LEVEL", "info", "debug, info, warn or error",
		oneOf(func(c *Config) *string { return &c.LogLevel }, "debug", "info", "warn", "error")},
	{"PRESENCE_GC_HEADROOM", "25", "how far the Go heap may grow past its live part before a collection, in percent of the live heap but never under 32 MiB (at 25: from a live heap of 128 MiB up; below, GOGC 25 to 100 over 32 MiB live and up to 800 under it; while it grows, as in a connect burst, 100 too, and the memory is handed back when the burst ends); lower saves memory per connection and costs GC CPU; off, or GOGC set: GOGC decides", func(c *Config, v string) error {
		if v == "off" {
			c.GCHeadroom = 0
			return nil
		}
		return whole(func(c *Config) *int { return &c.GCHeadroom }, 10, 100, "must be a whole number from 10 to 100, or off")(c, strings.TrimSuffix(v, "%"))
	}},
	{"PRESENCE_SYSMON_STEADY", "true", "keep the Go runtime's system monitor waking at its slow pace while the node idles, instead of sleeping until the next event and then waking every 20 µs while the node works (the node re-executes itself with GODEBUG=schedtrace at its longest period, 24.8 days: at most one SCHED line on stderr in that time); at 100 and 500 typing changes/s on two nodes it halved their context switches and cut their CPU by 8-18 %; false, or schedtrace in GODEBUG: the runtime's own behaviour", boolean(func(c *Config) *bool { return &c.SysmonSteady })},
	{"PRESENCE_DEBUG_ADDR", "", "address of a listener serving Go's profiler at /debug/pprof/ (empty: off; keep it on loopback)", func(c *Config, v string) error {
		if v != "" {
			if err := checkListenAddr(v); err != nil {
				return err
			}
		}
		c.DebugAddr = v
		return nil
	}},
}

// ConfigError names the bad setting; main exits with code 2 on it.
type ConfigError struct {
	Setting string // "PRESENCE_TTL (--ttl)"
	Value   string
	Err     error
}

func (e *ConfigError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("invalid %s: %v", e.Setting, e.Err)
	}
	return fmt.Sprintf("invalid %s=%q: %v", e.Setting, e.Value, e.Err)
}

// bareBools gives a boolean setting's flag (default true or false) given
// bare the value true: --redis-sharded alone is --redis-sharded=true, as
// Go's bool flags are, while --redis-sharded false still reads its value.
// A flag is bare when the end of the arguments, or another flag, follows.
func bareBools(args []string) []string {
	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		a := out[i]
		if a == "--" || a == "-" || !strings.HasPrefix(a, "-") {
			break // the flags end here (as the flag package reads them)
		}
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		next := i+1 < len(out) && !strings.HasPrefix(out[i+1], "-")
		if boolFlags[name] && !next {
			out[i] = a + "=true"
			continue
		}
		if next {
			i++ // its value
		}
	}
	return out
}

// boolFlags are the flags of the boolean settings.
var boolFlags = func() map[string]bool {
	m := map[string]bool{}
	for _, s := range settings {
		if s.def == "true" || s.def == "false" {
			m[s.flag()] = true
		}
	}
	return m
}()

func (e *ConfigError) Unwrap() error { return e.Err }

// errUsage is returned after --help has been printed.
var errUsage = errors.New("usage")

// parseConfig reads every setting from its flag, else its environment
// variable, else its default, and validates the whole.
// extra registers a subcommand's own flags.
func parseConfig(name string, args []string, lookupEnv func(string) (string, bool), usageOut io.Writer, extra func(*flag.FlagSet)) (Config, []string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if extra != nil {
		extra(fs)
	}
	vals := make(map[string]*string, len(settings))
	for _, s := range settings {
		vals[s.env] = fs.String(s.flag(), "", s.help)
	}
	if err := fs.Parse(bareBools(args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			if u, ok := commandUsage[name]; ok {
				fmt.Fprint(usageOut, u)
			} else {
				printUsage(usageOut)
			}
			return Config{}, nil, errUsage
		}
		// (the arguments are not shown: they may hold secrets; the
		// error names the flag)
		return Config{}, nil, &ConfigError{Setting: "flags", Err: flagError(fs, err)}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := checkPresentButEmpty(lookupEnv, vals, set); err != nil {
		return Config{}, nil, err
	}

	var c Config
	for _, s := range settings {
		v := s.def
		if set[s.flag()] {
			v = *vals[s.env]
		} else if e, ok := lookup(lookupEnv, s.env); ok {
			v = e
		}
		if err := s.apply(&c, strings.TrimSpace(v)); err != nil {
			shown := v
			switch s.env {
			case "REDIS_URL", "DATABASE_URL", "PRESENCE_JWKS_URL":
				shown = redact(v)
			case "PRESENCE_JWT_SECRET", "PRESENCE_SERVICE_TOKEN", "PRESENCE_ADMIN_TOKEN":
				shown = "(hidden)"
			}
			return Config{}, nil, &ConfigError{Setting: fmt.Sprintf("%s (--%s)", s.env, s.flag()), Value: shown, Err: err}
		}
	}
	if err := c.finish(name != "migrate" && name != "healthcheck"); err != nil {
		return Config{}, nil, err
	}
	return c, fs.Args(), nil
}

// flagError words a flag package error as users type flags: with two
// dashes (it wrote "-bogus" for --bogus), and with the form a value takes
// where the package says only "parse error".
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return fmt.Errorf("unknown flag --%s", strings.TrimPrefix(name, "-"))
	}
	m := flagValueError.FindStringSubmatch(msg)
	if m == nil {
		return err
	}
	out := fmt.Sprintf("invalid value %s for --%s", m[1], m[2])
	if f := fs.Lookup(m[2]); f != nil {
		if g, ok := f.Value.(flag.Getter); ok {
			if _, isDuration := g.Get().(time.Duration); isDuration {
				return errors.New(out + ": want a duration such as 90s, 15m or 24h")
			}
		}
	}
	return fmt.Errorf("%s: %s", out, m[3])
}

// flagValueError matches the flag package's error for a value it cannot
// parse.
var flagValueError = regexp.MustCompile(`^invalid (?:boolean )?value (".*") for (?:flag )?-(\S+): (.*)$`)

// lookup reads an environment variable; an empty one counts as unset,
// except for the four that choose dev mode (checkPresentButEmpty).
func lookup(lookupEnv func(string) (string, bool), key string) (string, bool) {
	v, ok := lookupEnv(key)
	return v, ok && v != ""
}

// devModeVars choose dev mode by their absence (CONTRACT §4).
var devModeVars = []string{"PRESENCE_JWT_SECRET", "PRESENCE_JWKS_URL", "REDIS_URL", "DATABASE_URL"}

// checkPresentButEmpty refuses a dev-mode variable (or its flag) that is
// present but empty: a deployment whose secret failed to render must not
// start an open, zero-configuration node (CONTRACT §4).
func checkPresentButEmpty(lookupEnv func(string) (string, bool), flags map[string]*string, set map[string]bool) error {
	for _, name := range devModeVars {
		flag := settingFlag(name)
		v, present := lookupEnv(name)
		if set[flag] {
			v, present = *flags[name], true
		}
		if present && strings.TrimSpace(v) == "" {
			return &ConfigError{Setting: fmt.Sprintf("%s (--%s)", name, flag), Value: "", Err: errors.New("is present but empty; unset it to run in dev mode, or give it a value")}
		}
	}
	return nil
}

// finish derives dev mode and checks settings against each other. The
// commands that check no token (migrate, healthcheck: verifies false) need
// no JWT secret outside dev mode.
func (c *Config) finish(verifies bool) error {
	c.DevMode = c.JWTSecret == "" && c.JWKSURL == "" && c.RedisURL == "" && c.DatabaseURL == ""
	if c.JWTSecret != "" && c.JWKSURL != "" {
		return &ConfigError{Setting: "PRESENCE_JWT_SECRET (--jwt-secret)", Value: "(hidden)", Err: errors.New("set either PRESENCE_JWT_SECRET or PRESENCE_JWKS_URL, not both")}
	}
	if c.JWTSecret != "" && len(c.JWTSecret) < 16 {
		return &ConfigError{Setting: "PRESENCE_JWT_SECRET (--jwt-secret)", Value: "(hidden)", Err: errors.New("must be at least 16 bytes")}
	}
	if verifies && !c.DevMode && c.JWTSecret == "" && c.JWKSURL == "" {
		return &ConfigError{Setting: "PRESENCE_JWT_SECRET (--jwt-secret)", Value: "", Err: errors.New("required outside dev mode (or set PRESENCE_JWKS_URL)")}
	}
	if c.RedisURL != "" && c.DatabaseURL == "" {
		return &ConfigError{Setting: "DATABASE_URL (--database-url)", Value: "", Err: errors.New("cluster mode (REDIS_URL set) needs PostgreSQL: durable data must be shared by every node")}
	}
	if c.Membership == "" {
		c.Membership = "store"
		if c.DevMode {
			c.Membership = "open"
		}
	}
	if c.AdminToken == "" && c.DevMode {
		c.AdminToken, c.AdminTokenGenerated = randomHex(16), true
	}
	if c.AdminToken != "" && len(c.AdminToken) < 16 {
		return &ConfigError{Setting: "PRESENCE_ADMIN_TOKEN (--admin-token)", Value: "(hidden)", Err: errors.New("must be at least 16 bytes")}
	}
	if c.ServiceToken != "" && len(strings.TrimSpace(c.ServiceToken)) < 16 {
		return &ConfigError{Setting: "PRESENCE_SERVICE_TOKEN (--service-token)", Value: "(hidden)", Err: errors.New("must be at least 16 bytes (not counting spaces)")}
	}
	if c.CORSOrigins == nil && c.DevMode {
		c.CORSOrigins = devOrigins
	}
	if c.NodeID == "" {
		c.NodeID = defaultNodeID()
	}
	// Clients wait for these with a JavaScript timer, whose longest delay
	// is 2^31-1 ms (about 596 hours); a longer one fires at once: with a
	// ping interval of 1000h every client timed out after 1 ms, and
	// reconnected, and again.
	if c.PingInterval+c.PingTimeout > maxClientTimer {
		return &ConfigError{Setting: "PRESENCE_PING_INTERVAL (--ping-interval)", Value: shortDuration(c.PingInterval),
			Err: fmt.Errorf("with PRESENCE_PING_TIMEOUT (%s) must be at most %s: clients wait for their sum with a JavaScript timer", shortDuration(c.PingTimeout), shortDuration(maxClientTimer.Truncate(time.Second)))}
	}
	if c.HeartbeatInterval+c.HeartbeatJitter > maxClientTimer {
		return &ConfigError{Setting: "PRESENCE_HEARTBEAT_INTERVAL (--heartbeat-interval)", Value: shortDuration(c.HeartbeatInterval),
			Err: fmt.Errorf("with PRESENCE_HEARTBEAT_JITTER (%s) must be at most %s: clients wait for the hint with a JavaScript timer", shortDuration(c.HeartbeatJitter), shortDuration(maxClientTimer.Truncate(time.Second)))}
	}
	return nil
}

// shortDuration writes d as a user writes it: 1000h, not 1000h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// maxClientTimer is the longest delay of a JavaScript timer (2^31-1 ms).
const maxClientTimer = (1<<31 - 1) * time.Millisecond

// devOrigins are allowed in dev mode when PRESENCE_CORS_ORIGINS is unset:
// pages on localhost at the usual front-end dev server ports, over http
// or https (a dev server with a local certificate).
var devOrigins = func() []string {
	var o []string
	for _, scheme := range []string{"http://", "https://"} {
		for _, host := range []string{"localhost", "127.0.0.1", "[::1]"} {
			for _, port := range []string{"", ":3000", ":3001", ":4200", ":5173", ":5174", ":8000", ":8080", ":8081", ":4173"} {
				o = append(o, scheme+host+port)
			}
		}
	}
	return o
}()

// parseLimit reads "N/duration" ("600/1m" or "5/s"); it takes no burst.
func parseLimit(v string) (int, time.Duration, error) {
	const form = "must be N/duration (such as 100/10s)"
	if strings.Contains(v, ":") {
		return 0, 0, errors.New(form + ", without a :burst (a fixed window: its N is the burst)")
	}
	n, w, ok := strings.Cut(v, "/")
	count, err := strconv.Atoi(n)
	if !ok || err != nil || count <= 0 {
		return 0, 0, errors.New(form)
	}
	d, err := limitWindow(w)
	if err != nil || d < time.Second {
		return 0, 0, errors.New("the window must be a duration of at least 1s")
	}
	return count, d, nil
}

// limitWindow reads a limit's window: a duration, or a unit alone ("s"
// for 1s).
func limitWindow(w string) (time.Duration, error) {
	if w == "ms" || w == "s" || w == "m" || w == "h" {
		w = "1" + w // "5/s"
	}
	return time.ParseDuration(w)
}

// eventLimit is the setting of one class of per-socket event limits.
func eventLimit(env, def, events string, dst func(*handlers.EventLimits) *handlers.Limit) setting {
	help := events + " per socket, as N/duration:burst (token bucket; burst defaults to N); 0 lifts the limit (load tests)"
	return setting{env, def, help, func(c *Config, v string) error {
		l, err := parseBucket(v)
		if err != nil {
			return err
		}
		*dst(&c.EventLimits) = l
		return nil
	}}
}

// parseBucket reads "N/duration[:burst]" ("5/1s:10" or "5/s:10": 5 per
// second sustained, 10 at once), or "0" / "off" for no limit.
func parseBucket(v string) (handlers.Limit, error) {
	if v == "0" || v == "off" {
		return handlers.NoLimit, nil
	}
	const form = "must be N/duration:burst (such as 5/1s:10), or 0 for no limit"
	rate, burst, hasBurst := strings.Cut(v, ":")
	n, w, ok := strings.Cut(rate, "/")
	count, err := strconv.Atoi(n)
	if !ok || err != nil || count <= 0 {
		return handlers.Limit{}, errors.New(form)
	}
	d, err := limitWindow(w)
	if err != nil || d < time.Millisecond {
		return handlers.Limit{}, errors.New("the window must be a duration of at least 1ms (such as 1s)")
	}
	b := count
	if hasBurst {
		if b, err = strconv.Atoi(burst); err != nil || b < 1 || b > 1000000 {
			return handlers.Limit{}, errors.New("the burst must be a whole number from 1 to 1000000")
		}
	}
	return handlers.Limit{Rate: float64(count) / d.Seconds(), Burst: b}, nil
}

// redact is a URL as an error may show it: its password, in the user
// info or as a password parameter (libpq's form), masked.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable)"
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

func defaultNodeID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "node"
	}
	return h + "-" + randomHex(3)
}

// parseSize reads "102400", "100KB", "100KiB", "1MB".
func parseSize(v string) (int64, error) {
	s := strings.ToUpper(strings.TrimSpace(v))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"K", 1 << 10}, {"M", 1 << 20}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("must be a size such as 102400, 100KB or 1MB")
	}
	if n > (1<<40)/mult {
		return 0, errors.New("too large")
	}
	return n * mult, nil
}

// commandUsage is the --help text of each command but serve (whose is
// printUsage's, with every setting): what the command does and the
// settings it reads. It accepts every setting's flag, as serve does.
var commandUsage = map[string]string{
	"token": `Usage: presenced token <userId> [--valid-for 24h] [flags]

Prints a client token for <userId> on stdout (HS256), valid for --valid-for.
It reads these settings (variables or flags, as the server does):
  --jwt-secret    PRESENCE_JWT_SECRET    the signing secret (in dev mode, without it:
                                         the generated dev secret beside PRESENCE_DATA)
  --data          PRESENCE_DATA          dev mode: which store's dev secret (default ./presenced.db)
  --jwt-audience  PRESENCE_JWT_AUDIENCE  the token's "aud": the first audience listed
  --jwt-issuer    PRESENCE_JWT_ISSUER    the token's "iss"
Every other setting's flag is accepted and ignored. presenced --help lists them all.
`,
	"migrate": `Usage: presenced migrate [up|status] [flags]

Applies the schema migrations (up, the default) or shows which are applied
(status), on DATABASE_URL (--database-url), else on the embedded store at
PRESENCE_DATA (--data, default ./presenced.db). A node applies them itself when it
starts; this runs them once before the nodes (docker-compose.yml does).
presenced --help lists every setting.
`,
	"healthcheck": `Usage: presenced healthcheck [--addr :3000] [flags]

Exits 0 if the server on this host answers /healthz on the port of
PRESENCE_ADDR (--addr), 1 if not: for a container's health check.
presenced --help lists every setting.
`,
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `presenced — a Socket.IO presence server

Usage:
  presenced [serve] [flags]            run the server (the default)
  presenced token <userId> [--valid-for 24h]
                                       print a client token signed with PRESENCE_JWT_SECRET
                                       (in dev mode: the generated dev secret)
  presenced migrate [up|status]        apply the schema / show it (DATABASE_URL, else PRESENCE_DATA)
  presenced healthcheck [--addr :3000] exit 0 if this host's server answers /healthz
  presenced --help                     this text

Every setting is an environment variable and a flag of the same name in kebab
case (PRESENCE_TYPING_TTL <-> --typing-ttl); a flag wins over the variable.
Durations use Go syntax (45s, 10m). A true/false flag given alone is true
(--redis-sharded is --redis-sharded=true).

Settings:
`)
	for _, s := range settings {
		def := s.def
		if def == "" {
			def = "-"
		}
		fmt.Fprintf(w, "  --%-25s %-33s default %s\n      %s\n", s.flag(), s.env, def, s.help)
	}
	fmt.Fprint(w, `
Dev mode: with none of PRESENCE_JWT_SECRET, PRESENCE_JWKS_URL, REDIS_URL and
DATABASE_URL present, the server runs one node in memory with a generated
secret kept beside PRESENCE_DATA, and prints how to mint a token. One of them
present but empty is a configuration error (exit 2), never dev mode.

Exit codes: 0 after a clean shutdown, 1 on a runtime error, 2 on bad configuration or usage.
`)
}
