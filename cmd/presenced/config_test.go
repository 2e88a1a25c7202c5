package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/presenced/presenced/auth"
	"github.com/redis/go-redis/v9"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// mustServeConfig is the serve configuration of args and the environment
// kv (name, value, …); it fails the test on an error.
func mustServeConfig(t *testing.T, args []string, kv ...string) Config {
	t.Helper()
	c, _, err := parseConfig("serve", args, env(kv...), &bytes.Buffer{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestParseConfigDefaults(t *testing.T) {
	c, rest, err := parseConfig("serve", nil, env(), &bytes.Buffer{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 0 {
		t.Fatalf("rest = %v", rest)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"addr", c.Addr, ":3000"},
		{"dev mode", c.DevMode, true},
		{"data", c.DataPath, "./presenced.db"},
		{"ping interval", c.PingInterval, 25 * time.Second},
		{"ping timeout", c.PingTimeout, 20 * time.Second},
		{"heartbeat interval", c.HeartbeatInterval, 15 * time.Second},
		{"heartbeat jitter", c.HeartbeatJitter, 5 * time.Second},
		{"typing ttl", c.TypingTTL, 5 * time.Second},
		{"max buffer", c.MaxBuffer, int64(100 << 10)},
		{"eio3", c.AllowEIO3, false},
		{"handshake limit", c.HandshakeLimit, 100},
		{"handshake window", c.HandshakeWindow, 10 * time.Second},
		{"shutdown timeout", c.ShutdownTimeout, 20 * time.Second},
		{"log level", c.LogLevel, "info"},
		{"gc headroom", c.GCHeadroom, 25},
		{"sysmon steady", c.SysmonSteady, true},
		{"dev origins", slices.Contains(c.CORSOrigins, "http://localhost:5173"), true},
		{"dev origins over https", slices.Contains(c.CORSOrigins, "https://localhost:5173"), true},
		{"no dev origin elsewhere", slices.Contains(c.CORSOrigins, "https://localhost.example:5173"), false},
		{"node id set", c.NodeID != "", true},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: got %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

func TestParseConfigPrecedence(t *testing.T) {
	// flag > environment > default
	c, _, err := parseConfig("serve", []string{"--typing-ttl", "7s"},
		env("PRESENCE_TYPING_TTL", "3s", "PRESENCE_PING_INTERVAL", "2s", "PRESENCE_JWT_SECRET", "0123456789abcdef"), &bytes.Buffer{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.TypingTTL, 7*time.Second; got != want {
		t.Errorf("typing ttl: got %v, want %v (flag wins)", got, want)
	}
	if got, want := c.PingInterval, 2*time.Second; got != want {
		t.Errorf("ping interval: got %v, want %v (env wins over default)", got, want)
	}
	if c.DevMode {
		t.Error("a JWT secret must turn dev mode off")
	}
	if c.CORSOrigins != nil {
		t.Errorf("outside dev mode no origin is allowed by default, got %v", c.CORSOrigins)
	}
}

func TestParseConfigValues(t *testing.T) {
	c, _, err := parseConfig("serve", []string{
		"--max-buffer", "1MB", "--handshake-limit", "5/2s", "--cors-origins", "https://a.example, http://b.example:8080",
		"--allow-eio3", "true", "--log-format", "text",
	}, env(), &bytes.Buffer{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.MaxBuffer, int64(1<<20); got != want {
		t.Errorf("max buffer: got %d, want %d", got, want)
	}
	if c.HandshakeLimit != 5 || c.HandshakeWindow != 2*time.Second {
		t.Errorf("handshake limit: got %d/%v", c.HandshakeLimit, c.HandshakeWindow)
	}
	if got, want := c.CORSOrigins, []string{"https://a.example", "http://b.example:8080"}; !slices.Equal(got, want) {
		t.Errorf("origins: got %v, want %v", got, want)
	}
	if !c.AllowEIO3 || c.LogFormat != "text" {
		t.Errorf("eio3/log format: %v %q", c.AllowEIO3, c.LogFormat)
	}
	c, _, err = parseConfig("serve", []string{"--rest-limit", "5/s", "--ping-interval", "500h", "--ping-timeout", "96h"}, env(), &bytes.Buffer{}, nil)
	if err != nil || c.RESTLimit != 5 || c.RESTWindow != time.Second {
		t.Errorf("rest limit 5/s: %v %d/%s", err, c.RESTLimit, c.RESTWindow)
	}
	if err == nil && c.PingInterval+c.PingTimeout != 596*time.Hour {
		t.Errorf("ping interval and timeout of 596h in all: %s + %s", c.PingInterval, c.PingTimeout)
	}
	if _, _, err := parseConfig("serve", []string{"--rest-limit", "5/1s:3"}, env(), &bytes.Buffer{}, nil); err == nil || !strings.Contains(err.Error(), "without a :burst") {
		t.Errorf("a rest limit with a burst: %v, want the burst named", err)
	}
	c, _, err = parseConfig("serve", []string{"--handshake-limit", "0"}, env(), &bytes.Buffer{}, nil)
	if err != nil || c.HandshakeLimit != 0 {
		t.Errorf("handshake limit 0: %v %d", err, c.HandshakeLimit)
	}
	for v, want := range map[string]int{"off": 0, "40": 40, "10%": 10, "100": 100} {
		c, _, err = parseConfig("serve", []string{"--gc-headroom", v}, env(), &bytes.Buffer{}, nil)
		if err != nil || c.GCHeadroom != want {
			t.Errorf("gc headroom %q: %v %d, want %d", v, err, c.GCHeadroom, want)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     []string
		setting string
	}{
		{"bad duration", []string{"--ping-interval", "abc"}, nil, "PRESENCE_PING_INTERVAL"},
		{"duration without unit", nil, []string{"PRESENCE_TYPING_TTL", "5"}, "PRESENCE_TYPING_TTL"},
		{"too small duration", []string{"--ping-timeout", "1ms"}, nil, "PRESENCE_PING_TIMEOUT"},
		{"negative jitter", []string{"--heartbeat-jitter", "-1s"}, nil, "PRESENCE_HEARTBEAT_JITTER"},
		{"bad size", []string{"--max-buffer", "lots"}, nil, "PRESENCE_MAX_BUFFER"},
		{"tiny size", []string{"--max-buffer", "10"}, nil, "PRESENCE_MAX_BUFFER"},
		{"bad bool", []string{"--allow-eio3", "maybe"}, nil, "PRESENCE_ALLOW_EIO3"},
		{"bad limit", []string{"--handshake-limit", "fast"}, nil, "PRESENCE_HANDSHAKE_LIMIT"},
		{"bad limit window", []string{"--handshake-limit", "10/1ms"}, nil, "PRESENCE_HANDSHAKE_LIMIT"},
		{"bad origin", []string{"--cors-origins", "example.com"}, nil, "PRESENCE_CORS_ORIGINS"},
		{"origin with path", []string{"--cors-origins", "https://a.example/app"}, nil, "PRESENCE_CORS_ORIGINS"},
		{"bad log level", []string{"--log-level", "loud"}, nil, "PRESENCE_LOG_LEVEL"},
		{"gc headroom too small", []string{"--gc-headroom", "5"}, nil, "PRESENCE_GC_HEADROOM"},
		{"gc headroom not a number", nil, []string{"PRESENCE_GC_HEADROOM", "half"}, "PRESENCE_GC_HEADROOM"},
		{"bad log format", nil, []string{"PRESENCE_LOG_FORMAT", "xml"}, "PRESENCE_LOG_FORMAT"},
		{"short secret", []string{"--jwt-secret", "short"}, nil, "PRESENCE_JWT_SECRET"},
		{"short service token", []string{"--service-token", "x"}, nil, "PRESENCE_SERVICE_TOKEN"},
		{"secret and jwks", []string{"--jwt-secret", "0123456789abcdef", "--jwks-url", "https://idp.example/jwks"}, nil, "PRESENCE_JWT_SECRET"},
		{"bad jwks url", []string{"--jwks-url", "ftp://x"}, nil, "PRESENCE_JWKS_URL"},
		{"empty data", []string{"--data", ""}, nil, "PRESENCE_DATA"},
		{"cluster without a database", nil, []string{"REDIS_URL", "redis://127.0.0.1:6379", "PRESENCE_JWT_SECRET", "0123456789abcdef"}, "DATABASE_URL"},
		{"bad redis scheme", []string{"--redis-url", "http://x"}, nil, "REDIS_URL"},
		{"sentinel without master", []string{"--redis-url", "redis+sentinel://a:26379,b:26379"}, nil, "REDIS_URL"},
		{"bad database url", []string{"--database-url", "mysql://x"}, nil, "DATABASE_URL"},
		{"bad prefix", []string{"--redis-prefix", "a b"}, nil, "PRESENCE_REDIS_PREFIX"},
		{"bad membership", []string{"--membership", "closed"}, nil, "PRESENCE_MEMBERSHIP"},
		{"bad flush batch", []string{"--lastseen-flush-batch", "0"}, nil, "PRESENCE_LASTSEEN_FLUSH_BATCH"},
		{"bad rest limit", []string{"--rest-limit", "x"}, nil, "PRESENCE_REST_LIMIT"},
		{"rest limit with a burst", []string{"--rest-limit", "5/1s:3"}, nil, "PRESENCE_REST_LIMIT"},
		{"ping interval past a JavaScript timer", []string{"--ping-interval", "1000h"}, nil, "PRESENCE_PING_INTERVAL"},
		{"ping timeout past a JavaScript timer", nil, []string{"PRESENCE_PING_TIMEOUT", "597h"}, "PRESENCE_PING_INTERVAL"},
		{"heartbeat hint past a JavaScript timer", []string{"--heartbeat-jitter", "600h"}, nil, "PRESENCE_HEARTBEAT_INTERVAL"},
		{"unknown flag", []string{"--nope"}, nil, "flags"},
		{"addr without a port", []string{"--addr", "notanaddress"}, nil, "PRESENCE_ADDR"},
		{"debug addr without a port", nil, []string{"PRESENCE_DEBUG_ADDR", "nonsense"}, "PRESENCE_DEBUG_ADDR"},
		{"debug addr with a port out of range", []string{"--debug-addr", "127.0.0.1:70000"}, nil, "PRESENCE_DEBUG_ADDR"},
		{"addr with a port out of range", []string{"--addr", "127.0.0.1:99999"}, nil, "PRESENCE_ADDR"},
		{"addr with an empty port", nil, []string{"PRESENCE_ADDR", "127.0.0.1:"}, "PRESENCE_ADDR"},
		{"addr with an unknown service", []string{"--addr", ":no-such-service"}, nil, "PRESENCE_ADDR"},
		{"outside dev mode without a secret", nil, []string{"DATABASE_URL", "postgres://x@127.0.0.1/db"}, "PRESENCE_JWT_SECRET"},
		{"bad trusted proxy", []string{"--trusted-proxies", "10.0.0.0/8,lb.internal"}, nil, "PRESENCE_TRUSTED_PROXIES"},
		// present but empty: a configuration error, never dev mode (CONTRACT §4)
		{"empty secret", nil, []string{"PRESENCE_JWT_SECRET", ""}, "PRESENCE_JWT_SECRET"},
		{"blank secret", nil, []string{"PRESENCE_JWT_SECRET", "  "}, "PRESENCE_JWT_SECRET"},
		{"empty jwks url", nil, []string{"PRESENCE_JWKS_URL", ""}, "PRESENCE_JWKS_URL"},
		{"empty redis url", nil, []string{"REDIS_URL", ""}, "REDIS_URL"},
		{"empty database url", nil, []string{"DATABASE_URL", ""}, "DATABASE_URL"},
		{"empty secret flag", []string{"--jwt-secret", ""}, nil, "PRESENCE_JWT_SECRET"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := parseConfig("serve", tt.args, env(tt.env...), &bytes.Buffer{}, nil)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a ConfigError", err)
			}
			if !strings.Contains(ce.Setting, tt.setting) {
				t.Errorf("error names %q, want %q: %v", ce.Setting, tt.setting, err)
			}
			if got := exitCode(err, &bytes.Buffer{}); got != 2 {
				t.Errorf("exit code %d, want 2", got)
			}
		})
	}
}

func TestListenAddrForms(t *testing.T) {
	for _, addr := range []string{":3000", "127.0.0.1:3000", "[::1]:3000", "localhost:0", ":http"} {
		c, _, err := parseConfig("serve", []string{"--addr", addr}, env(), &bytes.Buffer{}, nil)
		if err != nil || c.Addr != addr {
			t.Errorf("--addr %s: %v (addr %q)", addr, err, c.Addr)
		}
	}
}

// The commands that verify no token need no JWT secret outside dev mode:
// a migration step of a deployment has only the database URL.
func TestMigrateNeedsNoSecret(t *testing.T) {
	for _, cmd := range []string{"migrate", "healthcheck"} {
		c, _, err := parseConfig(cmd, nil, env("DATABASE_URL", "postgres://x@127.0.0.1/db"), &bytes.Buffer{}, nil)
		if err != nil || c.DevMode {
			t.Errorf("%s with DATABASE_URL alone: %v (dev mode %v)", cmd, err, c.DevMode)
		}
	}
}

func TestTrustedProxies(t *testing.T) {
	c := mustServeConfig(t, []string{"--trusted-proxies", " 10.0.0.0/8, 192.168.1.7 ,::1,fd00::1/64"})
	var got []string
	for _, p := range c.TrustedProxies {
		got = append(got, p.String())
	}
	if want := []string{"10.0.0.0/8", "192.168.1.7/32", "::1/128", "fd00::/64"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// An empty value of any other setting still means its default.
func TestEmptyOtherSettingIsDefault(t *testing.T) {
	c := mustServeConfig(t, nil, "PRESENCE_TYPING_TTL", "", "PRESENCE_ADDR", "")
	if !c.DevMode || c.Addr != ":3000" {
		t.Fatalf("dev %v addr %q", c.DevMode, c.Addr)
	}
}

func TestSecretRedactedInErrors(t *testing.T) {
	for _, e := range [][]string{
		{"REDIS_URL", "redis://u:hunter2@127.0.0.1:6379", "PRESENCE_JWT_SECRET", "0123456789abcdef"},
		{"REDIS_URL", "redis+sentinel://u:hunter2@a:1", "PRESENCE_JWT_SECRET", "0123456789abcdef"},
		{"DATABASE_URL", "mysql://u:hunter2@x/db"},
		{"PRESENCE_JWT_SECRET", "hunter2"},
		{"PRESENCE_JWKS_URL", "ftp://u:hunter2@h/jwks"},
		{"DATABASE_URL", "postgres://u:hunter2@127.0.0.1:5432/db?sslmode=bogus", "PRESENCE_JWT_SECRET", "0123456789abcdef"},
		{"DATABASE_URL", "postgres://u@127.0.0.1:5432/db?password=hunter2&sslmode=bogus", "PRESENCE_JWT_SECRET", "0123456789abcdef"},
	} {
		_, _, err := parseConfig("serve", nil, env(e...), &bytes.Buffer{}, nil)
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%v: a secret must not appear in %v", e, err)
		}
	}
	// a mistyped flag: the error names it, and shows none of the others
	_, _, err := parseConfig("serve", []string{"--jwt-secret", "hunter2hunter2hunter2", "--database-url", "postgres://u:hunter2@x/db", "--redis-urll", "x"}, env(), &bytes.Buffer{}, nil)
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "redis-urll") {
		t.Errorf("unknown flag: %v, want it named and no secret shown", err)
	}
}

// A database URL whose parameters the PostgreSQL driver refuses is bad
// configuration (exit 2, the setting and the reason named), found before
// anything starts; it was a runtime error when the store opened.
func TestDatabaseURLParameters(t *testing.T) {
	for url, reason := range map[string]string{
		"postgres://u@127.0.0.1:5432/db?sslmode=bogus":       "sslmode",
		"postgres://u@127.0.0.1:5432/db?pool_max_conns=abc":  "pool_max_conns",
		"postgres://u@127.0.0.1:5432/db?connect_timeout=-1x": "connect_timeout",
	} {
		_, _, err := parseConfig("serve", nil, env("DATABASE_URL", url, "PRESENCE_JWT_SECRET", "0123456789abcdef"), &bytes.Buffer{}, nil)
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "DATABASE_URL") || !strings.Contains(err.Error(), reason) {
			t.Errorf("%s: %v, want a ConfigError naming DATABASE_URL and %s", url, err, reason)
		}
	}
	c := mustServeConfig(t, nil, "DATABASE_URL", "postgres://u@127.0.0.1:5432/db?sslmode=disable&pool_max_conns=8", "PRESENCE_JWT_SECRET", "0123456789abcdef")
	if c.DatabaseURL == "" {
		t.Fatal("a good URL was not kept")
	}
}

// A boolean setting's flag may be given bare, as Go's bool flags.
func TestBareBoolFlags(t *testing.T) {
	c := mustServeConfig(t, []string{"--redis-sharded", "--allow-eio3", "--sysmon-steady=false", "--ttl", "40s"})
	if !c.RedisSharded || !c.AllowEIO3 || c.SysmonSteady || c.TTL != 40*time.Second {
		t.Fatalf("sharded %v, eio3 %v, sysmon %v, ttl %s; want true, true, false, 40s", c.RedisSharded, c.AllowEIO3, c.SysmonSteady, c.TTL)
	}
	c = mustServeConfig(t, []string{"--sysmon-steady", "false", "--allow-eio3"}) // a value after a space still counts
	if c.SysmonSteady || !c.AllowEIO3 {
		t.Fatalf("sysmon %v, eio3 %v; want false, true", c.SysmonSteady, c.AllowEIO3)
	}
	if _, _, err := parseConfig("serve", []string{"--ttl"}, env(), &bytes.Buffer{}, nil); err == nil {
		t.Fatal("--ttl without a value accepted")
	}
}

func TestParseRedisURL(t *testing.T) {
	tests := []struct {
		url     string
		addrs   []string
		cluster bool
		master  string
	}{
		{"redis://127.0.0.1:6379/2", []string{"127.0.0.1:6379"}, false, ""},
		{"redis+cluster://a:7000,b:7001,c", []string{"a:7000", "b:7001", "c:6379"}, true, ""},
		{"redis+sentinel://s1:26379,s2:26379/mymaster", []string{"s1:26379", "s2:26379"}, false, "mymaster"},
	}
	for _, tt := range tests {
		o, err := parseRedisURL(tt.url)
		if err != nil {
			t.Fatalf("%s: %v", tt.url, err)
		}
		if !slices.Equal(o.Addrs, tt.addrs) || o.IsClusterMode != tt.cluster || o.MasterName != tt.master {
			t.Errorf("%s: got %+v", tt.url, o)
		}
	}
}

// Every option redis.ParseURL reads, the query options included, reaches
// the client.
func TestParseRedisURLKeepsOptions(t *testing.T) {
	for _, raw := range []string{
		"redis://u:p@h:6380/3?pool_size=7&dial_timeout=2s&read_timeout=3s&write_timeout=4s&max_retries=5" +
			"&min_retry_backoff=1ms&max_retry_backoff=9ms&pool_fifo=true&pool_timeout=6s&min_idle_conns=2" +
			"&max_idle_conns=8&max_active_conns=9&conn_max_idle_time=1m&conn_max_lifetime=2m&client_name=node1&protocol=2",
		"rediss://h:6380?pool_size=3&skip_verify=true",
		"redis://h",
	} {
		want, err := redis.ParseURL(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		want.Network = "" // a universal client has no such option; "" means tcp for a host:port
		o, err := parseRedisURL(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if got := o.Simple(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\ngot  %+v\nwant %+v", raw, got, want)
		}
	}
	if _, err := parseRedisURL("redis://h?no_such_option=1"); err == nil {
		t.Error("an unknown option is accepted")
	}
}

func TestHelp(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"--help"}, env(), &out, &bytes.Buffer{})
	if !errors.Is(err, errUsage) || exitCode(err, &bytes.Buffer{}) != 0 {
		t.Fatalf("--help: %v", err)
	}
	for _, s := range settings {
		if !strings.Contains(out.String(), "--"+s.flag()) || !strings.Contains(out.String(), s.env) {
			t.Errorf("--help does not list %s / --%s", s.env, s.flag())
		}
	}
}

// Each command's --help says what it does and which settings it reads,
// not the server's 80 lines (a docs audit, 2026-12-08: token's own flags
// were in no usage line).
func TestCommandHelp(t *testing.T) {
	for cmd, want := range map[string][]string{
		"token":       {"Usage: presenced token <userId>", "--jwt-secret", "--jwt-audience", "--jwt-issuer", "--data", "--valid-for"},
		"migrate":     {"Usage: presenced migrate [up|status]", "DATABASE_URL", "PRESENCE_DATA"},
		"healthcheck": {"Usage: presenced healthcheck", "/healthz", "--addr"},
	} {
		var out bytes.Buffer
		err := run(context.Background(), []string{cmd, "--help"}, env(), &out, &bytes.Buffer{})
		if !errors.Is(err, errUsage) || exitCode(err, &bytes.Buffer{}) != 0 {
			t.Fatalf("%s --help: %v", cmd, err)
		}
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s --help lacks %q:\n%s", cmd, w, out.String())
			}
		}
		if strings.Contains(out.String(), "Settings:") {
			t.Errorf("%s --help prints the server's settings:\n%s", cmd, out.String())
		}
	}
}

func TestTokenCommand(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "presenced.db")
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"token", "alice", "--data", data, "--valid-for", "1h"}, env(), &out, &errOut); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("stdout must hold only the token, got %q", out.String())
	}
	secret, err := os.ReadFile(filepath.Join(dir, "presenced.dev-secret"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewHS256([]byte(strings.TrimSpace(string(secret))))
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify(context.Background(), lines[0])
	if err != nil {
		t.Fatal(err)
	}
	if c.UserID != "alice" {
		t.Errorf("sub: got %q, want alice", c.UserID)
	}
	if d := time.Until(c.ExpiresAt); d < 59*time.Minute || d > time.Hour+time.Minute {
		t.Errorf("expiry in %v, want about 1h", d)
	}
	// the first token made the secret, and says so with the absolute path;
	// the next one reuses it
	abs := filepath.Join(dir, "presenced.dev-secret")
	if !strings.Contains(errOut.String(), "no dev secret was found, so a new one was made in "+abs) {
		t.Errorf("stderr of the first token: %q", errOut.String())
	}
	errOut.Reset()
	if err := run(context.Background(), []string{"token", "alice", "--data", data}, env(), &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if got := errOut.String(); got != "signed with the dev secret in "+abs+"\n" {
		t.Errorf("stderr of the second token: %q", got)
	}

	// With a configured secret the token verifies with it.
	out.Reset()
	if err := run(context.Background(), []string{"token", "--jwt-secret", "0123456789abcdef", "bob"}, env(), &out, &errOut); err != nil {
		t.Fatal(err)
	}
	v2, _ := auth.NewHS256([]byte("0123456789abcdef"))
	if c, err := v2.Verify(context.Background(), strings.TrimSpace(out.String())); err != nil || c.UserID != "bob" {
		t.Errorf("configured secret: %v %+v", err, c)
	}

	for _, args := range [][]string{
		{"token"},
		{"token", "a b"},
		{"token", "alice", "extra"},
		{"token", "alice", "--valid-for", "-1h"},
		{"token", "alice", "--jwks-url", "https://idp.example/jwks"},
	} {
		err := run(context.Background(), append(args, "--data", data), env(), &bytes.Buffer{}, &bytes.Buffer{})
		if got := exitCode(err, &bytes.Buffer{}); got != 2 {
			t.Errorf("%v: exit %d (%v), want 2", args, got, err)
		}
	}
}

func TestDevSecretConcurrentCreate(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sub", "presenced.dev-secret")
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := loadOrCreateSecret(file)
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = string(s)
		}()
	}
	wg.Wait()
	for _, s := range got[1:] {
		if s != got[0] {
			t.Fatalf("concurrent starts disagree on the secret: %q vs %q", s, got[0])
		}
	}
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("secret file mode %v, want 0600", st.Mode().Perm())
	}
	again, _ := loadOrCreateSecret(file)
	if string(again) != got[0] {
		t.Error("secret not kept across loads")
	}
}

func TestUnknownCommand(t *testing.T) {
	err := run(context.Background(), []string{"frobnicate"}, env(), &bytes.Buffer{}, &bytes.Buffer{})
	if got := exitCode(err, &bytes.Buffer{}); got != 2 {
		t.Errorf("exit %d, want 2", got)
	}
}

// TestREADMEListsEverySetting keeps the README's configuration table true
// to the code.
func TestREADMEListsEverySetting(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range settings {
		if !strings.Contains(string(b), "`"+s.env+"`") {
			t.Errorf("README does not document %s", s.env)
		}
	}
}

// The dev banner's admin link carries the token only if this start
// generated it: an operator's own PRESENCE_ADMIN_TOKEN is not printed.
func TestDevBannerAdminLink(t *testing.T) {
	gen, _, err := parseConfig("serve", nil, env(), &bytes.Buffer{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l := adminLink("http://h", gen); !strings.Contains(l, "#token="+gen.AdminToken) || gen.AdminToken == "" {
		t.Errorf("generated token: link %q", l)
	}
	const own = "operator-chosen-secret-XYZ"
	set, _, err := parseConfig("serve", nil, env("PRESENCE_ADMIN_TOKEN", own), &bytes.Buffer{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l := adminLink("http://h", set); strings.Contains(l, own) || !set.DevMode {
		t.Errorf("the operator's token: link %q (dev mode %v)", l, set.DevMode)
	}
}

// migrate status on an embedded store that does not exist says so, and
// creates nothing (opening it would have made an empty database there).
func TestMigrateStatusMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "typo", "presenced.db")
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"migrate", "status", "--data", path}, env(), &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "no embedded store at "+path) {
		t.Fatalf("migrate status on a missing file: %v", err)
	}
	if _, serr := os.Stat(filepath.Dir(path)); !errors.Is(serr, fs.ErrNotExist) {
		t.Fatalf("migrate status created %s (%v)", filepath.Dir(path), serr)
	}
	if code := exitCode(err, &errOut); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
}

// Errors show what the user typed: flags with two dashes, the form a
// value takes, and durations as they are written (a docs audit,
// 2026-12-07: "-bogus", a bare "parse error", "1000h0m0s" and a limit of
// 596h31m23.647s where the docs say 596h31m23s).
func TestConfigErrorsWordedAsTyped(t *testing.T) {
	var validFor time.Duration
	withToken := func(fs *flag.FlagSet) { fs.DurationVar(&validFor, "valid-for", time.Hour, "") }
	for _, tc := range []struct {
		args  []string
		extra func(*flag.FlagSet)
		want  string
	}{
		{[]string{"--bogus"}, nil, "unknown flag --bogus"},
		{[]string{"--valid-for", "abc"}, withToken, `invalid value "abc" for --valid-for: want a duration such as 90s, 15m or 24h`},
		{[]string{"--ping-interval", "1000h"}, nil, `="1000h": with PRESENCE_PING_TIMEOUT (20s) must be at most 596h31m23s:`},
	} {
		_, _, err := parseConfig("serve", tc.args, env(), &bytes.Buffer{}, tc.extra)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want it to say %q", tc.args, err, tc.want)
		}
	}
	for d, want := range map[time.Duration]string{1000 * time.Hour: "1000h", 90 * time.Minute: "1h30m", 20 * time.Second: "20s", time.Hour + time.Second: "1h0m1s"} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// healthcheck refuses a stray argument: the flags after it were not read,
// and it probed the default port (a docs audit, 2026-12-07).
func TestHealthcheckRefusesStrayArguments(t *testing.T) {
	err := healthcheck([]string{"bogus", "--addr", ":1"}, env(), &bytes.Buffer{})
	if !errors.Is(err, errBadUsage) || exitCode(err, &bytes.Buffer{}) != 2 {
		t.Fatalf("healthcheck bogus --addr :1: %v; want a usage error (exit 2)", err)
	}
}
