package handlers

import (
	"context"

	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/store"
)

// Nodes tell each other of changes that their caches must follow at once,
// through server-side emits of the cluster adapter. The sender waits until
// every other node has acted (each acks after its work), so that what a
// client does after the REST answer, through any node, sees the change.

// privacyEvent tells the other nodes a user's new last-seen setting:
// (userId, setting).
const privacyEvent = "presenced:privacy"

// tellNodes sends a server-side event to the other nodes and waits until
// each has acknowledged it, or until ctx ends. Without a cluster adapter
// (one node) there is nobody to tell.
func (h *Sockets) tellNodes(ctx context.Context, event string, args ...any) error {
	io := h.rooms.io.Load()
	if io == nil {
		return nil
	}
	done := make(chan error, 1)
	ack := socket.Ack(func(_ []any, err error) {
		select {
		case done <- err:
		default:
		}
	})
	if err := io.Sockets().ServerSideEmit(event, append(args, ack)...); err != nil {
		// The in-memory adapter of a single node refuses server-side emits.
		h.log.Debug("not sent to other nodes", "event", event, "err", err)
		return nil
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ackOf splits a server-side event's arguments from its ack, if any.
func ackOf(args []any) ([]any, socket.Ack) {
	if n := len(args); n > 0 {
		if a, ok := args[n-1].(socket.Ack); ok {
			return args[:n-1], a
		}
	}
	return args, nil
}

// PrivacyChanged makes every other node's settings cache learn a user's
// new last-seen setting (this node's REST handler has updated its own).
func (h *Sockets) PrivacyChanged(ctx context.Context, userID string, v store.Visibility) {
	if err := h.tellNodes(ctx, privacyEvent, userID, string(v)); err != nil {
		h.log.Warn("privacy change not confirmed by every node", "user_id", userID, "err", err)
	}
}

// onPrivacy is the other side of PrivacyChanged.
func (h *Sockets) onPrivacy(raw ...any) {
	args, ack := ackOf(raw)
	if len(args) >= 2 {
		user, _ := args[0].(string)
		v, _ := args[1].(string)
		if s := h.rooms.settings; s != nil && user != "" && store.Visibility(v).Valid() {
			s.Set(user, store.Visibility(v))
		}
	}
	if ack != nil {
		ack([]any{true}, nil)
	}
}
