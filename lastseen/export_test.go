package lastseen

import "context"

// PresenceListJSONLen is l.jsonLen, for the fuzz test.
func PresenceListJSONLen(l PresenceList) int { return l.jsonLen() }

// WriteArrivals runs writeArrivals, as Run does every PushInterval.
func (p *Pipeline) WriteArrivals(ctx context.Context) error { return p.writeArrivals(ctx) }
