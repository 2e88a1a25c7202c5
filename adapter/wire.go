package adapter

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/zishang520/socket.io/parsers/socket/v3/parser"
	"github.com/zishang520/socket.io/servers/socket/v3"
	"github.com/zishang520/socket.io/v3/pkg/types"

	"github.com/presenced/presenced/transport"
)

// Request types of the classic protocol (createAdapter), index.js RequestType.
const (
	classicSockets              = 0
	classicAllRooms             = 1
	classicRemoteJoin           = 2
	classicRemoteLeave          = 3
	classicRemoteDisconnect     = 4
	classicRemoteFetch          = 5
	classicServerSideEmit       = 6
	classicBroadcast            = 7
	classicBroadcastClientCount = 8
	classicBroadcastAck         = 9
)

// Message types of the sharded protocol (createShardedAdapter), the
// MessageType of socket.io-adapter's cluster-adapter.js.
const (
	clusterBroadcast              = 3
	clusterSocketsJoin            = 4
	clusterSocketsLeave           = 5
	clusterDisconnectSockets      = 6
	clusterFetchSockets           = 7
	clusterFetchSocketsResponse   = 8
	clusterServerSideEmit         = 9
	clusterServerSideEmitResponse = 10
	clusterBroadcastClientCount   = 11
	clusterBroadcastAck           = 12
)

// emitterUID is the uid of messages from @socket.io/redis-emitter.
const emitterUID = "emitter"

const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// uid2 returns n random alphanumeric characters, like the uid2 package.
func uid2(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alnum[int(b[i])%len(alnum)]
	}
	return string(b)
}

// randomID returns 16 hex digits, like cluster-adapter's randomId().
func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// looksLikeASocketID is the sharded adapter's test for a private room.
func looksLikeASocketID(room string) bool { return len(room) == 20 }

// roomList returns the rooms of s as a JSON array (in sorted order, so that
// equal sets give equal bytes).
func roomList(s *types.Set[socket.Room]) []any {
	if s == nil {
		return []any{}
	}
	keys := s.Keys()
	out := make([]string, len(keys))
	for i, r := range keys {
		out[i] = string(r)
	}
	sort.Strings(out)
	list := make([]any, len(out))
	for i, r := range out {
		list[i] = r
	}
	return list
}

func roomSlice(rooms []socket.Room) []any {
	list := make([]any, len(rooms))
	for i, r := range rooms {
		list[i] = string(r)
	}
	return list
}

// flagsObj renders broadcast flags the way Node's BroadcastOperator holds
// them: only the flags that are set, the timeout in milliseconds.
func flagsObj(f *socket.BroadcastFlags) obj {
	o := obj{}
	if f == nil {
		return o
	}
	if f.ExpectSingleResponse {
		o = append(o, kv{"expectSingleResponse", true})
	}
	if f.Volatile {
		o = append(o, kv{"volatile", true})
	}
	if f.Compress != nil {
		o = append(o, kv{"compress", *f.Compress})
	}
	if f.Local {
		o = append(o, kv{"local", true})
	}
	if f.Timeout != nil {
		o = append(o, kv{"timeout", f.Timeout.Milliseconds()})
	}
	return o
}

// optsObj renders broadcast options: {rooms, except} or {rooms, except, flags}.
func optsObj(opts *socket.BroadcastOptions, withFlags bool) obj {
	var rooms, except *types.Set[socket.Room]
	var flags *socket.BroadcastFlags
	if opts != nil {
		rooms, except, flags = opts.Rooms, opts.Except, opts.Flags
	}
	o := obj{{"rooms", roomList(rooms)}, {"except", roomList(except)}}
	if withFlags {
		o = append(o, kv{"flags", flagsObj(flags)})
	}
	return o
}

// packetObj renders a Socket.IO packet: {type, data, nsp} in the classic
// protocol; {type, data} in the sharded one, where Node's ClusterAdapter
// publishes the packet before the namespace is set on it.
func packetObj(p *parser.Packet, withNsp bool) obj {
	o := obj{{"type", int(p.Type)}}
	if p.Data != nil {
		o = append(o, kv{"data", normalizeBinary(p.Data)})
	}
	if withNsp {
		o = append(o, kv{"nsp", p.Nsp})
	}
	if p.Id != nil {
		o = append(o, kv{"id", *p.Id})
	}
	return o
}

// decodeMessage reads a message body: JSON if it starts with "{", else msgpack.
func decodeMessage(payload string) (any, error) {
	if len(payload) > 0 && payload[0] == '{' {
		var v any
		if err := json.Unmarshal([]byte(payload), &v); err != nil {
			return nil, err
		}
		return v, nil
	}
	return decodeMsgpack([]byte(payload))
}

// encodeMessage writes a sharded-protocol message: JSON, unless its data
// holds binary (then msgpack), as ShardedRedisAdapter.encode does.
func encodeMessage(o obj, mayContainBinary bool) ([]byte, error) {
	if mayContainBinary {
		if data, _ := o.get("data"); hasBinary(data) {
			return encodeMsgpack(o)
		}
	}
	return appendJSON(nil, o)
}

var errMalformed = errors.New("adapter: malformed message")

// decodeMap decodes a message of another node as a map; false for a
// malformed one or another value. A malformed one is logged (ignore) as
// what, unless what is "".
func (a *NamespaceAdapter) decodeMap(payload, what string) (map[string]any, bool) {
	v, err := decodeMessage(payload)
	if err != nil {
		if what != "" {
			a.ignore(what, err)
		}
		return nil, false
	}
	return asMap(v)
}

func asMap(v any) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	return m, ok
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

func num(m map[string]any, k string) (float64, bool) {
	f, ok := m[k].(float64)
	return f, ok
}

func has(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}

// roomOf renders a room name that Node may have sent as a number.
func roomOf(v any) socket.Room {
	if s, ok := v.(string); ok {
		return socket.Room(s)
	}
	return socket.Room(keyString(v))
}

// decodeRooms reads a list of rooms: an array of names (strings, or
// numbers as Node may send them), or nothing (nil: none). Anything else is
// malformed (false): a Node adapter makes no usable set of it either (a
// string's Set is of its characters; an object is not iterable).
func decodeRooms(v any) ([]socket.Room, bool) {
	if v == nil {
		return nil, true
	}
	list, ok := v.([]any)
	if !ok {
		return nil, false
	}
	rooms := make([]socket.Room, 0, len(list))
	for _, r := range list {
		switch r.(type) {
		case string, float64, int64, uint64:
		default:
			return nil, false
		}
		rooms = append(rooms, roomOf(r))
	}
	return rooms, true
}

func decodeFlags(v any) *socket.BroadcastFlags {
	f := &socket.BroadcastFlags{}
	m, ok := asMap(v)
	if !ok {
		return f
	}
	f.Volatile, _ = m["volatile"].(bool)
	f.Local, _ = m["local"].(bool)
	f.ExpectSingleResponse, _ = m["expectSingleResponse"].(bool)
	if c, ok := m["compress"].(bool); ok {
		f.Compress = &c
	}
	if ms, ok := m["timeout"].(float64); ok && ms >= 0 && !math.IsInf(ms, 0) {
		d := time.Duration(ms * float64(time.Millisecond))
		f.Timeout = &d
	}
	return f
}

// decodeOpts reads broadcast options {rooms, except, flags}. Options that
// are not an object, or rooms or except that are not lists of rooms, are
// malformed (false): the message is dropped. Read as "no rooms", they
// would send a broadcast to every socket, or disconnect every socket. (A
// Node adapter throws on some of these, matches no room with a string of
// rooms, and sends to every socket when the options are a string or a
// number: dropping is the reading that leaks nothing.)
func decodeOpts(v any) (*socket.BroadcastOptions, bool) {
	m, ok := asMap(v)
	if !ok {
		return nil, false
	}
	rooms, ok := decodeRooms(m["rooms"])
	if !ok {
		return nil, false
	}
	except, ok := decodeRooms(m["except"])
	if !ok {
		return nil, false
	}
	return &socket.BroadcastOptions{
		Rooms:  types.NewSet(rooms...),
		Except: types.NewSet(except...),
		Flags:  decodeFlags(m["flags"]),
	}, true
}

// decodePacket reads {type, data, nsp, id}; a missing nsp is "/". A type
// that is not one of Socket.IO's packet types, or an nsp that is not a
// string, is malformed. Numbers that JSON cannot carry (NaN, ±Infinity)
// become null in data, as JSON.stringify writes them in a Node server:
// encoding/json would refuse the whole packet and the clients would get
// an event without data.
func decodePacket(v any) (*parser.Packet, error) {
	m, ok := asMap(v)
	if !ok {
		return nil, fmt.Errorf("%w: packet", errMalformed)
	}
	t, ok := num(m, "type")
	if !ok || t != math.Trunc(t) || t < float64(parser.CONNECT) || t > float64(parser.BINARY_ACK) {
		return nil, fmt.Errorf("%w: packet type %v", errMalformed, m["type"])
	}
	p := &parser.Packet{Type: parser.PacketType(t), Nsp: "/", Data: jsonNumbers(m["data"])}
	switch p.Type {
	case parser.BINARY_EVENT:
		p.Type = parser.EVENT
	case parser.BINARY_ACK:
		p.Type = parser.ACK
	}
	if nsp, ok := m["nsp"]; ok && nsp != nil {
		s, isStr := nsp.(string)
		if !isStr {
			return nil, fmt.Errorf("%w: packet nsp %v", errMalformed, nsp)
		}
		p.Nsp = s
	}
	if id, ok := num(m, "id"); ok && id >= 0 {
		u := uint64(id)
		p.Id = &u
	}
	if !clientValid(p) {
		return nil, fmt.Errorf("%w: packet data %.100v of a type %d packet", errMalformed, p.Data, p.Type)
	}
	return p, nil
}

// clientValid reports whether socket.io-client's parser takes p's data
// (its isPayloadValid): an event is a list whose first element is a
// number or a name other than the reserved ones, an ack a list. A
// broadcast it refuses makes every client it reaches close its connection
// ("parse error"), on every node: a Node server passes such a message on,
// presenced drops it (a black-box interop audit, 2026-12-07).
func clientValid(p *parser.Packet) bool {
	switch p.Type {
	case parser.EVENT:
		return transport.ValidEventData(p.Data)
	case parser.ACK:
		_, ok := p.Data.([]any)
		return ok
	}
	return true
}

// jsonNumbers replaces, in place, the numbers JSON has no form for (NaN,
// ±Infinity) by nil, in v and in the arrays and objects within it.
func jsonNumbers(v any) any {
	switch x := v.(type) {
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
	case float32:
		if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
	case []any, map[string]any:
		return replaceElems(x, jsonNumbers)
	}
	return v
}

// jsDate writes an RFC 3339 time (the library's handshake time) as
// JavaScript's Date.prototype.toString does in UTC, as a Node server's
// handshake.time is; anything else is left as it is.
func jsDate(v string) string {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return v
	}
	return t.UTC().Format("Mon Jan 02 2006 15:04:05") + " GMT+0000 (Coordinated Universal Time)"
}

// hostOnly is an address without its port, as Node's handshake.address
// (the remote address) is.
func hostOnly(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

func isLocal(opts *socket.BroadcastOptions) bool {
	return opts != nil && opts.Flags != nil && opts.Flags.Local
}

// RemoteData is socket data that shows another node (fetchSockets) a
// value of its own instead of itself: a Go struct would be sent with its
// exported fields under their Go names.
type RemoteData interface{ RemoteData() any }

// socketObj renders a local socket as a fetchSockets answer:
// {id, handshake, rooms, data}.
func socketObj(s socket.SocketDetails) obj {
	data := s.Data()
	if r, ok := data.(RemoteData); ok {
		data = r.RemoteData()
	}
	return obj{
		{"id", string(s.Id())},
		{"handshake", handshakeObj(s.Handshake())},
		{"rooms", roomList(s.Rooms())},
		{"data", data},
	}
}

// handshakeObj renders a handshake with Node's field names and shapes: a
// header or query value seen once is a string, the address without its
// port, the time as JavaScript's Date writes it, as in Node.
func handshakeObj(h *socket.Handshake) any {
	if h == nil {
		return nil
	}
	return obj{
		{"headers", nodeValues(h.Headers, true)},
		{"time", jsDate(h.Time)},
		{"address", hostOnly(h.Address)},
		{"xdomain", h.Xdomain},
		{"secure", h.Secure},
		{"issued", h.Issued},
		{"url", h.Url},
		{"query", nodeValues(h.Query, false)},
		{"auth", nodeAuth(h.Auth)},
	}
}

// nodeAuth is a handshake's auth as Node has it: an object, {} when the
// server kept nothing of it (presenced drops the token once verified).
func nodeAuth(auth map[string]any) map[string]any {
	if auth == nil {
		return map[string]any{}
	}
	return auth
}

func nodeValues[M ~map[string]any](m M, headers bool) obj {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	o := make(obj, 0, len(keys))
	for _, k := range keys {
		name := k
		if headers {
			name = strings.ToLower(k)
		}
		switch v := m[k].(type) {
		case []string:
			switch {
			case len(v) == 1:
				o = append(o, kv{name, v[0]})
			case headers && name != "set-cookie":
				o = append(o, kv{name, strings.Join(v, ", ")})
			default:
				o = append(o, kv{name, v})
			}
		default:
			o = append(o, kv{name, v})
		}
	}
	return o
}

// remoteSocket is a socket of another node, from a fetchSockets answer.
type remoteSocket struct {
	id        socket.SocketId
	handshake *socket.Handshake
	rooms     *types.Set[socket.Room]
	data      any
}

var _ socket.SocketDetails = (*remoteSocket)(nil)

func (r *remoteSocket) Id() socket.SocketId            { return r.id }
func (r *remoteSocket) Handshake() *socket.Handshake   { return r.handshake }
func (r *remoteSocket) Rooms() *types.Set[socket.Room] { return r.rooms }
func (r *remoteSocket) Data() any                      { return r.data }

func decodeSocket(v any) (*remoteSocket, bool) {
	m, ok := asMap(v)
	if !ok {
		return nil, false
	}
	id := str(m, "id")
	if id == "" {
		return nil, false
	}
	rooms, ok := decodeRooms(m["rooms"])
	if !ok {
		return nil, false
	}
	return &remoteSocket{
		id:        socket.SocketId(id),
		handshake: decodeHandshake(m["handshake"]),
		rooms:     types.NewSet(rooms...),
		data:      m["data"],
	}, true
}

func decodeHandshake(v any) *socket.Handshake {
	m, ok := asMap(v)
	if !ok {
		return &socket.Handshake{}
	}
	h := &socket.Handshake{
		Headers: goValues(m["headers"]),
		Time:    str(m, "time"),
		Address: str(m, "address"),
		Url:     str(m, "url"),
		Query:   goValues(m["query"]),
	}
	h.Xdomain, _ = m["xdomain"].(bool)
	h.Secure, _ = m["secure"].(bool)
	if issued, ok := num(m, "issued"); ok {
		h.Issued = int64(issued)
	}
	h.Auth, _ = asMap(m["auth"])
	return h
}

// goValues turns Node's header/query values (string or array) into the
// library's (string or []string).
func goValues(v any) map[string]any {
	m, ok := asMap(v)
	if !ok {
		return map[string]any{}
	}
	out := make(map[string]any, len(m))
	for k, val := range m {
		if list, ok := val.([]any); ok {
			ss := make([]string, 0, len(list))
			for _, e := range list {
				if s, ok := e.(string); ok {
					ss = append(ss, s)
				}
			}
			out[k] = ss
			continue
		}
		out[k] = val
	}
	return out
}
