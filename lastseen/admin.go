package lastseen

import (
	"context"
	"time"
)

// Exact returns a user's status and exact last-seen, unfiltered: what an
// operator sees in the admin panel (CONTRACT §1: exact times go only to the
// user and to operators). LastSeen is zero for a user never seen.
func (r *Reader) Exact(ctx context.Context, userID string) (Target, error) {
	targets := make([]Target, 1)
	if err := r.facts(ctx, []string{userID}, nil, targets); err != nil {
		return Target{}, err
	}
	return targets[0], nil
}

// FlushInfo describes a pipeline's last flush, for the admin panel.
type FlushInfo struct {
	At         time.Time // when it ended; zero before the first
	Duration   time.Duration
	Rows       int64 // users written by it
	Statements int64 // store statements it sent
	Err        string
	Errors     int64 // failed flushes since start
}

// LastFlush returns the last flush's figures.
func (p *Pipeline) LastFlush() FlushInfo {
	p.infoMu.Lock()
	defer p.infoMu.Unlock()
	return p.info
}

// noteFlush records a flush that began at start with the counters before.
func (p *Pipeline) noteFlush(start time.Time, before Stats, err error) {
	after := p.Stats()
	p.infoMu.Lock()
	defer p.infoMu.Unlock()
	p.info.At = time.Now()
	p.info.Duration = p.info.At.Sub(start)
	p.info.Rows = after.Rows - before.Rows
	p.info.Statements = after.Statements - before.Statements
	p.info.Err = ""
	if err != nil {
		p.info.Err = err.Error()
		p.info.Errors++
	}
}
