package handlers_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/presenced/presenced/auth"
	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/internal/fakeclock"
	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
)

const svcToken = "service-token-for-tests-0123456789"

// now is the tests' fixed clock (engine and reader).
var now = time.Date(2026, 11, 9, 12, 0, 30, 500_000_000, time.UTC)

type evictCall struct {
	Conv  string
	Users []string
}

type env struct {
	t      *testing.T
	url    string
	st     *store.SQLite
	eng    *presence.MemoryEngine
	clock  *fakeclock.Clock
	secret []byte

	mu     sync.Mutex
	evicts []evictCall
}

type envOpts struct {
	noService  bool
	rateLimit  int
	presences  handlers.PresenceReader // nil: the real reader
	membership presence.Membership     // nil: store membership through a cache
	// settingSaved replaces the real reader's SettingChanged
	settingSaved func(ctx context.Context, userID string) error
}

// newSQLite is an embedded store in the test's temporary directory, closed
// when the test ends.
func newSQLite(tb testing.TB) *store.SQLite {
	tb.Helper()
	st, err := store.OpenSQLite(context.Background(), filepath.Join(tb.TempDir(), "s.db"), store.SQLiteConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	st := newSQLite(t)
	clk := fakeclock.New(now)
	eng := presence.NewMemoryEngine(presence.NewMemory(), presence.Config{NodeID: "n1", Now: clk.Now})
	t.Cleanup(func() { eng.Close() })
	secret := []byte("0123456789abcdef0123456789abcdef")
	verifier, err := auth.NewHS256(secret)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, st: st, eng: eng, clock: clk, secret: secret}

	reader := lastseen.NewReader(lastseen.ReaderDeps{Status: eng, Store: st, Now: clk.Now, Versions: lastseen.NewLocalVersions()})
	var presences handlers.PresenceReader = reader
	if o.presences != nil {
		presences = o.presences
	}
	settingSaved := reader.SettingChanged
	if o.settingSaved != nil {
		settingSaved = o.settingSaved
	}
	membership := o.membership
	if membership == nil {
		membership = presence.NewCachedMembership(st, 0, 0)
	}
	token := svcToken
	if o.noService {
		token = ""
	}
	rest := handlers.NewREST(handlers.RESTDeps{
		Verifier:     verifier,
		ServiceToken: token,
		Presences:    presences,
		Rosters:      eng,
		Store:        st,
		Membership:   membership,
		SettingSaved: settingSaved,
		Evict: func(_ context.Context, conv string, users []string) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.evicts = append(e.evicts, evictCall{conv, slices.Clone(users)})
			return nil
		},
		RateLimit: o.rateLimit,
	})
	root := chi.NewRouter()
	root.Use(middleware.Recoverer)
	root.Mount("/v1", rest.Routes())
	srv := httptest.NewServer(root)
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

func (e *env) token(user string) string {
	e.t.Helper()
	return signToken(e.t, e.secret, user)
}

// signToken is a user's token signed with secret, valid for an hour.
func signToken(tb testing.TB, secret []byte, user string) string {
	tb.Helper()
	tok, err := auth.SignHS256(secret, user, time.Hour, time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

// req sends a request; auth is the whole Authorization header ("" for
// none). Every answer must be JSON.
func (e *env) req(method, path, authz, body string) resp {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if authz != "" {
		r.Header.Set("Authorization", authz)
	}
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		e.t.Errorf("%s %s: Content-Type %q, body %s", method, path, ct, b)
	}
	return resp{res.StatusCode, res.Header, b}
}

// as sends a request with a user's token.
func (e *env) as(user, method, path, body string) resp {
	e.t.Helper()
	return e.req(method, path, "Bearer "+e.token(user), body)
}

// service sends a request with the service token.
func (e *env) service(method, path, body string) resp {
	e.t.Helper()
	return e.req(method, path, "Bearer "+svcToken, body)
}

func (e *env) setPrivacy(user, v string) {
	e.t.Helper()
	r := e.as(user, "PUT", "/v1/me/privacy", `{"lastSeen":"`+v+`"}`)
	wantJSON(e.t, r, 200, `{"lastSeen":"`+v+`"}`)
}

func (e *env) setContacts(owner string, contacts ...string) {
	e.t.Helper()
	b, _ := json.Marshal(map[string]any{"userIds": append([]string{}, contacts...)})
	r := e.service("PUT", "/v1/service/users/"+owner+"/contacts", string(b))
	if r.status != 200 {
		e.t.Fatalf("set contacts: %d %s", r.status, r.body)
	}
}

func (e *env) lastSeen(user string, at time.Time) {
	e.t.Helper()
	if err := e.st.UpsertLastSeen(context.Background(), []store.LastSeen{{UserID: user, At: at}}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) connect(user string) {
	e.t.Helper()
	if err := e.eng.Connect(context.Background(), presence.Socket{ID: "s-" + user, UserID: user}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) evictCalls() []evictCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.evicts)
}

// wantJSON checks the status and that the body is the same JSON as want.
func wantJSON(t *testing.T, r resp, status int, want string) {
	t.Helper()
	if r.status != status {
		t.Errorf("status %d, want %d; body %s", r.status, status, r.body)
	}
	var got, exp any
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatalf("body is not JSON: %v: %s", err, r.body)
	}
	if err := json.Unmarshal([]byte(want), &exp); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	if !reflect.DeepEqual(got, exp) {
		t.Errorf("body\n got %s\nwant %s", bytes.TrimSpace(r.body), want)
	}
}

// wantError checks an error answer: status, code and the error shape.
func wantError(t *testing.T, r resp, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Errorf("status %d, want %d; body %s", r.status, status, r.body)
	}
	var body struct {
		Error *struct {
			Code    *string `json:"code"`
			Message *string `json:"message"`
		} `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || body.Error == nil || body.Error.Code == nil || body.Error.Message == nil {
		t.Fatalf("not the error shape: %s (%v)", r.body, err)
	}
	if *body.Error.Code != code {
		t.Errorf("code %q, want %q; body %s", *body.Error.Code, code, r.body)
	}
	if *body.Error.Message == "" {
		t.Errorf("empty message: %s", r.body)
	}
}

func errMessage(t *testing.T, r resp) string {
	t.Helper()
	var body struct{ Error struct{ Message string } }
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatal(err)
	}
	return body.Error.Message
}

func presenceJSON(user, status, lastSeen, bucket, display string) string {
	q := func(s string) string {
		if s == "" {
			return "null"
		}
		return `"` + s + `"`
	}
	return fmt.Sprintf(`{"userId":%q,"status":%q,"lastSeen":%s,"lastSeenBucket":%s,"display":%q}`,
		user, status, q(lastSeen), q(bucket), display)
}

// hiddenAs is the presence of target as a viewer who may not see its
// last-seen value sees it: hidden, with only bucket and the bucket's text.
func hiddenAs(target, bucket string) string {
	display, ok := map[string]string{
		"recently":     "last seen recently",
		"within_week":  "last seen within a week",
		"within_month": "last seen within a month",
		"long_ago":     "last seen a long time ago",
	}[bucket]
	if !ok {
		panic("hiddenAs: unknown bucket " + bucket)
	}
	return presenceJSON(target, "hidden", "", bucket, display)
}

// ---- happy paths and privacy (CONTRACT §3)

func TestPrivacyThroughUserPresenceAndQuery(t *testing.T) {
	e := newEnv(t, envOpts{})
	day := 24 * time.Hour

	// settings, contacts, last-seen values and connections
	for user, v := range map[string]string{
		"cora": "contacts", "carl": "contacts", "nora": "nobody", "otto": "nobody",
		"ghostn": "nobody", "recip": "nobody", "b2d": "nobody", "b3d": "nobody",
		"b3d1": "nobody", "b7d": "nobody", "b8d": "nobody", "b30d": "nobody",
		"b31d": "nobody", "b40d": "nobody",
	} {
		e.setPrivacy(user, v)
	}
	e.setContacts("cora", "alice", "recip")
	e.setContacts("carl", "bob")
	e.setContacts("alice", "cora", "carl") // one-sided: does not make alice a contact of carl
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	e.lastSeen("alice", ago(5*time.Minute+10*time.Second+250*time.Millisecond))
	e.lastSeen("evy", ago(5*time.Minute+10*time.Second+250*time.Millisecond))
	e.lastSeen("cora", ago(3*time.Hour+20*time.Minute))
	e.lastSeen("carl", ago(2*time.Hour))
	e.lastSeen("nora", ago(5*day))
	e.lastSeen("recip", ago(90*time.Second+123*time.Millisecond))
	e.lastSeen("old", ago(10*day))
	e.lastSeen("yday", ago(30*time.Hour))
	e.lastSeen("justnow", ago(20*time.Second))
	e.lastSeen("days4", ago(4*day+time.Hour))
	e.lastSeen("olive", ago(time.Hour)) // online: the stored value is not shown
	e.lastSeen("b2d", ago(2*day))
	e.lastSeen("b3d", ago(3*day))
	e.lastSeen("b3d1", ago(3*day+time.Millisecond))
	e.lastSeen("b7d", ago(7*day))
	e.lastSeen("b8d", ago(8*day))
	e.lastSeen("b30d", ago(30*day))
	e.lastSeen("b31d", ago(31*day))
	e.lastSeen("b40d", ago(40*day))
	e.connect("olive")
	e.connect("otto")
	e.clock.Set(now.Add(-10 * time.Minute)) // amy: connected, idle for longer than AWAY_AFTER
	e.connect("amy")
	e.clock.Set(now)

	cases := []struct {
		name, viewer, target string
		want                 string
	}{
		{"everyone: visible, rounded down to the minute", "alice", "evy",
			presenceJSON("evy", "offline", "2026-11-09T11:55:00.000Z", "", "last seen 5 minutes ago")},
		{"self: exact value", "alice", "alice",
			presenceJSON("alice", "offline", "2026-11-09T11:55:20.250Z", "", "last seen 5 minutes ago")},
		{"self with nobody: still exact", "recip", "recip",
			presenceJSON("recip", "offline", "2026-11-09T11:59:00.377Z", "", "last seen 1 minute ago")},
		{"contacts, viewer in contacts: visible", "alice", "cora",
			presenceJSON("cora", "offline", "2026-11-09T08:40:00.000Z", "", "last seen 3 hours ago")},
		{"contacts, viewer not in contacts: hidden", "bob", "cora",
			hiddenAs("cora", "recently")},
		{"contacts, only the viewer lists the target: hidden", "alice", "carl",
			hiddenAs("carl", "recently")},
		{"contacts, another viewer in contacts: visible", "bob", "carl",
			presenceJSON("carl", "offline", "2026-11-09T10:00:00.000Z", "", "last seen 2 hours ago")},
		{"nobody: hidden", "alice", "nora",
			hiddenAs("nora", "within_week")},
		{"reciprocity: viewer with nobody sees no one", "recip", "evy",
			hiddenAs("evy", "recently")},
		{"reciprocity beats being a contact", "recip", "cora",
			hiddenAs("cora", "recently")},
		{"reciprocity: online target hidden too", "recip", "olive",
			hiddenAs("olive", "recently")},
		{"online visible", "alice", "olive", presenceJSON("olive", "online", "", "", "online")},
		{"away visible", "alice", "amy", presenceJSON("amy", "away", "", "", "away")},
		{"online hidden", "alice", "otto", hiddenAs("otto", "recently")},
		{"online self", "otto", "otto", presenceJSON("otto", "online", "", "", "online")},
		{"never seen visible", "alice", "ghost", presenceJSON("ghost", "offline", "", "", "never seen")},
		{"never seen hidden", "alice", "ghostn", hiddenAs("ghostn", "long_ago")},
		{"display: just now", "alice", "justnow",
			presenceJSON("justnow", "offline", "2026-11-09T12:00:00.000Z", "", "last seen just now")},
		{"display: yesterday", "alice", "yday",
			presenceJSON("yday", "offline", "2026-11-08T06:00:00.000Z", "", "last seen yesterday")},
		{"display: days", "alice", "days4",
			presenceJSON("days4", "offline", "2026-11-05T11:00:00.000Z", "", "last seen 4 days ago")},
		{"display: date", "alice", "old",
			presenceJSON("old", "offline", "2026-10-30T12:00:00.000Z", "", "last seen on 30 Oct 2026")},
		{"bucket 2 days", "alice", "b2d", hiddenAs("b2d", "recently")},
		{"bucket exactly 3 days", "alice", "b3d", hiddenAs("b3d", "recently")},
		{"bucket just over 3 days", "alice", "b3d1", hiddenAs("b3d1", "within_week")},
		{"bucket exactly 7 days", "alice", "b7d", hiddenAs("b7d", "within_week")},
		{"bucket 8 days", "alice", "b8d", hiddenAs("b8d", "within_month")},
		{"bucket exactly 30 days", "alice", "b30d", hiddenAs("b30d", "within_month")},
		{"bucket 31 days", "alice", "b31d", hiddenAs("b31d", "long_ago")},
		{"bucket 40 days", "alice", "b40d", hiddenAs("b40d", "long_ago")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.as(c.viewer, "GET", "/v1/users/"+c.target+"/presence", "")
			wantJSON(t, r, 200, c.want)
			// the same through the bulk query
			r = e.as(c.viewer, "POST", "/v1/presence/query", `{"userIds":["`+c.target+`"]}`)
			wantJSON(t, r, 200, `{"presences":[`+c.want+`]}`)
		})
	}

	t.Run("query answers in request order, duplicates included", func(t *testing.T) {
		r := e.as("alice", "POST", "/v1/presence/query",
			`{"userIds":["evy","ghost","evy","alice","otto","olive"],"ignored":{"x":[1,2]}}`)
		evy := presenceJSON("evy", "offline", "2026-11-09T11:55:00.000Z", "", "last seen 5 minutes ago")
		wantJSON(t, r, 200, `{"presences":[`+strings.Join([]string{
			evy,
			presenceJSON("ghost", "offline", "", "", "never seen"),
			evy,
			presenceJSON("alice", "offline", "2026-11-09T11:55:20.250Z", "", "last seen 5 minutes ago"),
			hiddenAs("otto", "recently"),
			presenceJSON("olive", "online", "", "", "online"),
		}, ",")+`]}`)
	})

	t.Run("query of 1000 ids", func(t *testing.T) {
		ids := make([]string, handlers.MaxQueryIDs)
		for i := range ids {
			ids[i] = fmt.Sprintf("u%d", i%700) // duplicates too
		}
		b, _ := json.Marshal(map[string]any{"userIds": ids})
		r := e.as("alice", "POST", "/v1/presence/query", string(b))
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		var got struct{ Presences []lastseen.Presence }
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Presences) != len(ids) {
			t.Fatalf("%d presences, want %d", len(got.Presences), len(ids))
		}
		for i, p := range got.Presences {
			if p.UserID != ids[i] {
				t.Fatalf("presences[%d] = %s, want %s", i, p.UserID, ids[i])
			}
		}
	})

	t.Run("escaped id in the path", func(t *testing.T) {
		r := e.as("alice", "GET", "/v1/users/a%40b/presence", "")
		wantJSON(t, r, 200, presenceJSON("a@b", "offline", "", "", "never seen"))
	})
}

func TestMyPrivacy(t *testing.T) {
	e := newEnv(t, envOpts{})
	wantJSON(t, e.as("alice", "GET", "/v1/me/privacy", ""), 200, `{"lastSeen":"everyone"}`)
	for _, v := range []string{"contacts", "nobody", "everyone", "nobody"} {
		wantJSON(t, e.as("alice", "PUT", "/v1/me/privacy", `{"lastSeen":"`+v+`","other":1}`), 200, `{"lastSeen":"`+v+`"}`)
		wantJSON(t, e.as("alice", "GET", "/v1/me/privacy", ""), 200, `{"lastSeen":"`+v+`"}`)
	}
	// others' settings are their own
	wantJSON(t, e.as("bob", "GET", "/v1/me/privacy", ""), 200, `{"lastSeen":"everyone"}`)
	// and the setting takes effect at once
	e.lastSeen("alice", now.Add(-time.Hour))
	wantJSON(t, e.as("bob", "GET", "/v1/users/alice/presence", ""), 200, hiddenAs("alice", "recently"))
}

// A setting saved whose readers could not be told answers 503, which the
// client retries; the setting is saved all the same.
func TestMyPrivacySavedButNotTold(t *testing.T) {
	e := newEnv(t, envOpts{settingSaved: func(context.Context, string) error { return errors.New("redis down") }})
	r := e.as("alice", "PUT", "/v1/me/privacy", `{"lastSeen":"nobody"}`)
	wantJSON(t, r, 503, `{"error":{"code":"unavailable","message":"the setting is saved, but not every node has learnt it yet; retry"}}`)
	wantJSON(t, e.as("alice", "GET", "/v1/me/privacy", ""), 200, `{"lastSeen":"nobody"}`)
}

func TestConversationPresence(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	wantJSON(t, e.service("PUT", "/v1/service/conversations/c1/members", `{"userIds":["alice","bob","carol"]}`), 200,
		`{"conversationId":"c1","members":3,"removed":[]}`)

	// nobody there yet
	wantJSON(t, e.as("carol", "GET", "/v1/conversations/c1/presence", ""), 200,
		`{"conversationId":"c1","online":[],"typing":[]}`)

	e.connect("alice")
	if _, err := e.eng.Join(ctx, "s-alice", "c1"); err != nil {
		t.Fatal(err)
	}
	e.clock.Set(now.Add(2 * time.Second))
	e.connect("bob")
	if _, err := e.eng.Join(ctx, "s-bob", "c1"); err != nil {
		t.Fatal(err)
	}
	if err := e.eng.TypingStart(ctx, "s-bob", "c1"); err != nil {
		t.Fatal(err)
	}
	// since is rounded down to the minute, and null for a user whose
	// last-seen setting is not everyone (CONTRACT §1), whoever asks.
	wantJSON(t, e.as("carol", "GET", "/v1/conversations/c1/presence", ""), 200, `{"conversationId":"c1","online":[`+
		`{"userId":"alice","status":"online","since":"2026-11-09T12:00:00.000Z"},`+
		`{"userId":"bob","status":"online","since":"2026-11-09T12:00:00.000Z"}],"typing":["bob"]}`)
	wantJSON(t, e.as("bob", "PUT", "/v1/me/privacy", `{"lastSeen":"nobody"}`), 200, `{"lastSeen":"nobody"}`)
	wantJSON(t, e.as("alice", "PUT", "/v1/me/privacy", `{"lastSeen":"contacts"}`), 200, `{"lastSeen":"contacts"}`)
	for _, viewer := range []string{"carol", "bob"} {
		wantJSON(t, e.as(viewer, "GET", "/v1/conversations/c1/presence", ""), 200, `{"conversationId":"c1","online":[`+
			`{"userId":"alice","status":"online","since":null},`+
			`{"userId":"bob","status":"online","since":null}],"typing":["bob"]}`)
	}
	wantJSON(t, e.as("alice", "PUT", "/v1/me/privacy", `{"lastSeen":"everyone"}`), 200, `{"lastSeen":"everyone"}`)
	wantJSON(t, e.as("carol", "GET", "/v1/conversations/c1/presence", ""), 200, `{"conversationId":"c1","online":[`+
		`{"userId":"alice","status":"online","since":"2026-11-09T12:00:00.000Z"},`+
		`{"userId":"bob","status":"online","since":null}],"typing":["bob"]}`)

	// not a member: 403, whether the conversation exists or not
	wantError(t, e.as("mallory", "GET", "/v1/conversations/c1/presence", ""), 403, "forbidden")
	wantError(t, e.as("mallory", "GET", "/v1/conversations/nowhere/presence", ""), 403, "forbidden")
}

func TestServiceMembersReplace(t *testing.T) {
	e := newEnv(t, envOpts{})
	put := func(body string) resp { return e.service("PUT", "/v1/service/conversations/c1/members", body) }

	wantJSON(t, put(`{"userIds":["alice","bob","carol","bob"]}`), 200, `{"conversationId":"c1","members":3,"removed":[]}`)
	// every change is announced (other nodes forget their cached answers), with nobody to evict here
	if calls, want := e.evictCalls(), []evictCall{{"c1", []string{}}}; !reflect.DeepEqual(calls, want) {
		t.Fatalf("evict calls on an addition %+v, want %+v", calls, want)
	}
	wantJSON(t, e.as("bob", "GET", "/v1/conversations/c1/presence", ""), 200, `{"conversationId":"c1","online":[],"typing":[]}`)

	wantJSON(t, put(`{"userIds":["alice","dave"]}`), 200, `{"conversationId":"c1","members":2,"removed":["bob","carol"]}`)
	if calls, want := e.evictCalls(), []evictCall{{"c1", []string{}}, {"c1", []string{"bob", "carol"}}}; !reflect.DeepEqual(calls, want) {
		t.Fatalf("evict calls %+v, want %+v", calls, want)
	}
	// the membership cache is forgotten: bob is refused at once
	wantError(t, e.as("bob", "GET", "/v1/conversations/c1/presence", ""), 403, "forbidden")
	wantJSON(t, e.as("dave", "GET", "/v1/conversations/c1/presence", ""), 200, `{"conversationId":"c1","online":[],"typing":[]}`)

	// idempotent
	wantJSON(t, put(`{"userIds":["dave","alice"]}`), 200, `{"conversationId":"c1","members":2,"removed":[]}`)
	if calls := e.evictCalls(); len(calls) != 3 || len(calls[2].Users) != 0 {
		t.Fatalf("evict calls %+v, want a third with nobody", calls)
	}
	// empty list: everyone out
	wantJSON(t, put(`{"userIds":[]}`), 200, `{"conversationId":"c1","members":0,"removed":["alice","dave"]}`)
	if calls := e.evictCalls(); len(calls) != 4 || !reflect.DeepEqual(calls[3], evictCall{"c1", []string{"alice", "dave"}}) {
		t.Fatalf("evict calls %+v", calls)
	}

	// the whole store.MaxIDs fits, though it is more than 64 KiB of JSON
	ids := make([]string, handlers.MaxServiceIDs)
	for i := range ids {
		ids[i] = fmt.Sprintf("member-%05d", i)
	}
	b, _ := json.Marshal(map[string]any{"userIds": ids})
	if len(b) <= handlers.MaxBodyBytes {
		t.Fatalf("test body only %d bytes", len(b))
	}
	wantJSON(t, e.service("PUT", "/v1/service/conversations/big/members", string(b)), 200,
		fmt.Sprintf(`{"conversationId":"big","members":%d,"removed":[]}`, len(ids)))
	b, _ = json.Marshal(map[string]any{"userIds": append(ids, "one-more")})
	wantError(t, e.service("PUT", "/v1/service/conversations/big/members", string(b)), 413, "limit_exceeded")
}

func TestServiceContacts(t *testing.T) {
	e := newEnv(t, envOpts{})
	wantJSON(t, e.service("PUT", "/v1/service/users/cora/contacts", `{"userIds":["alice","bob","alice"]}`), 200,
		`{"userId":"cora","contacts":2}`)
	e.setPrivacy("cora", "contacts")
	e.lastSeen("cora", now.Add(-10*time.Minute))
	visible := presenceJSON("cora", "offline", "2026-11-09T11:50:00.000Z", "", "last seen 10 minutes ago")
	hidden := hiddenAs("cora", "recently")
	wantJSON(t, e.as("bob", "GET", "/v1/users/cora/presence", ""), 200, visible)
	// replaced, not merged
	wantJSON(t, e.service("PUT", "/v1/service/users/cora/contacts", `{"userIds":["alice"]}`), 200, `{"userId":"cora","contacts":1}`)
	wantJSON(t, e.as("bob", "GET", "/v1/users/cora/presence", ""), 200, hidden)
	wantJSON(t, e.as("alice", "GET", "/v1/users/cora/presence", ""), 200, visible)
	wantJSON(t, e.service("PUT", "/v1/service/users/cora/contacts", `{"userIds":[]}`), 200, `{"userId":"cora","contacts":0}`)
	wantJSON(t, e.as("alice", "GET", "/v1/users/cora/presence", ""), 200, hidden)
}

func TestOpenAPIServed(t *testing.T) {
	e := newEnv(t, envOpts{})
	r := e.req("GET", "/v1/openapi.json", "", "")
	if r.status != 200 || !bytes.Equal(r.body, handlers.OpenAPI) {
		t.Fatalf("GET /v1/openapi.json: %d, %d bytes", r.status, len(r.body))
	}
}

// ---- bad input

// A body declared longer than the limit is refused at once, 413, without
// waiting for it: it was read until the read deadline (30 s) when it never
// came, and then answered 400.
func TestDeclaredBodyTooLong(t *testing.T) {
	e := newEnv(t, envOpts{})
	u, _ := url.Parse(e.url)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/presence/query HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"userIds\":[", u.Host, e.token("alice"), handlers.MaxBodyBytes+1)
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer within 3 s: %v", err)
	}
	defer res.Body.Close()
	if res.StatusCode != 413 {
		t.Fatalf("status %d, want 413", res.StatusCode)
	}
	// the rest of the body is waited for a second at most
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil || time.Since(start) > 3*time.Second {
		t.Fatalf("the connection closed after %s (%v), want about 1 s", time.Since(start).Round(time.Millisecond), err)
	}
}

// A client that writes a body over the limit whole, as fetch or Go's client
// does, gets the 413: the connection was closed with the body unread and
// reset, and the client, still writing, saw only the reset (broken pipe).
func TestTooLongBodyAnswered(t *testing.T) {
	e := newEnv(t, envOpts{})
	for i := range 200 {
		body := `{"userIds":["a"],"pad":"` + strings.Repeat("x", handlers.MaxBodyBytes+i*1000) + `"}`
		res := e.as("alice", "POST", "/v1/presence/query", body)
		if res.status != 413 {
			t.Fatalf("request %d: %d %s, want 413", i, res.status, res.body)
		}
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t, envOpts{})
	long := strings.Repeat("x", 129)
	many := func(n int) string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("u%d", i)
		}
		b, _ := json.Marshal(map[string]any{"userIds": ids})
		return string(b)
	}
	huge := `{"userIds":["a"],"pad":"` + strings.Repeat("x", handlers.MaxBodyBytes) + `"}`
	hugeService := `{"userIds":["a"],"pad":"` + strings.Repeat("x", handlers.MaxServiceBodyBytes) + `"}`

	type tc struct {
		name, method, path, body string
		status                   int
		code                     string
	}
	var cases []tc
	userBodies := []struct {
		name, body string
		status     int
		code       string
	}{
		{"empty body", "", 400, "invalid_argument"},
		{"bad JSON", `{"userIds":[`, 400, "invalid_argument"},
		{"not JSON", `userIds=a`, 400, "invalid_argument"},
		{"array body", `["a"]`, 400, "invalid_argument"},
		{"string body", `"a"`, 400, "invalid_argument"},
		{"null body", `null`, 400, "invalid_argument"},
		{"trailing garbage", `{"userIds":["a"]} x`, 400, "invalid_argument"},
		{"two objects", `{"userIds":["a"]}{"userIds":["b"]}`, 400, "invalid_argument"},
		{"missing userIds", `{"ids":["a"]}`, 400, "invalid_argument"},
		{"userIds null", `{"userIds":null}`, 400, "invalid_argument"},
		{"userIds a string", `{"userIds":"a"}`, 400, "invalid_argument"},
		{"userIds an object", `{"userIds":{"a":1}}`, 400, "invalid_argument"},
		{"number in userIds", `{"userIds":["a",1]}`, 400, "invalid_argument"},
		{"null in userIds", `{"userIds":[null]}`, 400, "invalid_argument"},
		{"array in userIds", `{"userIds":[["a"]]}`, 400, "invalid_argument"},
		{"empty id", `{"userIds":[""]}`, 400, "invalid_argument"},
		{"bad character", `{"userIds":["a b"]}`, 400, "invalid_argument"},
		{"id too long", `{"userIds":["` + long + `"]}`, 400, "invalid_argument"},
		{"body over 64 KiB", huge, 413, "limit_exceeded"},
	}
	for _, b := range userBodies {
		cases = append(cases, tc{"query: " + b.name, "POST", "/v1/presence/query", b.body, b.status, b.code})
	}
	cases = append(cases,
		tc{"query: 0 ids", "POST", "/v1/presence/query", `{"userIds":[]}`, 400, "invalid_argument"},
		tc{"query: 1001 ids", "POST", "/v1/presence/query", many(1001), 413, "limit_exceeded"},
		tc{"user presence: bad id", "GET", "/v1/users/a%20b/presence", "", 400, "invalid_argument"},
		tc{"user presence: slash in id", "GET", "/v1/users/a%2Fb/presence", "", 400, "invalid_argument"},
		tc{"user presence: id too long", "GET", "/v1/users/" + long + "/presence", "", 400, "invalid_argument"},
		tc{"conversation: bad id", "GET", "/v1/conversations/c%21/presence", "", 400, "invalid_argument"},
		tc{"conversation: id too long", "GET", "/v1/conversations/" + long + "/presence", "", 400, "invalid_argument"},
		tc{"privacy: unknown value", "PUT", "/v1/me/privacy", `{"lastSeen":"friends"}`, 400, "invalid_argument"},
		tc{"privacy: wrong case", "PUT", "/v1/me/privacy", `{"lastSeen":"Everyone"}`, 400, "invalid_argument"},
		tc{"privacy: number", "PUT", "/v1/me/privacy", `{"lastSeen":1}`, 400, "invalid_argument"},
		tc{"privacy: null", "PUT", "/v1/me/privacy", `{"lastSeen":null}`, 400, "invalid_argument"},
		tc{"privacy: missing", "PUT", "/v1/me/privacy", `{}`, 400, "invalid_argument"},
		tc{"privacy: bad JSON", "PUT", "/v1/me/privacy", `{"lastSeen":`, 400, "invalid_argument"},
		tc{"privacy: array body", "PUT", "/v1/me/privacy", `["nobody"]`, 400, "invalid_argument"},
		tc{"privacy: trailing garbage", "PUT", "/v1/me/privacy", `{"lastSeen":"nobody"}]`, 400, "invalid_argument"},
		tc{"privacy: body over 64 KiB", "PUT", "/v1/me/privacy", `{"lastSeen":"nobody","pad":"` + strings.Repeat("x", handlers.MaxBodyBytes) + `"}`, 413, "limit_exceeded"},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wantError(t, e.as("alice", c.method, c.path, c.body), c.status, c.code)
		})
	}
	// privacy unchanged by all of this
	wantJSON(t, e.as("alice", "GET", "/v1/me/privacy", ""), 200, `{"lastSeen":"everyone"}`)

	for _, route := range []string{"/v1/service/conversations/c1/members", "/v1/service/users/u1/contacts"} {
		for _, b := range userBodies {
			if b.code == "limit_exceeded" {
				continue // service bodies may be larger
			}
			t.Run("service "+route+": "+b.name, func(t *testing.T) {
				wantError(t, e.service("PUT", route, b.body), b.status, b.code)
			})
		}
		t.Run("service "+route+": body over the service limit", func(t *testing.T) {
			wantError(t, e.service("PUT", route, hugeService), 413, "limit_exceeded")
		})
		t.Run("service "+route+": too many ids", func(t *testing.T) {
			wantError(t, e.service("PUT", route, many(handlers.MaxServiceIDs+1)), 413, "limit_exceeded")
		})
	}
	wantError(t, e.service("PUT", "/v1/service/conversations/c%20/members", `{"userIds":[]}`), 400, "invalid_argument")
	wantError(t, e.service("PUT", "/v1/service/users/"+long+"/contacts", `{"userIds":[]}`), 400, "invalid_argument")
	// nothing was written
	wantJSON(t, e.service("PUT", "/v1/service/conversations/c1/members", `{"userIds":[]}`), 200, `{"conversationId":"c1","members":0,"removed":[]}`)
}

// ---- authentication

func TestAuthentication(t *testing.T) {
	e := newEnv(t, envOpts{})
	other, err := auth.SignHS256([]byte("another-secret-another-secret-00"), "alice", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	expired, err := auth.SignHS256(e.secret, "alice", time.Hour, time.Now().Add(-2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	userRoutes := []struct{ method, path, body string }{
		{"GET", "/v1/users/bob/presence", ""},
		{"POST", "/v1/presence/query", `{"userIds":["bob"]}`},
		{"GET", "/v1/conversations/c1/presence", ""},
		{"GET", "/v1/me/privacy", ""},
		{"PUT", "/v1/me/privacy", `{"lastSeen":"nobody"}`},
	}
	creds := []struct {
		name, authz, reason string
	}{
		{"missing token", "", "missing token"},
		{"empty bearer", "Bearer ", "missing token"},
		{"other scheme", "Basic YWxpY2U6cHc=", "authorization scheme must be Bearer"},
		{"malformed token", "Bearer not-a-jwt", "malformed token"},
		{"wrong key", "Bearer " + other, "invalid signature"},
		{"expired token", "Bearer " + expired, "token expired"},
		{"service token on a user route", "Bearer " + svcToken, "the service token is not accepted here; use a user token"},
	}
	for _, rt := range userRoutes {
		for _, c := range creds {
			t.Run(rt.method+" "+rt.path+": "+c.name, func(t *testing.T) {
				r := e.req(rt.method, rt.path, c.authz, rt.body)
				wantError(t, r, 401, "unauthorized")
				if got := errMessage(t, r); got != c.reason {
					t.Errorf("message %q, want %q", got, c.reason)
				}
				if h := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(h, "Bearer") {
					t.Errorf("WWW-Authenticate %q", h)
				}
			})
		}
	}
	// the refused PUT changed nothing
	wantJSON(t, e.as("alice", "GET", "/v1/me/privacy", ""), 200, `{"lastSeen":"everyone"}`)

	serviceRoutes := []string{"/v1/service/conversations/c1/members", "/v1/service/users/u1/contacts"}
	for _, path := range serviceRoutes {
		for _, c := range []struct{ name, authz, reason string }{
			{"missing token", "", "missing token"},
			{"user token", "Bearer " + e.token("alice"), "a user token is not accepted here; use the service token"},
			{"wrong token", "Bearer " + svcToken + "x", "invalid service token"},
			{"prefix of the token", "Bearer " + svcToken[:10], "invalid service token"},
			{"other scheme", "Basic " + svcToken, "authorization scheme must be Bearer"},
		} {
			t.Run("PUT "+path+": "+c.name, func(t *testing.T) {
				r := e.req("PUT", path, c.authz, `{"userIds":["alice"]}`)
				wantError(t, r, 401, "unauthorized")
				if got := errMessage(t, r); got != c.reason {
					t.Errorf("message %q, want %q", got, c.reason)
				}
				if h := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(h, "Bearer") {
					t.Errorf("WWW-Authenticate %q", h)
				}
			})
		}
	}
	// the scheme is case-insensitive
	wantJSON(t, e.req("GET", "/v1/me/privacy", "bearer "+e.token("alice"), ""), 200, `{"lastSeen":"everyone"}`)
	// the openapi document needs no token
	if r := e.req("GET", "/v1/openapi.json", "", ""); r.status != 200 {
		t.Fatalf("openapi.json: %d", r.status)
	}
}

func TestServiceRoutesOffWithoutToken(t *testing.T) {
	e := newEnv(t, envOpts{noService: true})
	for _, path := range []string{"/v1/service/conversations/c1/members", "/v1/service/users/u1/contacts"} {
		for _, authz := range []string{"", "Bearer " + svcToken, "Bearer " + e.token("alice"), "Bearer "} {
			wantError(t, e.req("PUT", path, authz, `{"userIds":["alice"]}`), 404, "not_found")
		}
		wantError(t, e.req("GET", path, "", ""), 404, "not_found")
	}
	// the user routes are unaffected
	wantJSON(t, e.as("alice", "GET", "/v1/me/privacy", ""), 200, `{"lastSeen":"everyone"}`)
}

// ---- routing, limits, failures

func TestUnknownRoutesAndMethods(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, path := range []string{"/v1/nope", "/v1/users/alice", "/v1/users/alice/presence/x", "/v1/", "/v1/service/nope"} {
		wantError(t, e.as("alice", "GET", path, ""), 404, "not_found")
		wantError(t, e.req("GET", path, "", ""), 404, "not_found")
	}
	for _, c := range []struct{ method, path, allow string }{
		{"DELETE", "/v1/me/privacy", "GET, PUT"},
		{"POST", "/v1/users/alice/presence", "GET"},
		{"GET", "/v1/presence/query", "POST"},
		{"GET", "/v1/service/users/u1/contacts", "PUT"},
	} {
		r := e.as("alice", c.method, c.path, "")
		wantError(t, r, 405, "invalid_argument")
		if got := r.header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
	}
}

func TestRateLimit(t *testing.T) {
	e := newEnv(t, envOpts{rateLimit: 3})
	check429 := func(r resp) {
		t.Helper()
		wantError(t, r, 429, "rate_limited")
		if ra := r.header.Get("Retry-After"); ra == "" || ra == "0" {
			t.Errorf("Retry-After %q", ra)
		}
	}
	for i := 0; i < 3; i++ {
		wantJSON(t, e.as("alice", "GET", "/v1/me/privacy", ""), 200, `{"lastSeen":"everyone"}`)
	}
	check429(e.as("alice", "GET", "/v1/me/privacy", ""))
	check429(e.as("alice", "POST", "/v1/presence/query", `{"userIds":["bob"]}`)) // one budget per user
	// others have their own budget
	wantJSON(t, e.as("bob", "GET", "/v1/me/privacy", ""), 200, `{"lastSeen":"everyone"}`)

	// the service token has its own
	for i := 0; i < 3; i++ {
		wantJSON(t, e.service("PUT", "/v1/service/users/u1/contacts", `{"userIds":[]}`), 200, `{"userId":"u1","contacts":0}`)
	}
	check429(e.service("PUT", "/v1/service/users/u1/contacts", `{"userIds":[]}`))

	// unauthenticated requests are limited by address
	for i := 0; i < 3; i++ {
		wantError(t, e.req("GET", "/v1/me/privacy", "Bearer junk", ""), 401, "unauthorized")
	}
	check429(e.req("GET", "/v1/me/privacy", "", ""))
	check429(e.req("PUT", "/v1/service/users/u1/contacts", "Bearer junk", `{"userIds":[]}`))
	// a valid user is not affected by the address's failures
	wantJSON(t, e.as("carol", "GET", "/v1/me/privacy", ""), 200, `{"lastSeen":"everyone"}`)
}

type panicky struct{}

func (panicky) Presences(context.Context, string, []string) ([]lastseen.Presence, error) {
	panic("boom")
}

type failing struct{ err error }

func (f failing) Presences(context.Context, string, []string) ([]lastseen.Presence, error) {
	return nil, f.err
}

func TestFailures(t *testing.T) {
	t.Run("store unavailable", func(t *testing.T) {
		e := newEnv(t, envOpts{})
		e.st.Close()
		wantError(t, e.as("alice", "GET", "/v1/me/privacy", ""), 503, "unavailable")
		wantError(t, e.as("alice", "PUT", "/v1/me/privacy", `{"lastSeen":"nobody"}`), 503, "unavailable")
		wantError(t, e.as("alice", "GET", "/v1/users/bob/presence", ""), 503, "unavailable")
		wantError(t, e.as("alice", "GET", "/v1/conversations/c1/presence", ""), 503, "unavailable")
		wantError(t, e.service("PUT", "/v1/service/users/u1/contacts", `{"userIds":[]}`), 503, "unavailable")
		wantError(t, e.service("PUT", "/v1/service/conversations/c1/members", `{"userIds":[]}`), 503, "unavailable")
	})
	t.Run("presence backend unavailable", func(t *testing.T) {
		e := newEnv(t, envOpts{presences: failing{fmt.Errorf("read: %w", presence.ErrUnavailable)}})
		wantError(t, e.as("alice", "POST", "/v1/presence/query", `{"userIds":["bob"]}`), 503, "unavailable")
	})
	t.Run("internal error", func(t *testing.T) {
		e := newEnv(t, envOpts{presences: failing{errors.New("secret detail")}})
		r := e.as("alice", "GET", "/v1/users/bob/presence", "")
		wantError(t, r, 500, "internal")
		if bytes.Contains(r.body, []byte("secret detail")) {
			t.Errorf("internal detail leaked: %s", r.body)
		}
	})
	t.Run("panic", func(t *testing.T) {
		e := newEnv(t, envOpts{presences: panicky{}})
		wantError(t, e.as("alice", "GET", "/v1/users/bob/presence", ""), 500, "internal")
		// the server lives on
		wantJSON(t, e.as("alice", "GET", "/v1/me/privacy", ""), 200, `{"lastSeen":"everyone"}`)
	})
}
