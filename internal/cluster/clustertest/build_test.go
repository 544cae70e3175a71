package clustertest

import (
	"os/exec"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

// TestBinary: every call returns the one build, and it is kvrouter.
func TestBinary(t *testing.T) {
	first := Binary(t)
	if again := Binary(t); again != first {
		t.Fatalf("second call returned %s, want the first build %s", again, first)
	}
	out, err := exec.Command(first, "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "kvrouter") {
		t.Fatalf("%s --help: %v\n%s", first, err, out)
	}
}
