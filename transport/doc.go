// Package transport is presenced's Engine.IO websocket transport beneath the
// Socket.IO library (github.com/zishang520/socket.io): it reads frames
// itself (wsframes.go), hands the EVENT packets of the main namespace to a
// Dispatcher (the socket handlers) on a small worker pool (wspool.go),
// encodes their acks itself (wsjson.go), and passes everything else up the
// library's pipeline; an idle connection's reader parks on one epoll
// instance for the process (poller_linux.go). Everything a websocket is sent
// goes through one ordered queue of whole frames (wsout.go), and broadcasts
// are encoded once for all their recipients (broadcast.go: Frame,
// LocalAdapter), from a room index of its own (rooms.go). Beside it: the bound on what a client leaves unread
// (outbound.go), the library's ping-race guard (pingrace.go), the release of
// what the upgrade left (release.go: gorilla's buffers and Conn, the
// handshake's request), and the socket.io-msgpack-parser
// format (msgpackparser.go). It knows nothing of the handlers, presence or
// HTTP routing.
package transport
