package store

// PoolConns is the number of connections p's pool holds (tests).
func PoolConns(p *Postgres) int32 { return p.pool.Stat().TotalConns() }
