//go:build !linux

package transport

import "errors"

// poller is Linux's epoll (poller_linux.go); elsewhere idle readers block
// in Read, one goroutine per connection.
type poller struct{}

func sharedPoller() *poller            { return nil }
func (*poller) arm(*wsTransport) error { return errNoPoller }
func (*poller) forget(*wsTransport)    {}

var errNoPoller = errors.New("transport: no poller on this system")

// PolledConnections is 0, 0: there is no poller on this system.
func PolledConnections() (n, parked int) { return 0, 0 }
