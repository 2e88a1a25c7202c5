//go:build !race

package admin_test

const raceEnabled = false
