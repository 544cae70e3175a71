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
	"strings"
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
	if err := statSources(); err != nil {
		return "", err
	}
	return bin, nil
}

// statSources stats the module's files kvrouter is built from. The test
// binaries that run kvrouter do not import most of it (cmd/kvrouter,
// gateway, agent...), so go test would replay their cached results after
// those changed; it rechecks the files a test looked at, and these now
// count. What lies outside the module changes only with go.mod or go.sum.
func statSources() error {
	const files = `{{if .Module}}{{if .Module.Main}}{{.Module.GoMod}}
{{range .GoFiles}}{{$.Dir}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$.Dir}}/{{.}}
{{end}}{{end}}{{end}}`
	out, err := exec.Command("go", "list", "-deps", "-f", files, "kvrouter/cmd/kvrouter").Output()
	if err != nil {
		return fmt.Errorf("go list -deps kvrouter/cmd/kvrouter: %w", err)
	}
	seen := map[string]bool{}
	for _, name := range strings.Split(string(out), "\n") {
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		if _, err := os.Stat(name); err != nil {
			return fmt.Errorf("source of kvrouter: %w", err)
		}
		if strings.HasSuffix(name, ".mod") {
			_, _ = os.Stat(strings.TrimSuffix(name, ".mod") + ".sum")
		}
	}
	return nil
}
