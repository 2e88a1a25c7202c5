// Package lastseen keeps "last seen 3 minutes ago" right without turning
// connections into database writes, and decides what a viewer may see.
//
// Write path (Pipeline):
//
//	activity ─► Record ─► coarsen (≤ 1 per user per Coarse per node)
//	         ─► pending ─► Buffer (latest time per user, never lower; dirty set)
//	           (DirectActivity, with Redis: pending ─► Flush ─► Buffer.Raise
//	            of the users it holds ─► store.UpsertLastSeen)
//	offline  ─► RecordExact ─► Buffer (exact time, dirty at once)
//	Buffer ─► Flush: claim ≤ FlushBatch dirty users atomically
//	       ─► one store.UpsertLastSeen ─► Ack (or Release on failure)
//
// A flusher that dies between claim and write loses nothing: its claims
// are made dirty again by any node after ClaimTimeout. The Buffer has two
// implementations with one contract and one test suite: Memory (one node)
// and Redis (cluster mode; keys under <prefix>:{lastseen}, Lua in lua/).
//
// Read path (Reader): status from the presence engine; for offline users
// the buffer (one ZMSCORE), then the store for the misses (one query); the
// privacy settings and contacts in one query each, only when needed; then
// Filter, the single implementation of the privacy rules (CONTRACT §3) and
// of the display text.
package lastseen
