// Package clustertest gives the tests that run kvrouter as OS processes
// their binary: built at most once per test binary, on first use, shared
// through the Go build cache by the packages of one go test run, and
// skipped under -short.
package clustertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	once sync.Once
	dir  string // holds this test binary's copy of kvrouter
	path string
	err  error
)

// Main is the body of a TestMain whose tests call Binary: it runs the
// tests and removes the binary Binary built.
func Main(m *testing.M) {
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// Binary returns the path of kvrouter built without -race, even when the
// tests run under it, so that the processes they start run at full speed.
// The first call builds it; the package's TestMain calls Main to remove
// it. Under -short it skips t: the tests that run
// processes are the slow ones, and CI runs them without -short.
func Binary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs kvrouter processes; skipped under -short")
	}
	once.Do(func() {
		if dir, err = os.MkdirTemp("", "kvrouter-test-"); err == nil {
			path, err = build(dir)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// build compiles kvrouter into dir and returns the binary's path.
//
// go run, unlike go build -o, keeps the linked binary in the Go build
// cache under a key made of every build input, so the packages of one go
// test run, and later runs on unchanged sources, link it once; -exec cp
// copies it out instead of running it, so that this test binary's copy
// stays what it was whatever the cache does next. The build lock makes
// packages that build at the same time wait for the first rather than
// compile the same packages side by side: the go command does not share
// work in progress between its processes.
func build(dir string) (string, error) {
	unlock, err := lockBuild()
	if err != nil {
		return "", err
	}
	defer unlock()
	bin := filepath.Join(dir, "kvrouter")
	cmd := exec.Command("go", "run", "-exec", "cp", "kvrouter/cmd/kvrouter", bin)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go run -exec cp kvrouter/cmd/kvrouter: %w\n%s", err, out)
	}
	return bin, nil
}
