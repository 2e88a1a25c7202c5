package admin_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/presenced/presenced/ids"
)

// The admin API's disconnect body: no panic; a refused body (400)
// disconnects nobody; an accepted one disconnects exactly its valid user.
func FuzzAdminDisconnect(f *testing.F) {
	for _, s := range []string{`{"userId":"alice","reason":"abuse"}`, `{"userId":"alice"}`, `{"userId":"","reason":"x"}`,
		`{"userId":"a b","reason":"x"}`, `{"userId":1,"reason":"x"}`, `[]`, `null`, `{`, `{"userId":"alice","reason":"` + strings.Repeat("r", 501) + `"}`,
		`{"userId":"alice","reason":"` + strings.Repeat("理", 500) + `"}`, `{"userId":"alice","reason":"x"} trailing`} {
		f.Add(s)
	}
	fx := newFixture(f)
	c := fx.session(f)
	var s struct {
		CSRF string `json:"csrf"`
	}
	getJSON(f, c, fx.srv.URL+"/admin/api/session", &s)
	f.Fuzz(func(t *testing.T, body string) {
		fx.sockets.mu.Lock()
		fx.sockets.disconnected = nil
		fx.sockets.mu.Unlock()
		req, _ := http.NewRequest("POST", fx.srv.URL+"/admin/api/users/disconnect", strings.NewReader(body))
		req.Header.Set("X-CSRF-Token", s.CSRF)
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		fx.sockets.mu.Lock()
		got := fx.sockets.disconnected
		fx.sockets.mu.Unlock()
		switch res.StatusCode {
		case http.StatusOK:
			var b struct {
				UserID string `json:"userId"`
				Reason string `json:"reason"`
			}
			if err := json.Unmarshal([]byte(body), &b); err != nil || !ids.Valid(b.UserID) || b.Reason == "" || utf8.RuneCountInString(b.Reason) > 500 {
				t.Fatalf("accepted %q", body)
			}
			if len(got) != 1 || got[0] != b.UserID {
				t.Fatalf("accepted %q but disconnected %v", body, got)
			}
		case http.StatusBadRequest:
			if len(got) != 0 {
				t.Fatalf("refused %q but disconnected %v", body, got)
			}
		default:
			t.Fatalf("%q: status %d", body, res.StatusCode)
		}
	})
}

// The login bodies, JSON and form: no panic, and only the right token
// opens a session (a fresh client per input; the wrong-token limit is
// per IP, so the seeds stay under it and the fuzzer's 429 counts as a
// refusal).
func FuzzAdminLogin(f *testing.F) {
	for _, s := range []string{`{"token":"` + token + `"}`, `{"token":"wrong"}`, `{"token":1}`, `{}`, `[`, ``} {
		f.Add(s, false)
	}
	f.Add("token="+url.QueryEscape(token), true)
	f.Add("token=%zz", true)
	fx := newFixture(f)
	f.Fuzz(func(t *testing.T, body string, form bool) {
		c := client(t)
		path, ctype := "/admin/api/login", "application/json"
		if form {
			path, ctype = "/admin/login", "application/x-www-form-urlencoded"
		}
		res, err := c.Post(fx.srv.URL+path, ctype, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode >= 500 {
			t.Fatalf("%q: status %d", body, res.StatusCode)
		}
		ok := res.StatusCode == http.StatusNoContent || (form && res.Header.Get("Location") == "/admin/")
		var gave bool
		if form {
			q, err := url.ParseQuery(body)
			gave = err == nil && q.Get("token") == token
		} else {
			var b struct {
				Token string `json:"token"`
			}
			gave = json.NewDecoder(strings.NewReader(body)).Decode(&b) == nil && b.Token == token
		}
		if ok && !gave {
			t.Fatalf("%q opened a session without the token", body)
		}
	})
}
