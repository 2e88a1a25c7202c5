package lastseen_test

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/presenced/presenced/internal/jsontext"
	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func str(s string) *string { return &s }

const day = 24 * time.Hour

func TestFilter(t *testing.T) {
	exact := time.Date(2026, 11, 30, 11, 47, 59, 999_000_000, time.UTC) // 12m0.001s before now
	hidden := func(bucket, display string) lastseen.Presence {
		return lastseen.Presence{UserID: "t", Status: "hidden", LastSeenBucket: str(bucket), Display: display}
	}
	offline := func(lastSeen, display string) lastseen.Presence {
		return lastseen.Presence{UserID: "t", Status: "offline", LastSeen: str(lastSeen), Display: display}
	}
	live := func(status string) lastseen.Presence {
		return lastseen.Presence{UserID: "t", Status: status, Display: status}
	}
	never := lastseen.Presence{UserID: "t", Status: "offline", Display: "never seen"}
	recently := hidden("recently", "last seen recently")
	type tc struct {
		name    string
		viewer  string
		target  lastseen.Target
		viewerV store.Visibility
		want    lastseen.Presence
	}
	tg := func(status presence.Status, at time.Time, v store.Visibility, contact bool) lastseen.Target {
		return lastseen.Target{UserID: "t", Status: status, LastSeen: at, Setting: v, IsContact: contact}
	}
	cases := []tc{
		// V = T: exact value, status as is, whatever the settings.
		{"self online", "t", tg(presence.Online, exact, store.Nobody, false), store.Nobody, live("online")},
		{"self away", "t", tg(presence.Away, exact, store.Nobody, false), store.Nobody, live("away")},
		{"self offline exact ms", "t", tg(presence.Offline, exact, store.Everyone, false), store.Everyone,
			offline("2026-11-30T11:47:59.999Z", "last seen 12 minutes ago")},
		{"self offline nobody", "t", tg(presence.Offline, exact, store.Nobody, false), store.Nobody,
			offline("2026-11-30T11:47:59.999Z", "last seen 12 minutes ago")},
		{"self never seen", "t", tg(presence.Offline, time.Time{}, store.Nobody, false), store.Nobody, never},

		// Target everyone: visible, rounded down to the minute.
		{"everyone offline rounded", "v", tg(presence.Offline, exact, store.Everyone, false), store.Everyone,
			offline("2026-11-30T11:47:00.000Z", "last seen 13 minutes ago")},
		{"everyone on the minute", "v", tg(presence.Offline, exact.Truncate(time.Minute), store.Everyone, false), store.Everyone,
			offline("2026-11-30T11:47:00.000Z", "last seen 13 minutes ago")},
		{"everyone online", "v", tg(presence.Online, exact, store.Everyone, false), store.Everyone, live("online")},
		{"everyone away", "v", tg(presence.Away, time.Time{}, store.Everyone, false), store.Everyone, live("away")},
		{"everyone never seen", "v", tg(presence.Offline, time.Time{}, store.Everyone, false), store.Everyone, never},
		{"everyone, viewer contacts", "v", tg(presence.Offline, exact, store.Everyone, false), store.Contacts,
			offline("2026-11-30T11:47:00.000Z", "last seen 13 minutes ago")},

		// Target contacts: visible iff the viewer is in the target's contacts.
		{"contacts, is contact", "v", tg(presence.Offline, exact, store.Contacts, true), store.Everyone,
			offline("2026-11-30T11:47:00.000Z", "last seen 13 minutes ago")},
		{"contacts, is contact, online", "v", tg(presence.Online, exact, store.Contacts, true), store.Everyone, live("online")},
		{"contacts, not contact", "v", tg(presence.Offline, exact, store.Contacts, false), store.Everyone, recently},
		{"contacts, not contact, online", "v", tg(presence.Online, time.Time{}, store.Contacts, false), store.Everyone, recently},
		{"contacts, not contact, never seen", "v", tg(presence.Offline, time.Time{}, store.Contacts, false), store.Everyone,
			hidden("long_ago", "last seen a long time ago")},

		// Target nobody: hidden, online or not.
		{"nobody offline", "v", tg(presence.Offline, exact, store.Nobody, true), store.Everyone, recently},
		{"nobody online", "v", tg(presence.Online, time.Time{}, store.Nobody, true), store.Everyone, recently},
		{"nobody away", "v", tg(presence.Away, exact.Add(-40*day), store.Nobody, false), store.Everyone, recently},
		{"nobody never seen", "v", tg(presence.Offline, time.Time{}, store.Nobody, false), store.Everyone,
			hidden("long_ago", "last seen a long time ago")},

		// Reciprocity: a viewer who hides sees no one's last-seen.
		{"reciprocity, target everyone", "v", tg(presence.Offline, exact, store.Everyone, true), store.Nobody, recently},
		{"reciprocity, target everyone online", "v", tg(presence.Online, exact, store.Everyone, true), store.Nobody, recently},
		{"reciprocity, target contacts, is contact", "v", tg(presence.Offline, exact.Add(-5*day), store.Contacts, true), store.Nobody,
			hidden("within_week", "last seen within a week")},
		{"reciprocity, never seen", "v", tg(presence.Offline, time.Time{}, store.Everyone, false), store.Nobody,
			hidden("long_ago", "last seen a long time ago")},

		// Buckets from the true value, boundaries inclusive.
		{"bucket 3d", "v", tg(presence.Offline, now.Add(-3*day), store.Nobody, false), store.Everyone, recently},
		{"bucket 3d+1ms", "v", tg(presence.Offline, now.Add(-3*day-time.Millisecond), store.Nobody, false), store.Everyone,
			hidden("within_week", "last seen within a week")},
		{"bucket 7d", "v", tg(presence.Offline, now.Add(-7*day), store.Nobody, false), store.Everyone,
			hidden("within_week", "last seen within a week")},
		{"bucket 7d+1ms", "v", tg(presence.Offline, now.Add(-7*day-time.Millisecond), store.Nobody, false), store.Everyone,
			hidden("within_month", "last seen within a month")},
		{"bucket 30d", "v", tg(presence.Offline, now.Add(-30*day), store.Nobody, false), store.Everyone,
			hidden("within_month", "last seen within a month")},
		{"bucket 30d+1ms", "v", tg(presence.Offline, now.Add(-30*day-time.Millisecond), store.Nobody, false), store.Everyone,
			hidden("long_ago", "last seen a long time ago")},
		{"bucket future (clock skew)", "v", tg(presence.Offline, now.Add(time.Hour), store.Nobody, false), store.Everyone, recently},

		// Settings that are missing or unknown.
		{"empty target setting is everyone", "v", tg(presence.Offline, exact, "", false), store.Everyone,
			offline("2026-11-30T11:47:00.000Z", "last seen 13 minutes ago")},
		{"empty viewer setting is everyone", "v", tg(presence.Offline, exact, store.Everyone, false), "",
			offline("2026-11-30T11:47:00.000Z", "last seen 13 minutes ago")},
		{"unknown target setting hides", "v", tg(presence.Offline, exact, "friends", true), store.Everyone, recently},
		{"unknown viewer setting hides", "v", tg(presence.Offline, exact, store.Everyone, true), "friends", recently},

		// display follows the value shown: rounded for others, exact for self.
		{"display from rounded value", "v", tg(presence.Offline, now.Add(-50*time.Second), store.Everyone, false), store.Everyone,
			offline("2026-11-30T11:59:00.000Z", "last seen 1 minute ago")},
		{"display from exact value (self)", "t", tg(presence.Offline, now.Add(-50*time.Second), store.Everyone, false), store.Everyone,
			offline("2026-11-30T11:59:10.000Z", "last seen just now")},
		{"non-UTC input written in UTC", "t", tg(presence.Offline, exact.In(time.FixedZone("X", 5*3600)), store.Everyone, false), store.Everyone,
			offline("2026-11-30T11:47:59.999Z", "last seen 12 minutes ago")},
		{"sub-millisecond dropped (self)", "t", tg(presence.Offline, exact.Add(999*time.Microsecond), store.Everyone, false), store.Everyone,
			offline("2026-11-30T11:47:59.999Z", "last seen 12 minutes ago")},
		{"empty status is offline", "v", tg("", exact, store.Everyone, false), store.Everyone,
			offline("2026-11-30T11:47:00.000Z", "last seen 13 minutes ago")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := lastseen.Filter(c.viewer, c.target, c.viewerV, now)
			if !presenceEqual(got, c.want) {
				t.Errorf("Filter =\n  %s\nwant\n  %s", js(got), js(c.want))
			}
		})
	}
}

func presenceEqual(a, b lastseen.Presence) bool {
	eq := func(x, y *string) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return a.UserID == b.UserID && a.Status == b.Status && a.Display == b.Display &&
		eq(a.LastSeen, b.LastSeen) && eq(a.LastSeenBucket, b.LastSeenBucket)
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestDisplay(t *testing.T) {
	cases := []struct {
		age  time.Duration
		want string
	}{
		{0, "last seen just now"},
		{59*time.Second + 999*time.Millisecond, "last seen just now"},
		{-5 * time.Second, "last seen just now"},
		{-2 * time.Hour, "last seen just now"},
		{time.Minute, "last seen 1 minute ago"},
		{time.Minute + 59*time.Second, "last seen 1 minute ago"},
		{2 * time.Minute, "last seen 2 minutes ago"},
		{5 * time.Minute, "last seen 5 minutes ago"},
		{59*time.Minute + 59*time.Second + 999*time.Millisecond, "last seen 59 minutes ago"},
		{time.Hour, "last seen 1 hour ago"},
		{time.Hour + 59*time.Minute, "last seen 1 hour ago"},
		{2 * time.Hour, "last seen 2 hours ago"},
		{3 * time.Hour, "last seen 3 hours ago"},
		{23*time.Hour + 59*time.Minute + 59*time.Second, "last seen 23 hours ago"},
		{24 * time.Hour, "last seen yesterday"},
		{47*time.Hour + 59*time.Minute, "last seen yesterday"},
		{48 * time.Hour, "last seen 2 days ago"},
		{4 * day, "last seen 4 days ago"},
		{7*day - time.Millisecond, "last seen 6 days ago"},
		{7 * day, "last seen on 23 Nov 2026"},
		{28 * day, "last seen on 2 Nov 2026"},
		{400 * day, "last seen on 26 Oct 2025"},
	}
	for _, c := range cases {
		t.Run(c.age.String(), func(t *testing.T) {
			if got := lastseen.Display(now.Add(-c.age), now); got != c.want {
				t.Errorf("Display(now-%v) = %q, want %q", c.age, got, c.want)
			}
		})
	}
	// The date is the UTC date, whatever the zone of the value.
	at := time.Date(2026, 11, 2, 23, 30, 0, 0, time.UTC).In(time.FixedZone("E", 3*3600))
	if got := lastseen.Display(at, now); got != "last seen on 2 Nov 2026" {
		t.Errorf("Display in another zone = %q", got)
	}
}

func TestBucketOf(t *testing.T) {
	cases := []struct {
		at   time.Time
		want string
	}{
		{time.Time{}, "long_ago"},
		{now, "recently"},
		{now.Add(time.Minute), "recently"},
		{now.Add(-3 * day), "recently"},
		{now.Add(-3*day - time.Millisecond), "within_week"},
		{now.Add(-7 * day), "within_week"},
		{now.Add(-7*day - time.Millisecond), "within_month"},
		{now.Add(-30 * day), "within_month"},
		{now.Add(-30*day - time.Millisecond), "long_ago"},
		{now.Add(-3000 * day), "long_ago"},
	}
	for _, c := range cases {
		if got := lastseen.BucketOf(c.at, now); got != c.want {
			t.Errorf("BucketOf(now-%v) = %q, want %q", now.Sub(c.at), got, c.want)
		}
	}
}

// The wire shape: camelCase names, null for absent values.
func TestPresenceJSON(t *testing.T) {
	cases := []struct {
		p    lastseen.Presence
		want string
	}{
		{lastseen.Filter("v", lastseen.Target{UserID: "t", Status: presence.Online, Setting: store.Everyone}, store.Everyone, now),
			`{"userId":"t","status":"online","lastSeen":null,"lastSeenBucket":null,"display":"online"}`},
		{lastseen.Filter("v", lastseen.Target{UserID: "t", Status: presence.Offline, LastSeen: now.Add(-90 * time.Second), Setting: store.Everyone}, store.Everyone, now),
			`{"userId":"t","status":"offline","lastSeen":"2026-11-30T11:58:00.000Z","lastSeenBucket":null,"display":"last seen 2 minutes ago"}`},
		{lastseen.Filter("v", lastseen.Target{UserID: "t", Status: presence.Offline, LastSeen: now.Add(-10 * day), Setting: store.Nobody}, store.Everyone, now),
			`{"userId":"t","status":"hidden","lastSeen":null,"lastSeenBucket":"within_month","display":"last seen within a month"}`},
		{lastseen.Filter("v", lastseen.Target{UserID: "t", Status: presence.Offline}, store.Everyone, now),
			`{"userId":"t","status":"offline","lastSeen":null,"lastSeenBucket":null,"display":"never seen"}`},
	}
	for _, c := range cases {
		if got := js(c.p); got != c.want {
			t.Errorf("JSON\n  %s\nwant\n  %s", got, c.want)
		}
	}
}

func FuzzPresenceListJSON(f *testing.F) {
	f.Add("u1", "online", "2026-01-02T03:04:00.000Z", "", "online", true, false, 2)
	f.Add("a<b>&\"\\", "hidden", "", "within a week", "last seen\x00 \u2028é", false, true, 1)
	f.Add("", "", "\xff", "", "", true, true, 0)
	f.Fuzz(func(t *testing.T, id, status, seen, bucket, display string, hasSeen, hasBucket bool, n int) {
		var l lastseen.PresenceList
		if n >= 0 {
			l = lastseen.PresenceList{}
		}
		for i := range n % 4 {
			p := lastseen.Presence{UserID: id + strconv.Itoa(i), Status: status, Display: display}
			if hasSeen {
				p.LastSeen = &seen
			}
			if hasBucket {
				p.LastSeenBucket = &bucket
			}
			l = append(l, p)
		}
		if err := jsontext.SameAsMarshal(l.AppendJSON, []lastseen.Presence(l), l); err != nil {
			t.Fatal(err)
		}
		// the room grown up front is the JSON's length, or (an escape
		// needed) less
		if got, want := len(l.AppendJSON(nil)), lastseen.PresenceListJSONLen(l); l != nil && (got < want || got > want && jsontext.Plain(id+status+seen+bucket+display)) {
			t.Fatalf("jsonLen %d, JSON %d bytes", want, got)
		}
	})
}
