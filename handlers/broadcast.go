package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/internal/jsontext"
	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
)

// Settings tells users' last-seen settings without waiting long on the
// store, and takes changes; *lastseen.Settings satisfies it. Room events
// and rosters carry times only for users whose setting is everyone
// (CONTRACT §1).
type Settings interface {
	// Lookup returns the settings it knows within a short bound; a user
	// left out counts as hidden.
	Lookup(ctx context.Context, userIDs []string) map[string]store.Visibility
	// Set records a user's new setting.
	Set(userID string, v store.Visibility)
	// Reload forgets every setting known (changes may have been missed).
	Reload()
}

var _ Settings = (*lastseen.Settings)(nil)

// Rooms delivers domain events to Socket.IO rooms. It is bound to the
// Socket.IO server once that exists; with a cluster adapter the emits reach
// every node.
type Rooms struct {
	io        atomic.Pointer[socket.Server]
	typingTTL time.Duration
	log       *slog.Logger
	settings  Settings // nil: every time is hidden
	// send, when set, replaces the emit to the Socket.IO server (tests).
	send func(room socket.Room, exceptSocket, event string, payload any)

	mu       sync.RWMutex
	onStatus []func(context.Context, presence.Event)

	// joins: when this node last delivered a presence:join of a user in
	// a conversation (its own or another node's), for a leave that
	// overtakes it (Sockets.RemoteBroadcast); entries older than
	// joinWindow are dropped.
	joinsMu sync.Mutex
	joins   notedAt

	// shown: what this node's sockets were shown, made up for after a
	// gap in its subscription (aftergap.go)
	shown shownState
}

// joinKey is a user in a conversation.
type joinKey struct{ conv, user string }

// joinWindow is how long after a presence:join a leave of the same user
// in the same conversation is checked against the roster.
const joinWindow = time.Second

// joinedSince reports whether a presence:join of user in conv was
// delivered here after t.
func (r *Rooms) joinedSince(conv, user string, t time.Time) bool {
	r.joinsMu.Lock()
	defer r.joinsMu.Unlock()
	at, ok := r.joins.at[joinKey{conv, user}]
	return ok && at.After(t)
}

// noteJoin notes a presence:join of user in conv delivered here now.
func (r *Rooms) noteJoin(conv, user string) {
	r.joinsMu.Lock()
	defer r.joinsMu.Unlock()
	r.joins.note(joinKey{conv, user}, time.Now(), joinWindow, joinWindow)
}

// notedAt is when each user in a conversation was last noted; entries
// older than a bound go as new ones come.
type notedAt struct {
	at    map[joinKey]time.Time
	swept time.Time
}

// note notes k at now, having first dropped the entries older than keep,
// at most once per sweepEvery.
func (n *notedAt) note(k joinKey, now time.Time, sweepEvery, keep time.Duration) {
	if n.at == nil {
		n.at = map[joinKey]time.Time{}
	}
	if now.Sub(n.swept) > sweepEvery {
		for k, at := range n.at {
			if now.Sub(at) > keep {
				delete(n.at, k)
			}
		}
		n.swept = now
	}
	n.at[k] = now
}

// joinedLately reports whether a presence:join of user in conv was
// delivered here within joinWindow.
func (r *Rooms) joinedLately(conv, user string) bool {
	r.joinsMu.Lock()
	defer r.joinsMu.Unlock()
	at, ok := r.joins.at[joinKey{conv, user}]
	return ok && time.Since(at) <= joinWindow
}

// JoinAgain tells this node's sockets in a conversation, and only them,
// that a member is there (presence:join), with their join time: after a
// presence:leave that came after the join it is older than (see
// Sockets.RemoteBroadcast).
func (r *Rooms) JoinAgain(ctx context.Context, m presence.Member, conv string) {
	io := r.io.Load()
	if io == nil {
		return
	}
	settings := lookup(ctx, r.settings, []string{m.UserID})
	r.noteMember(conv, m.UserID, true)
	r.emitHere(ConversationRoom(conv), "presence:join", JoinPayload{ConversationID: conv, UserID: m.UserID, At: roomTime(m.Since, m.UserID, settings)})
}

// NewRooms creates an unbound Rooms.
func NewRooms(typingTTL time.Duration, log *slog.Logger) *Rooms {
	if typingTTL <= 0 {
		typingTTL = 5 * time.Second
	}
	return &Rooms{typingTTL: typingTTL, log: log}
}

// UseSettings sets where the users' last-seen settings are read (before
// the first event).
func (r *Rooms) UseSettings(s Settings) { r.settings = s }

// Settings returns what UseSettings set.
func (r *Rooms) Settings() Settings { return r.settings }

// prefetch starts reading users' settings ahead of the rosters and room
// events that will name them, where the source can (lastseen.Settings).
func (r *Rooms) prefetch(users ...string) {
	if p, ok := r.settings.(interface{ Prefetch([]string) }); ok {
		p.Prefetch(users)
	}
}

// Bind attaches the Socket.IO server.
func (r *Rooms) Bind(io *socket.Server) { r.io.Store(io) }

// OnStatus registers a listener of user status events (last-seen recording,
// presence subscriptions).
func (r *Rooms) OnStatus(fn func(context.Context, presence.Event)) {
	r.mu.Lock()
	r.onStatus = append(r.onStatus, fn)
	r.mu.Unlock()
}

// JoinPayload is `presence:join`. At is rounded down to the minute, and
// null unless the user's last-seen setting is everyone (CONTRACT §1).
type JoinPayload struct {
	ConversationID string  `json:"conversationId"`
	UserID         string  `json:"userId"`
	At             *string `json:"at"`
}

// LeavePayload is `presence:leave`; At as in JoinPayload.
type LeavePayload struct {
	ConversationID string  `json:"conversationId"`
	UserID         string  `json:"userId"`
	At             *string `json:"at"`
	Reason         string  `json:"reason"`
}

// MemberPayload is a roster entry; Since as JoinPayload's At.
type MemberPayload struct {
	UserID string  `json:"userId"`
	Status string  `json:"status"`
	Since  *string `json:"since"`
}

// lookup reads the settings of users; without a source every one is
// unknown (hidden).
func lookup(ctx context.Context, s Settings, users []string) map[string]store.Visibility {
	if s == nil || len(users) == 0 {
		return nil
	}
	return s.Lookup(ctx, users)
}

// roomTime is a room event's or roster entry's time as the contract shows
// it to every member.
func roomTime(t time.Time, user string, settings map[string]store.Visibility) *string {
	v, known := settings[user]
	return lastseen.RoomTime(t, v, known)
}

// MemberList is a roster as members see it. It encodes itself to JSON
// exactly as encoding/json encodes a []MemberPayload (FuzzMemberListJSON),
// without reflection: for a join's ack on the websocket transport, whose
// roster of 100 members took 4 KB of encoding/json's allocations per join.
type MemberList []MemberPayload

// AppendJSON appends l as json.Marshal would encode it, in a buffer
// grown once for the whole list.
func (l MemberList) AppendJSON(dst []byte) []byte {
	n := 2
	for i := range l {
		n += len(l[i].UserID) + len(l[i].Status) + len(`{"userId":"","status":"","since":null},`) + 24
	}
	return jsontext.Array(dst, l, n, func(dst []byte, m *MemberPayload) []byte {
		dst = append(dst, `{"userId":`...)
		dst = jsontext.String(dst, m.UserID)
		dst = append(dst, `,"status":`...)
		dst = jsontext.String(dst, m.Status)
		dst = append(dst, `,"since":`...)
		dst = jsontext.StringPtr(dst, m.Since)
		return append(dst, '}')
	})
}

// rosterPayload is a roster as members see it, with one settings lookup.
func rosterPayload(ctx context.Context, s Settings, ms []presence.Member) MemberList {
	users := make([]string, len(ms))
	for i, m := range ms {
		users[i] = m.UserID
	}
	settings := lookup(ctx, s, users)
	out := make(MemberList, len(ms))
	for i, m := range ms {
		out[i] = MemberPayload{UserID: m.UserID, Status: string(m.Status), Since: roomTime(m.Since, m.UserID, settings)}
	}
	return out
}

// Members is a roster as members see it (a join's ack).
func (r *Rooms) Members(ctx context.Context, ms []presence.Member) MemberList {
	return rosterPayload(ctx, r.settings, ms)
}

// TypingPayload is `typing`.
type TypingPayload struct {
	ConversationID string `json:"conversationId"`
	UserID         string `json:"userId"`
	Typing         bool   `json:"typing"`
	TTLMs          int64  `json:"ttlMs"`
}

// StatePayload is `state`.
type StatePayload struct {
	ConversationID string `json:"conversationId"`
	UserID         string `json:"userId"`
	State          any    `json:"state"`
}

// Sink is the presence engine's event sink.
func (r *Rooms) Sink() presence.Sink {
	return func(ctx context.Context, events []presence.Event) {
		// One settings lookup for the batch (a sweep of a dead node
		// brings many leaves at once).
		var users []string
		for _, e := range events {
			if e.Kind == presence.EventJoin || e.Kind == presence.EventLeave {
				users = append(users, e.UserID)
			}
		}
		settings := lookup(ctx, r.settings, users)
		for _, e := range events {
			r.deliver(ctx, e, settings)
		}
	}
}

func (r *Rooms) deliver(ctx context.Context, e presence.Event, settings map[string]store.Visibility) {
	switch e.Kind {
	case presence.EventJoin:
		r.noteJoin(e.ConversationID, e.UserID)
		r.noteMember(e.ConversationID, e.UserID, true)
		r.emit(ConversationRoom(e.ConversationID), e.ExceptSocket, "presence:join", JoinPayload{
			ConversationID: e.ConversationID, UserID: e.UserID, At: roomTime(e.At, e.UserID, settings),
		})
	case presence.EventLeave:
		r.noteMember(e.ConversationID, e.UserID, false)
		r.emit(ConversationRoom(e.ConversationID), e.ExceptSocket, "presence:leave", LeavePayload{
			ConversationID: e.ConversationID, UserID: e.UserID, At: roomTime(e.At, e.UserID, settings), Reason: e.Reason,
		})
	case presence.EventTyping:
		r.emit(ConversationRoom(e.ConversationID), e.ExceptSocket, "typing", TypingPayload{
			ConversationID: e.ConversationID, UserID: e.UserID, Typing: e.Typing, TTLMs: r.typingTTL.Milliseconds(),
		})
	case presence.EventStatus:
		r.mu.RLock()
		listeners := r.onStatus
		r.mu.RUnlock()
		for _, fn := range listeners {
			fn(ctx, e)
		}
	}
}

// emit sends an event to a room, except one socket if given.
func (r *Rooms) emit(room socket.Room, exceptSocket string, event string, payload any) {
	if r.send != nil {
		r.send(room, exceptSocket, event, payload)
		return
	}
	io := r.io.Load()
	if io == nil {
		return
	}
	op := io.To(room)
	if exceptSocket != "" {
		op = op.Except(socket.Room(exceptSocket))
	}
	if err := op.Emit(event, payload); err != nil {
		r.log.Warn("broadcast failed", "event", event, "room", string(room), "err", err)
	}
}

// reachable returns an error wrapping presence.ErrUnavailable while the
// cluster adapter finds this node cut off from the others for a broadcast
// to room (its ReachableRoom): the broadcast would reach this node's
// sockets alone. Without a cluster adapter (one node) there is nobody to
// reach.
func (r *Rooms) reachable(room socket.Room) error {
	io := r.io.Load()
	if io == nil {
		return nil
	}
	a, ok := io.Sockets().Adapter().(interface{ ReachableRoom(socket.Room) error })
	if !ok {
		return nil
	}
	if err := a.ReachableRoom(room); err != nil {
		return fmt.Errorf("handlers: other nodes: %w", errors.Join(presence.ErrUnavailable, err))
	}
	return nil
}

// State broadcasts a `state` event to a conversation except its sender.
func (r *Rooms) State(conv, userID, exceptSocket string, state any) {
	r.emit(ConversationRoom(conv), exceptSocket, "state", StatePayload{ConversationID: conv, UserID: userID, State: state})
}
