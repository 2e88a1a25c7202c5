package handlers

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync/atomic"

	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/transport"
)

// Nodes tell each other of changes that their caches must follow at once,
// through server-side emits of the cluster adapter. The sender waits until
// every other node has acted (each acks after its work), so that what a
// client does after the REST answer, through any node, sees the change.

// OwnEvents starts the name of every server-side event of presenced's own
// (privacy, contacts, evict, kick, admin-sockets): other Socket.IO servers
// sharing the cluster (Node ones) have no listener for them and never
// answer, so the adapter waits for presenced nodes' answers alone
// (adapter.Config.OwnEvents).
const OwnEvents = "presenced:"

// privacyEvent tells the other nodes a user's new last-seen setting:
// (userId, setting).
const privacyEvent = "presenced:privacy"

// tellNodes sends a server-side event to the other nodes and waits until
// each has acknowledged it, or until ctx ends. Without a cluster adapter
// (one node) there is nobody to tell.
func (h *Sockets) tellNodes(ctx context.Context, event string, args ...any) error {
	io := h.rooms.io.Load()
	if io == nil {
		return nil
	}
	done := make(chan error, 1)
	ack := socket.Ack(func(_ []any, err error) {
		select {
		case done <- err:
		default:
		}
	})
	if err := io.Sockets().ServerSideEmit(event, append(args, ack)...); err != nil {
		// The in-memory adapter of a single node refuses server-side emits.
		h.log.Debug("not sent to other nodes", "event", event, "err", err)
		return nil
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ackOf splits the arguments the library hands a listener (a client event,
// a server-side event) from their ack, the last one, if any.
func ackOf(args []any) ([]any, socket.Ack) {
	if n := len(args); n > 0 {
		if a, ok := args[n-1].(socket.Ack); ok {
			return args[:n-1], a
		}
	}
	return args, nil
}

// PrivacyChanged makes every node's subscribers of a user see the user as
// the new setting shows them, at once, and the user's own subscriptions
// show the others as the user may see them now (a `nobody` user sees
// nobody's times: CONTRACT §3); and every other node's settings cache
// learn it (this node's REST handler has updated its own).
func (h *Sockets) PrivacyChanged(ctx context.Context, userID string, v store.Visibility) {
	h.privacyChanged(userID)
	if err := h.tellNodes(ctx, privacyEvent, userID, string(v)); err != nil {
		h.log.Warn("privacy change not confirmed by every node", "user_id", userID, "err", err)
	}
}

// privacyChanged is this node's part of PrivacyChanged.
func (h *Sockets) privacyChanged(userID string) {
	if h.subs == nil {
		return
	}
	h.subs.Refresh(userID)
	for _, c := range h.localConns(userID, "") {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), h.cfg.OpTimeout)
			defer cancel()
			h.subs.RefreshViewer(ctx, c)
		}()
	}
}

// contactsEvent tells the other nodes that a user's contact list was
// replaced: (userId).
const contactsEvent = "presenced:contacts"

// ContactsChanged makes every node's subscribers of a user see the user as
// the new contact list lets them (CONTRACT §3: a `contacts` setting shows
// the user's times to their contacts only), at once: a viewer taken off
// the list would otherwise keep the last visible presence, and be sent
// `hidden` at the user's next change, its very moment.
func (h *Sockets) ContactsChanged(ctx context.Context, userID string) {
	if h.subs != nil {
		h.subs.Refresh(userID)
	}
	if err := h.tellNodes(ctx, contactsEvent, userID); err != nil {
		h.log.Warn("contacts change not confirmed by every node", "user_id", userID, "err", err)
	}
}

// onContacts is the other side of ContactsChanged.
func (h *Sockets) onContacts(raw ...any) {
	args, ack := ackOf(raw)
	if len(args) >= 1 {
		if user, _ := args[0].(string); user != "" && h.subs != nil {
			h.subs.Refresh(user)
		}
	}
	if ack != nil {
		ack([]any{true}, nil)
	}
}

// onPrivacy is the other side of PrivacyChanged.
func (h *Sockets) onPrivacy(raw ...any) {
	args, ack := ackOf(raw)
	if len(args) >= 2 {
		user, _ := args[0].(string)
		v, _ := args[1].(string)
		if s := h.rooms.settings; s != nil && user != "" && store.Visibility(v).Valid() {
			s.Set(user, store.Visibility(v))
		}
		if user != "" {
			h.privacyChanged(user)
		}
	}
	if ack != nil {
		ack([]any{true}, nil)
	}
}

// evictEvent tells the other nodes that a conversation's member list
// changed: (conversationId, [removed userId]). Each forgets its cached
// membership answers for it and removes the removed users' sockets.
const evictEvent = "presenced:evict"

// ListenEvictions makes this node act on the changes other nodes tell it
// of (membership, privacy, contacts) and on their operators' disconnects.
func (h *Sockets) ListenEvictions() {
	io := h.rooms.io.Load()
	if io == nil {
		return
	}
	_ = io.Sockets().On(privacyEvent, h.onPrivacy)
	_ = io.Sockets().On(contactsEvent, h.onContacts)
	_ = io.Sockets().On(kickEvent, h.onKick)
	_ = io.Sockets().On(evictEvent, h.onEvict)
}

// Evict is called after a conversation's member list was replaced, with
// the users removed (maybe none). On every node, it drops the cached
// membership answers of the conversation and removes the users' sockets
// from it: each leaves the room and the roster, which announces
// presence:leave with reason "left". It returns once every node has done
// so (or ctx ended), so that a join through any node after it is checked
// against the new list.
func (h *Sockets) Evict(ctx context.Context, conv string, users []string) error {
	h.membershipChanged(ctx, conv, users)
	list := make([]any, len(users))
	for i, u := range users {
		list[i] = u
	}
	if err := h.tellNodes(ctx, evictEvent, conv, list); err != nil {
		return fmt.Errorf("membership change not confirmed by every node: %w", err)
	}
	return nil
}

// onEvict is the other side of Evict.
func (h *Sockets) onEvict(raw ...any) {
	args, ack := ackOf(raw)
	if len(args) >= 2 {
		conv, _ := args[0].(string)
		list, _ := args[1].([]any)
		users := make([]string, 0, len(list))
		for _, u := range list {
			if s, ok := u.(string); ok {
				users = append(users, s)
			}
		}
		if conv != "" {
			ctx, cancel := context.WithTimeout(context.Background(), h.cfg.OpTimeout)
			h.membershipChanged(ctx, conv, users)
			cancel()
		}
	}
	if ack != nil {
		ack([]any{true}, nil)
	}
}

// membershipChanged is this node's part of a membership change. The
// order matters to a join running meanwhile (see join and recheckMember):
// the cache is emptied before the epoch moves, and the epoch moves before
// the sockets are looked for.
func (h *Sockets) membershipChanged(ctx context.Context, conv string, users []string) {
	if f, ok := h.membership.(interface{ Forget(string) }); ok {
		f.Forget(conv)
	}
	h.epochs.of(conv).Add(1)
	h.evictLocal(ctx, conv, users)
}

func (h *Sockets) evictLocal(ctx context.Context, conv string, users []string) {
	if len(users) == 0 {
		return
	}
	room := ConversationRoom(conv)
	for _, u := range users {
		for _, c := range h.localConns(u, room) {
			h.clearState(c, conv)
			c.sock.Leave(room)
			if err := h.engine.Leave(ctx, c.sid, conv); err != nil {
				h.log.Warn("eviction failed", "sid", c.sid, "conversation_id", conv, "err", err)
			}
		}
	}
}

// localConns returns this node's sockets of user that are in room (all
// of them if room is "").
func (h *Sockets) localConns(user string, room socket.Room) []*Conn {
	io := h.rooms.io.Load()
	if io == nil {
		return nil
	}
	nsp := io.Sockets()
	var out []*Conn
	for _, sid := range transport.RoomSockets(nsp.Adapter(), UserRoom(user)) {
		s, ok := nsp.Sockets().Load(sid)
		if !ok || (room != "" && !transport.InRoom(s, room)) {
			continue
		}
		if c, ok := s.Data().(*Conn); ok {
			out = append(out, c)
		}
	}
	return out
}

// memberEpochs count membership changes by conversation, striped by a
// hash of its id: a collision only costs a join a second membership check.
type memberEpochs [256]atomic.Uint64

func (e *memberEpochs) of(conv string) *atomic.Uint64 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(conv))
	return &e[h.Sum32()%uint32(len(e))]
}

// recheckMember runs after a join whose conversation's membership changed
// while it ran: the eviction of a removed member may have looked for its
// sockets before this one was in the room, or left the roster before the
// join entered it. If the user is no longer a member (or that cannot be
// told), the join is undone and refused.
func (h *Sockets) recheckMember(ctx context.Context, c *Conn, conv string) error {
	ok, err := h.membership.IsMember(ctx, conv, c.UserID)
	if err == nil && ok {
		return nil
	}
	h.clearState(c, conv)
	c.sock.Leave(ConversationRoom(conv))
	if lerr := h.engine.Leave(ctx, c.sid, conv); lerr != nil {
		h.log.Warn("undoing a revoked join failed", "sid", c.sid, "conversation_id", conv, "err", lerr)
	}
	if err != nil {
		return err
	}
	return errorf(CodeForbidden, "not a member of this conversation")
}

// libraryAck is an ack of the library's path as the transport's Replier,
// which serve answers through.
type libraryAck socket.Ack

func (a libraryAck) Reply(body any) { a([]any{body}, nil) }

// replierOf is a (nil for none) as a Replier (nil for none).
func replierOf(a socket.Ack) transport.Replier {
	if a == nil {
		return nil
	}
	return libraryAck(a)
}
