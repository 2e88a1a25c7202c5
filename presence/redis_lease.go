package presence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/redisepoch"
)

// leaseDue reports whether the lease must be claimed or renewed now.
func (e *RedisEngine) leaseDue(now time.Time) bool {
	e.leaseMu.Lock()
	defer e.leaseMu.Unlock()
	return !e.held.Load() || e.resyncDue || now.Sub(e.lastLse) >= e.rcfg.LeaseEvery
}

// Claim takes the node id's lease before the node serves. It returns
// ErrNodeIDTaken if a live instance holds the id. A holder that does not
// renew (this node's previous process, crashed) is waited out: at most one
// lease period. A Redis error is returned (ErrUnavailable); the claim is
// then made at the first connection to Redis, by Tick or Connect, and Run
// ends with ErrNodeIDTaken if the id is taken then.
func (e *RedisEngine) Claim(ctx context.Context) error {
	for {
		_, err := e.lease(ctx, e.cfg.Now(), true)
		if !errors.Is(err, errLeaseWait) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(e.rcfg.LeaseEvery / 2):
		}
	}
}

// lease claims or renews this instance's lease (one script on Redis's
// clock) and acts on the answer: renewed reports a lease renewed without a
// gap for at least the last renewal period (the caller may reap others;
// the script checks the full period).
//
// A claim made outside Claim, at the first connection of a node that
// started while Redis was unreachable, is tentative for a lease period: if
// Redis lost its data meanwhile, the id may be that of a running node,
// whose renewal then takes it back (nodeLease), and this node ends with
// ErrNodeIDTaken. A node that held the id renews as prior holder.
func (e *RedisEngine) lease(ctx context.Context, now time.Time, claiming bool) (renewed bool, err error) {
	e.leaseMu.Lock()
	defer e.leaseMu.Unlock()
	prior, probation := "0", int64(0)
	if e.held.Load() {
		prior = "1"
	} else if !claiming {
		probation = e.cfg.LeaseTTL.Milliseconds()
	}
	t0 := time.Now()
	v, err := nodeLease.Run(ctx, e.rdb, []string{e.kLease, e.kHolder, e.kReap, e.kTentative},
		e.cfg.NodeID, e.token, e.cfg.LeaseTTL.Milliseconds(), e.clk(), prior, probation).Int64Slice()
	if err == nil && len(v) != 4 {
		err = errors.New("unexpected script reply")
	}
	if err != nil {
		return false, unavailable("lease", err)
	}
	e.noteRedisClock(v[2], t0, time.Now())
	if v[0] > 0 {
		e.minLevel.Store(int32(min(v[3], readerLevel)))
	}
	switch v[0] {
	case 1:
		renewed = true
		e.leaseIntact(now)
	case 2:
		e.log.Warn("this node's lease had lapsed (a stall of Redis or of this node); renewed before anyone reaped it")
		e.leaseIntact(now)
	case 3:
		if probation > 0 {
			e.tentative = t0.Add(e.cfg.LeaseTTL)
		}
		if e.held.Load() {
			e.log.Warn("this node's lease had lapsed and its entries were reaped (or Redis lost its data); registering its sockets again")
			e.resyncDue = true
		}
	case -1:
		if e.held.Load() {
			// Another instance holds the id now: nothing more is written
			// as its holder (Close leaves its keys alone, Connect claims
			// again and is refused).
			e.held.Store(false)
			if time.Now().Before(e.tentative) {
				// our claim was tentative, and the running node whose id
				// it was took it back
				return false, fmt.Errorf("%w (a node running under this id before Redis lost its data took it back from this one, which had claimed it at its first connection)", ErrNodeIDTaken)
			}
			// we lapsed, and another process took the id meanwhile
			return false, fmt.Errorf("%w (it was taken over while this node's lease had lapsed)", ErrNodeIDTaken)
		}
		if e.takenUntil == 0 {
			e.takenUntil = v[1]
		} else if v[1] != e.takenUntil {
			return false, ErrNodeIDTaken // the holder renewed: it is alive
		}
		return false, errLeaseWait
	case -2:
		return false, errLeaseWait
	default:
		return false, unavailable("lease", fmt.Errorf("unexpected lease answer %d", v[0]))
	}
	e.held.Store(true)
	e.takenUntil = 0
	e.lastLse = now
	if e.resyncDue {
		if err := e.resync(ctx); err != nil {
			return false, err
		}
		e.resyncDue = false
	}
	if e.gEpoch == "" || e.epochDue {
		e.readGEpoch(ctx)
	}
	return renewed, nil
}

// readGEpoch reads {g}'s epoch (redisepoch): at the node's first lease,
// and after each resync (epochDue), when a new one says that Redis lost
// {g}'s keys, the timers of the graces under way with them (orphanGraces),
// and the same one that this node was reaped (its lease lapsed in a stall)
// while they stayed. Before a first read, a resync counts as a loss. A
// read that fails is made again at the next renewal: a failure tells
// neither (a review, 2026-12-07).
func (e *RedisEngine) readGEpoch(ctx context.Context) {
	epoch, err := redisepoch.Read(ctx, e.rdb, e.kEpoch)
	if err != nil {
		return
	}
	if e.epochDue && epoch != e.gEpoch {
		e.orphanGraces()
	}
	e.gEpoch, e.epochDue = epoch, false
}

// resync registers every local socket again, after this node was reaped
// (or Redis lost its data). It is idempotent: what is still there stays.
// A user comes back with the last activity this node saw (away if that
// is AwayAfter old), and the typing entries of this node's starts that
// have not expired are written again (resyncTyping).
func (e *RedisEngine) resync(ctx context.Context) error {
	now := e.cfg.Now()
	e.mu.Lock()
	socks := make([]*rSocket, 0, len(e.local))
	for _, s := range e.local {
		socks = append(socks, s)
	}
	buckets := e.regBuckets
	e.mu.Unlock()
	if buckets > regMinBuckets {
		if err := e.rdb.Set(ctx, regCountKey(e.kNode), buckets, 0).Err(); err != nil {
			return unavailable("resync", err)
		}
	}
	// Reaped ({g}'s epoch unchanged), this node's users were told gone
	// to every socket of their rooms, this node's too: the joins that
	// bring them back go to those sockets as well. After a loss nobody
	// told them anything: a join leaves out its own socket, as ever.
	reaped := false
	if e.gEpoch != "" {
		if epoch, err := redisepoch.Read(ctx, e.rdb, e.kEpoch); err == nil {
			reaped = epoch == e.gEpoch
		}
	}
	if err := e.register(ctx, socks, now, reaped); err != nil {
		return err
	}
	e.epochDue = true // (readGEpoch: was {g} lost, or this node reaped?)
	return e.resyncTyping(ctx, now)
}

// register writes local sockets into Redis again, as their connects and
// joins did: their registry lines, their users' records and their
// conversations' entries (idempotent: what is still there stays), and
// announces what was missing (a status, a join to the others, and with
// toSelf to the socket too).
func (e *RedisEngine) register(ctx context.Context, socks []*rSocket, now time.Time, toSelf bool) error {
	e.mu.Lock()
	regs := make(map[string]string, len(socks))
	convs := make(map[string][]string, len(socks))
	for _, s := range socks {
		regs[s.id] = registry(s)
		for _, c := range sortedKeys(s.convs) {
			if _, unsure := s.unsure[c]; !unsure {
				convs[s.id] = append(convs[s.id], c)
			}
		}
	}
	e.mu.Unlock()
	var b batch
	var back []owedKey // the member records brought back (markSpoken, in one round trip)
	defer func() { e.markSpoken(ctx, back, now) }()
	for _, s := range socks {
		pipe := e.rdb.Pipeline()
		pipe.HSet(ctx, e.regKey(s), s.id, regs[s.id])
		last := e.away.lastSeen(s.user) // (a connect is activity: not zero)
		if last.IsZero() || last.After(now) {
			last = now
		}
		came := userConnect.Run(ctx, pipe, []string{e.kUsers, e.kDue, e.userSockets(s.user), e.userReserved(s.user)},
			s.user, s.id, e.clk(), 0, now.Sub(last).Milliseconds(), e.cfg.AwayAfter.Milliseconds())
		joins := make([]*redis.Cmd, len(convs[s.id]))
		for i, c := range convs[s.id] {
			k := e.conv(c)
			joins[i] = e.runJoin(ctx, pipe, k, s.id, s.user)
		}
		if err := e.exec(ctx, pipe); err != nil {
			e.emit(ctx, b)
			return unavailable("register", err)
		}
		switch n, _ := came.Int(); n {
		case 1:
			b = append(b, Event{Kind: EventStatus, UserID: s.user, At: now, Status: Online})
		case 2:
			b = append(b, Event{Kind: EventStatus, UserID: s.user, At: now, Status: Away})
		}
		e.away.arm(s.user, last.Add(e.cfg.AwayAfter))
		for i, c := range convs[s.id] {
			if raw, _ := joins[i].Slice(); len(raw) == 3 && toInt(raw[0]) == 1 {
				// toSelf (a reap told the socket its user's leave): to
				// the socket too. Until 2026-12-07 it was left out, and
				// showed its own user gone for good (a black-box audit).
				except := s.id
				if toSelf {
					except = ""
				}
				b = append(b, Event{Kind: EventJoin, ConversationID: c, UserID: s.user, At: now, ExceptSocket: except})
				back = append(back, owedKey{c, s.user})
			}
		}
	}
	e.emit(ctx, b)
	return nil
}
