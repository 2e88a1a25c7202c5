package lastseen

import (
	"strconv"
	"time"

	"github.com/presenced/presenced/internal/jsontext"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/timestamp"
)

// Statuses a Presence can carry (CONTRACT §1 Presence). StatusHidden
// replaces the true status when the viewer may not see the target's
// last-seen.
const (
	StatusOnline  = string(presence.Online)
	StatusAway    = string(presence.Away)
	StatusOffline = string(presence.Offline)
	StatusHidden  = "hidden"
)

// Buckets give a hidden last-seen's rough age (CONTRACT §3).
const (
	BucketRecently    = "recently"     // ≤ 3 days, or online now
	BucketWithinWeek  = "within_week"  // ≤ 7 days
	BucketWithinMonth = "within_month" // ≤ 30 days
	BucketLongAgo     = "long_ago"     // older, or never seen
)

// Bucket boundaries, inclusive: an age of exactly 3 days is still recently.
const (
	RecentlyMax    = 3 * 24 * time.Hour
	WithinWeekMax  = 7 * 24 * time.Hour
	WithinMonthMax = 30 * 24 * time.Hour
)

// Presence is what a viewer may know of a user (CONTRACT §1 Presence), after
// the privacy filter. Nil pointers are JSON null.
type Presence struct {
	UserID         string  `json:"userId"`
	Status         string  `json:"status"` // online, away, offline or hidden
	LastSeen       *string `json:"lastSeen"`
	LastSeenBucket *string `json:"lastSeenBucket"`
	Display        string  `json:"display"`
}

// Target is the truth about a user, before the privacy filter.
type Target struct {
	UserID string
	Status presence.Status // online, away or offline
	// LastSeen is when the user was last seen (exact); zero: never seen.
	// It is ignored while the user is online or away.
	LastSeen time.Time
	// Setting is the target's last-seen privacy; empty means
	// store.DefaultVisibility, an unknown value hides (fails closed).
	Setting store.Visibility
	// IsContact: the viewer is in the target's contact list.
	IsContact bool
}

// Filter applies CONTRACT §3 for viewer looking at t at time now; the
// viewer's own setting matters by reciprocity. It is the single privacy
// rule of the project: REST, presence:query, presence:subscribe and
// presence:update all go through it.
//
//   - viewer = target: the exact value (milliseconds), status as is.
//   - visible (target everyone; contacts and viewer is a contact; and the
//     viewer's own setting is not nobody): status as is, lastSeen rounded
//     down to the minute.
//   - otherwise hidden: status "hidden", lastSeen null, lastSeenBucket
//     from the true value (online or away counts as now; never seen is
//     long_ago).
//   - visible and online/away: lastSeen and lastSeenBucket null, display
//     "online"/"away"; visible and never seen: status offline, display
//     "never seen".
//
// display is computed from the value shown (rounded for others), see
// Display.
func Filter(viewer string, t Target, viewerSetting store.Visibility, now time.Time) Presence {
	p := Presence{UserID: t.UserID, Status: string(t.Status)}
	live := t.Status == presence.Online || t.Status == presence.Away
	self := viewer == t.UserID
	if !self && !visible(t, viewerSetting) {
		at := t.LastSeen
		if live {
			at = now
		}
		b := BucketOf(at, now)
		p.Status = StatusHidden
		p.LastSeenBucket = &b
		p.Display = bucketDisplay(b)
		return p
	}
	switch {
	case live:
		p.Display = string(t.Status)
	case t.LastSeen.IsZero():
		p.Status = StatusOffline
		p.Display = "never seen"
	default:
		p.Status = StatusOffline
		shown := t.LastSeen.UTC().Truncate(time.Millisecond)
		if !self {
			shown = shown.Truncate(time.Minute)
		}
		s := timestamp.Format(shown)
		p.LastSeen = &s
		p.Display = Display(shown, now)
	}
	return p
}

func visible(t Target, viewerSetting store.Visibility) bool {
	if normalize(viewerSetting) == store.Nobody {
		return false // reciprocity
	}
	switch normalize(t.Setting) {
	case store.Everyone:
		return true
	case store.Contacts:
		return t.IsContact
	}
	return false
}

// normalize maps the empty setting to the default and anything unknown to
// nobody, so a corrupt value hides rather than shows.
func normalize(v store.Visibility) store.Visibility {
	if v == "" {
		return store.DefaultVisibility
	}
	if !v.Valid() {
		return store.Nobody
	}
	return v
}

// BucketOf says how long ago at was, in the coarse terms shown when the
// value itself is hidden. A zero at (never seen) is long_ago; a time in the
// future (clock skew) is recently.
func BucketOf(at, now time.Time) string {
	if at.IsZero() {
		return BucketLongAgo
	}
	age := now.Sub(at)
	switch {
	case age <= RecentlyMax:
		return BucketRecently
	case age <= WithinWeekMax:
		return BucketWithinWeek
	case age <= WithinMonthMax:
		return BucketWithinMonth
	}
	return BucketLongAgo
}

func bucketDisplay(b string) string {
	switch b {
	case BucketRecently:
		return "last seen recently"
	case BucketWithinWeek:
		return "last seen within a week"
	case BucketWithinMonth:
		return "last seen within a month"
	}
	return "last seen a long time ago"
}

// Display is the English text for a user last seen at `at`, seen at now.
// The rule counts elapsed time only, never calendar days, because the
// server does not know the viewer's time zone:
//
//	age < 1 minute (or in the future)  "last seen just now"
//	age < 1 hour                       "last seen 1 minute ago", "last seen 5 minutes ago"
//	age < 24 hours                     "last seen 1 hour ago", "last seen 3 hours ago"
//	age < 48 hours                     "last seen yesterday"
//	age < 7 days                       "last seen 4 days ago" (whole days, 2–6)
//	older                              "last seen on 2 Nov 2026" (the UTC date)
//
// Counts are rounded down: 59m59s is "59 minutes ago".
func Display(at, now time.Time) string {
	age := now.Sub(at)
	switch {
	case age < time.Minute:
		return "last seen just now"
	case age < time.Hour:
		return "last seen " + plural(int(age/time.Minute), "minute") + " ago"
	case age < 24*time.Hour:
		return "last seen " + plural(int(age/time.Hour), "hour") + " ago"
	case age < 48*time.Hour:
		return "last seen yesterday"
	case age < 7*24*time.Hour:
		return "last seen " + plural(int(age/(24*time.Hour)), "day") + " ago"
	}
	return "last seen on " + at.UTC().Format("2 Jan 2006")
}

func plural(n int, unit string) string {
	s := strconv.Itoa(n) + " " + unit
	if n != 1 {
		s += "s"
	}
	return s
}

// PresenceList is a list of presences that encodes itself to JSON exactly
// as encoding/json encodes a []Presence (FuzzPresenceListJSON), without
// reflection: an answer to presence:query of 1,000 users was a sixth of
// what the query allocated. The websocket transport uses AppendJSON.
type PresenceList []Presence

// AppendJSON appends l as json.Marshal would encode it, into room grown
// once for all of it: an answer of 1,000 users is about 100 KB, which
// grown by appending cost twice that in allocations.
func (l PresenceList) AppendJSON(dst []byte) []byte {
	return jsontext.Array(dst, l, l.jsonLen(), func(dst []byte, p *Presence) []byte {
		dst = append(dst, `{"userId":`...)
		dst = jsontext.String(dst, p.UserID)
		dst = append(dst, `,"status":`...)
		dst = jsontext.String(dst, p.Status)
		dst = append(dst, `,"lastSeen":`...)
		dst = jsontext.StringPtr(dst, p.LastSeen)
		dst = append(dst, `,"lastSeenBucket":`...)
		dst = jsontext.StringPtr(dst, p.LastSeenBucket)
		dst = append(dst, `,"display":`...)
		dst = jsontext.String(dst, p.Display)
		return append(dst, '}')
	})
}

// jsonLen is the length of l's JSON when none of its strings needs an
// escape (ids, statuses, times and the English displays never do).
func (l PresenceList) jsonLen() int {
	n := 2
	for i := range l {
		p := &l[i]
		n += len(`{"userId":"","status":"","lastSeen":,"lastSeenBucket":,"display":""},`) +
			len(p.UserID) + len(p.Status) + len(p.Display) + jsonLenPtr(p.LastSeen) + jsonLenPtr(p.LastSeenBucket)
	}
	if len(l) > 0 {
		n-- // no comma after the last
	}
	return n
}

func jsonLenPtr(s *string) int {
	if s == nil {
		return len("null")
	}
	return len(*s) + 2
}
