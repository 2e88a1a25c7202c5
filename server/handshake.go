package server

import (
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/zishang520/socket.io/servers/socket/v3"
)

// The Socket.IO handshake each socket keeps for its life (the library's
// buildHandshake): maps of its own of the request's headers and query, its
// URL and its time. Nothing changes them after the namespace's middlewares
// (the library only builds them; fetchSockets answers read them,
// adapter.handshakeObj), and most sockets' are alike: a websocket upgrade
// keeps a handful of headers (upgradeHeaders), the same for every client
// of a browser and an origin, and the query is Engine.IO's
// (?EIO=4&transport=websocket). compactHandshake lets alike sockets share
// one copy of each, about 1 KB of live heap less per socket.
//
// A shared map is never written to: whoever would change one socket's
// handshake must copy it first (authenticate only changes Auth, which is
// not shared).

// handshakeDropped are headers that mean nothing once the connection is
// made, and differ per connection: kept, they would keep each socket's
// headers apart from all others.
var handshakeDropped = [...]string{"Sec-Websocket-Key"}

// handshakeInternMax bounds each table of interned values. A table that
// fills is emptied and starts over: the sockets keep the copies they have,
// new sockets share new ones.
const handshakeInternMax = 4096

// handshakeInternBytes bounds the content of an interned value: larger
// ones (a polling connection's request keeps every header, cookies
// included) are seldom alike, and the tables would keep up to
// handshakeInternMax of them alive after their sockets closed.
const handshakeInternBytes = 512

// interned is a table of shared values by their content.
type interned[V any] struct {
	mu sync.Mutex
	m  map[string]V
}

// get returns the value kept under key, or keeps v under key and returns
// it. The key is copied only when kept.
func (t *interned[V]) get(key []byte, v V) V {
	t.mu.Lock()
	defer t.mu.Unlock()
	if kept, ok := t.m[string(key)]; ok {
		return kept
	}
	if t.m == nil {
		t.m = make(map[string]V)
	} else if len(t.m) >= handshakeInternMax {
		clear(t.m)
	}
	t.m[string(key)] = v
	return v
}

var (
	internedValues  interned[map[string]any] // headers and queries
	internedStrings interned[string]         // URLs and times
)

// compactHandshake drops handshakeDropped from h's headers, adds the
// request's Host (net/http keeps it out of the headers; a Node server's
// handshake.headers.host, which fetchSockets answers carry, has it), and
// has h share its headers, query, URL and time with alike handshakes.
// Maps whose values are not all lists of strings (not the library's), and
// values over handshakeInternBytes, are left alone.
func compactHandshake(h *socket.Handshake, host string) {
	if h == nil {
		return
	}
	if h.Headers != nil {
		for _, k := range handshakeDropped {
			delete(h.Headers, k)
		}
		if _, ok := h.Headers["Host"]; !ok && host != "" {
			h.Headers["Host"] = []string{host}
		}
		h.Headers = internValues(h.Headers)
	}
	h.Query = internValues(h.Query)
	h.Url = internString(h.Url)
	h.Time = internString(h.Time)
}

// internValues returns the shared map equal to m, m itself when its values
// are not all []string.
func internValues(m map[string]any) map[string]any {
	if len(m) == 0 {
		return m
	}
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if _, ok := v.([]string); !ok {
			return m
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// key: name \x00 value \x01 value … \x00 per entry (names and values
	// of a request hold no NUL)
	var stack [handshakeInternBytes]byte
	b := stack[:0]
	for _, k := range keys {
		b = append(b, k...)
		for _, v := range m[k].([]string) {
			if strings.IndexByte(v, 0) >= 0 || strings.IndexByte(v, 1) >= 0 {
				return m
			}
			b = append(b, 1)
			b = append(b, v...)
		}
		b = append(b, 0)
		if len(b) > handshakeInternBytes {
			return m
		}
	}
	return internedValues.get(b, m)
}

// internString returns the shared string equal to s.
func internString(s string) string {
	if s == "" || len(s) > handshakeInternBytes {
		return s
	}
	var stack [handshakeInternBytes]byte
	return internedStrings.get(append(stack[:0], s...), s)
}

// handshakeToken is the client's token: the CONNECT's auth payload
// ({token}). A client of Engine.IO v3 (socket.io-client 2.x, with
// PRESENCE_ALLOW_EIO3) has no auth payload: its token comes as a query
// parameter, as such clients send it to a Node server (query: {token}),
// of the namespace's CONNECT (which the library hands over as auth, each
// value a list) or, for the main namespace, which such a client joins
// without a CONNECT, of its handshake request; inURL says so.
func handshakeToken(sock *socket.Socket) (token string, inURL bool) {
	h := sock.Handshake()
	if h == nil {
		return "", false
	}
	if t, ok := h.Auth["token"].(string); ok || sock.Conn().Protocol() != 3 {
		return t, false
	}
	if l, ok := h.Auth["token"].([]string); ok && len(l) > 0 {
		return l[0], true
	}
	return h.Query.Query().Get("token"), true
}

// dropURLToken removes a v3 client's token from the handshake's query and
// URL (handshakeToken): a credential is kept for no connection's life.
func dropURLToken(h *socket.Handshake) {
	delete(h.Query, "token")
	if u, err := url.Parse(h.Url); err == nil {
		q := u.Query()
		q.Del("token")
		u.RawQuery = q.Encode()
		h.Url = u.String()
	}
}
