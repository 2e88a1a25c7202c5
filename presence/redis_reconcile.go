package presence

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// reconcile compares this node's entries in Redis (its registry) with its
// sockets, a group of buckets at a time: a socket the node no longer has
// (its leave or disconnect never reached Redis: a lost reply, a race with
// a join) is removed, as timed out now; a conversation a live socket no
// longer has is left; a line of a live socket in another bucket than its
// own is dropped. The registry's bucket count is written again (Redis may
// have lost it). Cost: a round trip per regReadGroup buckets (about 3,000
// sockets) per ReconcileEvery, plus the removals; nothing per user per
// period.
//
// The other way round, a live socket whose line is missing, or lacks a
// conversation the socket has, lost writes Redis had acknowledged (a
// failover to a replica that had not received them, a restart without
// persistence): once two reconciliations in a row find it so (the first
// may have read the registry before a connect or a join in flight wrote
// it), the socket is registered again (register), its user and joins
// with it.
//
// With checkMembers, the member records of the live sockets' conversations
// are read as well (unlisted), and a socket they do not list counts as
// missing too: a Redis Cluster master that came back empty (no replica)
// or a replica that lagged loses conversations' records while the node's
// registry, in another slot, may survive (a black-box audit: rosters
// stayed empty for 3 × PRESENCE_TTL, and typing:start was refused
// forbidden). Tick asks for it after Redis failed and every
// memberCheckEvery reconciliations, two in a row each time.
func (e *RedisEngine) reconcile(ctx context.Context, now time.Time, checkMembers bool) error {
	e.mu.Lock()
	for u, next := range e.lastAct {
		if !now.Before(next) {
			delete(e.lastAct, u)
		}
	}
	buckets := e.regBuckets
	before := make(map[string]*rSocket, len(e.local))
	for id, s := range e.local {
		before[id] = s
	}
	e.mu.Unlock()
	listed := make(map[string][]string, len(before)) // sid → the conversations its line lists
	if buckets > regMinBuckets {
		if err := e.rdb.Set(ctx, regCountKey(e.kNode), buckets, 0).Err(); err != nil {
			return unavailable("reconcile", err)
		}
	}
	err := e.scanRegistry(ctx, registryKeys(e.kNode, buckets)[1:], func(lines []regLine) error {
		var ghosts, stale []*rSocket
		var ghostKeys, regs []string
		var strays []regLine
		e.mu.Lock()
		for _, l := range lines {
			f := strings.Split(l.line, "\t")
			s, live := e.local[l.sid]
			if !live {
				_, pending := e.pending[l.sid]
				_, leaving := e.leaving[l.sid]
				if !pending && !leaving {
					ghosts = append(ghosts, &rSocket{id: l.sid, user: f[0], convs: setOf(f[1:])})
					ghostKeys = append(ghostKeys, l.key)
				}
				continue
			}
			if l.key != e.regKey(s) {
				strays = append(strays, l)
				continue
			}
			listed[l.sid] = f[1:]
			var gone map[string]struct{}
			for _, c := range f[1:] {
				if _, in := s.convs[c]; !in {
					if gone == nil {
						gone = map[string]struct{}{}
					}
					gone[c] = struct{}{}
				}
			}
			if gone != nil {
				stale = append(stale, &rSocket{id: l.sid, user: s.user, convs: gone, bucket: s.bucket})
				regs = append(regs, registry(s))
			}
		}
		e.mu.Unlock()
		for i, g := range ghosts {
			e.log.Warn("removing an entry of a socket this node no longer has", "sid", g.id, "user_id", g.user)
			b, err := e.removeFrom(ctx, ghostKeys[i], g, now, "timeout", time.Time{}, false)
			e.emit(ctx, b)
			if err != nil {
				return err
			}
		}
		for _, l := range strays {
			if err := e.rdb.HDel(ctx, l.key, l.sid).Err(); err != nil {
				return unavailable("reconcile", err)
			}
		}
		for i, s := range stale {
			if err := e.leaveStale(ctx, s, regs[i], now); err != nil {
				return err
			}
		}
		return nil
	})
	var unlisted map[string]struct{}
	if err == nil && checkMembers {
		unlisted, err = e.unlisted(ctx, before)
	}
	if err == nil {
		err = e.registerMissing(ctx, before, listed, unlisted, now)
	}
	if err != nil && !errors.Is(err, ErrUnavailable) {
		err = unavailable("reconcile", err)
	}
	return err
}

// registerMissing registers again the sockets of before (the live sockets
// when the registry's read began) that are still live and whose line
// listed (sid → its conversations) lacks or misses one of their
// conversations, or that a conversation's member record does not list
// (unlisted), if the last reconciliation found them so too.
func (e *RedisEngine) registerMissing(ctx context.Context, before map[string]*rSocket, listed map[string][]string, unlisted map[string]struct{}, now time.Time) error {
	e.mu.Lock()
	suspect := make(map[string]struct{})
	var lost []*rSocket
	for id, s := range before {
		_, pending := e.pending[id]
		_, leaving := e.leaving[id]
		if e.local[id] != s || pending || leaving {
			continue
		}
		convs, ok := listed[id]
		if ok && isIn(unlisted, id) {
			ok = false
		}
		if ok {
			var have map[string]struct{} // for a long list only: most list a few
			if len(convs) > 16 {
				have = setOf(convs)
			}
			for c := range s.convs {
				if !lists(convs, have, c) && !isIn(s.unsure, c) {
					ok = false
					break
				}
			}
		}
		if ok {
			continue
		}
		if _, again := e.missing[id]; again {
			lost = append(lost, s)
		} else {
			suspect[id] = struct{}{}
		}
	}
	e.missing = suspect
	e.mu.Unlock()
	if len(lost) == 0 {
		return nil
	}
	e.log.Warn("registering again sockets whose entries Redis lost", "sockets", len(lost))
	return e.register(ctx, lost, now, false)
}

// memberCheckEvery: one reconciliation in this many (and the one after)
// reads the member records even when Redis did not fail (unlisted): a
// node that sent nothing to a master while it was down saw no failure.
const memberCheckEvery = 8

// memberReadGroup is how many conversations' member records go in one
// round trip of unlisted.
const memberReadGroup = 500

// redisFailed asks the next two reconciliations to read the member
// records (reconcile's checkMembers).
func (e *RedisEngine) redisFailed() { e.memberChecks.Store(2) }

// unlisted returns the sockets of before, still live, whose member record
// in one of their conversations does not list them: one HMGET per
// conversation of the users this node has there, memberReadGroup
// conversations a round trip. A record of a release before 2026-12-02
// (no socket list) counts as listing them. A read that fails tells
// nothing: its sockets are not counted, and the reconciliation is not
// failed for it (a failed one is tried again on the next tick: with a
// master down, every 50 ms).
func (e *RedisEngine) unlisted(ctx context.Context, before map[string]*rSocket) (map[string]struct{}, error) {
	want := map[string]map[string][]string{} // conversation → user → sockets
	e.mu.Lock()
	for id, s := range before {
		if e.local[id] != s {
			continue
		}
		for c := range s.convs {
			if isIn(s.unsure, c) {
				continue
			}
			users := want[c]
			if users == nil {
				users = map[string][]string{}
				want[c] = users
			}
			users[s.user] = append(users[s.user], id)
		}
	}
	e.mu.Unlock()
	convs := sortedKeys(want)
	out := map[string]struct{}{}
	for len(convs) > 0 {
		group := convs[:min(len(convs), memberReadGroup)]
		convs = convs[len(group):]
		pipe := e.rdb.Pipeline()
		reads := make([]*redis.SliceCmd, len(group))
		users := make([][]string, len(group))
		for i, c := range group {
			users[i] = sortedKeys(want[c])
			reads[i] = pipe.HMGet(ctx, e.conv(c).m, users[i]...)
		}
		if err := e.exec(ctx, pipe); abandoned(err) {
			return nil, unavailable("reconcile", err)
		}
		for i, c := range group {
			if reads[i].Err() != nil {
				// its master is down (a Redis Cluster without full
				// coverage): unknown, and the reconciliation goes on; the
				// failure arms the next one's check (redisFailed)
				continue
			}
			recs := reads[i].Val()
			for j, u := range users[i] {
				var rec string
				if j < len(recs) {
					rec, _ = recs[j].(string)
				}
				for _, sid := range want[c][u] {
					if rec == "" || !legacyMember(rec) && !memberHas(rec, "", sid, u) {
						out[sid] = struct{}{}
					}
				}
			}
		}
	}
	return out, nil
}

// leaveStale takes a live socket out of conversations it no longer has
// and corrects its registry line.
func (e *RedisEngine) leaveStale(ctx context.Context, s *rSocket, reg string, now time.Time) error {
	convs := sortedKeys(s.convs)
	pipe := e.rdb.Pipeline()
	leaves := make([]*redis.Cmd, len(convs))
	for i, c := range convs {
		leaves[i] = e.runLeave(ctx, pipe, c, s.id, s.user, "left", 0, "", false)
	}
	pipe.HSet(ctx, e.regKey(s), s.id, reg)
	if err := e.exec(ctx, pipe); err != nil {
		return unavailable("reconcile", err)
	}
	var b batch
	for i, c := range convs {
		if v, _ := leaves[i].Int64Slice(); len(v) >= 3 {
			if e.leaveTyping(c, s.id, s.user, v) {
				b = append(b, Event{Kind: EventTyping, ConversationID: c, UserID: s.user, At: now, Typing: false})
			}
			if v[1] == 1 {
				b = append(b, Event{Kind: EventLeave, ConversationID: c, UserID: s.user, At: now, Reason: ReasonLeft})
			}
		}
	}
	e.emit(ctx, b)
	return nil
}

// lists reports whether a registry line's conversations (convs, or have,
// their set, when made) hold c.
func lists(convs []string, have map[string]struct{}, c string) bool {
	if have != nil {
		return isIn(have, c)
	}
	return slices.Contains(convs, c)
}

func isIn(m map[string]struct{}, k string) bool {
	_, ok := m[k]
	return ok
}

func setOf(keys []string) map[string]struct{} {
	m := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		m[k] = struct{}{}
	}
	return m
}

// retryPending retries the cleanup of sockets whose disconnect failed.
func (e *RedisEngine) retryPending(ctx context.Context, now time.Time) error {
	e.mu.Lock()
	var todo []*rSocket
	for _, s := range e.pending {
		todo = append(todo, s)
	}
	e.mu.Unlock()
	for _, s := range todo {
		e.mu.Lock()
		_, live := e.local[s.id]
		e.mu.Unlock()
		if live {
			continue
		}
		b, err := e.removeSocket(ctx, s, now, true)
		e.emit(ctx, b)
		if err != nil {
			return err
		}
		e.mu.Lock()
		delete(e.pending, s.id)
		e.mu.Unlock()
	}
	return nil
}
