//go:build race

package admin_test

// raceEnabled: under the race detector the scale test fills a tenth.
const raceEnabled = true
