package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	ws "github.com/gorilla/websocket"
	"github.com/zishang520/socket.io/parsers/engine/v3/packet"
	"github.com/zishang520/socket.io/servers/engine/v3"
	"github.com/zishang520/socket.io/servers/engine/v3/transports"
	"github.com/zishang520/socket.io/v3/pkg/types"

	"github.com/presenced/presenced/internal/stack"
)

// The websocket transport. It replaces the library's (servers/engine
// v3.0.6 transports/websocket.go) and behaves the same towards the engine,
// with differences that matter under load:
//
//   - EVENT packets of the main namespace are decoded here and handed to
//     the Dispatcher (the socket handlers) directly; their acks are
//     written straight to the websocket. Whatever the handlers decline, and
//     every other packet, goes up the library's pipeline as before.
//   - frames are read by our own reader (wsframes.go) into one buffer per
//     connection, reused, and the direct events run on a small pool of
//     goroutines while the reader waits (wspool.go): the readers do not
//     allocate, which matters during GC cycles;
//   - a connection with nothing to read for ParkAfter is parked on one
//     epoll instance for the process (poller_linux.go): an idle socket
//     holds no reader goroutine and no read buffer;
//   - the heartbeat of a connection on this transport from its handshake
//     runs on one timer wheel for all of them (heartbeat.go), not on two
//     timer goroutines of the library's per connection;
//   - everything written goes through one ordered queue of whole frames
//     (wsout.go): the engine's packets, the direct acks, and broadcasts
//     encoded once for all their recipients (broadcast.go). The transport
//     stays writable: the engine hands each packet over at once and keeps
//     nothing in its own buffer, so the queue's order is the socket's.

// Dispatcher takes EVENT packets of the main namespace read off a
// websocket (the socket handlers plug in here). DirectEvent handles one:
// args are the decoded packet data, the event name first (an argument
// that is a small JSON object is an *Object); ack is nil when the client
// asked for none. It reports false, having done nothing, when the event
// must take the library's path instead. slot is the websocket's own cache
// for the dispatcher (its reader is the only user): what the dispatcher
// stores there it finds again at the connection's next event.
//
// args, its Objects and ack are the event's scratch, reused once
// DirectEvent returns (directCall): DirectEvent answers before it returns,
// and keeps none of them; the values they hold (strings, nested maps and
// arrays) it may keep.
type Dispatcher interface {
	DirectEvent(slot *any, engineID func() string, args []any, ack Replier) bool
}

// Backlogger, when the Dispatcher is one too, bounds what a connection's
// reader hands the library's path (events a direct event could not take:
// their socket has events queued already, its handlers were slow a moment
// ago, a binary or msgpack event). The library decodes each such message at
// once and queues it on its socket, however many wait there: without a
// bound, one user's 20 sockets sending 1,000-id subscribes without waiting
// for their acks took a node from 24 MB to 4 GB in 30 s (a resource audit,
// 2026-12-07). With it, the reader waits (and reads nothing: the client's
// writes wait in TCP) while MaxQueued of the connection's messages are
// queued and not handled.
//
// Mark, called after each message handed to the library with the number
// of its packets (a websocket message is one; a long-polling POST is
// handed in groups of MaxQueued), counts them as queued until the library
// has taken them off the socket's queue; Backlog reports how many
// messages and events of the socket wait so (ok false: no socket is
// connected on the connection).
// slot and engineID are as for DirectEvent.
type Backlogger interface {
	Backlog(slot *any, engineID func() string) (queued int, ok bool)
	Mark(slot *any, engineID func() string, packets int)
}

// AwaitBacklog waits while MaxQueued of the messages and events of the
// connection engineID's socket are queued, or until it has no socket.
func AwaitBacklog(bl Backlogger, slot *any, engineID func() string) {
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 10*time.Millisecond) {
		if n, ok := bl.Backlog(slot, engineID); !ok || n < MaxQueued {
			return
		}
		time.Sleep(wait)
	}
}

// MaxOtherNspConnects bounds a connection's CONNECTs to namespaces other
// than the main one (Socket.IO "40/name,"): the server serves none of
// them, and the library answers each with a refusal, uncounted. One more
// closes the connection. Before, four connections without a token sent
// 4.85 million in 45 s and kept 0.9 cores busy answering them (a
// resource audit, 2026-12-07); the main namespace's refused CONNECTs are
// bounded by the server (PRESENCE_HANDSHAKE_LIMIT).
const MaxOtherNspConnects = 10

var (
	otherNspConnect     = []byte("40/")
	errOtherNspConnects = errors.New("too many CONNECTs to namespaces the server does not serve")
)

// MaxQueued bounds a connection's messages queued on the library's path
// and not handled (Backlogger). A client's burst of events after it
// connects (joins, a subscribe, a query) fits.
const MaxQueued = 16

// Replier answers a direct event: Reply writes the ACK packet whose one
// argument is body, in the socket's order (wsout.go). Only the first reply
// is written.
type Replier interface{ Reply(body any) }

// WebsocketConfig configures the websocket transport.
type WebsocketConfig struct {
	Dispatcher Dispatcher // nil: every packet takes the library's path
	// PingInterval and PingTimeout are the engine's: the heartbeat of a
	// connection on this transport from its handshake runs on them
	// (heartbeat.go; 0: the engine runs every heartbeat), and the
	// early-PONG hold of an upgraded one on PingTimeout (holdPong).
	PingInterval, PingTimeout time.Duration
	MaxMessage                int64 // the engine's maxHttpBufferSize
	// WriteWait is each write's deadline (0: none): a client that stops
	// reading fails the write instead of holding the writer forever.
	WriteWait time.Duration
	// SendBuffer, when positive, is each connection's kernel send buffer
	// (SO_SNDBUF; Linux doubles it). Bytes the kernel has taken are out
	// of the transport's queue, so neither the unread bound nor the write
	// deadline sees them: with the kernel's own sizing a client that stops
	// reading left up to its maximum (4 MiB by default) unread beyond the
	// bound, and a write never blocked until that was full.
	SendBuffer int
	// InlineEvents are events whose handling allocates nothing, run on the
	// socket's reader rather than handed to the pool (wspool.go): the
	// pool is there so that few goroutines allocate during a GC cycle,
	// and the reader waits for the event either way.
	InlineEvents []string
	// BinaryPackets: the Socket.IO parser sends every packet as a binary
	// message (MsgpackParser). No text message is then taken for a
	// direct event: the library hands it to the parser, which refuses it
	// and closes the connection, as a Node server does. Before
	// 2026-12-07 a JSON client's text events were served on a msgpack
	// server's websocket (a black-box audit).
	BinaryPackets bool
	// BeforeUpgrade, if set, is called with the session's id when an
	// upgrading connection's UPGRADE packet is read, before the engine
	// makes it the session's transport: it waits until the session's
	// long-polling POST under way, if any, has been handed on whole (the
	// server hands a POST's packets in groups; those after the upgrade
	// were refused by the closed polling transport, and lost: a
	// black-box audit, 2026-12-07).
	BeforeUpgrade func(sid string)
}

// NewWebsocket returns the websocket transport for the engine's transport
// set (beside the library's engine.Polling). Attach it to the engine too,
// for the heartbeat.
func NewWebsocket(cfg WebsocketConfig) *Websocket {
	b := &Websocket{direct: cfg.Dispatcher, pool: newDirectPool(cfg.InlineEvents), pongHold: wsPongHold(cfg.PingTimeout), limit: cfg.MaxMessage, writeWait: cfg.WriteWait, sendBuffer: cfg.SendBuffer, noText: cfg.BinaryPackets, beforeUpgrade: cfg.BeforeUpgrade}
	if cfg.PingInterval > 0 && cfg.PingTimeout > 0 {
		b.beats = newHeartbeat(cfg.PingInterval, cfg.PingTimeout)
	}
	return b
}

// EventsInFlight is the number of events of this transport's sockets
// waiting for a worker or being handled (the direct path's).
func (b *Websocket) EventsInFlight() int { return int(b.pool.inFlight.Load()) }

// Attach lets the transport run the heartbeat of the engine's connections
// that start on it (heartbeat.go); without it the engine runs them.
func (b *Websocket) Attach(e engine.BaseServer) {
	_ = e.On("connection", b.takeHeartbeat)
}

// Websocket is the transport's constructor (transports.TransportCtor).
type Websocket struct {
	direct        Dispatcher
	noText        bool             // WebsocketConfig.BinaryPackets
	beforeUpgrade func(sid string) // WebsocketConfig.BeforeUpgrade
	pool          *directPool
	pongHold      time.Duration // see holdPong
	limit         int64         // the engine's maxHttpBufferSize
	// writeWait is each write's deadline (0: none): a client that stops
	// reading fails the write instead of holding the writer forever.
	writeWait  time.Duration
	sendBuffer int        // SO_SNDBUF of each connection (0: the kernel's)
	beats      *heartbeat // nil: none (the engine runs every heartbeat)
}

// wsPongHold is how long after its PING an early PONG is held on our
// websocket transport (holdPong): long enough for a ping goroutine held off
// the CPU of a saturated node, and well inside the ping timeout.
func wsPongHold(pingTimeout time.Duration) time.Duration {
	return max(pongGuard, min(time.Second, pingTimeout/4))
}

func (b *Websocket) New(ctx *types.HttpContext) transports.Transport {
	t := transports.MakeTransport()
	SetEmitter(t) // nothing has seen it yet
	w := &wsTransport{Transport: t, direct: b.direct, noText: b.noText, beforeUpgrade: b.beforeUpgrade, pool: b.pool, pongHold: b.pongHold, writeWait: b.writeWait, beats: b.beats}
	w.frames.limit = b.limit
	w.Prototype(w)
	w.Construct(ctx)
	if tc, ok := w.netConn.(*net.TCPConn); ok && b.sendBuffer > 0 {
		_ = tc.SetWriteBuffer(b.sendBuffer)
	}
	return w
}
func (*Websocket) Name() string          { return transports.WEBSOCKET }
func (*Websocket) HandlesUpgrades() bool { return true }
func (*Websocket) UpgradesTo() []string  { return nil }

type wsTransport struct {
	transports.Transport

	conn   *types.WebSocketConn
	idle   time.Duration
	direct Dispatcher
	noText bool // no text message is a direct event (BinaryPackets)
	// beforeUpgrade: WebsocketConfig.BeforeUpgrade
	beforeUpgrade func(sid string)
	pool          *directPool
	pongHold      time.Duration
	writeWait     time.Duration
	frames        frameReader // the reader's
	job           []byte      // the message a pool worker is handling (wspool.go)
	jobDone       chan bool
	slot          any           // the reader's cache for the dispatcher
	otherNsp      int           // CONNECTs to other namespaces read (MaxOtherNspConnects)
	idFn          func() string // engineID, made once
	// upgradeSid is the engine connection's id when this transport is an
	// upgrade (the engine sets Sid only on a connection's first transport).
	upgradeSid string

	netConn net.Conn        // the hijacked connection, written by wsout.go
	raw     syscall.RawConn // netConn's, for writes that must not block (nil: none)
	// frameMu is held by whoever writes to netConn, from a frame's first
	// byte to its last: a write that stopped inside a frame (tryWrite)
	// hands it on to the writer that finishes the frame (frameMuHeld), so
	// that no control frame lands in the middle.
	frameMu sync.Mutex
	one     [1][]byte // a coalesced batch, as net.Buffers (under frameMu)
	// rawCall is rawWrite's call, made once per connection so that a write
	// allocates nothing; it belongs to the holder of frameMu.
	rawCall rawCall
	out     outbound
	guard   atomic.Pointer[outboundGuard] // the unread bound, once WatchConn set it
	pingAt  atomic.Int64                  // unix ns of the last PING queued (pingrace.go)
	// The heartbeat's wheel (heartbeat.go; nil: none) and this
	// connection's place on it; ownBeat once it is there (set once).
	beats   *heartbeat
	beat    beat
	ownBeat atomic.Bool

	// The poller (poller_linux.go) and this connection's registration:
	// poll is nil where there is none (no epoll, or a connection without
	// raw reads), noPark set (by the reader) once parking failed; parked
	// while no reader runs, until the poller wakes it.
	poll   *poller
	pollID uint64 // guarded by poll.mu
	noPark bool
	reads  uint8 // messages read, counted up to 2 (ParkAfterConnect; the reader's)
	// sparse: the last message came ParkAfter or more after the one
	// before it, and so did that one (active: it did not): it is handled on
	// the reader, and the connection parks as soon as nothing is left to
	// read (see ParkAfter). lastRead is when that message was read (unix
	// ns). The reader's.
	sparse, active bool
	lastRead       int64
	parked         atomic.Bool

	// settled: the engine hands this transport everything in order, so
	// frames may be queued on it directly (Frame.WriteTo). A connection's
	// first transport is settled from the start; an upgrade once the
	// engine has handled its UPGRADE packet, which makes it the transport
	// and then flushes the packets the engine held meanwhile (until then a
	// direct frame could pass them).
	settled     atomic.Bool
	frameMuHeld bool // the writer goroutine owns frameMu already (set by tryWrite)
	closeSent   bool // a CLOSE frame is written (writeControl; under frameMu)
	// initMu is held from takeHeartbeat until the engine has done with the
	// connection's initialization and its emitters are ours (adopt.go):
	// the reader starts once it can take it (readAfterInit).
	initMu sync.Mutex
}

func (w *wsTransport) Construct(ctx *types.HttpContext) {
	w.Transport.Construct(ctx)
	w.idle = ctx.IdleTimeout
	w.conn = ctx.Websocket
	w.frames.conn, w.frames.ctl, w.frames.idle = w.conn.NetConn(), frameLocked{w}, w.idle
	w.netConn = w.conn.NetConn()
	if sc, ok := w.netConn.(syscall.Conn); ok {
		w.raw, _ = sc.SyscallConn()
	}
	if w.raw != nil {
		w.poll = sharedPoller()
	}
	releaseBuffers(w.conn.Conn)
	w.jobDone = make(chan bool, 1)
	w.upgradeSid = ctx.Query().Peek("sid")
	w.settled.Store(w.upgradeSid == "")
	w.idFn = w.engineID

	_ = w.conn.On("error", func(errs ...any) {
		var err error
		if len(errs) > 0 {
			err, _ = errs[0].(error)
		}
		w.OnError("websocket error", err)
	})
	_ = w.conn.Once("close", func(...any) { w.OnClose() })

	w.SetWritable(true)
	w.SetPerMessageDeflate(nil)
	transports.StartReader(w, ctx.TransportReadPermission(), w.readAfterInit)
}

func (w *wsTransport) Name() string          { return transports.WEBSOCKET }
func (w *wsTransport) HandlesUpgrades() bool { return true }

func (w *wsTransport) engineID() string {
	if id := w.Sid(); id != "" {
		return id
	}
	return w.upgradeSid
}

// read is the connection's reader: one message at a time, until the
// connection fails or closes, or, with the poller, until nothing is left to
// read: the connection is then parked (see park) and the goroutine ends.
// It does not allocate for a direct event (wsframes.go, wspool.go).
// readAfterInit is the reader's start: it waits for initMu (see there).
func (w *wsTransport) readAfterInit() {
	w.initMu.Lock()
	w.initMu.Unlock() //nolint:staticcheck // an empty critical section: a wait for takeHeartbeat's hand-over
	w.read()
}

func (w *wsTransport) read() {
	if !w.readMessages() {
		w.conn.Emit("close") // once-listener: a no-op after the first
	}
}

// readMessages reads until the connection fails (false) or is parked
// (true).
func (w *wsTransport) readMessages() (parked bool) {
	grown := false
	for {
		if w.poll != nil && !w.noPark {
			if w.sparse && w.frames.drained() {
				w.sparse = false
				if w.park() {
					return true
				}
			}
			wait := ParkAfter
			if w.reads == 1 {
				wait = ParkAfterConnect
			}
			ok, err := w.frames.await(wait)
			if err != nil {
				w.fail(err)
				return false
			}
			if !ok && w.park() {
				return true
			}
		}
		mt, msg, err := w.frames.next()
		if err != nil {
			w.fail(err)
			return false
		}
		if w.poll != nil {
			now := time.Now().UnixNano()
			long := now-w.lastRead >= int64(ParkAfter)
			w.sparse = w.reads >= 2 && long && !w.active
			w.active = w.reads >= 2 && !long
			w.lastRead = now
		}
		if w.reads < 2 {
			w.reads++
		}
		if mt == ws.TextMessage && (w.maybeDirect(msg) && w.dispatch(msg) || w.takePong(msg) || w.holdPong(msg)) {
			continue
		}
		// The library's path: the engine keeps what it is given.
		if !grown {
			// Deep, above all the Socket.IO CONNECT: grow the stack
			// in one step while it holds only the reader's frames.
			grown = true
			stack.Grow()
		}
		if mt == ws.TextMessage && bytes.HasPrefix(msg, otherNspConnect) {
			if w.otherNsp++; w.otherNsp > MaxOtherNspConnects {
				w.fail(errOtherNspConnects)
				return false
			}
		}
		data := append([]byte(nil), msg...)
		bl, _ := w.direct.(Backlogger)
		if bl != nil && (mt != ws.TextMessage || len(msg) > 0 && msg[0] == '4') {
			AwaitBacklog(bl, &w.slot, w.idFn)
		} else {
			bl = nil
		}
		if mt == ws.TextMessage {
			if w.beforeUpgrade != nil && !w.settled.Load() && len(data) == 1 && data[0] == '5' {
				w.beforeUpgrade(w.upgradeSid)
			}
			w.OnData(types.NewStringBuffer(data))
			if !w.settled.Load() && len(data) == 1 && data[0] == '5' {
				// The engine has handled the UPGRADE: it made this its
				// transport and flushed what it held (see settled).
				w.settled.Store(true)
			}
		} else {
			w.OnData(types.NewBytesBuffer(data))
		}
		if bl != nil {
			bl.Mark(&w.slot, w.idFn, 1)
		}
	}
}

// dispatch runs a direct event: on the pool (wspool.go), or on this
// reader: an event whose handling allocates nothing (InlineEvents: the
// pool is there for the GC's sake only, and the reader waits for it
// anyway), and a sparse connection's message, whose reader the poller
// started and parks the connection right after: a hand-off less on the
// path of nearly every real client's heartbeat. The poller's readers are few (they are
// kept and reused between wakes), so that running handlers on them keeps
// what the pool is for: few goroutines that allocate during a GC cycle.
func (w *wsTransport) dispatch(msg []byte) bool {
	if w.sparse || w.pool.inlines(msg) {
		return w.runDirect(msg)
	}
	return w.pool.run(w, msg)
}

// ParkAfter is how long a reader waits for the next message before it
// parks the connection: a socket that talks more often keeps its reader
// (and the Go runtime's own poller: a wake through ours costs a handoff
// between goroutines; parking at once made the heartbeats' p99 5× under
// load, measured before the poller's wait moved into the netpoller),
// while real clients, which send a heartbeat every 15-20 s and a PONG every
// 25 s, are parked nearly all the time. A parked connection has no read
// deadline (the engine's idle timeout): the heartbeat (heartbeat.go, or
// the engine's) closes one whose client has gone silent.
//
// A connection whose message came ParkAfter or more after the one before
// (sparse) skips the wait: it parks as soon as that message is handled,
// on the reader the poller started (dispatch). Before, real clients'
// heartbeats, 15-20 s apart, each woke the connection through the poller
// and then held a reader goroutine (its stack, a timer) for ParkAfter
// before it parked again; at 1,000 heartbeats/s from 5,000 sockets (one
// each 5 s) the server's CPU per heartbeat was 236-267 µs, and is 130-137
// µs now (docs/benchmarks/presence-load.md). A connection that then talks
// more often than ParkAfter waits as above.
//
// The message that ends a pause after a busy spell (the one before it
// came within ParkAfter of its own predecessor) is not sparse: it waits as
// above, and only the next message past a pause parks at once. When a
// burst of activity followed a pause, parking at once woke each of those
// connections twice through the poller in its first moments (the first
// message parked, the second came soon after): in the heartbeat benchmark
// (5,000 sockets, steps 2 s apart), the first seconds of the 30,000/s step
// had a p99 of 110-430 ms at about 0.65 cores, against under 30 ms for the
// rest of the step; with this rule 9-13 ms, and the step's p99 30 ms
// instead of 112-243 (docs/benchmarks/presence-load.md). Real clients'
// sockets, once their heartbeats are 15-20 s apart, park at once as
// before; one that was busy holds a reader for ParkAfter once more.
const ParkAfter = 2 * time.Second

// ParkAfterConnect is ParkAfter for the wait after a connection's first
// message: on a connection that starts on this transport, the Socket.IO
// CONNECT. Its reader ran the library's connect path, which is deep (a
// reader's stack grows on it), and a burst of connects (a node's clients
// coming back after a deploy) would keep every socket connected in the
// last 2 s on such a reader, and the process's peak with them. Measured at
// 10,000 idle sockets connected at once, 500 in flight: RSS per socket
// 16.4-16.5 KiB at 500 ms and 15.8 at 200 ms, against 17.3-17.9 with 2 s
// for this wait too. At 200 ms the join ack p99 of a burst that joins
// right after connecting rose from 112-185 to 167-208 ms (sockets parked
// before their joins came, and woken through the poller); at 500 ms it did
// not move (docs/benchmarks/presence-load.md). A client that sends its
// first events right after its session sends them within this wait, or
// wakes its connection through the poller once.
const ParkAfterConnect = 500 * time.Millisecond

// park hands a connection with nothing to read to the poller, which starts
// a reader again when bytes (or the end) arrive: an idle socket holds no
// goroutine and no read buffer. false: it cannot be parked (it could not be
// registered), and its reader blocks in Read from now on. A parked
// connection that the server closes needs no reader to report it: the
// close is emitted by types.WebSocketConn.Close itself (and the fd leaves
// the epoll set with it).
func (w *wsTransport) park() bool {
	w.frames.parkBuffer()
	w.parked.Store(true)
	if err := w.poll.arm(w); err != nil && w.parked.CompareAndSwap(true, false) {
		// Closed meanwhile (the next read reports it) or not pollable.
		w.noPark = true
		return false
	}
	return true // the poller starts the reader again
}

func (w *wsTransport) fail(err error) {
	if ws.IsUnexpectedCloseError(err) || errors.Is(err, net.ErrClosed) {
		w.conn.Emit("close")
	} else {
		w.conn.Emit("error", err)
	}
}

// readDirect handles msg when it is an Engine.IO MESSAGE carrying a
// Socket.IO EVENT of the main namespace ("42", an optional ack id, a JSON
// array) that the handlers take. Anything else, including JSON the library
// would read differently, reports false and goes the library's way.
func (w *wsTransport) readDirect(msg []byte) bool {
	if !w.maybeDirect(msg) {
		return false
	}
	i := 2
	for i < len(msg) && msg[i] >= '0' && msg[i] <= '9' {
		i++
	}
	if i == len(msg) || msg[i] != '[' || i-2 > 20 {
		return false
	}
	var id uint64
	hasID := i > 2
	if hasID {
		var err error
		if id, err = strconv.ParseUint(string(msg[2:i]), 10, 64); err != nil {
			return false
		}
	}
	call := directCalls.Get().(*directCall)
	defer call.release()
	args, ok := decodeArgsInto(msg[i:], call)
	if !ok {
		var slow []any // (a variable of its own: &args would move args to the heap)
		if !decodeSlow(msg[i:], &slow) {
			return false
		}
		args = slow
	}
	if len(args) == 0 {
		return false
	}
	var ack Replier
	if hasID {
		call.w, call.id = w, id
		ack = call
	}
	return w.direct.DirectEvent(&w.slot, w.idFn, args, ack)
}

// decodeSlow decodes what decodeArgs does not read itself, as
// json.Unmarshal does, except that where a number does not fit a float64
// (1e999, 400 digits) the numbers are json.Numbers, not an error: it is
// valid JSON (Node reads it), and the event then gets its handler's answer
// (invalid_argument where a number has no place) instead of a parse error
// that closes the socket.
func decodeSlow(b []byte, into *[]any) bool {
	if json.Unmarshal(b, into) == nil {
		return true
	}
	*into = nil
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(into); err != nil {
		return false
	}
	_, err := d.Token()
	return err == io.EOF // nothing after the array
}

// maybeDirect is readDirect's first check, on the reader.
func (w *wsTransport) maybeDirect(msg []byte) bool {
	return w.direct != nil && !w.noText && len(msg) >= 4 && msg[0] == '4' && msg[1] == '2'
}

// takePong hands a PONG to the heartbeat's wheel when it runs this
// connection's heartbeat (heartbeat.go): the engine never sees it.
func (w *wsTransport) takePong(msg []byte) bool {
	if len(msg) != 1 || msg[0] != '3' || !w.ownBeat.Load() {
		return false
	}
	w.beats.pong(w)
	return true
}

// holdPong delays a PONG that came back within pongHold of its PING until
// pongHold has passed (pingrace.go), without holding up the reader and the
// events behind the PONG meanwhile. Not blocking the reader, the hold can
// be far longer than pongGuard: a 50 ms hold still lost a socket or two
// per 10,000-socket load run on a saturated machine.
func (w *wsTransport) holdPong(msg []byte) bool {
	if len(msg) != 1 || msg[0] != '3' || w.Protocol() != 4 { // Engine.IO v4 PONG
		return false
	}
	wait := w.pongHold - time.Duration(time.Now().UnixNano()-w.pingAt.Load())
	if wait <= 0 || wait > w.pongHold {
		return false
	}
	time.AfterFunc(wait, func() { w.OnData(types.NewStringBufferString("3")) })
	return true
}

// writeAck writes a Socket.IO ACK packet for id whose one argument is
// body, as the library's encoder would ("43" + id + the JSON array), in
// the socket's order (wsout.go).
func (w *wsTransport) writeAck(id uint64, body any) {
	bp := ackBufs.Get().(*[]byte)
	buf := append((*bp)[:0], make([]byte, maxFrameHeader)...)
	buf = append(buf, '4', '3')
	buf = strconv.AppendUint(buf, id, 10)
	buf = append(buf, '[')
	buf, err := appendJSON(buf, body)
	buf = append(buf, ']')
	if err == nil {
		w.writeNow(sealFrame(buf, opText)) // copies the frame if it must wait
	}
	if cap(buf) <= ackBufKeep {
		*bp = buf[:0]
		ackBufs.Put(bp)
	}
	if err != nil {
		w.OnError("encode ack", err)
	}
}

// ackBufs are the buffers acks are built in, shared by all connections: a
// join's ack with its roster takes a few KB, and kept per connection it
// was the largest buffer an idle socket held.
var ackBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// ackBufKeep is the largest ack buffer the pool keeps: a join's ack with
// a roster of a hundred members takes about 8 KB, which was built anew
// (and grown in steps) for every join when only 4 KB were kept, and the
// answer to a presence:query of 1,000 ids (the most it takes) about
// 65–130 KB, allocated anew for each query when 32 KB were kept. The pool
// holds about as many buffers as acks are built at once, and lets them go
// at GC.
const ackBufKeep = 160 << 10

// Send queues the engine's packets, in order, and returns at once; the
// transport stays writable (see wsTransport).
func (w *wsTransport) Send(packets []*packet.Packet) {
	frames := make([][]byte, 0, len(packets))
	for _, p := range packets {
		if p.Type == packet.PING {
			w.pingAt.Store(time.Now().UnixNano())
		}
		if p.Options != nil && p.Options.WsPreEncodedFrame != nil {
			f := p.Options.WsPreEncodedFrame
			if _, ok := f.(*types.StringBuffer); ok {
				frames = append(frames, buildFrame(opText, nil, f.Bytes()))
			} else {
				frames = append(frames, buildFrame(opBinary, nil, f.Bytes()))
			}
			continue
		}
		data, err := w.Parser().EncodePacket(p, w.SupportsBinary())
		if err != nil {
			w.OnError("encode packet", err)
			return
		}
		if _, ok := data.(*types.StringBuffer); ok {
			frames = append(frames, buildFrame(opText, nil, data.Bytes()))
		} else {
			frames = append(frames, buildFrame(opBinary, nil, data.Bytes()))
		}
	}
	w.queue(frames...)
	w.Emit("drain")
}

// OnClose releases the connection on every close path.
func (w *wsTransport) OnClose() {
	if w.poll != nil {
		w.poll.forget(w)
	}
	if w.beats != nil {
		w.beats.remove(w)
	}
	w.abandonOut()
	w.Transport.OnClose()
}

// DoClose closes the transport (the engine's Close): what is queued is
// written first, within closeWait.
func (w *wsTransport) DoClose(fn types.Callable) {
	w.closeOut()
	if fn != nil {
		fn()
	}
}
