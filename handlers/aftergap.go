package handlers

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/transport"
)

// Room events cross nodes through Redis Pub/Sub, which delivers at most
// once: those sent while a node's subscription was lost (its link to
// Redis dropped, Redis closed it, the process was stopped) never reach
// its sockets. Each node keeps what its sockets were shown of the others'
// presence in the conversations they are in, and when its subscription is
// back (Sockets.ResyncAfterGap) it reads each of those rosters and makes
// up for the difference, on its own sockets alone:
//   - a member who joined meanwhile: presence:join, with their join time;
//   - a member gone meanwhile (missing from two reads 3 s apart, so that a
//     node still registering its sockets again after Redis lost its data
//     is not taken for gone): presence:leave, reason "timeout", at the
//     time it was found;
//   - a user another node showed typing there, no longer typing: the
//     typing stop.
//
// Until 2026-12-07 none was: a member who left while a node's
// subscription was down stayed in that node's clients' rosters for good,
// one who joined was missing from them, and a typing indicator stayed on
// (a black-box audit: a node stopped for 8 s).

// shownState is what this node's sockets were shown that a gap may have
// left stale.
type shownState struct {
	on atomic.Bool // Rooms.FollowShown: in a cluster
	mu sync.Mutex
	// typists: the users another node (or an emitter) showed typing here
	// (a typing event, typing true), by conversation, with when that came,
	// until a stop of theirs comes; entries older than typistsKept go
	typists notedAt
	// rosters: per conversation with sockets here, who they were shown
	// there, from the roster of this node's first join there and the
	// presence:join/leave delivered here since, its own and other
	// nodes'; conversations without sockets here go at the next sweep
	rosters      map[string]*shownRoster
	rostersSwept time.Time
}

// shownRoster is who this node's sockets in a conversation were shown
// there; gen counts its changes, so that a check against the roster read
// from the engine can tell that an event came meanwhile.
type shownRoster struct {
	users map[string]struct{}
	gen   uint64
}

// typistsKept is how long a user shown typing by another node is kept
// without a stop: a typing session refreshed silently for longer than
// this, whose stop a gap loses, stays shown.
const typistsKept = time.Hour

// shownSweep is how often the conversations without sockets here are
// dropped from shownState.rosters, and the old typists.
const shownSweep = time.Minute

// leaveConfirm is how long after the first read of a roster that no
// longer has a member shown here it is read again, before the leave is
// made up for.
var leaveConfirm atomic.Int64

func init() { leaveConfirm.Store(int64(3 * time.Second)) }

// FollowShown has r keep what this node's sockets are shown of the
// others' presence, to make up for what a gap in its subscription to the
// other nodes' room events loses (Sockets.ResyncAfterGap). A node without
// a cluster adapter hears every event.
func (r *Rooms) FollowShown() { r.shown.on.Store(true) }

// followsShown reports whether FollowShown was called.
func (r *Rooms) followsShown() bool { return r.shown.on.Load() }

// noteTypist notes a typing event of user in conv that another node sent
// to this node's sockets.
func (r *Rooms) noteTypist(conv, user string, typing bool) {
	k := joinKey{conv, user}
	sh := &r.shown
	if !sh.on.Load() {
		return
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !typing {
		delete(sh.typists.at, k)
		return
	}
	sh.typists.note(k, time.Now(), shownSweep, typistsKept)
}

// showRoster notes who a socket joining conv here was shown (online, and
// the joining user), if it is the first socket of this node's there
// (first), or this node's sockets there are not followed yet. (While
// none was there, on sharded Pub/Sub, the room's events did not come.)
func (r *Rooms) showRoster(conv, self string, online []presence.Member, first bool) {
	sh := &r.shown
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.rosters[conv]; ok && !first {
		return
	}
	if sh.rosters == nil {
		sh.rosters = map[string]*shownRoster{}
	}
	users := make(map[string]struct{}, len(online)+1)
	for _, m := range online {
		users[m.UserID] = struct{}{}
	}
	users[self] = struct{}{}
	sh.rosters[conv] = &shownRoster{users: users}
}

// noteMember notes a presence:join (online) or presence:leave of user in
// conv delivered to this node's sockets.
func (r *Rooms) noteMember(conv, user string, online bool) {
	sh := &r.shown
	if !sh.on.Load() {
		return
	}
	sh.mu.Lock()
	if ro, ok := sh.rosters[conv]; ok {
		if online {
			ro.users[user] = struct{}{}
		} else {
			delete(ro.users, user)
		}
		ro.gen++
	}
	sweep := time.Since(sh.rostersSwept) > shownSweep
	if sweep {
		sh.rostersSwept = time.Now()
	}
	sh.mu.Unlock()
	if sweep {
		go r.sweepRosters() // (called on the subscription's goroutine too)
	}
}

// sweepRosters drops the rosters of conversations without sockets here.
func (r *Rooms) sweepRosters() {
	io := r.io.Load()
	if io == nil {
		return
	}
	a := io.Sockets().Adapter()
	sh := &r.shown
	sh.mu.Lock()
	convs := slices.Collect(maps.Keys(sh.rosters))
	sh.mu.Unlock()
	for _, conv := range convs {
		if len(transport.RoomSockets(a, ConversationRoom(conv))) == 0 {
			sh.mu.Lock()
			delete(sh.rosters, conv)
			sh.mu.Unlock()
		}
	}
}

// typist is a user shown typing by another node, since at.
type typist struct {
	user string
	at   time.Time
}

// shownConvs returns the conversations whose shown state a gap may have
// left stale, with the users other nodes showed typing in each.
func (r *Rooms) shownConvs() map[string][]typist {
	sh := &r.shown
	sh.mu.Lock()
	defer sh.mu.Unlock()
	out := make(map[string][]typist, len(sh.rosters))
	for conv := range sh.rosters {
		out[conv] = nil
	}
	for k, at := range sh.typists.at {
		out[k.conv] = append(out[k.conv], typist{k.user, at})
	}
	return out
}

// anyShown reports whether this node follows anything a gap may leave
// stale.
func (r *Rooms) anyShown() bool {
	sh := &r.shown
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return len(sh.rosters) > 0 || len(sh.typists.at) > 0
}

// rosterGen returns the generation of the roster shown in conv, false if
// this node does not follow conv.
func (r *Rooms) rosterGen(conv string) (uint64, bool) {
	sh := &r.shown
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ro, ok := sh.rosters[conv]
	if !ok {
		return 0, false
	}
	return ro.gen, true
}

// rosterDiff compares the roster shown in conv, if still at generation
// gen, with online: the members missing from it (joined, noted as shown
// now), and the users shown who are not online (gone), of whom those in
// confirm are noted as gone (left). ok is false if an event changed the
// roster shown since gen.
func (r *Rooms) rosterDiff(conv string, gen uint64, online []presence.Member, confirm []string) (joined []presence.Member, gone, left []string, ok bool) {
	sh := &r.shown
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ro, followed := sh.rosters[conv]
	if !followed {
		return nil, nil, nil, true
	}
	if ro.gen != gen {
		return nil, nil, nil, false
	}
	now := make(map[string]struct{}, len(online))
	for _, m := range online {
		now[m.UserID] = struct{}{}
		if _, shown := ro.users[m.UserID]; !shown {
			joined = append(joined, m)
			ro.users[m.UserID] = struct{}{}
		}
	}
	for u := range ro.users {
		if _, on := now[u]; !on {
			gone = append(gone, u)
			if slices.Contains(confirm, u) {
				left = append(left, u)
				delete(ro.users, u)
			}
		}
	}
	if len(joined) > 0 || len(left) > 0 {
		ro.gen++
	}
	return joined, gone, left, true
}

// stopTypistHere tells this node's sockets in conv, and only them, that
// a user another node showed typing (since t.at) stopped, unless a typing
// event of that user came since.
func (r *Rooms) stopTypistHere(conv string, t typist) bool {
	k := joinKey{conv, t.user}
	sh := &r.shown
	sh.mu.Lock()
	at, ok := sh.typists.at[k]
	if !ok || !at.Equal(t.at) {
		sh.mu.Unlock()
		return false
	}
	delete(sh.typists.at, k)
	sh.mu.Unlock()
	r.emitHere(ConversationRoom(conv), "typing", TypingPayload{ConversationID: conv, UserID: t.user, Typing: false, TTLMs: r.typingTTL.Milliseconds()})
	return true
}

// emitHere sends an event to this node's sockets in room, and only them.
func (r *Rooms) emitHere(room socket.Room, event string, payload any) {
	if r.send != nil {
		r.send(room, "", event, payload)
		return
	}
	io := r.io.Load()
	if io == nil {
		return
	}
	if err := io.Local().To(room).Emit(event, payload); err != nil {
		r.log.Warn("broadcast failed", "event", event, "room", string(room), "err", err)
	}
}

// gapTries is how many times a conversation's roster is read when events
// keep changing what was shown there meanwhile.
const gapTries = 3

// afterGap makes up, on this node's sockets, for the room events a gap in
// its subscription lost (see the top of this file). It returns how many
// conversations it could not read.
func (h *Sockets) afterGap() (unread int64) {
	convs := h.rooms.shownConvs()
	if len(convs) == 0 {
		return 0
	}
	var failed, joins, stops, leaves atomic.Int64
	var goneMu sync.Mutex
	gone := map[string][]string{} // by conversation: not online at the first read
	tasks := make([]func(context.Context), 0, len(convs))
	for conv, typists := range convs {
		tasks = append(tasks, func(ctx context.Context) {
			res, err := h.readShown(ctx, conv, nil)
			if err != nil {
				failed.Add(1)
				return
			}
			joins.Add(int64(h.madeUpJoins(ctx, conv, res.joined)))
			for _, t := range typists {
				if !slices.Contains(res.typing, t.user) && h.rooms.stopTypistHere(conv, t) {
					stops.Add(1)
				}
			}
			if len(res.gone) > 0 {
				goneMu.Lock()
				gone[conv] = res.gone
				goneMu.Unlock()
			}
		})
	}
	h.runResyncWork(tasks)
	if len(gone) > 0 && h.sleep(time.Duration(leaveConfirm.Load())) {
		tasks = tasks[:0]
		for conv, first := range gone {
			tasks = append(tasks, func(ctx context.Context) {
				res, err := h.readShown(ctx, conv, first)
				if err != nil {
					failed.Add(1)
					return
				}
				joins.Add(int64(h.madeUpJoins(ctx, conv, res.joined)))
				leaves.Add(int64(h.madeUpLeaves(ctx, conv, res.left)))
			})
		}
		h.runResyncWork(tasks)
	}
	level := slog.LevelInfo
	if failed.Load() > 0 {
		level = slog.LevelWarn
	}
	h.log.Log(context.Background(), level, "room events made up for after a gap in the cluster's notices",
		"conversations", len(convs), "joins", joins.Load(), "leaves", leaves.Load(), "typing_stops", stops.Load(), "unread", failed.Load())
	return failed.Load()
}

// shownRead is a conversation's roster read after a gap, against what
// this node's sockets there were shown (Rooms.rosterDiff).
type shownRead struct {
	joined     []presence.Member
	gone, left []string
	typing     []string
}

// readShown reads conv's roster and compares it with what this node's
// sockets there were shown, reading it again while events change that
// meanwhile (gapTries times at most); the users of confirm who are gone
// are noted as gone.
func (h *Sockets) readShown(ctx context.Context, conv string, confirm []string) (shownRead, error) {
	for range gapTries {
		gen, followed := h.rooms.rosterGen(conv)
		res, err := h.engine.Roster(ctx, conv)
		if err != nil {
			return shownRead{}, err
		}
		if !followed {
			return shownRead{typing: res.Typing}, nil
		}
		joined, gone, left, ok := h.rooms.rosterDiff(conv, gen, res.Online, confirm)
		if ok {
			return shownRead{joined: joined, gone: gone, left: left, typing: res.Typing}, nil
		}
	}
	h.log.Debug("roster shown here changing too often to check after a gap", "conversation_id", conv)
	return shownRead{}, nil
}

// madeUpJoins tells this node's sockets in conv of members who joined
// while its subscription was lost.
func (h *Sockets) madeUpJoins(ctx context.Context, conv string, joined []presence.Member) int {
	if len(joined) == 0 {
		return 0
	}
	users := make([]string, len(joined))
	for i, m := range joined {
		users[i] = m.UserID
	}
	settings := lookup(ctx, h.rooms.settings, users)
	for _, m := range joined {
		h.rooms.emitHere(ConversationRoom(conv), "presence:join", JoinPayload{ConversationID: conv, UserID: m.UserID, At: roomTime(m.Since, m.UserID, settings)})
	}
	return len(joined)
}

// madeUpLeaves tells this node's sockets in conv of users gone while its
// subscription was lost: reason timeout, at the time it was found.
func (h *Sockets) madeUpLeaves(ctx context.Context, conv string, users []string) int {
	if len(users) == 0 {
		return 0
	}
	settings := lookup(ctx, h.rooms.settings, users)
	now := h.now()
	for _, u := range users {
		h.rooms.emitHere(ConversationRoom(conv), "presence:leave", LeavePayload{ConversationID: conv, UserID: u, At: roomTime(now, u, settings), Reason: presence.ReasonTimeout})
	}
	return len(users)
}
