// Command presenced is the presence server. main only sets up signals and
// calls run, which does everything else and is what the tests drive.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/presenced/presenced/auth"
	"github.com/presenced/presenced/ids"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
)

func main() {
	reexec = execSelf
	// SIGHUP too: a closed terminal (dev mode runs in one) shuts down as
	// SIGTERM does, with the final flush, where Go's default ended the
	// process at once
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	err := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode prints err and maps it to the process exit code: 2 for bad
// configuration or usage, 1 for anything else.
func exitCode(err error, stderr io.Writer) int {
	var ce *ConfigError
	switch {
	case err == nil, errors.Is(err, errUsage):
		return 0
	case errors.As(err, &ce), errors.Is(err, errBadUsage):
		fmt.Fprintln(stderr, "presenced:", err)
		return 2
	default:
		fmt.Fprintln(stderr, "presenced:", err)
		return 1
	}
}

var errBadUsage = errors.New("bad usage (see presenced --help)")

// run is the whole program: it parses the command line and the environment
// and runs the chosen subcommand until ctx ends.
func run(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(ctx, args, lookupEnv, stdout, stderr)
	case "token":
		return token(args, lookupEnv, stdout, stderr)
	case "healthcheck":
		return healthcheck(args, lookupEnv, stdout)
	case "help":
		printUsage(stdout)
		return nil
	case "migrate":
		return migrate(ctx, args, lookupEnv, stdout, stderr)
	default:
		return fmt.Errorf("%w: unknown command %q", errBadUsage, cmd)
	}
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	format := cfg.LogFormat
	if format == "" {
		format = "json"
		if isTerminal(w) {
			format = "text"
		}
	}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func serve(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) error {
	cfg, rest, err := parseConfig("serve", args, lookupEnv, stdout, nil)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errBadUsage, rest[0])
	}
	log := newLogger(cfg, stderr).With("node", cfg.NodeID)
	if cfg.SysmonSteady && reexec != nil {
		if env := steadySysmonEnv(os.Environ()); env != nil {
			err := reexec(env) // returns only if it failed
			log.Warn("could not execute again with GODEBUG=schedtrace set: the Go runtime's system monitor sleeps deeply when the node idles (PRESENCE_SYSMON_STEADY)", "err", err)
		}
	}
	// GOGC, where the operator set it, is the runtime's own setting.
	_, gogcSet := os.LookupEnv("GOGC")
	stopGC, _ := startGCTuner(cfg.GCHeadroom, gcHeadroomFloor, gogcSet)
	defer stopGC()
	if gogcSet && cfg.GCHeadroom > 0 {
		log.Debug("GOGC is set: PRESENCE_GC_HEADROOM does not apply")
	}

	a, err := build(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.close()
	// one node: the users the last run left online, if it crashed, get its
	// last alive moment before anyone can ask (else each flush retries)
	if _, err := a.pipeline.RecoverOnline(ctx); err != nil {
		log.Warn("crash recovery of the last run's online users failed; retried at each flush", "err", err)
	}

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s (PRESENCE_ADDR, --addr): %w", cfg.Addr, err)
	}
	if cfg.DevMode {
		printDevBanner(stdout, cfg, ln.Addr(), devSecretPath(cfg.DataPath))
	}
	if cfg.DebugAddr != "" {
		_, stop, err := serveDebug(cfg.DebugAddr, log)
		if err != nil {
			_ = ln.Close()
			return err
		}
		defer stop()
	}

	// The engine and the last-seen pipeline outlive the HTTP server: the
	// shutdown's disconnect work needs them; then they stop in order.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	engineDone, pipelineDone, busDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	subsDone := make(chan struct{})
	// The engine ends early only if another live node holds this node's id
	// (found at the first connection to Redis): the server stops then.
	sctx, stopServe := context.WithCancel(ctx)
	defer stopServe()
	// From the shutdown's start a cluster node leaves the shared timers
	// to the others: the rooms it would announce them in close now.
	if r, ok := a.engine.(interface{ Retire() }); ok {
		defer context.AfterFunc(sctx, r.Retire)()
	}
	var engineErr error
	go func() {
		defer close(engineDone)
		if engineErr = a.engine.Run(bg); engineErr != nil {
			log.Error("presence engine stopped; shutting down", "err", engineErr)
			stopServe()
		}
	}()
	go func() { defer close(pipelineDone); _ = a.pipeline.Run(bg) }()
	go func() { defer close(subsDone); a.subs.Run(bg) }()
	adminDone := make(chan struct{})
	if a.admin != nil {
		// at its end it takes this node off the other panels
		go func() { defer close(adminDone); _ = a.admin.Run(bg) }()
		// the admin pages' live streams would hold up the graceful shutdown
		defer context.AfterFunc(sctx, a.admin.EndStreams)()
	}
	go func() {
		defer close(busDone)
		for bg.Err() == nil {
			if err := a.bus.Run(bg, a.subs.Deliver); err != nil {
				log.Warn("status bus stopped; restarting", "err", err)
				select {
				case <-bg.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}()

	// The whole shutdown keeps to PRESENCE_SHUTDOWN_TIMEOUT from the
	// signal: Serve takes half of it at most, the final work below the rest.
	stopping := make(chan time.Time, 1)
	defer context.AfterFunc(sctx, func() { stopping <- time.Now() })()
	serveErr := a.srv.Serve(sctx, ln)

	deadline := time.Now().Add(cfg.ShutdownTimeout) // (Serve failed on its own)
	if sctx.Err() != nil {
		deadline = (<-stopping).Add(cfg.ShutdownTimeout)
	}
	fctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if d, ok := a.engine.(interface{ Drain(context.Context) error }); ok {
		// One node in memory: nobody else will end the flap graces of the
		// sockets just closed, so end them now (exact last-seen times).
		if err := d.Drain(fctx); err != nil {
			log.Warn("presence drain failed", "err", err)
		}
	}
	// The disconnect work's events (leaves, offline statuses) reach the
	// rooms and the last-seen buffer before anything below stops.
	if err := a.events.Close(fctx); err != nil {
		log.Warn("presence events not all delivered at shutdown", "err", err)
	}
	stopBG()
	<-engineDone
	<-pipelineDone
	<-busDone
	<-subsDone
	if a.admin != nil {
		<-adminDone
	}
	flushErr := a.pipeline.Flush(fctx)
	if flushErr != nil {
		log.Error("last-seen flush at shutdown failed", "err", flushErr)
	}
	if err := a.engine.Close(); err != nil {
		log.Warn("presence close failed", "err", err)
	}
	if errors.Is(engineErr, presence.ErrNodeIDTaken) {
		return nodeIDTaken(cfg)
	}
	if serveErr != nil {
		return serveErr
	}
	if flushErr != nil && a.rdb == nil {
		// the buffer was this process's memory: those times are lost,
		// and the exit says so (in Redis they stay for the next flush)
		return fmt.Errorf("last-seen times not stored at shutdown (the store failed; they were buffered in memory): %w", flushErr)
	}
	log.Info("stopped")
	return nil
}

// newVerifier picks the token verifier: JWKS, the configured secret, or in
// dev mode the generated secret (whose file it returns).
func newVerifier(ctx context.Context, cfg Config, log *slog.Logger) (auth.Verifier, string, error) {
	if cfg.JWKSURL != "" {
		v, err := auth.NewJWKS(ctx, auth.JWKSConfig{URL: cfg.JWKSURL, Log: log.With("component", "jwks")}, cfg.tokenOptions()...)
		return v, "", err
	}
	secret, file, err := secretFor(cfg)
	if err != nil {
		return nil, "", err
	}
	v, err := auth.NewHS256(secret, cfg.tokenOptions()...)
	return v, file, err
}

// secretFor returns the HS256 secret: PRESENCE_JWT_SECRET, or in dev mode
// the one kept in a file beside PRESENCE_DATA (created on first use).
func secretFor(cfg Config) ([]byte, string, error) {
	if cfg.JWTSecret != "" {
		return []byte(cfg.JWTSecret), "", nil
	}
	if !cfg.DevMode {
		return nil, "", &ConfigError{Setting: "PRESENCE_JWT_SECRET (--jwt-secret)", Err: errors.New("required outside dev mode")}
	}
	file := devSecretPath(cfg.DataPath)
	secret, err := loadOrCreateSecret(file)
	return secret, file, err
}

func devSecretPath(dataPath string) string {
	return filepath.Join(filepath.Dir(dataPath), "presenced.dev-secret")
}

// loadOrCreateSecret reads the dev secret, or creates it (0600) if absent.
// Concurrent first starts agree: only one O_EXCL create wins.
func loadOrCreateSecret(file string) ([]byte, error) {
	for range 3 {
		b, err := os.ReadFile(file)
		if err == nil {
			s := strings.TrimSpace(string(b))
			if len(s) < 16 {
				return nil, fmt.Errorf("dev secret file %s is shorter than 16 bytes; delete it to make a new one", file)
			}
			return []byte(s), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read dev secret: %w", err)
		}
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return nil, fmt.Errorf("create dev secret: %w", err)
		}
		f, err := os.OpenFile(file+".tmp-"+randomHex(4), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("create dev secret: %w", err)
		}
		secret := randomHex(32)
		_, werr := f.WriteString(secret + "\n")
		cerr := f.Close()
		if werr != nil || cerr != nil {
			_ = os.Remove(f.Name())
			return nil, fmt.Errorf("write dev secret: %w", errors.Join(werr, cerr))
		}
		// Link fails if another process created the file first: then read theirs.
		err = os.Link(f.Name(), file)
		_ = os.Remove(f.Name())
		if err == nil {
			return []byte(secret), nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("create dev secret: %w", err)
		}
	}
	return nil, fmt.Errorf("could not create or read dev secret %s", file)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand, Go ≥ 1.24)
	return hex.EncodeToString(b)
}

// printDevBanner prints what a developer needs to start (CONTRACT §5): the
// generated secret, and a command that mints tokens with it (the token
// command finds the secret beside PRESENCE_DATA: it is given the same one).
func printDevBanner(w io.Writer, cfg Config, addr net.Addr, secretFile string) {
	url := "http://" + displayAddr(addr)
	secret, _, _ := secretFor(cfg)
	example, _ := mintDev(cfg, "alice", 24*time.Hour)
	data := ""
	if cfg.DataPath != defaultDataPath {
		data = " --data " + shellQuote(cfg.DataPath)
	}
	fmt.Fprintf(w, `presenced is running in dev mode (one node, in memory) on %s
  dev secret:  %s (HS256; kept in %s across restarts, delete that file to rotate)
  mint token:  go run ./cmd/presenced token alice%s      (or: presenced token alice%s)
  try it:      npm i socket.io-client && node -e "require('socket.io-client').io('%s',{auth:{token:process.argv[1]}}).on('session',s=>{console.log(s);process.exit()})" %s
  admin panel: %s
`, url, secret, secretFile, data, data, url, example, adminLink(url, cfg))
}

// adminLink is the banner's way into the admin panel: with the token
// generated at this start, a login link that carries it; with the
// operator's own PRESENCE_ADMIN_TOKEN, the login page alone (an operator's
// secret is not printed).
func adminLink(url string, cfg Config) string {
	if cfg.AdminTokenGenerated {
		return url + "/admin/login#token=" + cfg.AdminToken
	}
	return url + "/admin/login (log in with PRESENCE_ADMIN_TOKEN)"
}

// shellQuote quotes s for a POSIX shell where it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:@%+=,-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func mintDev(cfg Config, user string, validFor time.Duration) (string, error) {
	secret, _, err := secretFor(cfg)
	if err != nil {
		return "", err
	}
	return auth.SignHS256(secret, user, validFor, time.Now(), cfg.tokenOptions()...)
}

// tokenOptions are the token requirements of PRESENCE_JWT_AUDIENCE and
// PRESENCE_JWT_ISSUER (none when unset).
func (c Config) tokenOptions() []auth.Option {
	return []auth.Option{auth.WithAudience(c.JWTAudience...), auth.WithIssuer(c.JWTIssuer)}
}

// displayAddr turns a listen address into one a browser can open.
func displayAddr(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

// token prints a token for <userId> on stdout, and nothing else there.
func token(args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) error {
	var user string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		user, args = args[0], args[1:]
	}
	var validFor time.Duration
	cfg, rest, err := parseConfig("token", args, lookupEnv, stdout, func(fs *flag.FlagSet) {
		fs.DurationVar(&validFor, "valid-for", 24*time.Hour, "token lifetime")
	})
	if err != nil {
		return err
	}
	if user == "" && len(rest) == 1 {
		user, rest = rest[0], nil
	}
	if user == "" || len(rest) > 0 {
		return fmt.Errorf("%w: usage: presenced token <userId> [--valid-for 24h]", errBadUsage)
	}
	if !ids.Valid(user) {
		return fmt.Errorf("%w: %q is not a valid user id (%s)", errBadUsage, user, ids.Rule)
	}
	if validFor <= 0 {
		return fmt.Errorf("%w: --valid-for must be positive", errBadUsage)
	}
	if cfg.JWKSURL != "" && cfg.JWTSecret == "" {
		return fmt.Errorf("%w: with PRESENCE_JWKS_URL tokens come from your identity provider; presenced can only sign HS256 with PRESENCE_JWT_SECRET", errBadUsage)
	}
	_, statErr := os.Stat(devSecretPath(cfg.DataPath))
	secret, file, err := secretFor(cfg)
	if err != nil {
		return err
	}
	t, err := auth.SignHS256(secret, user, validFor, time.Now(), cfg.tokenOptions()...)
	if err != nil {
		return err
	}
	if file != "" {
		if abs, err := filepath.Abs(file); err == nil {
			file = abs
		}
	}
	switch {
	case file != "" && errors.Is(statErr, fs.ErrNotExist):
		// no dev server has run with this data directory: its secret is
		// new, and a server elsewhere will refuse the token
		fmt.Fprintf(stderr, "no dev secret was found, so a new one was made in %s; a dev server accepts this token only if it runs with the same PRESENCE_DATA (--data) directory\n", file)
	case file != "":
		fmt.Fprintf(stderr, "signed with the dev secret in %s\n", file)
	}
	fmt.Fprintln(stdout, t)
	return nil
}

// healthcheck GETs this node's /healthz on the loopback address of
// PRESENCE_ADDR (for container health checks: the image has no curl).
func healthcheck(args []string, lookupEnv func(string) (string, bool), stdout io.Writer) error {
	cfg, rest, err := parseConfig("healthcheck", args, lookupEnv, stdout, nil)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		// (the flags after it were not read: it probed the default port)
		return fmt.Errorf("%w: unexpected argument %q", errBadUsage, rest[0])
	}
	_, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return &ConfigError{Setting: "PRESENCE_ADDR (--addr)", Value: cfg.Addr, Err: err}
	}
	client := &http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get("http://" + net.JoinHostPort("127.0.0.1", port) + "/healthz")
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: /healthz answered %s", resp.Status)
	}
	fmt.Fprintln(stdout, "ok")
	return nil
}

// migrate applies the schema (up, the default) or shows its state (status)
// on the configured store: DATABASE_URL, else the embedded file.
func migrate(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) error {
	action := "up"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		action, args = args[0], args[1:]
	}
	if action != "up" && action != "status" {
		return fmt.Errorf("%w: usage: presenced migrate [up|status]", errBadUsage)
	}
	cfg, rest, err := parseConfig("migrate", args, lookupEnv, stdout, nil)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errBadUsage, rest[0])
	}
	log := newLogger(cfg, stderr)
	if action == "status" && cfg.DatabaseURL == "" {
		if _, err := os.Stat(cfg.DataPath); errors.Is(err, fs.ErrNotExist) {
			// (opening it would create it)
			return fmt.Errorf("no embedded store at %s: nothing is applied there (presenced migrate up, or the server, creates it)", cfg.DataPath)
		}
	}
	st, err := openStore(ctx, cfg, log, false)
	if err != nil {
		return err
	}
	defer st.Close()
	m, ok := st.(interface {
		Migrate(context.Context) ([]store.Migration, error)
		MigrationStatus(context.Context) ([]store.Migration, error)
	})
	if !ok {
		return errors.New("this store has no migrations")
	}
	if action == "up" {
		applied, err := m.Migrate(ctx)
		if err != nil {
			return err
		}
		if len(applied) == 0 {
			fmt.Fprintln(stdout, "schema is up to date")
		}
		for _, mg := range applied {
			fmt.Fprintf(stdout, "applied %05d %s\n", mg.Version, mg.Name)
		}
		return nil
	}
	all, err := m.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	for _, mg := range all {
		state := "pending"
		switch {
		case mg.Applied && mg.AppliedAt.IsZero(): // (store.UnknownMigration)
			state = "applied"
		case mg.Applied:
			state = "applied " + mg.AppliedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(stdout, "%05d %-40s %s\n", mg.Version, mg.Name, state)
	}
	return nil
}
