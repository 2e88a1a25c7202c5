//go:build !unix

package main

import "errors"

// execSelf cannot replace the process here.
func execSelf([]string) error {
	return errors.New("re-execution is not supported on this system")
}
