package server

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	eioparser "github.com/zishang520/socket.io/parsers/engine/v3/parser"
	"github.com/zishang520/socket.io/servers/socket/v3"
	"github.com/zishang520/socket.io/v3/pkg/types"
)

func handshakeOf(key, origin string) *socket.Handshake {
	return &socket.Handshake{
		Headers: map[string]any{
			"Connection": []string{"Upgrade"}, "Upgrade": []string{"websocket"},
			"Sec-Websocket-Key": []string{key}, "Origin": []string{origin},
		},
		Query: map[string]any{"EIO": []string{"4"}, "transport": []string{"websocket"}},
		Url:   "/socket.io/?EIO=4&transport=websocket",
		Time:  "2026-12-04T05:00:00Z",
		Auth:  map[string]any{"room": key},
	}
}

func sameMap(a, b map[string]any) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// Alike handshakes share their maps; the upgrade's key is not kept; what
// differs is not shared, and the content is what it was.
func TestCompactHandshakeShares(t *testing.T) {
	a, b, c := handshakeOf("k1", "https://a.example"), handshakeOf("k2", "https://a.example"), handshakeOf("k3", "https://b.example")
	for _, h := range []*socket.Handshake{a, b, c} {
		compactHandshake(h, "")
	}
	if _, kept := a.Headers["Sec-Websocket-Key"]; kept {
		t.Fatalf("Sec-Websocket-Key kept: %v", a.Headers)
	}
	if !sameMap(a.Headers, b.Headers) || !sameMap(a.Query, b.Query) || !sameMap(a.Query, c.Query) {
		t.Fatal("alike headers or queries not shared")
	}
	if sameMap(a.Headers, c.Headers) {
		t.Fatal("headers of another origin shared")
	}
	if got := c.Headers["Origin"].([]string); len(got) != 1 || got[0] != "https://b.example" {
		t.Fatalf("c's origin: %v", got)
	}
	if want := (map[string]any{"Connection": []string{"Upgrade"}, "Upgrade": []string{"websocket"}, "Origin": []string{"https://a.example"}}); !reflect.DeepEqual(map[string]any(b.Headers), want) {
		t.Fatalf("b's headers %#v, want %#v", b.Headers, want)
	}
	if sameMap(a.Auth, b.Auth) || b.Auth["room"] != "k2" {
		t.Fatalf("auth is the socket's own: %v", b.Auth)
	}
}

// A value the library would not have built (not a list of strings), or
// one that would make two contents look alike, is left alone.
func TestCompactHandshakeLeavesOddValues(t *testing.T) {
	h := handshakeOf("k", "o")
	h.Query["x"] = 1
	q := h.Query
	compactHandshake(h, "")
	if !sameMap(h.Query, q) {
		t.Fatal("a query with a non-list value was replaced")
	}
	// "a" = ["b\x01c"] and "a" = ["b", "c"] must not be taken for each other
	x := map[string]any{"a": []string{"b\x01c"}}
	y := map[string]any{"a": []string{"b", "c"}}
	if got := internValues(x); !sameMap(got, x) {
		t.Fatal("a value holding the separator was interned")
	}
	if got := internValues(y); !reflect.DeepEqual(got, y) {
		t.Fatalf("got %v, want %v", got, y)
	}
	// a large map (a polling request's cookies) is not kept by the tables
	big := func() map[string]any {
		return map[string]any{"Cookie": []string{strings.Repeat("c", handshakeInternBytes)}}
	}
	if a, b := internValues(big()), internValues(big()); sameMap(a, b) {
		t.Fatal("a map over handshakeInternBytes was interned")
	}
	long := strings.Repeat("u", handshakeInternBytes+1)
	if got := internString(long); unsafe.StringData(got) != unsafe.StringData(long) {
		t.Fatal("a string over handshakeInternBytes was replaced")
	}
}

// The tables stay bounded: past handshakeInternMax distinct values they
// start over, and what was handed out stays as it was.
func TestCompactHandshakeTablesBounded(t *testing.T) {
	first := internValues(map[string]any{"Origin": []string{"o-first"}})
	for i := range handshakeInternMax + 10 {
		internValues(map[string]any{"Origin": []string{fmt.Sprint("o-", i)}})
		internString(fmt.Sprint("t-", i))
	}
	internedValues.mu.Lock()
	n := len(internedValues.m)
	internedValues.mu.Unlock()
	if n > handshakeInternMax {
		t.Fatalf("%d interned values, want at most %d", n, handshakeInternMax)
	}
	if got := first["Origin"].([]string)[0]; got != "o-first" {
		t.Fatalf("a shared map changed: %v", first)
	}
}

// FuzzValidPayload: the polling payload check (closeOnBadPollingPayload)
// never panics on any body, in either Engine.IO version, and refuses an
// empty one and any v4 body with an empty packet.
func FuzzValidPayload(f *testing.F) {
	for _, seed := range []string{"", "1", "6", `42["x"]`, "2\x1e3", "\x1e\x1e", `42["a"]` + "\x1e\x1e" + `42["b"]`, "bAQID", "b!!!", "1:6", `7:42["x"]`, `99:42["x"]`, "ab:42", "1:9", "0:", "2:b4AQ", "bAQ==", "bAQ", "b", "bA\nQID", "bAQ\r\nID", "4x\x1ebAQID\x1e6", "7", "b====", "bAQ=ID"} {
		f.Add(seed, true)
		f.Add(seed, false)
	}
	f.Fuzz(func(t *testing.T, body string, v4 bool) {
		eio := "3"
		if v4 {
			eio = "4"
		}
		ok := validPayload(eio, []byte(body), "text/plain;charset=UTF-8")
		if ok && (body == "" || (v4 && strings.Contains("\x1e"+body+"\x1e", "\x1e\x1e"))) {
			t.Fatalf("EIO %s body %q accepted", eio, body)
		}
		// v4, checked in place: as the library's decoder judges it
		if v4 && body != "" && !strings.Contains("\x1e"+body+"\x1e", "\x1e\x1e") {
			_, err := eioparser.Parserv4().DecodePayload(types.NewStringBuffer([]byte(body)))
			if got := validV4Packets([]byte(body)); got != (err == nil) {
				t.Fatalf("body %q: checked %v, the library's decoder: %v", body, got, err)
			}
		}
	})
}
