package adapter

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// In sharded mode on a Redis Cluster a publish picks no lane itself: a
// router does, and waits for the slot map if there is none yet. A cluster
// that accepts connections and never answers held each publish up in the
// caller for the read timeout (5 s) in the first version of the lanes
// (a review, 2026-12-07); the message now fails, unavailable, once the
// router has waited the publish timeout.
func TestPublishNeverWaitsForTheSlotMap(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var held []net.Conn
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // accepted, never answered
			mu.Unlock()
		}
	}()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{ln.Addr().String()}, ContextTimeoutEnabled: true})
	defer cc.Close()
	cfg, err := Config{Sharded: true, PublishTimeout: 200 * time.Millisecond}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := newPublisher(ctx, cc, cfg)
	done := make(chan error, 1)
	start := time.Now()
	p.publish(outMsg{channel: "x", payload: []byte("p"), sharded: true, done: func(err error) { done <- err }})
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("publish held the caller up %v", d)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrRedisUnavailable) {
			t.Errorf("the message failed with %v, want ErrRedisUnavailable", err)
		}
	case <-time.After(3 * time.Second):
		t.Error("the message neither failed nor went out in 3 s")
	}
	cancel()
	p.wait()
}
