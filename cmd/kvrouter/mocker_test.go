package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kvrouter/internal/runner"
)

// TestMockerRunnerSecret: the runner secret comes from a file or the
// environment; runners bound beyond loopback refuse to start without one,
// naming where to put it.
func TestMockerRunnerSecret(t *testing.T) {
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("sources", func(t *testing.T) {
		tests := []struct {
			name, env, file, arg string
			want                 string
			wantErr              string
		}{
			{name: "file", file: file, want: "from-file"},
			{name: "env", env: "from-env", want: "from-env"},
			{name: "file over env", env: "from-env", file: file, want: "from-file"},
			{name: "deprecated flag", arg: "from-argv", want: "from-argv"},
			{name: "none", want: ""},
			{name: "both flags", file: file, arg: "x", wantErr: "--runner-secret-file"},
			{name: "missing file", file: file + ".absent", wantErr: "--runner-secret-file"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if tt.env != "" {
					t.Setenv(runner.SecretEnv, tt.env)
				} else {
					// Unset for the subtest, whatever the caller's environment.
					t.Setenv(runner.SecretEnv, "")
					os.Unsetenv(runner.SecretEnv)
				}
				got, err := runnerSecret(tt.file, tt.arg)
				if tt.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
						t.Fatalf("err = %v, want one naming %s", err, tt.wantErr)
					}
					return
				}
				if err != nil || got != tt.want {
					t.Fatalf("runnerSecret = %q, %v; want %q", got, err, tt.want)
				}
			})
		}
	})
	t.Run("required beyond loopback", func(t *testing.T) {
		t.Setenv(runner.SecretEnv, "")
		os.Unsetenv(runner.SecretEnv)
		cmd := newMockerCmd()
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs([]string{"--listen", "127.0.0.1:0", "--advertise-host", "10.0.0.7"})
		err := cmd.Execute()
		if err == nil {
			t.Fatal("started")
		}
		for _, w := range []string{"--runner-secret-file", runner.SecretEnv, "--runner-insecure"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q lacks %q", err, w)
			}
		}
	})
}
