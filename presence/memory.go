package presence

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// Memory is the in-memory backend: the whole cluster's presence state in
// one process. Production uses it with one Engine (single-node mode); tests
// attach several Engines to one Memory to model a cluster.
type Memory struct {
	mu      sync.Mutex
	sockets map[string]*mSocket
	convs   map[string]*mConv
	users   map[string]*mUser
	leases  map[string]time.Time // node → last lease renewal

	// pending timers, so that a tick visits only what may be due
	typingConvs map[string]struct{}
	graceConvs  map[string]struct{}
	graceUsers  map[string]struct{}
	lastFull    time.Time

	order emitOrder // the operations' events, delivered in the order they held mu
}

type mSocket struct {
	id, user, node string
	convs          map[string]struct{}
	refreshed      time.Time
}

type mConv struct {
	members map[string]*mMember
	typing  map[string]*mTyping
}

type mMember struct {
	since      time.Time
	socks      map[string]struct{}
	graceUntil time.Time // set while the user's last socket here is gone but the flap grace runs
	leftAt     time.Time
}

type mTyping struct {
	until time.Time
	sid   string // the typist: the socket of the last start
	// told: the socket the start's announcement left out (its own); a
	// refresh of another socket of the user's keeps it
	told string
}

type mUser struct {
	socks          map[string]struct{}
	activity       time.Time
	status         Status // last announced
	graceUntil     time.Time
	disconnectedAt time.Time
}

// NewMemory creates an empty backend.
func NewMemory() *Memory {
	return &Memory{
		sockets: map[string]*mSocket{},
		convs:   map[string]*mConv{},
		users:   map[string]*mUser{},
		leases:  map[string]time.Time{},

		typingConvs: map[string]struct{}{},
		graceConvs:  map[string]struct{}{},
		graceUsers:  map[string]struct{}{},
	}
}

// MemoryEngine is one node's Engine over a Memory backend.
type MemoryEngine struct {
	m     *Memory
	cfg   Config
	alarm *alarm // wakes Run when a flap grace of this node ends

	lastRefresh time.Time // guarded by m.mu
}

var _ Engine = (*MemoryEngine)(nil)

// NewMemoryEngine attaches a node to the backend.
func NewMemoryEngine(m *Memory, cfg Config) *MemoryEngine {
	cfg = cfg.WithDefaults()
	e := &MemoryEngine{m: m, cfg: cfg, alarm: newAlarm(alarmStep, alarmGap)}
	m.mu.Lock()
	m.leases[cfg.NodeID] = cfg.Now()
	m.mu.Unlock()
	return e
}

// batch collects the events of one operation; they are delivered after the
// lock is released.
type batch []Event

// unlockEmit releases the backend's lock, held by the caller, and
// delivers b, after the events of every operation that held the lock
// before (emitOrder).
func (e *MemoryEngine) unlockEmit(ctx context.Context, b batch) {
	m := e.m
	if len(b) == 0 {
		m.mu.Unlock()
		return
	}
	t := m.order.ticket()
	m.mu.Unlock()
	m.order.run(t, func() { e.cfg.Sink(ctx, b) })
}

// emitOrder delivers the batches of a backend's operations in the order
// the operations held its lock: each takes a ticket under the lock and
// delivers when every earlier ticket has delivered. Delivered as the
// goroutines came, a typing start right after its expiry could reach the
// others before the expiry's stop, and they showed the user not typing
// for the rest of the new session (a black-box audit: 4 of 120 sessions
// started within a few ms of the expiry); so could a join right after a
// grace's leave. A Sink must not wait for an operation of the backend.
type emitOrder struct {
	mu     sync.Mutex
	cond   *sync.Cond
	issued uint64 // tickets taken
	done   uint64 // tickets delivered (they go in order)
}

func (o *emitOrder) ticket() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.issued
	o.issued++
	return t
}

// run waits for ticket t's turn, runs deliver, and passes the turn on.
func (o *emitOrder) run(t uint64, deliver func()) {
	o.mu.Lock()
	if o.cond == nil {
		o.cond = sync.NewCond(&o.mu)
	}
	for o.done != t {
		o.cond.Wait()
	}
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.done++
		o.cond.Broadcast()
		o.mu.Unlock()
	}()
	deliver()
}

// Connect implements Engine.
func (e *MemoryEngine) Connect(ctx context.Context, s Socket) error {
	now := e.cfg.Now()
	var b batch
	m := e.m
	m.mu.Lock()
	if _, ok := m.sockets[s.ID]; !ok {
		if u := m.users[s.UserID]; s.Max > 0 && u != nil && len(u.socks) >= s.Max {
			m.mu.Unlock()
			return ErrTooManySockets
		}
		m.sockets[s.ID] = &mSocket{id: s.ID, user: s.UserID, node: e.cfg.NodeID, convs: map[string]struct{}{}, refreshed: now}
		u := m.users[s.UserID]
		if u == nil {
			u = &mUser{socks: map[string]struct{}{}, status: Offline}
			m.users[s.UserID] = u
		}
		u.socks[s.ID] = struct{}{}
		u.graceUntil = time.Time{}
		u.activity = now
		if u.status != Online {
			u.status = Online
			b = append(b, Event{Kind: EventStatus, UserID: s.UserID, At: now, Status: Online})
		}
	}
	e.unlockEmit(ctx, b)
	return nil
}

// Disconnect implements Engine.
func (e *MemoryEngine) Disconnect(ctx context.Context, socketID string) error {
	return e.disconnect(ctx, socketID, e.cfg.FlapGrace)
}

// DisconnectNow implements Engine.
func (e *MemoryEngine) DisconnectNow(ctx context.Context, socketID string) error {
	return e.disconnect(ctx, socketID, 0)
}

func (e *MemoryEngine) disconnect(ctx context.Context, socketID string, grace time.Duration) error {
	err := e.update(ctx, func(m *Memory, now time.Time) (batch, error) {
		if s, ok := m.sockets[socketID]; ok {
			return m.removeSocket(s, now, grace, ReasonDisconnected, nil), nil
		}
		return nil, nil
	})
	if err == nil && grace > 0 {
		e.alarm.set(time.Now().Add(grace))
	}
	return err
}

// removeSocket takes a socket out of every conversation and of its user.
// With a grace, the user's leaves and offline wait for it; without, they
// happen now, and lastSeen is the socket's last proof of life (reason
// timeout) or now.
func (m *Memory) removeSocket(s *mSocket, now time.Time, grace time.Duration, reason string, b batch) batch {
	for _, conv := range sortedKeys(s.convs) {
		b = m.leaveConv(s, conv, now, grace, reason, b)
	}
	delete(m.sockets, s.id)
	u := m.users[s.user]
	if u == nil {
		return b
	}
	// the user's last-seen is the latest moment one of their sockets was
	// there: a socket that closed after a node died, before its sockets
	// were reaped, was there later than the dead node's last proof
	seen := now
	if reason == ReasonTimeout {
		seen = s.refreshed
	}
	if seen.After(u.disconnectedAt) {
		u.disconnectedAt = seen
	}
	if !removeLast(u.socks, s.id) {
		return b
	}
	if reason == ReasonTimeout || grace <= 0 {
		b = append(b, Event{Kind: EventStatus, UserID: s.user, At: now, Status: Offline, LastSeen: u.disconnectedAt})
		delete(m.users, s.user)
		return b
	}
	u.graceUntil = now.Add(grace)
	m.graceUsers[s.user] = struct{}{}
	return b
}

// removeLast removes socket id from socks and reports whether none is left.
func removeLast(socks map[string]struct{}, id string) bool {
	delete(socks, id)
	return len(socks) == 0
}

// leaveConv removes socket s from conversation conv.
func (m *Memory) leaveConv(s *mSocket, conv string, now time.Time, grace time.Duration, reason string, b batch) batch {
	delete(s.convs, conv)
	c := m.convs[conv]
	if c == nil {
		return b
	}
	if t := c.typing[s.user]; t != nil && t.sid == s.id {
		delete(c.typing, s.user)
		b = append(b, Event{Kind: EventTyping, ConversationID: conv, UserID: s.user, At: now, Typing: false})
	}
	mem := c.members[s.user]
	if mem == nil || !removeLast(mem.socks, s.id) {
		return b
	}
	if reason == ReasonDisconnected && grace > 0 {
		mem.graceUntil = now.Add(grace)
		mem.leftAt = now
		m.graceConvs[conv] = struct{}{}
		return b
	}
	at := now
	if reason == ReasonTimeout {
		at = s.refreshed
	}
	delete(c.members, s.user)
	if t := c.typing[s.user]; t != nil {
		delete(c.typing, s.user)
		b = append(b, Event{Kind: EventTyping, ConversationID: conv, UserID: s.user, At: now, Typing: false})
	}
	b = append(b, Event{Kind: EventLeave, ConversationID: conv, UserID: s.user, At: at, Reason: reason})
	m.dropIfEmpty(conv, c)
	return b
}

func (m *Memory) dropIfEmpty(conv string, c *mConv) {
	if len(c.members) == 0 && len(c.typing) == 0 {
		delete(m.convs, conv)
	}
}

// Join implements Engine.
func (e *MemoryEngine) Join(ctx context.Context, socketID, conv string) (JoinResult, error) {
	now := e.cfg.Now()
	var b batch
	m := e.m
	m.mu.Lock()
	s, ok := m.sockets[socketID]
	if !ok {
		m.mu.Unlock()
		return JoinResult{}, ErrUnknown
	}
	if _, in := s.convs[conv]; !in {
		if len(s.convs) >= e.cfg.MaxConversations {
			m.mu.Unlock()
			return JoinResult{}, &LimitError{Max: e.cfg.MaxConversations}
		}
		c := m.convs[conv]
		if c == nil {
			c = &mConv{members: map[string]*mMember{}, typing: map[string]*mTyping{}}
			m.convs[conv] = c
		}
		mem := c.members[s.user]
		if mem == nil {
			mem = &mMember{since: now, socks: map[string]struct{}{}}
			c.members[s.user] = mem
			b = append(b, Event{Kind: EventJoin, ConversationID: conv, UserID: s.user, At: now, ExceptSocket: socketID})
		}
		mem.graceUntil = time.Time{}
		mem.socks[socketID] = struct{}{}
		s.convs[conv] = struct{}{}
	}
	b = m.activity(s.user, now, b)
	res := m.roster(conv, now, e.cfg.AwayAfter)
	e.unlockEmit(ctx, b)
	return res, nil
}

// activity records activity of a user; an away user comes back online.
func (m *Memory) activity(user string, now time.Time, b batch) batch {
	u := m.users[user]
	if u == nil {
		return b
	}
	u.activity = now
	if u.status == Away {
		u.status = Online
		b = append(b, Event{Kind: EventStatus, UserID: user, At: now, Status: Online})
	}
	return b
}

func (m *Memory) status(user string, now time.Time, awayAfter time.Duration) Status {
	u := m.users[user]
	if u == nil {
		return Offline
	}
	if now.Sub(u.activity) >= awayAfter {
		return Away
	}
	return Online
}

func (m *Memory) roster(conv string, now time.Time, awayAfter time.Duration) JoinResult {
	res := JoinResult{Online: []Member{}, Typing: []string{}}
	c := m.convs[conv]
	if c == nil {
		return res
	}
	for user, mem := range c.members {
		st := m.status(user, now, awayAfter)
		if st == Offline {
			st = Away // in flap grace: still shown, without activity
		}
		res.Online = append(res.Online, Member{UserID: user, Status: st, Since: mem.since})
	}
	slices.SortFunc(res.Online, func(a, b Member) int {
		return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.UserID, b.UserID))
	})
	for user, t := range c.typing {
		if t.until.After(now) {
			res.Typing = append(res.Typing, user)
		}
	}
	slices.Sort(res.Typing)
	return res
}

// Leave implements Engine.
func (e *MemoryEngine) Leave(ctx context.Context, socketID, conv string) error {
	return e.update(ctx, func(m *Memory, now time.Time) (batch, error) {
		s, ok := m.sockets[socketID]
		if !ok {
			return nil, ErrUnknown
		}
		var b batch
		if _, in := s.convs[conv]; in {
			b = m.leaveConv(s, conv, now, 0, ReasonLeft, b)
		}
		return m.activity(s.user, now, b), nil
	})
}

// EndGraces implements Engine.
func (e *MemoryEngine) EndGraces(ctx context.Context, conv string, users []string) error {
	return e.update(ctx, func(m *Memory, now time.Time) (batch, error) {
		c := m.convs[conv]
		if c == nil {
			return nil, nil
		}
		var b batch
		for _, user := range users {
			mem := c.members[user]
			if mem != nil && len(mem.socks) == 0 && !mem.graceUntil.IsZero() {
				b = m.endGrace(conv, c, user, mem, b)
			}
		}
		m.dropIfEmpty(conv, c)
		return b, nil
	})
}

// endGrace ends user's flap grace in conv (the user has no socket
// there): the user leaves, at the disconnect.
func (m *Memory) endGrace(conv string, c *mConv, user string, mem *mMember, b batch) batch {
	delete(c.members, user)
	return append(b, Event{Kind: EventLeave, ConversationID: conv, UserID: user, At: mem.leftAt, Reason: ReasonDisconnected})
}

// update runs fn under the backend's lock and delivers its events once
// the lock is released.
func (e *MemoryEngine) update(ctx context.Context, fn func(m *Memory, now time.Time) (batch, error)) error {
	now := e.cfg.Now()
	e.m.mu.Lock()
	b, err := fn(e.m, now)
	e.unlockEmit(ctx, b)
	return err
}

// Heartbeat implements Engine.
func (e *MemoryEngine) Heartbeat(ctx context.Context, socketID string, active bool) error {
	return e.update(ctx, func(m *Memory, now time.Time) (batch, error) {
		s, ok := m.sockets[socketID]
		if !ok {
			return nil, ErrUnknown
		}
		s.refreshed = now
		if !active {
			return nil, nil
		}
		return m.activity(s.user, now, nil), nil
	})
}

// Touch implements Engine.
func (e *MemoryEngine) Touch(ctx context.Context, socketID string) error {
	return e.update(ctx, func(m *Memory, now time.Time) (batch, error) {
		s, ok := m.sockets[socketID]
		if !ok {
			return nil, ErrUnknown
		}
		return m.activity(s.user, now, nil), nil
	})
}

// TypingStart implements Engine.
func (e *MemoryEngine) TypingStart(ctx context.Context, socketID, conv string) error {
	return e.typingUpdate(ctx, socketID, conv, func(m *Memory, s *mSocket, c *mConv, now time.Time) batch {
		var b batch
		if t := c.typing[s.user]; t != nil {
			if t.until.After(now) {
				t.until, t.sid = now.Add(e.cfg.TypingTTL), socketID
				return nil
			}
			// expired, and not removed yet: its stop first, as the
			// expiry would have announced it
			b = append(b, Event{Kind: EventTyping, ConversationID: conv, UserID: s.user, At: now, Typing: false})
		}
		c.typing[s.user] = &mTyping{until: now.Add(e.cfg.TypingTTL), sid: socketID, told: socketID}
		m.typingConvs[conv] = struct{}{}
		return append(b, Event{Kind: EventTyping, ConversationID: conv, UserID: s.user, At: now, Typing: true, ExceptSocket: socketID})
	})
}

// TypingStop implements Engine.
func (e *MemoryEngine) TypingStop(ctx context.Context, socketID, conv string) error {
	return e.typingUpdate(ctx, socketID, conv, func(m *Memory, s *mSocket, c *mConv, now time.Time) batch {
		t := c.typing[s.user]
		if t == nil {
			return nil
		}
		delete(c.typing, s.user) // expired or not: its stop was not announced yet
		// to every socket told of the start: all but the one that made
		// it, which may not be this one (another socket of the user's
		// refreshed it, and stops it now: it was told). Until 2026-12-07
		// this one was left out, and showed its own user typing for good
		// (a black-box audit).
		return batch{{Kind: EventTyping, ConversationID: conv, UserID: s.user, At: now, Typing: false, ExceptSocket: t.told}}
	})
}

// typingUpdate runs a typing change of socketID in conv, which it must
// have joined; the change's events go out with the user's activity.
func (e *MemoryEngine) typingUpdate(ctx context.Context, socketID, conv string, change func(m *Memory, s *mSocket, c *mConv, now time.Time) batch) error {
	return e.update(ctx, func(m *Memory, now time.Time) (batch, error) {
		s, c, err := m.joined(socketID, conv)
		if err != nil {
			return nil, err
		}
		return m.activity(s.user, now, change(m, s, c, now)), nil
	})
}

func (m *Memory) joined(socketID, conv string) (*mSocket, *mConv, error) {
	s, ok := m.sockets[socketID]
	if !ok {
		return nil, nil, ErrUnknown
	}
	if _, in := s.convs[conv]; !in {
		return nil, nil, ErrNotJoined
	}
	return s, m.convs[conv], nil
}

// Roster implements Engine.
func (e *MemoryEngine) Roster(_ context.Context, conv string) (JoinResult, error) {
	m := e.m
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.roster(conv, e.cfg.Now(), e.cfg.AwayAfter), nil
}

// Users implements Engine.
func (e *MemoryEngine) Users(_ context.Context, ids []string) ([]UserPresence, error) {
	now := e.cfg.Now()
	m := e.m
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]UserPresence, len(ids))
	for i, id := range ids {
		out[i] = UserPresence{UserID: id, Status: Offline}
		u := m.users[id]
		if u == nil {
			continue
		}
		if len(u.socks) == 0 && !u.graceUntil.IsZero() {
			// within flap grace the user still counts as connected
			out[i].Status, out[i].Since = u.status, u.activity
			continue
		}
		out[i].Status, out[i].Since = m.status(id, now, e.cfg.AwayAfter), u.activity
	}
	return out, nil
}

// Tick implements Engine.
func (e *MemoryEngine) Tick(ctx context.Context) error {
	now := e.cfg.Now()
	var b batch
	m := e.m
	m.mu.Lock()
	// this node is alive, and so are its sockets (re-scored every TTL/3)
	m.leases[e.cfg.NodeID] = now
	if now.Sub(e.lastRefresh) >= e.cfg.TTL/3 {
		e.lastRefresh = now
		for _, s := range m.sockets {
			if s.node == e.cfg.NodeID {
				s.refreshed = now
			}
		}
	}
	b = m.expire(now, e.cfg, b)
	e.unlockEmit(ctx, b)
	return nil
}

// fullScanEvery is how often the timers that need a scan of every socket
// or user (entries past their TTL, away transitions) run, which is how
// late a user may turn away: a second, or a twentieth of a shorter
// AwayAfter (at most 50 ms late at the smallest, 1s: a scan each second
// turned such users away 0.9 s late), at least a tick.
func fullScanEvery(cfg Config) time.Duration {
	return max(min(cfg.AwayAfter/20, time.Second), tickEvery(cfg))
}

// expire runs every timer of the backend; whichever node ticks first does
// the work, once, under the lock. Typing expiry and flap graces only visit
// the conversations and users that have one pending; dead nodes cost a
// look at the leases; the full scans run once a second.
func (m *Memory) expire(now time.Time, cfg Config, b batch) batch {
	lapsed := map[string]bool{}
	for node, lease := range m.leases {
		if now.Sub(lease) >= cfg.LeaseTTL {
			lapsed[node] = true
		}
	}
	full := now.Sub(m.lastFull) >= fullScanEvery(cfg)
	if full || len(lapsed) > 0 {
		// Dead nodes' sockets and sockets not refreshed within TTL go
		// without grace; their last proof of life is their lastSeen.
		var dead []*mSocket
		for _, s := range m.sockets {
			lease, ok := m.leases[s.node]
			if lapsed[s.node] || (full && now.Sub(s.refreshed) >= cfg.TTL) {
				if ok && lease.After(s.refreshed) {
					s.refreshed = lease
				}
				dead = append(dead, s)
			}
		}
		slices.SortFunc(dead, func(a, b *mSocket) int { return cmp.Compare(a.id, b.id) })
		for _, s := range dead {
			b = m.removeSocket(s, now, 0, ReasonTimeout, b)
		}
		for node := range lapsed {
			delete(m.leases, node)
		}
	}

	for _, conv := range sortedKeys(m.typingConvs) {
		c := m.convs[conv]
		if c == nil || len(c.typing) == 0 {
			delete(m.typingConvs, conv)
			continue
		}
		for _, user := range sortedKeys(c.typing) {
			if t := c.typing[user]; !t.until.After(now) {
				delete(c.typing, user)
				b = append(b, Event{Kind: EventTyping, ConversationID: conv, UserID: user, At: now, Typing: false})
			}
		}
		if len(c.typing) == 0 {
			delete(m.typingConvs, conv)
		}
		m.dropIfEmpty(conv, c)
	}
	for _, conv := range sortedKeys(m.graceConvs) {
		c := m.convs[conv]
		if c == nil {
			delete(m.graceConvs, conv)
			continue
		}
		pending := false
		for _, user := range sortedKeys(c.members) {
			mem := c.members[user]
			if len(mem.socks) > 0 || mem.graceUntil.IsZero() {
				continue
			}
			if mem.graceUntil.After(now) {
				pending = true
				continue
			}
			b = m.endGrace(conv, c, user, mem, b)
		}
		if !pending {
			delete(m.graceConvs, conv)
		}
		m.dropIfEmpty(conv, c)
	}
	for _, user := range sortedKeys(m.graceUsers) {
		u := m.users[user]
		switch {
		case u == nil || len(u.socks) > 0 || u.graceUntil.IsZero():
			delete(m.graceUsers, user)
		case !u.graceUntil.After(now):
			b = append(b, Event{Kind: EventStatus, UserID: user, At: now, Status: Offline, LastSeen: u.disconnectedAt})
			delete(m.users, user)
			delete(m.graceUsers, user)
		}
	}

	if full {
		m.lastFull = now
		for _, user := range sortedKeys(m.users) {
			u := m.users[user]
			if len(u.socks) > 0 && u.status == Online && now.Sub(u.activity) >= cfg.AwayAfter {
				u.status = Away
				b = append(b, Event{Kind: EventStatus, UserID: user, At: now, Status: Away})
			}
		}
	}
	return b
}

// Drain ends every flap grace now, as if it had run out: for a single
// node shutting down, whose graces nobody else would end. The offline
// events carry the exact disconnect times.
func (e *MemoryEngine) Drain(ctx context.Context) error {
	now := e.cfg.Now()
	var b batch
	m := e.m
	m.mu.Lock()
	for _, c := range m.convs {
		for _, mem := range c.members {
			if !mem.graceUntil.IsZero() {
				mem.graceUntil = now
			}
		}
	}
	for _, u := range m.users {
		if !u.graceUntil.IsZero() {
			u.graceUntil = now
		}
	}
	b = m.expire(now, e.cfg, b)
	e.unlockEmit(ctx, b)
	return nil
}

// Run implements Engine.
func (e *MemoryEngine) Run(ctx context.Context) error {
	defer e.alarm.stop()
	return runTicker(ctx, e.cfg, e.Tick, alarmWake{e.alarm.C, e.Tick})
}

// Close implements Engine.
func (e *MemoryEngine) Close() error { return nil }

// tickEvery is how often Run ticks, which is how late a timer (a typing
// expiry, the end of a flap grace and so the offline update) may fire:
// 50 ms, or a hundredth of a shorter typing TTL. (At 250 ms, offline
// updates came 167 ms after the grace at the median.) A tick that finds
// nothing due costs the Redis engine one short script.
func tickEvery(cfg Config) time.Duration {
	return min(max(cfg.TypingTTL/100, 10*time.Millisecond), 50*time.Millisecond)
}

// alarmWake is what runTicker runs when an alarm rings.
type alarmWake struct {
	C   <-chan struct{}
	run func(context.Context) error
}

// runTicker runs tick every tickEvery, and the run of one of wakes (at most
// two) when a moment its alarm holds has come (between ticks, never at once
// with one).
func runTicker(ctx context.Context, cfg Config, tick func(context.Context) error, wakes ...alarmWake) error {
	var w [2]alarmWake // a missing one's nil channel never receives
	if copy(w[:], wakes) < len(wakes) {
		panic("presence: runTicker takes at most two alarms")
	}
	t := time.NewTicker(tickEvery(cfg))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			_ = tick(ctx) // errors are counted and logged by the engine
		case <-w[0].C:
			_ = w[0].run(ctx)
		case <-w[1].C:
			_ = w[1].run(ctx)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
