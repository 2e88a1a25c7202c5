package admin

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/ids"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/timestamp"
)

const (
	maxPage     = 100 // rows per page at most
	defaultPage = 25
	// previewMembers are the members shown beside each conversation of
	// the list (its page has the full roster, paginated).
	previewMembers = 5
	viewTimeout    = 2 * time.Second
)

// apiError is a refused request; its status is handlers.HTTPStatus of its
// code.
type apiError struct {
	code    string
	message string
}

func (e *apiError) Error() string { return e.message }

func badRequest(msg string) *apiError {
	return &apiError{handlers.CodeInvalidArgument, msg}
}

// view computes one JSON answer of the API; the stream sends the same.
type view func(ctx context.Context, q url.Values) (any, error)

func (p *Panel) views() map[string]view {
	return map[string]view{
		"cluster":       p.cluster,
		"conversations": p.conversations,
		"conversation":  p.conversation,
		"user":          p.user,
		"lastseen":      p.lastseen,
		"health":        p.health,
	}
}

func (p *Panel) serveView(v view) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), viewTimeout)
		defer cancel()
		out, err := v(ctx, r.URL.Query())
		if err != nil {
			writeViewError(w, err)
			return
		}
		handlers.WriteJSON(w, http.StatusOK, out)
	}
}

func writeViewError(w http.ResponseWriter, err error) {
	if ae, ok := err.(*apiError); ok {
		handlers.WriteError(w, handlers.HTTPStatus(ae.code), ae.code, ae.message)
		return
	}
	handlers.WriteError(w, handlers.HTTPStatus(handlers.CodeUnavailable), handlers.CodeUnavailable, err.Error())
}

// paging reads page (1-based) and limit (≤ maxPage).
func paging(q url.Values) (page, limit int, err error) {
	page, limit = 1, defaultPage
	if s := q.Get("page"); s != "" {
		if page, err = strconv.Atoi(s); err != nil || page < 1 || page > 1_000_000 {
			return 0, 0, badRequest("page must be a number from 1 to 1000000")
		}
	}
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > maxPage {
			return 0, 0, badRequest("limit must be between 1 and 100")
		}
	}
	return page, limit, nil
}

func ts(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := timestamp.Format(t)
	return &s
}

// NodeView is a node on the cluster page.
type NodeView struct {
	NodeStats
	Self       bool   `json:"self"`
	LeaseAgeMs *int64 `json:"leaseAgeMs"` // null: no lease (dead or gone)
	StatsAgeMs int64  `json:"statsAgeMs"`
}

func (p *Panel) cluster(ctx context.Context, _ url.Values) (any, error) {
	now := time.Now()
	stats, statsErr := p.clusterStats(ctx)
	leases, leaseErr := p.d.View.Leases(ctx)
	nodes := make([]NodeView, 0, len(stats))
	seen := map[string]bool{}
	var sockets int64
	var eps float64
	for _, st := range stats {
		n := NodeView{NodeStats: st, Self: st.Node == p.cfg.NodeID, StatsAgeMs: now.Sub(st.At).Milliseconds()}
		if l, ok := leases[st.Node]; ok {
			age := now.Sub(l).Milliseconds()
			n.LeaseAgeMs = &age
		}
		seen[st.Node] = true
		// A node whose lease is gone (dead, or stopped) is shown with its
		// last figures until they expire, but its sockets are gone: the
		// totals leave it out, as the users and rosters already do.
		if n.Self || n.LeaseAgeMs != nil || leaseErr != nil {
			sockets += st.Sockets
			eps += st.EventsPerSec
		}
		nodes = append(nodes, n)
	}
	// A node with a lease but no stats (publishing failed, or an older
	// version) is shown too, without figures.
	for node, l := range leases {
		if !seen[node] {
			age := now.Sub(l).Milliseconds()
			nodes = append(nodes, NodeView{NodeStats: NodeStats{Node: node, History: []Sample{}}, LeaseAgeMs: &age, StatsAgeMs: -1})
		}
	}
	slices.SortFunc(nodes, func(a, b NodeView) int {
		switch {
		case a.Node < b.Node:
			return -1
		case a.Node > b.Node:
			return 1
		}
		return 0
	})
	out := map[string]any{
		"node": p.cfg.NodeID, "cluster": p.d.Redis != nil, "nodes": nodes,
		"sockets": sockets, "eventsPerSec": eps, "at": ts(now),
	}
	var warnings []string
	if statsErr != nil {
		warnings = append(warnings, "stats: "+statsErr.Error())
	}
	if leaseErr != nil {
		warnings = append(warnings, "leases: "+leaseErr.Error())
	}
	out["warnings"] = warnings
	return out, nil
}

// ConversationRow is a conversation of the list.
type ConversationRow struct {
	ID      string   `json:"id"`
	Online  int      `json:"online"`
	Members []string `json:"members"` // up to previewMembers of them
	Typing  []string `json:"typing"`
}

func (p *Panel) conversations(ctx context.Context, q url.Values) (any, error) {
	page, limit, err := paging(q)
	if err != nil {
		return nil, err
	}
	prefix := q.Get("q")
	if len(prefix) > 256 {
		return nil, badRequest("q is at most 256 characters")
	}
	counts := p.d.View.ConversationCounts
	if p.convs != nil {
		counts = p.convs.page
	}
	total, rows, err := counts(ctx, prefix, (page-1)*limit, limit)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(rows))
	for i, c := range rows {
		ids[i] = c.ID
	}
	previews, err := p.d.View.Previews(ctx, ids, previewMembers)
	if err != nil {
		return nil, err
	}
	out := make([]ConversationRow, len(rows))
	for i, c := range rows {
		out[i] = ConversationRow{ID: c.ID, Online: c.Online, Members: previews[i].Members, Typing: previews[i].Typing}
	}
	return map[string]any{"q": prefix, "page": page, "limit": limit, "total": total, "rows": out}, nil
}

// MemberView is a roster entry with its exact time.
type MemberView struct {
	UserID string  `json:"userId"`
	Status string  `json:"status"`
	Since  *string `json:"since"`
	Typing bool    `json:"typing"`
}

func (p *Panel) conversation(ctx context.Context, q url.Values) (any, error) {
	id := q.Get("id")
	if !ids.Valid(id) {
		return nil, badRequest("id must be a valid conversation id")
	}
	page, limit, err := paging(q)
	if err != nil {
		return nil, err
	}
	r, err := p.d.Engine.Roster(ctx, id)
	if err != nil {
		return nil, err
	}
	typing := map[string]bool{}
	for _, u := range r.Typing {
		typing[u] = true
	}
	from := min((page-1)*limit, len(r.Online))
	to := min(from+limit, len(r.Online))
	members := make([]MemberView, 0, to-from)
	for _, m := range r.Online[from:to] {
		members = append(members, MemberView{UserID: m.UserID, Status: string(m.Status), Since: ts(m.Since), Typing: typing[m.UserID]})
	}
	return map[string]any{"id": id, "online": len(r.Online), "typing": r.Typing, "page": page, "limit": limit, "members": members}, nil
}

// ConnectionView is one of a user's sockets.
type ConnectionView struct {
	ID            string   `json:"id"`
	Node          string   `json:"node"`
	Transport     string   `json:"transport"` // "" when the node did not answer
	Subscriptions int      `json:"subscriptions"`
	Conversations []string `json:"conversations"`
}

func (p *Panel) user(ctx context.Context, q url.Values) (any, error) {
	id := q.Get("id")
	if !ids.Valid(id) {
		return nil, badRequest("id must be a valid user id")
	}
	t, err := p.d.Reader.Exact(ctx, id)
	if err != nil {
		return nil, err
	}
	up, err := p.d.Engine.Users(ctx, []string{id})
	if err != nil {
		return nil, err
	}
	privacy, err := p.d.Store.Privacy(ctx, []string{id})
	if err != nil {
		return nil, err
	}
	setting := privacy[id]
	if setting == "" {
		setting = store.DefaultVisibility
	}
	socks, err := p.d.View.UserSockets(ctx, id)
	if err != nil {
		return nil, err
	}
	local, localErr := p.d.Sockets.ClusterSockets(ctx, id)
	byID := map[string]ConnectionView{}
	for _, s := range socks {
		byID[s.ID] = ConnectionView{ID: s.ID, Node: s.Node, Conversations: append([]string{}, s.Conversations...)}
	}
	for _, l := range local {
		c, ok := byID[l.ID]
		if !ok {
			// connected, not yet (or no longer) in the engine
			c = ConnectionView{ID: l.ID, Node: l.Node, Conversations: []string{}}
		}
		c.Transport, c.Subscriptions = l.Transport, l.Subscriptions
		byID[l.ID] = c
	}
	conns := make([]ConnectionView, 0, len(byID))
	convSet := map[string]bool{}
	subs := 0
	for _, c := range byID {
		conns = append(conns, c)
		subs += c.Subscriptions
		for _, cv := range c.Conversations {
			convSet[cv] = true
		}
	}
	slices.SortFunc(conns, func(a, b ConnectionView) int {
		if a.Node != b.Node {
			if a.Node < b.Node {
				return -1
			}
			return 1
		}
		if a.ID < b.ID {
			return -1
		}
		return 1
	})
	convs := make([]string, 0, len(convSet))
	for c := range convSet {
		convs = append(convs, c)
	}
	slices.Sort(convs)
	var since time.Time
	if len(up) == 1 {
		since = up[0].Since
	}
	out := map[string]any{
		"userId":        id,
		"status":        string(t.Status),
		"since":         ts(since),
		"lastSeen":      ts(t.LastSeen),
		"privacy":       string(setting),
		"connections":   conns,
		"conversations": convs,
		"subscriptions": subs,
	}
	if localErr != nil {
		out["warnings"] = []string{localErr.Error()}
	}
	return out, nil
}

func (p *Panel) flushView() FlushView {
	f := p.d.Pipeline.LastFlush()
	return FlushView{At: ts(f.At), Ms: float64(f.Duration.Microseconds()) / 1000, Rows: f.Rows, Statements: f.Statements, Error: f.Err, Errors: f.Errors}
}

// LastSeenNode is a node's part of the last-seen pipeline.
type LastSeenNode struct {
	Node  string    `json:"node"`
	Self  bool      `json:"self"`
	AgeMs *int64    `json:"lastFlushAgeMs"` // null: no flush yet
	Flush FlushView `json:"flush"`
}

// lastseen: the shared buffer's backlog, this node's flush counters, and
// every node's last flush (published with the node's stats).
func (p *Panel) lastseen(ctx context.Context, _ url.Values) (any, error) {
	now := time.Now()
	f := p.d.Pipeline.LastFlush()
	totals := p.d.Pipeline.Stats()
	out := map[string]any{
		"node":            p.cfg.NodeID,
		"lastFlushAt":     ts(f.At),
		"lastFlushAgeMs":  nil,
		"lastFlushMs":     float64(f.Duration.Microseconds()) / 1000,
		"lastFlushRows":   f.Rows,
		"lastFlushStmts":  f.Statements,
		"lastFlushError":  f.Err,
		"flushErrors":     f.Errors,
		"statementsTotal": totals.Statements,
		"rowsTotal":       totals.Rows,
	}
	if !f.At.IsZero() {
		out["lastFlushAgeMs"] = now.Sub(f.At).Milliseconds()
	}
	if p.d.Buffer != nil {
		st, err := p.d.Buffer.Stats(ctx)
		if err != nil {
			out["bufferError"] = err.Error()
		} else {
			out["dirty"], out["claimed"], out["bufferUsers"] = st.Dirty, st.Claimed, st.Users
		}
	}
	stats, _ := p.clusterStats(ctx)
	nodes := make([]LastSeenNode, 0, len(stats))
	for _, st := range stats {
		n := LastSeenNode{Node: st.Node, Self: st.Node == p.cfg.NodeID, Flush: st.Flush}
		if st.Flush.At != nil {
			if at, err := time.Parse(time.RFC3339Nano, *st.Flush.At); err == nil {
				age := now.Sub(at).Milliseconds()
				n.AgeMs = &age
			}
		}
		nodes = append(nodes, n)
	}
	slices.SortFunc(nodes, func(a, b LastSeenNode) int { return strings.Compare(a.Node, b.Node) })
	out["nodes"] = nodes
	return out, nil
}

func (p *Panel) health(ctx context.Context, _ url.Values) (any, error) {
	type result struct {
		Name  string  `json:"name"`
		OK    bool    `json:"ok"`
		Ms    float64 `json:"ms"`
		Error string  `json:"error,omitempty"`
	}
	out := make([]result, len(p.d.Ready))
	var wg sync.WaitGroup
	for i, c := range p.d.Ready {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := c.Check(ctx)
			out[i] = result{Name: c.Name, OK: err == nil, Ms: float64(time.Since(start).Microseconds()) / 1000}
			if err != nil {
				out[i].Error = err.Error()
			}
		}()
	}
	wg.Wait()
	status := "ok"
	for _, r := range out {
		if !r.OK {
			status = "unavailable"
		}
	}
	return map[string]any{"status": status, "checks": out}, nil
}

// disconnect disconnects a user's sockets on every node. It needs the
// session's CSRF token and a reason, which is logged.
func (p *Panel) disconnect(w http.ResponseWriter, r *http.Request) {
	nonce, _ := p.sessionNonce(r)
	if !sameOrigin(r) {
		handlers.WriteError(w, http.StatusForbidden, "forbidden", "cross-origin request: its Origin is not this host")
		return
	}
	if !tokenMatches(r.Header.Get("X-CSRF-Token"), p.sessions.csrf(nonce)) {
		handlers.WriteError(w, http.StatusForbidden, "forbidden", "missing or wrong X-CSRF-Token")
		return
	}
	var body struct {
		UserID string `json:"userId"`
		Reason string `json:"reason"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8192))
	if err := dec.Decode(&body); err != nil || dec.Decode(&struct{}{}) != io.EOF {
		handlers.WriteError(w, http.StatusBadRequest, handlers.CodeInvalidArgument, "body must be one JSON object {\"userId\": string, \"reason\": string}")
		return
	}
	if !ids.Valid(body.UserID) {
		handlers.WriteError(w, http.StatusBadRequest, handlers.CodeInvalidArgument, "userId must be a valid user id")
		return
	}
	// characters, as the page's field counts them (at most: it counts
	// UTF-16 units); bytes refused a reason the field took
	if body.Reason == "" || utf8.RuneCountInString(body.Reason) > 500 {
		handlers.WriteError(w, http.StatusBadRequest, handlers.CodeInvalidArgument, "reason is required, of at most 500 characters")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), viewTimeout)
	defer cancel()
	socks, _ := p.d.View.UserSockets(ctx, body.UserID)
	kctx, kcancel := context.WithTimeout(r.Context(), viewTimeout) // a time of its own: the count may have used up ctx's
	defer kcancel()
	err := p.d.Sockets.DisconnectUser(kctx, body.UserID)
	p.disconnects.Inc()
	p.log.Warn("admin disconnected a user", "user_id", body.UserID, "reason", body.Reason, "sockets", len(socks), "ip", handlers.ClientIP(r), "confirmed", err == nil)
	if err != nil {
		handlers.WriteError(w, http.StatusServiceUnavailable, handlers.CodeUnavailable,
			"not every node confirmed the disconnect (a node out of reach of Redis may still hold the user's sockets): try again; "+err.Error())
		return
	}
	handlers.WriteJSON(w, http.StatusOK, map[string]any{"userId": body.UserID, "sockets": len(socks)})
}

// stream sends a view every PublishEvery as server-sent events (event
// "update", data: the view's JSON) while the page is open; the view and
// its parameters are those of the JSON route (?view=cluster&…).
func (p *Panel) stream(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v, ok := p.views()[q.Get("view")]
	if !ok {
		handlers.WriteError(w, http.StatusBadRequest, handlers.CodeInvalidArgument, "view must be one of cluster, conversations, conversation, user, lastseen, health")
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		handlers.WriteError(w, http.StatusInternalServerError, "internal", "streaming unsupported")
		return
	}
	select {
	case <-p.ending:
		handlers.WriteError(w, http.StatusServiceUnavailable, handlers.CodeUnavailable, "shutting down")
		return
	default:
	}
	select {
	case p.streams <- struct{}{}:
		defer func() { <-p.streams }()
	default:
		handlers.WriteError(w, http.StatusServiceUnavailable, handlers.CodeUnavailable, "too many live admin pages open")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	t := time.NewTicker(p.cfg.PublishEvery)
	defer t.Stop()
	var last []byte
	for {
		ctx, cancel := context.WithTimeout(r.Context(), viewTimeout)
		out, err := v(ctx, q)
		cancel()
		var b []byte
		event := "update"
		if err == nil {
			if b, err = json.Marshal(out); err != nil {
				p.log.Error("admin view not written", "view", q.Get("view"), "err", err)
			}
		}
		if err != nil {
			event = "problem"
			b, _ = json.Marshal(map[string]string{"message": err.Error()})
		}
		if string(b) != string(last) {
			if _, err := w.Write([]byte("event: " + event + "\ndata: " + string(b) + "\n\n")); err != nil {
				return
			}
			last = b
		} else if _, err := w.Write([]byte(": keep-alive\n\n")); err != nil {
			return
		}
		fl.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-p.ending:
			return
		case <-t.C:
		}
		if _, ok := p.sessionNonce(r); !ok {
			return // the session expired
		}
	}
}
