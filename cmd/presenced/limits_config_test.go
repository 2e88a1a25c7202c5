package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/presenced/presenced/handlers"
)

func TestEventLimitSettings(t *testing.T) {
	c := mustServeConfig(t, nil)
	want := handlers.EventLimits{
		Typing: handlers.Limit{Rate: 5, Burst: 10}, Join: handlers.Limit{Rate: 20, Burst: 200}, Query: handlers.Limit{Rate: 5, Burst: 10},
		State: handlers.Limit{Rate: 30, Burst: 60}, Heartbeat: handlers.Limit{Rate: 10, Burst: 20}, Other: handlers.Limit{Rate: 20, Burst: 50},
	}
	if c.EventLimits != want {
		t.Errorf("defaults: got %+v, want %+v", c.EventLimits, want)
	}
	c = mustServeConfig(t, []string{"--typing-limit", "1/2s:4", "--query-limit", "0", "--heartbeat-limit", "off", "--join-limit", "30/s"},
		"PRESENCE_STATE_LIMIT", "100/100ms:7", "PRESENCE_EVENT_LIMIT", "3/1m:3")
	l := c.EventLimits
	if l.Typing != (handlers.Limit{Rate: 0.5, Burst: 4}) || l.Join != (handlers.Limit{Rate: 30, Burst: 30}) ||
		l.State != (handlers.Limit{Rate: 1000, Burst: 7}) || l.Other != (handlers.Limit{Rate: 0.05, Burst: 3}) {
		t.Errorf("values: got %+v", l)
	}
	if !l.Query.Unlimited() || !l.Heartbeat.Unlimited() {
		t.Errorf("0 / off: got %v %v, want unlimited", l.Query, l.Heartbeat)
	}
	for _, bad := range []string{"fast", "5", "5/", "0/1s", "-1/1s", "5/0s", "5/1s:", "5/1s:0", "5/1s:x", "5/d"} {
		_, _, err := parseConfig("serve", []string{"--typing-limit", bad}, env(), &bytes.Buffer{}, nil)
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(ce.Setting, "PRESENCE_TYPING_LIMIT") {
			t.Errorf("%q: got %v, want a PRESENCE_TYPING_LIMIT error", bad, err)
		}
	}
	var help bytes.Buffer
	if _, _, err := parseConfig("serve", []string{"--help"}, env(), &help, nil); !errors.Is(err, errUsage) {
		t.Fatal(err)
	}
	for _, f := range []string{"--typing-limit", "--join-limit", "--query-limit", "--state-limit", "--heartbeat-limit", "--event-limit"} {
		if !strings.Contains(help.String(), f) {
			t.Errorf("--help does not list %s", f)
		}
	}
}

func TestMaxSocketsPerUserSetting(t *testing.T) {
	c, _, err := parseConfig("serve", nil, env(), &bytes.Buffer{}, nil)
	if err != nil || c.MaxSocketsPerUser != 20 || zeroOff(c.MaxSocketsPerUser) != 20 {
		t.Fatalf("default: %v %d", err, c.MaxSocketsPerUser)
	}
	c, _, err = parseConfig("serve", nil, env("PRESENCE_MAX_SOCKETS_PER_USER", "0"), &bytes.Buffer{}, nil)
	if err != nil || c.MaxSocketsPerUser != 0 || zeroOff(0) >= 0 {
		t.Fatalf("0 lifts the cap: %v %d → %d", err, c.MaxSocketsPerUser, zeroOff(0))
	}
	for _, bad := range []string{"-1", "many", "1.5"} {
		_, _, err := parseConfig("serve", []string{"--max-sockets-per-user", bad}, env(), &bytes.Buffer{}, nil)
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(ce.Setting, "PRESENCE_MAX_SOCKETS_PER_USER") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
