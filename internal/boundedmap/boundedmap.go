// Package boundedmap keeps the caches' maps within their size: the
// privacy settings (lastseen.Settings), the store's last-seen answers
// (lastseen.Reader) and conversation membership (presence).
package boundedmap

// MakeRoom makes room in m, which holds at most max entries, for adding
// new ones. When they would not fit it drops the expired entries, and if
// that is not enough, arbitrary ones until m with the new entries is at
// most half full (so that a full cache is not trimmed at every insert).
func MakeRoom[K comparable, V any](m map[K]V, max, adding int, expired func(V) bool) {
	if len(m)+adding <= max {
		return
	}
	for k, v := range m {
		if expired(v) {
			delete(m, k)
		}
	}
	if len(m)+adding <= max {
		return
	}
	for k := range m {
		if len(m)+adding <= max/2 {
			return
		}
		delete(m, k)
	}
}
