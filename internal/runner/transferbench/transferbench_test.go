package transferbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// The test binary doubles as the source process, so Run is tested across
// two real processes as the command uses it.
const childEnv = "TRANSFERBENCH_TEST_SOURCE"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		var cfg Config
		fmt.Sscan(os.Getenv(childEnv), &cfg.BlockBytes, &cfg.Blocks)
		if err := Serve(context.Background(), cfg, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestRunAcrossProcesses(t *testing.T) {
	cfg := Config{BlockBytes: 64 << 10, Blocks: 16, Rounds: 3}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d", childEnv, cfg.BlockBytes, cfg.Blocks))
	cmd.Stderr = os.Stderr
	res, err := Run(context.Background(), cfg, cmd)
	if err != nil {
		t.Fatal(err)
	}
	if res.PullGbps <= 0 || res.TCPCopyGbps <= 0 || res.Ratio != res.PullGbps/res.TCPCopyGbps {
		t.Fatalf("result %+v", res)
	}
	if res.BlockBytes != cfg.BlockBytes || res.Blocks != cfg.Blocks || res.Rounds != cfg.Rounds {
		t.Fatalf("result %+v does not echo the config", res)
	}
}

func TestRunSourceFails(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// A block size the source refuses: it exits without an address line.
	cmd.Env = append(os.Environ(), childEnv+"=-1 4")
	_, err := Run(context.Background(), Config{BlockBytes: 1024, Blocks: 4, Rounds: 1}, cmd)
	if err == nil {
		t.Fatal("run against a failed source succeeded")
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{{BlockBytes: -1}, {Blocks: -1}, {Rounds: 5000}, {BlockBytes: 1 << 30, Blocks: 100}} {
		if _, err := cfg.withDefaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", cfg, err)
		}
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tt := range tests {
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
