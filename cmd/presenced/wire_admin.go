package main

import (
	"github.com/presenced/presenced/admin"
	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/server"
)

// newAdmin builds the admin panel over the wired components.
func newAdmin(cfg Config, a *app, reader *lastseen.Reader, buf lastseen.Buffer, ready []server.Check) (*admin.Panel, error) {
	view, _ := a.engine.(presence.AdminView)
	checks := make([]admin.Check, len(ready))
	for i, c := range ready {
		checks[i] = admin.Check{Name: c.Name, Check: c.Check}
	}
	return admin.New(admin.Config{
		Token:  cfg.AdminToken,
		NodeID: cfg.NodeID,
		Prefix: cfg.RedisPrefix,
	}, admin.Deps{
		Log:      a.log.With("component", "admin"),
		Registry: a.metrics.Registry,
		Engine:   a.engine,
		View:     view,
		Reader:   reader,
		Pipeline: a.pipeline,
		Buffer:   buf,
		Store:    a.store,
		Redis:    a.rdb,
		Ready:    checks,
		Sockets:  a.sockets,
	})
}
