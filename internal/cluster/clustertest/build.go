package clustertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Build compiles kvrouter into dir and returns the binary's path. Tests
// that run a cluster build it once, without -race even when they run under
// it, so that the cluster's processes start and run at full speed.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "kvrouter")
	cmd := exec.Command("go", "build", "-o", bin, "kvrouter/cmd/kvrouter")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build kvrouter: %w\n%s", err, out)
	}
	return bin, nil
}

// RunWithBinary is the body of a TestMain whose tests run clusters: it
// builds kvrouter once into a temporary directory, stores its path in
// bin, runs the tests (m is the *testing.M) and removes the binary. It
// returns the exit code for os.Exit.
func RunWithBinary(m interface{ Run() int }, bin *string) int {
	dir, err := os.MkdirTemp("", "kvrouter-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *bin, err = Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
