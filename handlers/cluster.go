package handlers

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/transport"
)

// Nodes tell each other of changes that their caches must follow at once,
// through server-side emits of the cluster adapter. The sender waits until
// every other node has acted (each acks after its work), so that what a
// client does after the REST answer, through any node, sees the change.
//
// Redis Pub/Sub delivers at most once, and keeps nothing. The changes
// (membership, privacy, contacts) are in the store before they are told,
// and a notice that may not have reached every node is made up for:
//   - when the sender could not publish it, or not every node answered in
//     time, the sender tells it again in the background (redeliver), until
//     every node answers or noticeRetryFor has passed;
//   - a node whose subscription was lost while it was sent (its link to
//     Redis dropped) never gets it, and no node answers for it; when its
//     subscription is back (adapter.Config.Regained), it checks what such
//     notices change against the store (ResyncAfterGap).
//
// Before 2026-12-07 neither was done: a member removed while their node's
// link to Redis was down for two seconds kept their place in the room
// (its typing, states, and typing and states of their own) until they
// left, and a privacy change showed a hidden user's room times there for
// a minute (a privacy audit).

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
	if err := h.notify(ctx, privacyEvent, userID, string(v)); err != nil {
		h.log.Warn("privacy change not confirmed by every node: told again in the background", "user_id", userID, "err", err)
	}
}

// noticeRetryFor bounds how long a notice is told again (redeliver);
// maxRedeliveries bounds the notices being told again at once.
const (
	noticeRetryFor  = 10 * time.Minute
	maxRedeliveries = 10_000
)

// notify tells the other nodes of a change (tellNodes), and tells them
// again in the background if not every node confirmed it.
func (h *Sockets) notify(ctx context.Context, event string, args ...any) error {
	err := h.tellNodes(ctx, event, args...)
	if err != nil {
		h.redeliver(event, args)
	}
	return err
}

// redeliver tells the other nodes of a change again, after 1 s, then at
// doubling intervals up to 30 s, until every node confirms it, the node
// stops (Close), or noticeRetryFor passes. Telling a node twice is
// harmless: each acts on the store's state (membershipChanged removes only
// users who are no longer members; a privacy change reads the setting
// again).
func (h *Sockets) redeliver(event string, args []any) {
	if h.redelivering.Add(1) > maxRedeliveries {
		h.redelivering.Add(-1)
		h.log.Error("notice dropped: too many waiting to be told again", "event", event)
		return
	}
	go func() {
		defer h.redelivering.Add(-1)
		give := time.Now().Add(noticeRetryFor)
		for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-h.stop:
				t.Stop()
				h.log.Warn("notice not confirmed by every node when the node stopped", "event", event)
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*h.cfg.OpTimeout)
			err := h.tellNodes(ctx, event, args...)
			cancel()
			if err == nil {
				h.log.Info("notice confirmed by every node on a retry", "event", event)
				return
			}
			if time.Now().After(give) {
				h.log.Error("notice not confirmed by every node: given up", "event", event, "err", err)
				return
			}
		}
	}()
}

// Close stops telling notices again.
func (h *Sockets) Close() { h.stopOnce.Do(func() { close(h.stop) }) }

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
	if err := h.notify(ctx, contactsEvent, userID); err != nil {
		h.log.Warn("contacts change not confirmed by every node: told again in the background", "user_id", userID, "err", err)
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
//
// A removed user within a flap grace there (disconnected, not back yet)
// leaves at once too: else the roster listed them until the grace ended.
func (h *Sockets) Evict(ctx context.Context, conv string, users []string) error {
	h.membershipChanged(ctx, conv, users)
	if err := h.engine.EndGraces(ctx, conv, users); err != nil {
		h.log.Warn("flap graces of removed members left to run out", "conversation_id", conv, "users", len(users), "err", err)
	}
	list := make([]any, len(users))
	for i, u := range users {
		list[i] = u
	}
	if err := h.notify(ctx, evictEvent, conv, list); err != nil {
		return fmt.Errorf("membership change not confirmed by every node (told again in the background): %w", err)
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

// evictLocal removes this node's sockets of users from conv, unless the
// user is a member again (a notice told again after the user was added
// back; if that cannot be told, the user is removed).
func (h *Sockets) evictLocal(ctx context.Context, conv string, users []string) {
	room := ConversationRoom(conv)
	for _, u := range users {
		conns := h.localConns(u, room)
		if len(conns) == 0 {
			continue
		}
		if member, err := h.membership.IsMember(ctx, conv, u); err == nil && member {
			continue
		}
		for _, c := range conns {
			h.evictConn(ctx, c, conv)
		}
	}
}

// evictConn takes a socket out of a conversation whose member list no
// longer has its user.
func (h *Sockets) evictConn(ctx context.Context, c *Conn, conv string) {
	h.clearState(c, conv)
	c.sock.Leave(ConversationRoom(conv))
	if err := h.engine.Leave(ctx, c.sid, conv); err != nil {
		h.log.Warn("eviction failed", "sid", c.sid, "conversation_id", conv, "err", err)
	}
}

// resyncWorkers bounds the membership checks ResyncAfterGap runs at once.
const resyncWorkers = 4

// ResyncAfterGap runs when this node's subscription to the other nodes'
// notices is back after it was lost (adapter.Config.Regained): the notices
// sent meanwhile never reached it. It forgets its cached member lists and
// settings, takes its sockets out of the conversations whose member lists
// no longer have their users, and shows each subscription as its viewer
// may see it now. Operators' disconnects sent meanwhile are not redone
// (DisconnectUser told the operator). Calls that come while one runs make
// it run once more after it.
func (h *Sockets) ResyncAfterGap() {
	if h.resyncing.Add(1) > 1 {
		return
	}
	for {
		h.resyncOnce()
		if h.resyncing.Add(-1) == 0 {
			return
		}
		h.resyncing.Store(1)
	}
}

func (h *Sockets) resyncOnce() {
	start := time.Now()
	if f, ok := h.membership.(interface{ ForgetAll() }); ok {
		f.ForgetAll()
	}
	for i := range h.epochs {
		h.epochs[i].Add(1) // joins under way check again (recheckMember)
	}
	if s := h.rooms.settings; s != nil {
		s.Reload()
	}
	io := h.rooms.io.Load()
	if io == nil {
		return
	}
	nsp := io.Sockets()
	type check struct {
		c    *Conn
		conv string
	}
	var checks []check
	var viewers []*Conn
	if _, open := h.membership.(presence.Open); !open {
		for _, room := range transport.RoomNames(nsp.Adapter()) {
			conv, ok := strings.CutPrefix(string(room), "conversation:")
			if !ok {
				continue
			}
			for _, sid := range transport.RoomSockets(nsp.Adapter(), room) {
				if s, ok := nsp.Sockets().Load(sid); ok {
					if c, ok := s.Data().(*Conn); ok {
						checks = append(checks, check{c, conv})
					}
				}
			}
		}
	}
	if h.subs != nil {
		nsp.Sockets().Range(func(_ socket.SocketId, s *socket.Socket) bool {
			if c, ok := s.Data().(*Conn); ok {
				viewers = append(viewers, c)
			}
			return true
		})
	}
	var evicted, failed atomic.Int64
	tasks := make([]func(context.Context), 0, len(checks))
	for _, k := range checks {
		tasks = append(tasks, func(ctx context.Context) {
			member, err := h.membership.IsMember(ctx, k.conv, k.c.UserID)
			switch {
			case err != nil:
				failed.Add(1)
			case !member && transport.InRoom(k.c.sock, ConversationRoom(k.conv)):
				h.evictConn(ctx, k.c, k.conv)
				evicted.Add(1)
			}
		})
	}
	h.runResyncWork(tasks)
	// The subscriptions are shown as they are, and the room events lost
	// are made up for (afterGap), once the nodes have registered their
	// sockets again (each at its next lease renewal, within a second) if
	// Redis lost its data: read at once, the subscriptions showed every
	// user of the cluster offline to their subscribers, and online again
	// a moment later (a black-box audit, 2026-12-07).
	if len(viewers) > 0 || h.rooms.anyShown() {
		go func() {
			if !h.sleep(time.Duration(viewerSettle.Load())) {
				return
			}
			tasks := make([]func(context.Context), len(viewers))
			for i, c := range viewers {
				tasks[i] = func(ctx context.Context) { h.subs.RefreshViewer(ctx, c) }
			}
			h.runResyncWork(tasks)
			for h.afterGap() > 0 && h.sleep(time.Duration(resyncRetry.Load())) {
			}
		}()
	}
	level := slog.LevelInfo
	if failed.Load() > 0 {
		level = slog.LevelWarn
	}
	h.log.Log(context.Background(), level, "checked this node's sockets after a gap in the cluster's notices",
		"memberships", len(checks), "evicted", evicted.Load(), "unchecked", failed.Load(), "viewers", len(viewers), "took", time.Since(start).String())
	if failed.Load() > 0 {
		// the store did not answer for some (PostgreSQL down as well):
		// all are checked again later, until every one is
		go func() {
			if h.sleep(time.Duration(resyncRetry.Load())) {
				h.ResyncAfterGap()
			}
		}()
	}
}

// sleep waits d, and reports false if the node stopped meanwhile.
func (h *Sockets) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-h.stop:
		return false
	}
}

// runResyncWork runs tasks, resyncWorkers at a time, each within
// OpTimeout, and returns once all are done.
func (h *Sockets) runResyncWork(tasks []func(context.Context)) {
	work := make(chan func(context.Context))
	var wg sync.WaitGroup
	for range min(resyncWorkers, len(tasks)) {
		wg.Go(func() {
			for f := range work {
				ctx, cancel := context.WithTimeout(context.Background(), h.cfg.OpTimeout)
				f(ctx)
				cancel()
			}
		})
	}
	for _, f := range tasks {
		work <- f
	}
	close(work)
	wg.Wait()
}

// viewerSettle is how long (ns; tests shorten it) after a gap the
// subscriptions are shown as they are (resyncOnce).
var viewerSettle atomic.Int64

func init() { viewerSettle.Store(int64(2 * time.Second)) }

// resyncRetry is how long (ns; tests shorten it) after a ResyncAfterGap
// that could not check every membership it runs again.
var resyncRetry atomic.Int64

func init() { resyncRetry.Store(int64(30 * time.Second)) }

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
