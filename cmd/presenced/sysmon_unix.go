//go:build unix

package main

import (
	"os"
	"syscall"
)

// execSelf executes this program again with env; it returns only on a
// failure.
func execSelf(env []string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return syscall.Exec(exe, os.Args, env)
}
