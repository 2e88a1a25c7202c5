package transport

import (
	"net/http"
	"reflect"
	"sync"
	"unsafe"

	ws "github.com/gorilla/websocket"
	"github.com/zishang520/socket.io/servers/engine/v3"
	"github.com/zishang520/socket.io/v3/pkg/types"
)

// releaseBuffers drops the read buffer (a bufio.Reader of the engine's
// 1 KiB ReadBufferSize) and the write buffer (1 KiB and a frame header)
// that gorilla's Upgrader gives every connection: our transport reads and
// writes the hijacked connection itself (wsframes.go, wsout.go), control
// frames included, and keeps gorilla's Conn only until ReleaseRequest.
// The library builds the Upgrader, so the buffers cannot be declined
// there; they are cleared here, through reflection, as fields of the
// gorilla version this module pins (v1.5.3: Conn.br and Conn.writeBuf).
// It reports whether both fields were found; TestReleaseBuffers fails
// when an upgrade renames them. Measured: 2.8 KB of heap per websocket.
func releaseBuffers(c *ws.Conn) bool {
	if c == nil {
		return false
	}
	v := reflect.ValueOf(c).Elem()
	found := 0
	for _, name := range [...]string{"br", "writeBuf"} {
		f := v.FieldByName(name)
		if !f.IsValid() {
			continue
		}
		reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().SetZero()
		found++
	}
	return found == 2
}

// ReleaseRequest lets an engine connection on our websocket transport go
// of its handshake's request once its Socket.IO session is accepted. Call
// it from the namespace's last middleware, on the connection's reader,
// which is where a later CONNECT would read the request.
//
// The engine keeps the first request of every connection for the
// connection's life, and the transport's "headers" listener, which only
// the polling transport ever fires, holds it too; after the namespace's
// handshake (which copies its headers and query) nothing reads it.
// Measured: about 3 KB of heap per websocket, the library's HttpContext
// (its context and parameter bags) and the request our upgrade made
// (server.upgradeRequest). Gorilla's Conn from the engine's upgrade goes
// too (about 0.4 KB).
//
// The connection is left a shared request with no headers and no query:
// whatever still asks the library for it finds one (the library closes a
// connection that sends a second CONNECT for the namespace anyway). It
// reports whether the request was released: not for a connection on
// another transport, nor when the engine's socket has no field "request"
// (the library's v3.0.6 has it; TestReleaseRequest fails when an upgrade
// renames it).
func ReleaseRequest(conn engine.Socket) bool {
	w, ok := conn.Transport().(*wsTransport)
	if !ok {
		return false
	}
	v := reflect.ValueOf(conn)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return false
	}
	f := v.Elem().FieldByName("request")
	if !f.IsValid() || f.Type() != reflect.TypeFor[*types.HttpContext]() {
		return false
	}
	w.RemoveAllListeners("headers")
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(detachedRequest()))
	// gorilla's Conn too: our transport writes its control frames and
	// closes the connection itself (writeControl, closeConn), and the
	// engine's handshake, the last user of it, is over (the CONNECT this
	// follows was read only once the engine let the reader start).
	w.conn.Conn = nil
	return true
}

// detachedRequest is the request a released connection is left with.
var detachedRequest = sync.OnceValue(func() *types.HttpContext {
	r, err := http.NewRequest(http.MethodGet, "/socket.io/", http.NoBody)
	if err != nil {
		panic(err) // a constant URL
	}
	r.RequestURI = r.URL.RequestURI()
	return types.NewHttpContext(refusingWriter{}, r)
})

// refusingWriter is the detached request's response: nothing can be
// written to it.
type refusingWriter struct{}

func (refusingWriter) Header() http.Header       { return http.Header{} }
func (refusingWriter) Write([]byte) (int, error) { return 0, http.ErrHijacked }
func (refusingWriter) WriteHeader(int)           {}
