// This file holds the build lock where flock(2) exists.

//go:build unix

package clustertest

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockBuild takes a lock, shared by every test process on the machine,
// that is held while kvrouter is built, and returns its release. The
// kernel drops it if the process dies.
func lockBuild() (unlock func(), err error) {
	name := filepath.Join(os.TempDir(), "kvrouter-test-build.lock")
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, fmt.Errorf("build lock: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("build lock %s: %w", name, err)
	}
	return func() { f.Close() }, nil
}
