package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/presenced/presenced/auth"
	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/ids"
	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
)

// Fuzz targets of the REST body decoders (readObject, idList, the privacy
// value, the path ids of the service routes), through the real router on
// an embedded store. Every target checks that nothing panics, that every
// answer is JSON with the contract's error shape and a 4xx status when it
// is not 200, that a refused request changes nothing in the store, and
// that an accepted one did what it said.
//
//	go test -run '^$' -fuzz '^FuzzRESTPrivacyPut$' -fuzztime 10s ./handlers

// restFuzz is one API on one store, shared by a target's inputs.
type restFuzz struct {
	h      http.Handler
	st     *store.SQLite
	user   string // the viewer's token
	mu     sync.Mutex
	evicts int
}

func newRESTFuzz(tb testing.TB) *restFuzz {
	tb.Helper()
	ctx := context.Background()
	st := newSQLite(tb)
	eng := presence.NewMemoryEngine(presence.NewMemory(), presence.Config{NodeID: "n1"})
	secret := []byte("0123456789abcdef0123456789abcdef")
	verifier, err := auth.NewHS256(secret)
	if err != nil {
		tb.Fatal(err)
	}
	f := &restFuzz{st: st, user: signToken(tb, secret, "viewer")}
	rest := handlers.NewREST(handlers.RESTDeps{
		Verifier:     verifier,
		ServiceToken: svcToken,
		Presences:    lastseen.NewReader(lastseen.ReaderDeps{Status: eng, Store: st}),
		Rosters:      eng,
		Store:        st,
		Membership:   presence.NewCachedMembership(st, 0, 0),
		Evict: func(context.Context, string, []string) error {
			f.mu.Lock()
			f.evicts++
			f.mu.Unlock()
			return nil
		},
		RateLimit: 1 << 30,
	})
	root := chi.NewRouter()
	root.Mount("/v1", rest.Routes())
	f.h = root
	// Known state that a refused request must leave as it is.
	if err := st.SetPrivacy(ctx, "viewer", store.Visibility("contacts")); err != nil {
		tb.Fatal(err)
	}
	if _, err := st.SetMembers(ctx, "c1", []string{"m1", "m2"}); err != nil {
		tb.Fatal(err)
	}
	if err := st.SetContacts(ctx, "u1", []string{"k1", "k2"}); err != nil {
		tb.Fatal(err)
	}
	return f
}

// do sends one request; it checks the answer's shape and returns its
// status and decoded body.
func (f *restFuzz) do(t *testing.T, method, path, authz string, body []byte) (int, map[string]any) {
	t.Helper()
	r := httptest.NewRequest(method, "http://x"+path, bytes.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+authz)
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	var out map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s %s %q: answer %d is not a JSON object: %q", method, path, body, w.Code, w.Body.Bytes())
	}
	if w.Code != http.StatusOK {
		e, _ := out["error"].(map[string]any)
		code, _ := e["code"].(string)
		msg, _ := e["message"].(string)
		if w.Code != http.StatusBadRequest && w.Code != http.StatusRequestEntityTooLarge && w.Code != http.StatusNotFound && w.Code != http.StatusMethodNotAllowed {
			t.Fatalf("%s %s %q: status %d %v (bad input must be a 4xx)", method, path, body, w.Code, out)
		}
		if code == "" || msg == "" {
			t.Fatalf("%s %s: error without code or message: %v", method, path, out)
		}
	}
	return w.Code, out
}

// restState is what the routes under test could change.
type restState struct {
	Privacy  map[string]store.Visibility
	Members  map[string][]string
	Contacts map[string]map[string]bool
	Evicts   int
}

func (f *restFuzz) snapshot(t *testing.T, convs, owners, candidates []string) restState {
	t.Helper()
	ctx := context.Background()
	s := restState{Members: map[string][]string{}, Contacts: map[string]map[string]bool{}}
	var err error
	if s.Privacy, err = f.st.Privacy(ctx, []string{"viewer"}); err != nil {
		t.Fatal(err)
	}
	// members among those the fuzz inputs could have put there, read as
	// production reads them (IsMember)
	for _, c := range convs {
		s.Members[c] = []string{}
		for _, u := range append([]string{"m1", "m2"}, candidates...) {
			ok, err := f.st.IsMember(ctx, c, u)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				s.Members[c] = append(s.Members[c], u)
			}
		}
		slices.Sort(s.Members[c])
		s.Members[c] = slices.Compact(s.Members[c])
	}
	for _, o := range owners {
		if s.Contacts[o], err = f.st.ContactsAmong(ctx, o, candidates); err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	s.Evicts = f.evicts
	f.mu.Unlock()
	return s
}

// bodyIDs reads the valid ids of a body's userIds leniently (whatever the
// handler makes of it), for the snapshot.
func bodyIDs(body []byte) []string {
	var v struct{ UserIds []any }
	_ = json.Unmarshal(body, &v)
	var out []string
	for _, x := range v.UserIds {
		if s, ok := x.(string); ok && ids.Valid(s) {
			out = append(out, s)
		}
	}
	return out
}

// acceptedIDs decodes an accepted body's userIds strictly.
func acceptedIDs(t *testing.T, body []byte) []string {
	t.Helper()
	var v map[string]json.RawMessage
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("accepted body %q is not a JSON object: %v", body, err)
	}
	var list []string
	if err := json.Unmarshal(v["userIds"], &list); err != nil {
		t.Fatalf("accepted body %q: userIds %s", body, v["userIds"])
	}
	for _, id := range list {
		if !ids.Valid(id) {
			t.Fatalf("accepted invalid id %q", id)
		}
	}
	return list
}

var restIDSeeds = []string{
	`{"userIds":["u2"]}`, `{"userIds":["u2","u2","u3"]}`, `{"userIds":[]}`, `{"userIds":null}`, `{}`, `null`, ``,
	`[]`, `{"userIds":"u2"}`, `{"userIds":[5]}`, `{"userIds":[""]}`, `{"userIds":["a b"]}`, `{"userIds":["u1"],"extra":1}`,
	`{"userIds":["u1"]} trailing`, `{"userIds":["\u0075\u0031"]}`, `  {"userIds":["u1"]}  `, `{"userIds":["u1"],"userIds":["u2"]}`,
}

func FuzzRESTPresenceQuery(f *testing.F) {
	for _, s := range restIDSeeds {
		f.Add([]byte(s))
	}
	env := newRESTFuzz(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		ids := bodyIDs(body)
		before := env.snapshot(t, []string{"c1"}, []string{"u1"}, ids)
		status, out := env.do(t, "POST", "/v1/presence/query", env.user, body)
		if after := env.snapshot(t, []string{"c1"}, []string{"u1"}, ids); !equalJSON(before, after) {
			t.Fatalf("a query changed the store: %+v → %+v", before, after)
		}
		if status != http.StatusOK {
			return
		}
		want := acceptedIDs(t, body)
		ps, _ := out["presences"].([]any)
		if len(want) == 0 || len(ps) != len(want) {
			t.Fatalf("%d presences for %d ids (%q)", len(ps), len(want), body)
		}
		for i, p := range ps {
			if u, _ := p.(map[string]any)["userId"].(string); u != want[i] {
				t.Fatalf("presence %d is %q, want %q (request order)", i, u, want[i])
			}
		}
	})
}

func FuzzRESTPrivacyPut(f *testing.F) {
	for _, s := range []string{`{"lastSeen":"everyone"}`, `{"lastSeen":"contacts"}`, `{"lastSeen":"nobody"}`,
		`{"lastSeen":"Everyone"}`, `{"lastSeen":""}`, `{"lastSeen":null}`, `{"lastSeen":1}`, `{}`, `null`, ``, `[]`,
		`{"lastSeen":"nobody","x":[1]}`, `{"lastSeen":"\u006eobody"}`, `{"lastSeen":["nobody"]}`} {
		f.Add([]byte(s))
	}
	env := newRESTFuzz(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		before := env.snapshot(t, []string{"c1"}, []string{"u1"}, []string{"k1", "k2"})
		status, out := env.do(t, "PUT", "/v1/me/privacy", env.user, body)
		after := env.snapshot(t, []string{"c1"}, []string{"u1"}, []string{"k1", "k2"})
		if status != http.StatusOK {
			if !equalJSON(before, after) {
				t.Fatalf("refused (%d) but changed: %+v → %+v", status, before, after)
			}
			return
		}
		var v struct{ LastSeen string }
		if err := json.Unmarshal(body, &v); err != nil || !store.Visibility(v.LastSeen).Valid() {
			t.Fatalf("accepted %q", body)
		}
		if out["lastSeen"] != v.LastSeen || after.Privacy["viewer"] != store.Visibility(v.LastSeen) {
			t.Fatalf("set %q: answered %v, stored %v", v.LastSeen, out["lastSeen"], after.Privacy["viewer"])
		}
		// back to the known value for the next input
		if err := env.st.SetPrivacy(context.Background(), "viewer", store.Visibility("contacts")); err != nil {
			t.Fatal(err)
		}
	})
}

// serviceSeeds are (path id, body) pairs for the service routes.
func serviceSeeds(f *testing.F) {
	for _, s := range restIDSeeds {
		f.Add("c9", []byte(s))
	}
	for _, id := range []string{"", "c1", "a b", "a%2Fb", "a/b", "caf\u00e9", strings.Repeat("x", 129), "..", "%"} {
		f.Add(id, []byte(`{"userIds":["m1"]}`))
	}
}

// fuzzService runs one service route: PUT path(id) with body.
func fuzzService(f *testing.F, path func(id string) string, check func(t *testing.T, env *restFuzz, id string, ids []string, out map[string]any, after restState)) {
	serviceSeeds(f)
	env := newRESTFuzz(f)
	f.Fuzz(func(t *testing.T, id string, body []byte) {
		keys := []string{"c1", "u1"}
		if ids.Valid(id) && !slices.Contains(keys, id) {
			keys = append(keys, id)
		}
		cands := append([]string{"k1", "k2", "m1", "m2"}, bodyIDs(body)...)
		before := env.snapshot(t, keys, keys, cands)
		status, out := env.do(t, "PUT", path(url.PathEscape(id)), svcToken, body)
		after := env.snapshot(t, keys, keys, cands)
		if status != http.StatusOK {
			if !equalJSON(before, after) {
				t.Fatalf("refused (%d) but changed: %+v → %+v", status, before, after)
			}
			return
		}
		if !ids.Valid(id) {
			t.Fatalf("path id %q accepted", id)
		}
		check(t, env, id, acceptedIDs(t, body), out, after)
		// back to the known state for the next input
		ctx := context.Background()
		if _, err := env.st.SetMembers(ctx, "c1", []string{"m1", "m2"}); err != nil {
			t.Fatal(err)
		}
		if err := env.st.SetContacts(ctx, "u1", []string{"k1", "k2"}); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzRESTServiceMembers(f *testing.F) {
	fuzzService(f, func(id string) string { return "/v1/service/conversations/" + id + "/members" },
		func(t *testing.T, _ *restFuzz, conv string, ids []string, out map[string]any, after restState) {
			want := slices.Clone(ids)
			slices.Sort(want)
			want = slices.Compact(want)
			if got := after.Members[conv]; !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Fatalf("members of %q: stored %v, want %v", conv, got, want)
			}
			if out["conversationId"] != conv || out["members"] != float64(len(want)) {
				t.Fatalf("answer %v for %q with %d members", out, conv, len(want))
			}
		})
}

func FuzzRESTServiceContacts(f *testing.F) {
	fuzzService(f, func(id string) string { return "/v1/service/users/" + id + "/contacts" },
		func(t *testing.T, _ *restFuzz, user string, ids []string, out map[string]any, after restState) {
			for cand, is := range after.Contacts[user] {
				if is != slices.Contains(ids, cand) {
					t.Fatalf("contacts of %q: %q is %v, body %v", user, cand, is, ids)
				}
			}
			for _, id := range ids {
				if !after.Contacts[user][id] {
					t.Fatalf("contacts of %q: %q missing", user, id)
				}
			}
			want := slices.Clone(ids)
			slices.Sort(want)
			if out["userId"] != user || out["contacts"] != float64(len(slices.Compact(want))) {
				t.Fatalf("answer %v for %q with %v", out, user, ids)
			}
		})
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
