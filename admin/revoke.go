package admin

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// revocations are the sessions logged out before their expiry: a copy of
// the cookie taken before the logout (or one a browser kept) no longer
// opens the panel. Each node keeps the logouts it served until the
// session's expiry. With Redis (a cluster) each logout is written there
// too, as <prefix>:admin:revoked:<nonce> expiring with the session, and a
// node looks there for a session it has not seen logged out at most once
// per revokedRecheck, so a logout through one node holds on the others
// within that time. While Redis does not answer, a node goes by what it
// knows (its own logouts, and those it has read).
type revocations struct {
	mu      sync.Mutex
	gone    map[string]time.Time // nonce → the session's expiry
	checked map[string]time.Time // cluster: nonce → when Redis last said it stands
	now     func() time.Time

	rdb    redis.UniversalClient // nil: one node
	prefix string
}

const (
	revokedRecheck = 2 * time.Second
	revokedTimeout = time.Second // each Redis round trip
	revokedPrune   = 1000        // entries of a map before the expired ones go
)

func newRevocations() *revocations {
	return &revocations{gone: map[string]time.Time{}, checked: map[string]time.Time{}, now: time.Now}
}

func (v *revocations) key(nonce string) string { return v.prefix + ":admin:revoked:" + nonce }

// revoke ends the session nonce, valid until exp. The error is Redis's:
// the logout then holds on this node only.
func (v *revocations) revoke(ctx context.Context, nonce string, exp time.Time) error {
	now := v.now()
	v.mu.Lock()
	v.gone[nonce] = exp
	delete(v.checked, nonce)
	v.prune(now)
	v.mu.Unlock()
	if v.rdb == nil || !exp.After(now) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, revokedTimeout)
	defer cancel()
	return v.rdb.Set(ctx, v.key(nonce), "1", exp.Sub(now)).Err()
}

// revoked reports whether the session nonce (valid until exp) was logged out.
func (v *revocations) revoked(ctx context.Context, nonce string, exp time.Time) bool {
	now := v.now()
	v.mu.Lock()
	_, gone := v.gone[nonce]
	last, seen := v.checked[nonce]
	v.mu.Unlock()
	if gone || v.rdb == nil || (seen && now.Sub(last) < revokedRecheck) {
		return gone
	}
	ctx, cancel := context.WithTimeout(ctx, revokedTimeout)
	defer cancel()
	n, err := v.rdb.Exists(ctx, v.key(nonce)).Result()
	if err != nil {
		return false // Redis is down: what this node knows (nothing)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if n > 0 {
		v.gone[nonce] = exp
		delete(v.checked, nonce)
	} else {
		v.checked[nonce] = now
	}
	v.prune(now)
	return n > 0
}

// prune drops expired sessions' entries once a map is large (mu held).
// Only sessions with a valid MAC get here, so the maps stay as small as
// the logins made.
func (v *revocations) prune(now time.Time) {
	if len(v.gone) > revokedPrune {
		for k, exp := range v.gone {
			if !exp.After(now) {
				delete(v.gone, k)
			}
		}
	}
	if len(v.checked) > revokedPrune {
		for k, at := range v.checked {
			if now.Sub(at) >= revokedRecheck {
				delete(v.checked, k)
			}
		}
	}
}
