// Package redisfollow tells a Pub/Sub subscriber of a Sentinel-managed
// Redis that the master moved.
//
// When Sentinel announces a new master, go-redis's failover client drops
// its command connections to the old one, but not its Pub/Sub
// connections: those stay on the demoted master, which answers PINGs and
// keeps the subscriptions while everyone publishes to the new master, and
// they get nothing until the demoted master has become a replica and
// caught up (10-11 s after SENTINEL FAILOVER, measured). A Follower
// watches the client's dials: once a command connection reaches another
// server than the subscriber's last connection, the subscriber should
// subscribe again (through the client, which dials the new master).
package redisfollow

import (
	"context"
	"net"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Follower watches a failover client's dials for one subscriber.
type Follower struct {
	key    *byte // marks the subscriber's contexts (a key of its own)
	notify func()
	at     atomic.Pointer[string] // the server the subscriber's last connection reached
	moved  atomic.Bool
}

// failoverAddr is the address go-redis gives a failover client's options.
const failoverAddr = "FailoverClient"

// New returns a Follower of client if it is a failover client (Sentinel),
// else nil (every method of a nil Follower is a no-op). notify is called,
// from a dial, when the master moved; it must not block. The Follower's
// hook stays on the client for good (go-redis removes none): make one per
// subscriber, not per connection.
func New(client redis.UniversalClient, notify func()) *Follower {
	c, ok := client.(*redis.Client)
	if !ok || c.Options().Addr != failoverAddr {
		return nil
	}
	f := &Follower{key: new(byte), notify: notify}
	c.AddHook(hook{f})
	return f
}

// Context marks ctx as the subscriber's: connections dialed under it are
// its (their server is the one to compare the command dials with).
func (f *Follower) Context(ctx context.Context) context.Context {
	if f == nil {
		return ctx
	}
	return context.WithValue(ctx, f.key, true)
}

// Moved reports, once, that the master moved since the last call.
func (f *Follower) Moved() bool {
	return f != nil && f.moved.Swap(false)
}

type hook struct{ f *Follower }

func (h hook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil || conn == nil {
			return conn, err
		}
		remote := conn.RemoteAddr().String()
		if ctx.Value(h.f.key) != nil {
			h.f.at.Store(&remote)
		} else if at := h.f.at.Load(); at != nil && *at != remote && h.f.moved.CompareAndSwap(false, true) {
			h.f.notify()
		}
		return conn, err
	}
}

func (hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
