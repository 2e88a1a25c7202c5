package lastseen

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/ids"
	"github.com/presenced/presenced/internal/boundedmap"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
)

// StatusReader tells users' current status; presence.Reader satisfies it.
type StatusReader interface {
	// Users returns the presence of userIDs, in the order asked.
	Users(ctx context.Context, userIDs []string) ([]presence.UserPresence, error)
}

var _ StatusReader = presence.Reader(nil)

// ReaderDeps are what a Reader reads from.
type ReaderDeps struct {
	Status StatusReader // required
	Buffer Buffer       // nil: the store only
	Store  store.Store  // required
	Now    func() time.Time
	// StoredMaxAge, when set, keeps what the store answered for a user's
	// last-seen (a time, or none) this long. The store is asked only for
	// users the buffer does not hold, and whatever the flush writes to the
	// store is in the buffer at that moment and stays there for the
	// buffer's retention: an answer kept for less than that is never
	// shown in place of a newer time. (With the Pipeline's DirectActivity
	// an activity record of a user the buffer does not hold is written to
	// the store alone; it is read only when an offline time is lost, and
	// then at most StoredMaxAge late.) Set it well under the retention
	// (the server uses min(30s, retention/4)), and only with a buffer.
	StoredMaxAge time.Duration
	// Versions, when set, lets the reader keep the privacy settings it
	// reads from the store, each for as long as its bucket's version is
	// the one it was read under (privacyCache): a lookup reads the
	// versions along with the presence facts, in the same round trip when
	// both are on Redis, and the store only for the settings it does not
	// hold. nil: the settings are read from the store every time.
	Versions PrivacyVersions
}

// Reader answers presence queries: status from the presence engine,
// last-seen from the buffer then the store, filtered by the privacy rules
// (Filter) for the viewer.
type Reader struct {
	d ReaderDeps

	mu     sync.Mutex
	stored map[string]storedEntry // user → the store's answer (StoredMaxAge)

	privacy *privacyCache // nil without Versions
}

type storedEntry struct {
	t, at time.Time // the last-seen (zero: none), when the store said so
}

// storedMaxEntries bounds the stored answers kept (when full, expired ones
// go, and if that is not enough, arbitrary ones down to half:
// boundedmap.MakeRoom).
const storedMaxEntries = 100_000

// NewReader returns a Reader over d.
func NewReader(d ReaderDeps) *Reader {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Buffer == nil {
		d.StoredMaxAge = 0 // nothing would shadow a stale answer
	}
	r := &Reader{d: d}
	if d.Versions != nil {
		r.privacy = &privacyCache{v: d.Versions, maxAge: privacyCacheMaxAge,
			maxEntries: privacyCacheMaxEntries / PrivacyBuckets, now: d.Now}
	}
	return r
}

// SettingChanged is told that userID's privacy setting was saved in the
// store: every node's reader reads it again (Versions.Changed). Without
// Versions it does nothing.
func (r *Reader) SettingChanged(ctx context.Context, userID string) error {
	if r.d.Versions == nil {
		return nil
	}
	return r.d.Versions.Changed(ctx, userID)
}

// settings starts the lookup of ids' privacy settings (see privacyRead).
func (r *Reader) settings(ctx context.Context, ids []string) *privacyRead {
	return r.privacy.begin(ctx, r.d.Store.Privacy, ids)
}

// Presence is Presences for one user.
func (r *Reader) Presence(ctx context.Context, viewerID, userID string) (Presence, error) {
	out, err := r.Presences(ctx, viewerID, []string{userID})
	if err != nil {
		return Presence{}, err
	}
	return out[0], nil
}

// Presences returns what viewerID may see of userIDs, in request order
// (duplicates answered each time). Whatever the number of users it costs at
// most: one StatusReader.Users; one Buffer.Get (one ZMSCORE) for the
// offline users; one store.LastSeen for those the engine and the buffer do
// not know; one store.Privacy for the targets and the viewer (none when
// the viewer asks only about themself; with Versions, only for the
// settings the reader does not hold, and the versions read along with the
// status); one store.ContactOf for the
// targets whose setting is contacts (none if there are none, or the viewer's
// own setting hides everything anyway). The callers validate the ids.
func (r *Reader) Presences(ctx context.Context, viewerID string, userIDs []string) ([]Presence, error) {
	if len(userIDs) == 0 {
		return []Presence{}, nil
	}
	users := ids.Unique(userIDs)
	// The settings do not depend on the facts: both are read at once, the
	// settings of users and the viewer's (at viewerAt), when anyone but the
	// viewer is asked about.
	var read *privacyRead
	sids, viewerAt := withID(users, viewerID)
	if len(sids) > 1 {
		read = r.settings(ctx, sids)
	}
	targets, box := targetScratch.get(len(users))
	defer targetScratch.put(box, targets)
	if err := r.facts(ctx, users, read, targets); err != nil {
		return nil, err
	}
	defer read.release()

	viewerSetting := store.DefaultVisibility
	if read != nil {
		settings, err := read.finish(ctx)
		if err != nil {
			return nil, fmt.Errorf("lastseen: read privacy: %w", err)
		}
		viewerSetting = settings[viewerAt]
		var owners []*Target
		for i := range targets {
			t := &targets[i]
			if i == viewerAt {
				continue
			}
			t.Setting = settings[i] // targets are in the order of users
			if normalize(t.Setting) == store.Contacts {
				owners = append(owners, t)
			}
		}
		if len(owners) > 0 && normalize(viewerSetting) != store.Nobody {
			ownerIDs := make([]string, len(owners))
			for i, t := range owners {
				ownerIDs[i] = t.UserID
			}
			isContact, err := r.d.Store.ContactOf(ctx, ownerIDs, viewerID)
			if err != nil {
				return nil, fmt.Errorf("lastseen: read contacts: %w", err)
			}
			for _, t := range owners {
				t.IsContact = isContact[t.UserID]
			}
		}
	}

	now := r.d.Now()
	out := make([]Presence, len(userIDs))
	if len(users) == len(userIDs) {
		// no duplicates: ids.Unique kept the order, targets[i] is userIDs[i]'s
		for i := range targets {
			out[i] = Filter(viewerID, targets[i], viewerSetting, now)
		}
		return out, nil
	}
	at := make(map[string]*Target, len(targets))
	for i := range targets {
		at[targets[i].UserID] = &targets[i]
	}
	for i, id := range userIDs {
		out[i] = Filter(viewerID, *at[id], viewerSetting, now)
	}
	return out, nil
}

// PresencesFor returns what each of viewerIDs may see of one user whose
// presence is already known (a status change to announce to subscribers),
// in the order of viewerIDs. up.LastSeen is used when set; otherwise the
// buffer and then the store are asked. It costs one store.Privacy for the
// target and all viewers (with Versions: for the settings the reader does
// not hold, and one read of their versions) and, only when the target's
// setting is contacts,
// one store.ContactsAmong.
func (r *Reader) PresencesFor(ctx context.Context, up presence.UserPresence, viewerIDs []string) ([]Presence, error) {
	t := &Target{UserID: up.UserID, Status: up.Status, LastSeen: up.LastSeen}
	if t.Status == "" {
		t.Status = presence.Offline
	}
	if t.Status == presence.Offline && t.LastSeen.IsZero() {
		if err := r.lastSeen(ctx, []*Target{t}, true); err != nil {
			return nil, err
		}
	}
	viewers := ids.Unique(viewerIDs)
	var settings []store.Visibility // of sids: viewers and the target (at self)
	isContact := map[string]bool{}
	sids, self := withID(viewers, up.UserID)
	if len(sids) > 1 {
		var err error
		settings, err = r.settings(ctx, sids).finish(ctx)
		if err != nil {
			return nil, fmt.Errorf("lastseen: read privacy: %w", err)
		}
		t.Setting = settings[self]
		if normalize(t.Setting) == store.Contacts {
			var ask []string
			for i, v := range viewers {
				if i != self && normalize(settings[i]) != store.Nobody {
					ask = append(ask, v)
				}
			}
			if len(ask) > 0 {
				isContact, err = r.d.Store.ContactsAmong(ctx, up.UserID, ask)
				if err != nil {
					return nil, fmt.Errorf("lastseen: read contacts: %w", err)
				}
			}
		}
	}
	var at map[string]int // duplicates in viewerIDs: the position of each in viewers
	if settings != nil && len(viewers) != len(viewerIDs) {
		at = make(map[string]int, len(viewers))
		for i, v := range viewers {
			at[v] = i
		}
	}
	settingOf := func(i int, v string) store.Visibility { // viewerIDs[i] is v
		switch {
		case settings == nil:
			return ""
		case at != nil:
			return settings[at[v]]
		}
		return settings[i]
	}
	now := r.d.Now()
	out := make([]Presence, len(viewerIDs))
	for i, v := range viewerIDs {
		tv := *t
		tv.IsContact = isContact[v]
		out[i] = Filter(v, tv, settingOf(i, v), now)
	}
	return out, nil
}

// withID returns ids (unique) with id among them, and its position: ids
// itself when it holds id, else a copy with id at the end.
func withID(ids []string, id string) ([]string, int) {
	if i := slices.Index(ids, id); i >= 0 {
		return ids, i
	}
	return append(ids[:len(ids):len(ids)], id), len(ids)
}

// PipelinedStatus is a StatusReader on Redis that can queue its read on a
// pipeline (presence.RedisEngine).
type PipelinedStatus interface {
	QueueUsers(ctx context.Context, pipe redis.Pipeliner, ids []string) func(each func(i int, up presence.UserPresence)) error
}

// PipelinedBuffer is a Buffer on Redis that can queue its read on a
// pipeline (*Redis).
type PipelinedBuffer interface {
	Pipeline() redis.Pipeliner
	// QueueGet fills out (as many zero times as userIDs).
	QueueGet(ctx context.Context, pipe redis.Pipeliner, userIDs []string, out []time.Time) func() ([]time.Time, error)
}

// facts gathers the true status and last-seen of ids (unique) into all
// (as many zero targets, in the order of ids). When the
// status and the buffer live on the same Redis (both pipelined), they are
// read in ONE round trip whatever the number of ids; the buffer is then
// asked about every id, which costs less than a second round trip. The
// versions of settings' buckets (nil: none) go in that round trip too when
// they are on that Redis.
func (r *Reader) facts(ctx context.Context, ids []string, settings *privacyRead, all []Target) error {
	ps, okS := r.d.Status.(PipelinedStatus)
	pb, okB := r.d.Buffer.(PipelinedBuffer)
	if okS && okB {
		return r.factsPipelined(ctx, ids, ps, pb, settings, all)
	}
	ups, err := r.d.Status.Users(ctx, ids)
	if err != nil {
		return fmt.Errorf("lastseen: read status: %w", err)
	}
	return r.factsFrom(ctx, ids, func(each func(int, presence.UserPresence)) error {
		for i, up := range ups {
			each(i, up)
		}
		return nil
	}, nil, all)
}

func (r *Reader) factsPipelined(ctx context.Context, ids []string, ps PipelinedStatus, pb PipelinedBuffer, settings *privacyRead, all []Target) error {
	pipe := pb.Pipeline()
	users := ps.QueueUsers(ctx, pipe, ids)
	tb, box := timeScratch.get(len(ids))
	defer timeScratch.put(box, tb)
	times := pb.QueueGet(ctx, pipe, ids, tb)
	if settings != nil {
		settings.queue(ctx, pipe) // the settings' versions, when on this Redis
	}
	_, _ = pipe.Exec(ctx) // each command's error is read below
	buffered, err := times()
	if err == nil {
		return r.factsFrom(ctx, ids, users, buffered, all)
	}
	if err := users(func(int, presence.UserPresence) {}); err != nil {
		return fmt.Errorf("lastseen: read status: %w", err)
	}
	return fmt.Errorf("lastseen: read buffer: %w", err)
}

// factsFrom builds the targets, into all, from the statuses (statuses
// calls its function with the i-th id's) and, when given, the buffered
// times of every id (else the buffer is asked for the offline). The
// targets are in the order of ids: a slice, not a map by id, which cost a
// sixth of what a query of 1,000 ids allocated.
func (r *Reader) factsFrom(ctx context.Context, ids []string, statuses func(each func(i int, up presence.UserPresence)) error, buffered []time.Time, all []Target) error {
	for i, id := range ids {
		all[i] = Target{UserID: id, Status: presence.Offline}
	}
	err := statuses(func(i int, up presence.UserPresence) {
		if i < len(all) && up.UserID == all[i].UserID {
			all[i].Status, all[i].LastSeen = up.Status, up.LastSeen
		}
	})
	if err != nil {
		return fmt.Errorf("lastseen: read status: %w", err)
	}
	ob, box := offlineScratch.get(len(ids))
	offline := ob[:0]
	defer func() { offlineScratch.put(box, offline) }()
	for i := range all {
		t := &all[i]
		if t.Status != presence.Online && t.Status != presence.Away {
			t.Status = presence.Offline
			offline = append(offline, t)
			if buffered != nil && buffered[i].After(t.LastSeen) {
				t.LastSeen = buffered[i]
			}
		}
	}
	return r.lastSeen(ctx, offline, buffered == nil)
}

// lastSeen fills the last-seen of the offline targets: the later of what
// the engine remembered and (if askBuffer) the buffer holds, else the
// store.
func (r *Reader) lastSeen(ctx context.Context, offline []*Target, askBuffer bool) error {
	if len(offline) == 0 {
		return nil
	}
	if askBuffer && r.d.Buffer != nil {
		times, err := r.d.Buffer.Get(ctx, targetIDs(offline))
		if err != nil {
			return fmt.Errorf("lastseen: read buffer: %w", err)
		}
		for i, t := range offline {
			if times[i].After(t.LastSeen) {
				t.LastSeen = times[i]
			}
		}
	}
	var misses []*Target
	for _, t := range offline {
		if t.LastSeen.IsZero() {
			misses = append(misses, t)
		}
	}
	misses = r.storedKnown(misses)
	if len(misses) == 0 {
		return nil
	}
	ids := targetIDs(misses)
	stored, err := r.d.Store.LastSeen(ctx, ids)
	if err != nil {
		return fmt.Errorf("lastseen: read store: %w", err)
	}
	for _, t := range misses {
		t.LastSeen = stored[t.UserID]
	}
	r.keepStored(ids, stored)
	return nil
}

func targetIDs(ts []*Target) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.UserID
	}
	return out
}

// storedKnown fills the targets whose store answer is kept (fresh) and
// returns the others.
func (r *Reader) storedKnown(ts []*Target) []*Target {
	if r.d.StoredMaxAge <= 0 || len(ts) == 0 {
		return ts
	}
	now := r.d.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	rest := ts[:0]
	for _, t := range ts {
		if e, ok := r.stored[t.UserID]; ok && now.Sub(e.at) < r.d.StoredMaxAge {
			t.LastSeen = e.t
			continue
		}
		rest = append(rest, t)
	}
	return rest
}

// keepStored keeps the store's answers for ids (StoredMaxAge).
func (r *Reader) keepStored(ids []string, stored map[string]time.Time) {
	if r.d.StoredMaxAge <= 0 {
		return
	}
	now := r.d.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stored == nil {
		r.stored = make(map[string]storedEntry)
	}
	boundedmap.MakeRoom(r.stored, storedMaxEntries, len(ids), func(e storedEntry) bool { return now.Sub(e.at) >= r.d.StoredMaxAge })
	for _, id := range ids {
		r.stored[id] = storedEntry{t: stored[id], at: now}
	}
}
