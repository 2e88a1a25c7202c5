package handlers

import (
	"context"
	"errors"
	"time"

	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/transport"
)

// The admin panel's view of sockets (issue #13): transport and
// subscriptions live only in the process that holds the socket, so the
// panel asks every node with a server-side emit.

// LocalSocket is what a node knows of one of its sockets.
type LocalSocket struct {
	ID            string `json:"id"`
	Node          string `json:"node"`
	Transport     string `json:"transport"`
	Subscriptions int    `json:"subscriptions"`
}

// adminSocketsEvent asks every node for its sockets of a user.
const adminSocketsEvent = "presenced:admin-sockets"

// LocalSockets returns this node's sockets of userID.
func (h *Sockets) LocalSockets(userID string) []LocalSocket {
	out := []LocalSocket{}
	io := h.rooms.io.Load()
	if io == nil {
		return out
	}
	nsp := io.Sockets()
	for _, sid := range transport.RoomSockets(nsp.Adapter(), UserRoom(userID)) {
		s, ok := nsp.Sockets().Load(sid)
		if !ok {
			continue
		}
		ls := LocalSocket{ID: string(sid), Node: h.cfg.NodeID}
		if conn := s.Conn(); conn != nil && conn.Transport() != nil {
			ls.Transport = conn.Transport().Name()
		}
		if c, ok := s.Data().(*Conn); ok {
			c.mu.Lock()
			ls.Subscriptions = len(c.subs)
			c.mu.Unlock()
		}
		out = append(out, ls)
	}
	return out
}

// ListenAdmin makes this node answer other nodes' admin questions.
func (h *Sockets) ListenAdmin() {
	io := h.rooms.io.Load()
	if io == nil {
		return
	}
	_ = io.Sockets().On(adminSocketsEvent, func(args ...any) {
		if len(args) < 2 {
			return
		}
		user, _ := args[0].(string)
		ack, ok := args[len(args)-1].(socket.Ack)
		if !ok || ack == nil {
			return
		}
		list := []any{}
		for _, s := range h.LocalSockets(user) {
			list = append(list, map[string]any{"id": s.ID, "node": s.Node, "transport": s.Transport, "subscriptions": s.Subscriptions})
		}
		ack([]any{list}, nil)
	})
}

// ClusterSockets returns userID's sockets on every node that answered
// within ctx: this node's, and the others' through the cluster adapter. On
// a single node (no adapter) it is LocalSockets. err reports nodes that did
// not answer; what arrived is returned with it.
func (h *Sockets) ClusterSockets(ctx context.Context, userID string) ([]LocalSocket, error) {
	out := h.LocalSockets(userID)
	io := h.rooms.io.Load()
	if io == nil {
		return out, nil
	}
	type answer struct {
		args []any
		err  error
	}
	res := make(chan answer, 1)
	if err := io.ServerSideEmitWithAck(adminSocketsEvent, userID)(func(args []any, err error) {
		res <- answer{args, err}
	}); err != nil {
		// no cluster adapter: nobody else to ask
		return out, nil
	}
	var a answer
	select {
	case a = <-res:
	case <-ctx.Done():
		return out, errors.New("other nodes did not answer in time")
	case <-time.After(5 * time.Second):
		return out, errors.New("other nodes did not answer in time")
	}
	for _, resp := range a.args {
		list, _ := resp.([]any)
		for _, item := range list {
			m, _ := item.(map[string]any)
			id, _ := m["id"].(string)
			if id == "" {
				continue
			}
			ls := LocalSocket{ID: id}
			ls.Node, _ = m["node"].(string)
			ls.Transport, _ = m["transport"].(string)
			if n, ok := m["subscriptions"].(float64); ok {
				ls.Subscriptions = int(n)
			}
			out = append(out, ls)
		}
	}
	return out, a.err
}

// kickEvent tells the other nodes to disconnect a user's sockets: (userId).
const kickEvent = "presenced:kick"

// DisconnectUser disconnects every socket of userID on every node, as a
// server-side disconnect (the client gets "io server disconnect" and does
// not reconnect by itself), and ends the user's presence at once: no flap
// grace, which is there for a client coming back, and this one will not
// (presence.Connections.DisconnectNow). It returns once every node has
// disconnected its sockets, or when ctx ends.
// Then it asks every node to disconnect the user's sockets the library's
// way too: a node of an earlier release, which knows no kickEvent, does
// that (with the grace); the others have none left by then.
// It returns an error if not every node confirmed the disconnect (a node
// whose link to Redis is down did not get it): unlike the notices of
// changes in the store, a disconnect is not told again later, where it
// would end the user's next connection; the operator is told to try again.
func (h *Sockets) DisconnectUser(ctx context.Context, userID string) error {
	h.kick(userID)
	err := h.tellNodes(ctx, kickEvent, userID)
	if err != nil {
		h.log.Warn("disconnect not confirmed by every node", "user_id", userID, "err", err)
	}
	if io := h.rooms.io.Load(); io != nil {
		io.In(UserRoom(userID)).DisconnectSockets(false)
	}
	return err
}

// kick is this node's part of DisconnectUser.
func (h *Sockets) kick(userID string) {
	for _, c := range h.localConns(userID, "") {
		c.kicked.Store(true) // before the disconnect work can run
		c.sock.Disconnect(false)
	}
}

// onKick is the other side of DisconnectUser.
func (h *Sockets) onKick(raw ...any) {
	args, ack := ackOf(raw)
	if len(args) >= 1 {
		if user, _ := args[0].(string); user != "" {
			h.kick(user)
		}
	}
	if ack != nil {
		ack([]any{true}, nil)
	}
}
