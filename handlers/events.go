package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/ids"
	"github.com/presenced/presenced/internal/jsontext"
	"github.com/presenced/presenced/internal/throttle"
	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/transport"
)

// MaxStateBytes bounds the JSON encoding of a `state:set` state.
const MaxStateBytes = 1024

// handler does one event's work and returns the ack body: nil ({"ok":true}),
// a map of the body's fields other than ok, or a reply that holds ok itself
// (okReply).
type handler func(ctx context.Context, c *Conn, p payload) (any, error)

// okReply is an ack body of its own type that already says ok: true, for
// the events answered most often (heartbeatReply), where a map costs more
// than the work.
type okReply interface{ okReply() }

// events are the client → server events (CONTRACT §1).
func (h *Sockets) events() map[string]handler {
	return map[string]handler{
		"conversation:join":  h.join,
		"conversation:leave": h.leave,
		"heartbeat":          h.heartbeat,
		"typing:start":       h.typingStart,
		"typing:stop":        h.typingStop,
		"state:set":          h.stateSet,
		"presence:query":     h.query,
		"presence:subscribe": h.subscribe,
	}
}

// InlineEvents are the events whose handling allocates nothing
// (TestHeartbeatAllocatesNothing): the websocket transport runs them on
// the socket's reader instead of its pool (transport.WebsocketConfig).
func InlineEvents() []string { return []string{"heartbeat"} }

// register attaches one catch-all listener to a socket: it queues the
// known events for their handlers and answers unknown events that asked
// for an ack. One listener rather than one per event saves about 2 KB per
// socket (the library keeps a closure and a listener list for each).
func (h *Sockets) register(s *socket.Socket, c *Conn) {
	events := h.handlers
	s.OnAny(func(args ...any) {
		name, _ := firstString(args)
		if fn, known := events[name]; known {
			// Runs on the reader as the packet arrives; handle runs later
			// from the socket's queue, in the same order, where the
			// library runs an event's listeners (and, as it does, not
			// once the socket is disconnected).
			c.arrived(time.Now())
			rest := args[1:]
			s.Enqueue(func() {
				if !s.Connected() {
					c.dequeued()
					c.pending.Add(-1)
					return
				}
				h.handle(c, name, fn, rest)
			})
			return
		}
		if len(args) == 0 {
			return
		}
		// Unknown events are limited too ("any other event"): a client
		// spraying them costs an ack each.
		e := errorf(CodeNotFound, "unknown event")
		if !h.allow(c, classOther, time.Now()) {
			h.other.limited.Inc()
			e = rateLimited(h.limits[classOther])
		} else {
			// "any other client event" is activity (CONTRACT §1); not
			// on the reader, which must not wait on the backend
			go h.touch(c)
		}
		if ack, ok := args[len(args)-1].(socket.Ack); ok {
			h.metrics.Events.WithLabelValues("unknown", e.Code).Inc()
			ack([]any{ackError(e)}, nil)
		}
	})
}

// touch records activity of c's user for an event that has no handler.
func (h *Sockets) touch(c *Conn) {
	select {
	case <-c.ready:
	default:
		return // still connecting, which is activity already
	}
	if !c.connected.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.OpTimeout)
	defer cancel()
	if err := h.engine.Touch(ctx, c.sid); err != nil {
		h.log.Debug("activity of an unknown event not recorded", "sid", c.sid, "user_id", c.UserID, "err", err)
	}
}

// handle runs one event: waits for the connection to be set up, decodes,
// calls the handler under a timeout, acks, and records metrics. No panic
// escapes to the library.
func (h *Sockets) handle(c *Conn, name string, fn handler, args []any) {
	arrival, queued := c.dequeued()
	defer c.pending.Add(-1)
	args, ack := ackOf(args) // the library hands the ack as the last argument
	h.serve(c, name, fn, args, replierOf(ack), arrival, queued)
}

// serve runs one event of either path (handle, DirectEvent) once its place
// in the queue is known: args are the event's arguments, ack nil when the
// client asked for none.
func (h *Sockets) serve(c *Conn, name string, fn handler, args []any, ack transport.Replier, arrival time.Time, queued bool) {
	start := time.Now()
	info, known := h.stats[name]
	outcome := "ok"
	defer func() {
		if r := recover(); r != nil {
			h.log.Error("event handler panic", "event", name, "sid", c.sid, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			outcome = CodeInternal
			if ack != nil {
				ack.Reply(ackError(errorf(CodeInternal, "internal error")))
			}
		}
		took := time.Since(start).Seconds()
		if known && outcome == "ok" {
			info.count.Inc()
			info.duration.Observe(took)
			return
		}
		h.metrics.Events.WithLabelValues(name, outcome).Inc()
		h.metrics.EventDuration.WithLabelValues(name).Observe(took)
	}()

	reply := func(body any, err error) {
		if ack != nil && c.sock != nil && !c.sock.Connected() {
			ack = nil // as the library: no ack to a closed socket
		}
		if err != nil {
			e := classify(err)
			outcome = e.Code
			switch e.Code {
			case CodeInternal:
				h.log.Warn("event failed", "event", name, "sid", c.sid, "user_id", c.UserID, "err", err)
			case CodeUnavailable:
				h.unavailable.fail(h.log, name, c, err, time.Now())
			}
			if refusedActivity[e.Code] {
				// a well-formed event refused (not a member, not joined,
				// over a count) is still the user's activity, as any
				// client event is (CONTRACT §1); bad input and a rate
				// limit change nothing
				h.touch(c)
			}
			if ack != nil {
				ack.Reply(ackError(e))
			}
			return
		}
		if h.unavailable.failing.Load() {
			h.unavailable.recover(h.log, time.Now())
		}
		if ack != nil {
			switch b := body.(type) {
			case nil:
				body = map[string]any{"ok": true}
			case map[string]any:
				b["ok"] = true
			case okReply:
			default:
				panic(fmt.Sprintf("handlers: %s answered a %T", name, body))
			}
			ack.Reply(body)
		}
		if r, ok := body.(pooledReply); ok {
			r.release() // its ack is encoded (or there is none)
		}
	}

	if queued && start.Sub(arrival) > h.cfg.OpTimeout {
		// Shed load: this event waited in the socket's queue longer than
		// an event may take; its client has most likely given up, and
		// doing the work now would only delay the events behind it. (Not
		// logged one by one: under overload that would be a flood; the
		// events metric counts them.)
		outcome = CodeUnavailable
		if ack != nil {
			ack.Reply(ackError(errorf(CodeUnavailable, "server overloaded, retry")))
		}
		return
	}
	select {
	case <-c.ready:
	default: // only the first events of a connection wait here
		t := time.NewTimer(h.cfg.OpTimeout)
		select {
		case <-c.ready:
			t.Stop()
		case <-t.C:
			reply(nil, errorf(CodeUnavailable, "connection not ready"))
			return
		}
	}
	// The one place both paths of every known event are limited, before
	// anything is decoded or done.
	if known && !h.allow(c, info.class, start) {
		info.limited.Inc()
		reply(nil, rateLimited(h.limits[info.class]))
		return
	}
	p, err := decode(args)
	if err != nil {
		reply(nil, err)
		return
	}
	ctx := h.opCtx.get(time.Now())
	if !c.connected.Load() {
		// The engine did not take the connection (its backend was down):
		// try again now rather than leaving the socket unusable.
		if err := h.lateConnect(ctx, c); err != nil {
			reply(nil, err)
			return
		}
	}
	if !info.roomEvents {
		reply(fn(ctx, c, p))
		return
	}
	// The room events of the operation go out after its ack, and also when
	// the handler panics: what the engine did is told either way.
	ctx, after := presence.WithAfterReply(ctx)
	defer after.Run()
	reply(fn(ctx, c, p))
	ack = nil // answered: a panic in after.Run must not answer again
}

// refusedActivity are the refusals of an event that still count as the
// user's activity.
var refusedActivity = map[string]bool{CodeForbidden: true, CodeNotFound: true, CodeLimitExceeded: true}

// roomEventsOf are the events whose handling may tell a conversation's
// room of a change.
var roomEventsOf = map[string]bool{
	"conversation:join": true, "conversation:leave": true, "typing:start": true, "typing:stop": true,
}

// payload is a decoded event argument: a JSON object, as the library
// decodes it (a map) or as the websocket transport does (an Object, for a
// small one).
type payload struct {
	m map[string]any
	o transport.Object
}

// get returns a field's value.
func (p payload) get(field string) (any, bool) {
	if p.o != nil {
		return p.o.Get(field)
	}
	v, ok := p.m[field]
	return v, ok
}

// decode takes the event's first argument, which must be an object when
// present. An event sent with no argument decodes to an empty object.
func decode(args []any) (payload, error) {
	if len(args) == 0 || args[0] == nil {
		return payload{}, nil
	}
	switch v := args[0].(type) {
	case map[string]any:
		return payload{m: v}, nil
	case *transport.Object:
		if v == nil {
			break
		}
		return payload{o: *v}, nil
	}
	return payload{}, errorf(CodeInvalidArgument, "payload must be an object")
}

// id reads a required id field.
func (p payload) id(field string) (string, error) {
	v, ok := p.get(field)
	if !ok || v == nil {
		return "", errorf(CodeInvalidArgument, "%s is required", field)
	}
	s, ok := v.(string)
	if !ok {
		return "", errorf(CodeInvalidArgument, "%s must be a string", field)
	}
	if !ids.Valid(s) {
		return "", errorf(CodeInvalidArgument, "%s must be %s", field, ids.Rule)
	}
	return s, nil
}

// optBool reads an optional boolean field.
func (p payload) optBool(field string, def bool) (bool, error) {
	v, ok := p.get(field)
	if !ok || v == nil {
		return def, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, errorf(CodeInvalidArgument, "%s must be a boolean", field)
	}
	return b, nil
}

func (h *Sockets) join(ctx context.Context, c *Conn, p payload) (any, error) {
	conv, err := p.id("conversationId")
	if err != nil {
		return nil, err
	}
	epoch := h.epochs.of(conv).Load()
	ok, err := h.membership.IsMember(ctx, conv, c.UserID)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errorf(CodeForbidden, "not a member of this conversation")
	}
	// Into the room first, so that nothing said after the roster snapshot
	// is missed; out again if the engine refuses. What the room says from
	// now on reaches the socket after the ack (transport.Hold): an event
	// newer than the snapshot must not reach the client before it.
	release := transport.Hold(c.sock)
	if !presence.OnReply(ctx, release) {
		defer release()
	}
	room := ConversationRoom(conv)
	already := c.rooms.InRoom(room)
	c.rooms.Join(room)
	res, err := h.engine.Join(ctx, c.sid, conv)
	if err != nil {
		if !already {
			c.rooms.Leave(room)
		}
		return nil, err
	}
	if h.epochs.of(conv).Load() != epoch {
		// The membership changed while this join ran: an eviction may
		// have missed it.
		if err := h.recheckMember(ctx, c, conv); err != nil {
			return nil, err
		}
	}
	if h.rooms.followsShown() {
		h.rooms.showRoster(conv, c.UserID, res.Online, !already && len(transport.RoomSockets(c.sock.Nsp().Adapter(), room)) == 1)
	}
	return map[string]any{
		"conversationId": conv,
		"online":         h.rooms.Members(ctx, res.Online),
		"typing":         res.Typing,
	}, nil
}

func (h *Sockets) leave(ctx context.Context, c *Conn, p payload) (any, error) {
	conv, err := p.id("conversationId")
	if err != nil {
		return nil, err
	}
	h.clearState(c, conv)
	// Out of the room first: the leaving socket is not told of its own leave.
	room := ConversationRoom(conv)
	was := c.rooms.InRoom(room)
	c.rooms.Leave(room)
	if err := h.engine.Leave(ctx, c.sid, conv); err != nil {
		if was {
			c.rooms.Join(room)
		}
		return nil, err
	}
	return nil, nil
}

func (h *Sockets) heartbeat(ctx context.Context, c *Conn, p payload) (any, error) {
	active, err := p.optBool("active", true)
	if err != nil {
		return nil, err
	}
	if err := h.engine.Heartbeat(ctx, c.sid, active); err != nil {
		return nil, err
	}
	if h.activity != nil {
		// a live connection counts as seen, active or not
		h.activity(ctx, c.UserID, h.now())
	}
	next := h.cfg.HeartbeatInterval
	if j := h.cfg.HeartbeatJitter; j > 0 {
		next += time.Duration(rand.Int64N(int64(j)))
	}
	r := heartbeatReplies.Get().(*heartbeatReply)
	*r = heartbeatReply{NextInMs: next.Milliseconds(), OK: true, ServerTime: h.clock.Format(h.now())}
	return r, nil
}

// heartbeatReplies are the heartbeats' ack bodies, each back in the pool
// once its ack is encoded (serve's reply: both paths encode an ack before
// Reply returns). A body of its own returned in an interface is an
// allocation per heartbeat, nearly all a node allocated at 30,000
// heartbeats/s (1.3 allocations, 53 bytes a heartbeat), and what an
// allocation rate costs there is GC cycles: the seconds with a cycle
// held the heartbeats' p99 (docs/benchmarks/presence-load.md).
var heartbeatReplies = sync.Pool{New: func() any { return new(heartbeatReply) }}

// pooledReply is an ack body that goes back to its pool once serve has
// had it encoded.
type pooledReply interface{ release() }

func (r *heartbeatReply) release() {
	*r = heartbeatReply{}
	heartbeatReplies.Put(r)
}

// heartbeatReply is the heartbeat's ack body. Its JSON is what a map of
// the same fields encodes to (keys in order); in MessagePack the fields
// keep their json names. A map cost about 300 of the 870 bytes a heartbeat
// allocated.
type heartbeatReply struct {
	NextInMs   int64  `json:"nextInMs"`
	OK         bool   `json:"ok"`
	ServerTime string `json:"serverTime"`
}

func (heartbeatReply) okReply() {}

// AppendJSON appends r as encoding/json encodes it.
func (r heartbeatReply) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"nextInMs":`...)
	dst = strconv.AppendInt(dst, r.NextInMs, 10)
	dst = append(dst, `,"ok":`...)
	dst = strconv.AppendBool(dst, r.OK)
	dst = append(dst, `,"serverTime":`...)
	dst = jsontext.String(dst, r.ServerTime)
	return append(dst, '}')
}

func (h *Sockets) typingStart(ctx context.Context, c *Conn, p payload) (any, error) {
	conv, err := p.id("conversationId")
	if err != nil {
		return nil, err
	}
	return nil, h.engine.TypingStart(ctx, c.sid, conv)
}

func (h *Sockets) typingStop(ctx context.Context, c *Conn, p payload) (any, error) {
	conv, err := p.id("conversationId")
	if err != nil {
		return nil, err
	}
	if r, ok := p.get("reason"); ok && r != nil {
		if r != "sent" && r != "cleared" {
			return nil, errorf(CodeInvalidArgument, `reason must be "sent" or "cleared"`)
		}
	}
	return nil, h.engine.TypingStop(ctx, c.sid, conv)
}

// stateSlot throttles one socket's `state` broadcasts in one conversation:
// at most one per StateInterval, coalesced to the latest value.
type stateSlot struct {
	latest  any
	setAt   time.Time // when latest was set, if it is a state
	sent    time.Time
	timer   *time.Timer
	visible bool // a non-null state has been broadcast
}

func (h *Sockets) stateSet(ctx context.Context, c *Conn, p payload) (any, error) {
	conv, err := p.id("conversationId")
	if err != nil {
		return nil, err
	}
	raw, ok := p.get("state")
	if !ok {
		return nil, errorf(CodeInvalidArgument, "state is required (an object, or null to clear)")
	}
	if raw != nil {
		if _, isObj := raw.(map[string]any); !isObj {
			return nil, errorf(CodeInvalidArgument, "state must be an object or null")
		}
		if why := notPlainJSON(raw, 0); why != "" {
			return nil, errorf(CodeInvalidArgument, "state must be plain JSON: %s", why)
		}
		n, err := jsonSize(raw)
		if err != nil {
			return nil, errorf(CodeInvalidArgument, "state is not JSON")
		}
		if n > MaxStateBytes {
			return nil, errorf(CodeInvalidArgument, "state is %d bytes of JSON; at most %d", n, MaxStateBytes)
		}
	}
	if !c.rooms.InRoom(ConversationRoom(conv)) {
		return nil, presence.ErrNotJoined
	}
	// A state is broadcast, never stored: cut off from the other nodes,
	// it would reach this node's members alone, so it is refused as a
	// typing change is when Redis fails.
	if err := h.rooms.reachable(ConversationRoom(conv)); err != nil {
		return nil, err
	}
	if err := h.engine.Touch(ctx, c.sid); err != nil {
		return nil, err
	}
	h.queueState(c, conv, raw)
	return nil, nil
}

// jsonSize is the length of v's JSON as a client writes it: without the
// HTML escapes of json.Marshal (which writes <, > and & in 6 bytes each,
// so that a state of 200 '<' counted 1,208 bytes), and with U+2028 and
// U+2029 in their 3 bytes of UTF-8, as JSON.stringify writes them, where
// encoding/json always escapes them in 6 (a state of 300 of them, 908
// bytes from the client, counted 1,808: a docs audit, 2026-12-07).
func jsonSize(v any) (int, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		var bad *json.UnsupportedValueError
		if !errors.As(err, &bad) {
			return 0, err
		}
		// NaN or ±Infinity, which a msgpack client can send: counted as
		// JSON.stringify writes them, null (they were refused as "not
		// JSON", where Node relays them: a black-box audit, 2026-12-07)
		b.Reset()
		if err := enc.Encode(nonFiniteAsNull(v)); err != nil {
			return 0, err
		}
	}
	out := b.Bytes()
	n := len(out) - 1 // (Encode ends with a newline)
	for i := 0; i < len(out); i++ {
		if out[i] != '\\' {
			continue
		}
		// an escape: \u2028 and \u2029 stand for 3 bytes; any other is
		// what a client writes too (skipped whole, so that an escaped
		// backslash before "u2028" is not taken for one)
		if rest := out[i+1:]; bytes.HasPrefix(rest, []byte("u2028")) || bytes.HasPrefix(rest, []byte("u2029")) {
			n -= 3
			i += 5
		} else {
			i++
		}
	}
	return n, nil
}

// nonFiniteAsNull is v with its NaN and ±Infinity numbers nil (a copy of
// its maps and arrays).
func nonFiniteAsNull(v any) any {
	return jsontext.MapLeaves(v, func(leaf any) any {
		if x, ok := leaf.(float64); ok && (math.IsNaN(x) || math.IsInf(x, 0)) {
			return nil
		}
		return leaf
	})
}

// maxStateDepth bounds how deeply a state's objects and arrays nest.
const maxStateDepth = 32

// notPlainJSON says why v holds more than JSON has (objects, arrays,
// strings, numbers, booleans, null), nested at most maxStateDepth deep,
// or "" if it does not. A binary attachment decodes to something else,
// which the JSON encoding of a broadcast would turn into {}: the bytes
// would be lost silently. Each cause has its own words: one message for
// all of them told a client that sent a Date about binary data and depth
// (a docs audit, 2026-12-07).
func notPlainJSON(v any, depth int) string {
	if depth > maxStateDepth {
		return fmt.Sprintf("nested more than %d levels deep", maxStateDepth)
	}
	switch x := v.(type) {
	case nil, bool, string, float64, json.Number:
		return ""
	case map[string]any:
		for _, e := range x {
			if why := notPlainJSON(e, depth+1); why != "" {
				return why
			}
		}
		return ""
	case []any:
		for _, e := range x {
			if why := notPlainJSON(e, depth+1); why != "" {
				return why
			}
		}
		return ""
	case time.Time, transport.Date:
		return "it holds a date (send it as a string or a number)"
	}
	return "it holds binary data (an attachment)"
}

// queueState records the latest state and broadcasts it now or when the
// throttle interval has passed.
func (h *Sockets) queueState(c *Conn, conv string, state any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h.queueStateLocked(c, conv, state)
}

func (h *Sockets) queueStateLocked(c *Conn, conv string, state any) {
	if c.gone {
		return
	}
	slot := c.states[conv]
	if state == nil && (slot == nil || !slot.visible) {
		// Nothing of this socket's was shown: a null would clear the
		// state another socket of the user shows.
		if slot != nil {
			if slot.timer != nil {
				slot.timer.Stop()
			}
			delete(c.states, conv)
			h.lastStates.cleared(conv, c.UserID, localSetter(c.sid))
		}
		return
	}
	if c.states == nil {
		c.states = map[string]*stateSlot{}
	}
	if slot == nil {
		slot = &stateSlot{}
		c.states[conv] = slot
	}
	slot.latest = state
	if state != nil {
		slot.setAt = time.Now()
		h.lastStates.set(conv, c.UserID, localSetter(c.sid), slot.setAt)
	}
	if slot.timer != nil {
		return // a send is scheduled; it will take the latest
	}
	wait := h.cfg.StateInterval - time.Since(slot.sent)
	if wait <= 0 {
		h.sendStateLocked(c, conv, slot)
		return
	}
	slot.timer = time.AfterFunc(wait, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.gone || c.states[conv] != slot {
			return
		}
		slot.timer = nil
		if slot.latest != nil && h.lastStates.newer(conv, c.UserID, c.sid, slot.setAt) {
			// Another socket of the user set a state after this one
			// (CONTRACT §1: last write wins): this one, held by the
			// throttle, is not shown over it; it stays this socket's, and
			// shows again if that one is cleared (RestoreState).
			return
		}
		h.sendStateLocked(c, conv, slot)
	})
}

func (h *Sockets) sendStateLocked(c *Conn, conv string, slot *stateSlot) {
	slot.sent = time.Now()
	slot.visible = slot.latest != nil
	h.rooms.State(conv, c.UserID, c.sid, slot.latest)
	if slot.latest == nil {
		delete(c.states, conv)
		h.lastStates.cleared(conv, c.UserID, localSetter(c.sid))
		go h.RestoreState(conv, c.UserID, slot.sent)
	}
}

// clearState drops a conversation's state of this socket, telling the room
// if others saw one.
func (h *Sockets) clearState(c *Conn, conv string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	slot := c.states[conv]
	if slot == nil {
		return
	}
	if slot.timer != nil {
		slot.timer.Stop()
	}
	delete(c.states, conv)
	h.lastStates.cleared(conv, c.UserID, localSetter(c.sid))
	if slot.visible {
		h.rooms.State(conv, c.UserID, c.sid, nil)
		go h.RestoreState(conv, c.UserID, time.Now())
	}
}

// lastStates records, for each user and conversation, when each of the
// user's sockets here set the state it shows, and when each other node's
// last state of the user there arrived: what "last write wins" (CONTRACT
// §1) is decided on, where each socket keeps its own state.
//   - A state held by a socket's throttle is not sent once a later one is
//     recorded (newer): it went out after the later one, and every member
//     showed the older state for good (a black-box audit, 2026-12-08: two
//     devices, the second setting its state within 100 ms of the first's
//     second set, 30 of 30 tries).
//   - After a `state: null`, a node shows its own last setter's state
//     again only if no other node's is later (laterRemote): with a user's
//     sockets on three nodes, the two left each showed their own, in
//     either order, and members of one room ended on different states
//     for good (the same audit: 15 of 24 on the older one).
//
// Between nodes, "later" is when the other node's broadcast arrived here:
// a state set there a few milliseconds before this node's may still be
// taken for the later one. A record goes when its state is cleared (the
// socket's null, leave or disconnect; the other node's null) or the user
// leaves the conversation; what a crashed node showed stays until then.
type lastStates struct {
	mu      sync.Mutex
	m       map[stateKey]map[string]time.Time // by "s:"+socket id here, "n:"+node uid elsewhere
	sweepAt int                               // the size that triggers the next sweep
}

type stateKey struct{ conv, user string }

// lastStatesSweep: past this many users with records, those whose every
// record is older than lastStatesKeep go (a crashed node's, whose users
// stayed through other nodes); the next sweep waits until there are twice
// as many as the sweep left, so that a node with many states sweeps
// seldom.
const (
	lastStatesSweep = 4096
	lastStatesKeep  = time.Hour
)

func localSetter(sid string) string     { return "s:" + sid }
func remoteSetter(origin string) string { return "n:" + origin }

// set records a state of user in conv set (or arrived) at at by setter.
func (l *lastStates) set(conv, user, setter string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[stateKey]map[string]time.Time{}
	}
	k := stateKey{conv, user}
	if len(l.m) >= max(l.sweepAt, lastStatesSweep) && l.m[k] == nil {
		l.sweep(at)
		l.sweepAt = 2 * len(l.m)
	}
	if l.m[k] == nil {
		l.m[k] = map[string]time.Time{}
	}
	l.m[k][setter] = at
}

func (l *lastStates) sweep(now time.Time) {
	for k, byWho := range l.m {
		old := true
		for _, at := range byWho {
			if now.Sub(at) < lastStatesKeep {
				old = false
				break
			}
		}
		if old {
			delete(l.m, k)
		}
	}
}

// cleared forgets setter's record: its state is not the user's any more.
func (l *lastStates) cleared(conv, user, setter string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := stateKey{conv, user}
	if byWho := l.m[k]; byWho != nil {
		delete(byWho, setter)
		if len(byWho) == 0 {
			delete(l.m, k)
		}
	}
}

// left forgets the user's records in conv: they left it.
func (l *lastStates) left(conv, user string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, stateKey{conv, user})
}

// newer reports whether a state of user in conv was set after setAt by
// another setter than the socket sid (of this node or another).
func (l *lastStates) newer(conv, user, sid string, setAt time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	own := localSetter(sid)
	for who, at := range l.m[stateKey{conv, user}] {
		if who != own && at.After(setAt) {
			return true
		}
	}
	return false
}

// laterRemote reports whether another node's state of user in conv
// arrived after t.
func (l *lastStates) laterRemote(conv, user string, t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for who, at := range l.m[stateKey{conv, user}] {
		if strings.HasPrefix(who, "n:") && at.After(t) {
			return true
		}
	}
	return false
}

// RestoreState shows again, after a `state: null` of user in conv went
// out at nullAt (one socket of theirs cleared its state, left or went
// away), the state of the user's socket on this node that set one last
// there, unless that state went out since or is about to (a throttled
// send). The others saw the user's state cleared, though the user's last
// write may have been another socket's (CONTRACT §1: last write wins,
// cleared on leave): each socket's state is its own, and the user's is
// the last one set by a socket still there. It goes out at once, not held
// by the throttle: held, it came after a state set meanwhile by a third
// socket, and stayed. Every node does this for its own sockets on a null
// from another node (RemoteBroadcast), after it arrived, so everyone gets
// the null before what follows it. It runs on a goroutine of its own: the
// null goes out under the clearing socket's lock, and this takes the
// others'.
func (h *Sockets) RestoreState(conv, user string, nullAt time.Time) {
	var last *Conn
	var lastSet time.Time
	for _, c := range h.localConns(user, ConversationRoom(conv)) {
		c.mu.Lock()
		if slot := c.states[conv]; !c.gone && slot != nil && slot.latest != nil && slot.setAt.After(lastSet) {
			last, lastSet = c, slot.setAt
		}
		c.mu.Unlock()
	}
	if last == nil || h.lastStates.laterRemote(conv, user, lastSet) {
		return // (another node's state is later: that node shows it again)
	}
	last.mu.Lock()
	defer last.mu.Unlock()
	slot := last.states[conv]
	if last.gone || slot == nil || slot.latest == nil || slot.timer != nil || slot.sent.After(nullAt) {
		return
	}
	h.sendStateLocked(last, conv, slot)
}

// RemoteBroadcast is told of each event another node (or an emitter)
// broadcast to this node's sockets, after they got it: the uid of the
// node's adapter (origin) and its packet's data (the event's name, then
// its arguments):
//   - a `state` event is recorded (lastStates), and one clearing a user's
//     state in a conversation restores the state of one of their sockets
//     here (RestoreState);
//   - a presence:join is noted (Rooms.noteJoin);
//   - a presence:leave that came within a second of a presence:join of the
//     same user there is checked against the roster (leaveOvertook);
//   - a presence:leave forgets the user's states there (lastStates);
//   - presence:join, presence:leave and typing events are noted
//     (Rooms.noteMember, Rooms.noteTypist), for what a gap in the
//     subscription loses (afterGap).
func (h *Sockets) RemoteBroadcast(origin string, data any) {
	ev, ok := data.([]any)
	if !ok || len(ev) < 2 {
		return
	}
	name, _ := ev[0].(string)
	if name != "state" && name != "presence:join" && name != "presence:leave" && name != "typing" {
		return
	}
	p, ok := ev[1].(map[string]any)
	if !ok {
		return
	}
	conv, _ := p["conversationId"].(string)
	user, _ := p["userId"].(string)
	if conv == "" || user == "" {
		return
	}
	switch name {
	case "state":
		st, has := p["state"]
		if !has {
			return
		}
		if st == nil {
			h.lastStates.cleared(conv, user, remoteSetter(origin))
			go h.RestoreState(conv, user, time.Now())
		} else {
			h.lastStates.set(conv, user, remoteSetter(origin), time.Now())
		}
	case "presence:join":
		h.rooms.noteJoin(conv, user)
		h.rooms.noteMember(conv, user, true)
	case "typing":
		if typing, ok := p["typing"].(bool); ok {
			h.rooms.noteTypist(conv, user, typing)
		}
	case "presence:leave":
		h.lastStates.left(conv, user)
		h.rooms.noteMember(conv, user, false)
		if h.rooms.joinedLately(conv, user) {
			go h.leaveOvertook(conv, user, time.Now())
		}
	}
}

// overtakeWait is how long leaveOvertook waits for a join that the leave
// it checks came before.
const overtakeWait = 100 * time.Millisecond

// leaveOvertook runs after a presence:leave that came from another node
// right after a presence:join of the same user in the same conversation:
// the leave may be the older of the two. A user's leave through one node
// and their join through another a few milliseconds later reach each
// node's sockets in the order they reach the node: its own event at once,
// the other's through Redis after it. The join's node, and a third node
// that got the join's publication first, showed the user gone while the
// roster had them (a black-box run: 5 of 70 tries at 1.5-4.5 ms apart).
// Unless a join of the user there reaches this node within overtakeWait
// after the leave (arrived at), which then came in the right order, the
// roster is read: if it has the user, this node's sockets there are told
// of the join again, and only they (each node sees to its own).
func (h *Sockets) leaveOvertook(conv, user string, arrived time.Time) {
	time.Sleep(overtakeWait)
	if h.rooms.joinedSince(conv, user, arrived) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.OpTimeout)
	defer cancel()
	res, err := h.engine.Roster(ctx, conv)
	if err != nil {
		h.log.Debug("roster check after a leave that came after a join failed", "conversation_id", conv, "user_id", user, "err", err)
		return
	}
	for _, m := range res.Online {
		if m.UserID == user {
			h.rooms.JoinAgain(ctx, m, conv)
			return
		}
	}
}

// clearStates clears every state of a closing socket.
func (h *Sockets) clearStates(c *Conn) {
	c.mu.Lock()
	convs := make([]string, 0, len(c.states))
	for conv := range c.states {
		convs = append(convs, conv)
	}
	c.mu.Unlock()
	for _, conv := range convs {
		h.clearState(c, conv)
	}
	c.mu.Lock()
	c.gone = true
	c.mu.Unlock()
}

// ids reads a list of user ids of at most MaxQueryIDs.
// With distinct, the bound is on the distinct ids, which come back in
// their first order (presence:subscribe: "duplicates ignored"); else on
// the list (presence:query answers each duplicate).
func (p payload) ids(field string, minLen int, distinct bool) ([]string, error) {
	v, ok := p.get(field)
	if !ok || v == nil {
		return nil, errIDListMissing(field)
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, errIDListType(field)
	}
	if !distinct {
		if err := checkIDCount(field, len(arr), minLen, MaxQueryIDs); err != nil {
			return nil, err
		}
	}
	out := make([]string, len(arr))
	for i, x := range arr {
		s, ok := x.(string)
		if !ok || !ids.Valid(s) {
			return nil, errIDAt(field, i)
		}
		out[i] = s
	}
	if distinct {
		out = ids.Unique(out)
		if err := checkIDCount(field, len(out), minLen, MaxQueryIDs); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (h *Sockets) query(ctx context.Context, c *Conn, p payload) (any, error) {
	ids, err := p.ids("userIds", 1, false)
	if err != nil {
		return nil, err
	}
	if h.viewers == nil {
		return nil, errorf(CodeUnavailable, "presence queries are not available")
	}
	var ps []lastseen.Presence
	err = h.touchWhile(ctx, c, func() (err error) {
		ps, err = h.viewers.Presences(ctx, c.UserID, ids)
		return err
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"presences": lastseen.PresenceList(ps)}, nil
}

// touchWhile records the activity of c's user (any event is activity),
// then runs read. The activity's error comes first (the socket is lost, or
// the backend unavailable), and read does not run then. Touch does not
// wait for a round trip (the Redis engine sends activity records in the
// background), so the read is not delayed by it; touchWhile ran the two
// side by side on two goroutines before that. Only for reads, or for
// changes the caller undoes on an error (subscribe).
func (h *Sockets) touchWhile(ctx context.Context, c *Conn, read func() error) error {
	if err := h.engine.Touch(ctx, c.sid); err != nil {
		return err
	}
	return read()
}

func (h *Sockets) subscribe(ctx context.Context, c *Conn, p payload) (any, error) {
	unique, err := p.ids("userIds", 0, true)
	if err != nil {
		return nil, err
	}
	if h.viewers == nil || h.subs == nil {
		return nil, errorf(CodeUnavailable, "presence subscriptions are not available")
	}
	// Subscribe first, then read: a change between the two is not missed
	// (at worst it is sent as well as acked). The activity is recorded
	// before the read; a refusal (the engine has lost the socket, or a
	// backend is unavailable) puts the subscriptions back as they were.
	prev := h.subs.Replace(c, unique)
	ps := []lastseen.Presence{}
	err = h.touchWhile(ctx, c, func() (err error) {
		if len(unique) > 0 {
			ps, err = h.viewers.Presences(ctx, c.UserID, unique)
		}
		return err
	})
	if err != nil {
		h.subs.Restore(c, prev)
		return nil, err
	}
	seed(c, ps)
	return map[string]any{"presences": lastseen.PresenceList(ps)}, nil
}

// arrived notes when a known event's packet arrived.
func (c *Conn) arrived(t time.Time) {
	c.pending.Add(1)
	c.mu.Lock()
	c.arrivals = append(c.arrivals, t)
	c.mu.Unlock()
}

// dequeued takes the arrival time of the event about to be handled.
func (c *Conn) dequeued() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return popFront(&c.arrivals)
}

// unavailableLog logs events that failed because a backend was down
// (acks unavailable) as one line at once, then one per 10 s with their
// count, and one when events succeed again: an outage of a few seconds
// wrote a line per event (thousands with a few hundred clients; failover
// audit). Events succeed again when one succeeds unavailableQuiet after
// the last failure: during an outage some events go on succeeding (a
// heartbeat, a join in a conversation whose Redis Cluster master is up),
// and each of those ended the run, so that every failure was logged at
// once again, with a recovery line after it (a second failover audit: 24
// to 58 pairs of lines per node in outages of 4 s).
type unavailableLog struct {
	failing  atomic.Bool // a run of failures is under way (read on every success)
	mu       sync.Mutex
	log      throttle.Log
	lastFail time.Time
}

// unavailableQuiet is how long after the last failure a success ends a
// run of failures.
const unavailableQuiet = 5 * time.Second

func (u *unavailableLog) fail(log *slog.Logger, event string, c *Conn, err error, now time.Time) {
	u.mu.Lock()
	if u.log.Every == 0 {
		u.log.Every = 10 * time.Second
	}
	n, ok := u.log.Fail(now)
	u.lastFail = now
	u.failing.Store(true)
	u.mu.Unlock()
	if ok {
		log.Warn("events failed: backend unavailable", "event", event, "sid", c.sid, "user_id", c.UserID, "err", err, "failed", n)
	}
}

func (u *unavailableLog) recover(log *slog.Logger, now time.Time) {
	u.mu.Lock()
	if now.Sub(u.lastFail) < unavailableQuiet {
		u.mu.Unlock()
		return
	}
	n, ok := u.log.Recover()
	u.failing.Store(false)
	u.mu.Unlock()
	if ok {
		log.Info("events succeed again", "failed_meanwhile", n)
	}
}
