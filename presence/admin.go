package presence

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"
)

// The admin panel's read-only views of the whole cluster (issue #13). They
// are not part of Engine: only the panel needs them, and each backend
// answers them from its own data model.

// ConversationCount is a conversation and how many users are in it now
// (online, away, or within their flap grace).
type ConversationCount struct {
	ID     string
	Online int
}

// SocketInfo is one connected socket of a user, anywhere in the cluster.
type SocketInfo struct {
	ID            string
	Node          string
	Conversations []string
}

// AdminView is what the admin panel reads beyond Engine.
type AdminView interface {
	// ConversationCounts returns the conversations whose id starts with
	// prefix ("" for all), busiest first (ties by id), offset and limit
	// applied, and how many matched in all.
	ConversationCounts(ctx context.Context, prefix string, offset, limit int) (total int, page []ConversationCount, err error)
	// UserSockets returns a user's sockets on every node, by id.
	UserSockets(ctx context.Context, userID string) ([]SocketInfo, error)
	// Leases returns every live node's last lease renewal.
	Leases(ctx context.Context) (map[string]time.Time, error)
	// Previews returns, for each conversation of ids, up to n of its
	// members, sorted by user id, and who is typing now: the list's
	// glimpse of each row, cheaper than whole rosters. Which n of a larger
	// conversation is up to the engine, the same from call to call.
	Previews(ctx context.Context, ids []string, n int) ([]Preview, error)
}

// Preview is a glimpse of a conversation.
type Preview struct {
	Members []string
	Typing  []string
}

var (
	_ AdminView = (*MemoryEngine)(nil)
	_ AdminView = (*RedisEngine)(nil)
)

// pageOf sorts counts busiest first and cuts the page out.
func pageOf(all []ConversationCount, offset, limit int) []ConversationCount {
	slices.SortFunc(all, func(a, b ConversationCount) int {
		return cmp.Or(cmp.Compare(b.Online, a.Online), strings.Compare(a.ID, b.ID))
	})
	offset = min(max(offset, 0), len(all))
	end := min(offset+max(limit, 0), len(all))
	return slices.Clone(all[offset:end])
}

// ConversationCounts implements AdminView: one pass over the conversations
// under the lock (10,000 conversations take about a millisecond).
func (e *MemoryEngine) ConversationCounts(_ context.Context, prefix string, offset, limit int) (int, []ConversationCount, error) {
	e.m.mu.Lock()
	all := make([]ConversationCount, 0, len(e.m.convs))
	for id, c := range e.m.convs {
		if strings.HasPrefix(id, prefix) && len(c.members) > 0 {
			all = append(all, ConversationCount{ID: id, Online: len(c.members)})
		}
	}
	e.m.mu.Unlock()
	return len(all), pageOf(all, offset, limit), nil
}

// UserSockets implements AdminView.
func (e *MemoryEngine) UserSockets(_ context.Context, userID string) ([]SocketInfo, error) {
	e.m.mu.Lock()
	defer e.m.mu.Unlock()
	u := e.m.users[userID]
	if u == nil {
		return []SocketInfo{}, nil
	}
	out := make([]SocketInfo, 0, len(u.socks))
	for _, sid := range sortedKeys(u.socks) {
		if s := e.m.sockets[sid]; s != nil {
			out = append(out, SocketInfo{ID: sid, Node: s.node, Conversations: sortedKeys(s.convs)})
		}
	}
	return out, nil
}

// Leases implements AdminView.
func (e *MemoryEngine) Leases(context.Context) (map[string]time.Time, error) {
	e.m.mu.Lock()
	defer e.m.mu.Unlock()
	out := make(map[string]time.Time, len(e.m.leases))
	for n, t := range e.m.leases {
		out[n] = t
	}
	return out, nil
}

// Previews implements AdminView.
func (e *MemoryEngine) Previews(_ context.Context, ids []string, n int) ([]Preview, error) {
	now := e.cfg.Now()
	e.m.mu.Lock()
	defer e.m.mu.Unlock()
	out := make([]Preview, len(ids))
	for i, id := range ids {
		out[i] = Preview{Members: []string{}, Typing: []string{}}
		c := e.m.convs[id]
		if c == nil {
			continue
		}
		for user := range c.members {
			out[i].Members = append(out[i].Members, user)
		}
		slices.Sort(out[i].Members)
		out[i].Members = out[i].Members[:min(n, len(out[i].Members))]
		for user, t := range c.typing {
			if t.until.After(now) {
				out[i].Typing = append(out[i].Typing, user)
			}
		}
		slices.Sort(out[i].Typing)
	}
	return out, nil
}
