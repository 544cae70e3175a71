package main

import (
	"bytes"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"

	"kvrouter/internal/index"
	"kvrouter/internal/sysmem"
)

// TestServeRefusesBadFlags: a configuration that cannot start fails before
// serving, with an error naming the flag to fix.
func TestServeRefusesBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"--worker", "url=ftp://h:1"}, []string{"--worker", "url"}},
		{[]string{"--worker", "url=http://h:1,events=tcp://*:5557"}, []string{"--worker", "events=tcp://*:5557", "dials"}},
		{[]string{"--worker", "url=http://h:1", "--worker", "url=http://h:1"}, []string{"--worker id", "h:1", "id="}},
		{[]string{"--worker", "url=http://h:1,tp=2"}, []string{"--worker", "tp=2", "engine=sglang"}},
		{[]string{"--hint-policy", "always"}, []string{"--hint-policy", "always"}},
		{[]string{"--hint-policy", "min-blocks", "--hint-min-blocks", "0"}, []string{"--hint-min-blocks"}},
		{[]string{"--hint-bandwidth-gbps", "0"}, []string{"--hint-bandwidth-gbps"}},
		{[]string{"--temperature", "-1"}, []string{"--temperature"}},
		{[]string{"--approx-ttl", "0s"}, []string{"--approx-ttl"}},
		{[]string{"--runner-probe", "-1s"}, []string{"--runner-probe"}},
		{[]string{"--runner-probe", "2s", "--owner-ttl", "1s"}, []string{"--owner-ttl", "--runner-probe"}},
		{[]string{"--upstream-idle-timeout", "0s"}, []string{"--upstream-idle-timeout", "keep-alive"}},
		{[]string{"--tokenizer", "demo", "--chat-template", "/nonexistent/t.tmpl"}, []string{"--chat-template", "chatml"}},
		{[]string{"--chat-template", "chatml"}, []string{"--chat-template", "--tokenizer PATH"}},
		{[]string{"--tokenizer", "default"}, []string{"--tokenizer", "demo"}},
		{[]string{"--tokenizer-check-interval", "-1s"}, []string{"--tokenizer-check-interval"}},
		{[]string{"--tokenizer", "/nonexistent/tokenizer.json"}, []string{"--tokenizer", "/nonexistent/tokenizer.json"}},
		{[]string{"--nats-listen", "nowhere"}, []string{"--nats-listen"}},
		{[]string{"--log-level", "loud"}, []string{"--log-level"}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := newServeCmd()
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			cmd.SetArgs(append([]string{"--listen", "127.0.0.1:0"}, tc.args...))
			err := cmd.Execute()
			if err == nil {
				t.Fatal("started")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestServeHelp: every flag is explained.
func TestServeHelp(t *testing.T) {
	cmd := newServeCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"listen", "nats", "nats-listen", "discovery-bucket", "lease", "worker", "events-bind", "tokenizer",
		"tokenize-cache", "chat-template", "tokenizer-config", "tokenizer-check-interval", "temperature", "overlap-credit", "host-credit", "disk-credit",
		"prefill-load-scale", "request-weight", "hint-policy", "hint-min-blocks", "hint-margin", "hint-bandwidth-gbps", "hint-setup-ms",
		"hint-prefill-tokens-per-s", "kv-bytes-per-token", "approx-ttl", "detached-owner-ttl", "runner-probe", "owner-ttl", "engine-metrics-interval",
		"allow-target-override", "max-blocks", "replica", "log-level", "body-timeout", "max-body-memory", "admin-listen", "peer-allow",
		"nats-creds", "nats-nkey", "nats-user", "nats-password-file", "nats-token-file", "nats-tls-ca", "nats-tls-cert", "nats-tls-key"} {
		if !strings.Contains(out.String(), "--"+flag+" ") {
			t.Errorf("--help does not explain --%s", flag)
		}
	}
	for _, key := range []string{"url=", "events=", "replay=", "block_size=", "dp=", "tp=", "type=", "id=", "model=", "engine=", "hint=", "control="} {
		if !strings.Contains(out.String(), key) {
			t.Errorf("--help does not explain the --worker key %s", key)
		}
	}
}

func TestApplyGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "")
	if err := applyGC(250); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetGCPercent(100); got != 250 {
		t.Fatalf("GC percent %d, want 250", got)
	}
	if err := applyGC(0); err == nil {
		t.Fatal("--gc-percent 0 taken")
	}
	t.Setenv("GOGC", "50")
	debug.SetGCPercent(50)
	if err := applyGC(400); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetGCPercent(100); got != 50 {
		t.Fatalf("GOGC=50 overridden: %d", got)
	}
}

// TestIndexBudget: --index-memory as given, negative unbounded, 0 derived
// from the machine (on Linux, where /proc/meminfo tells it).
func TestIndexBudget(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	if got := indexBudget(1<<30, log); got != 1<<30 {
		t.Errorf("explicit: %d", got)
	}
	if got := indexBudget(-1, log); got != 0 {
		t.Errorf("negative: %d, want 0 (unbounded)", got)
	}
	avail, err := sysmem.Limit()
	if err != nil {
		t.Skipf("machine memory unknown here: %v", err)
	}
	gc := debug.SetGCPercent(100)
	debug.SetGCPercent(gc)
	if got, want := indexBudget(0, log), index.DefaultMaxBytes(avail, gc); got != want || got <= 0 {
		t.Errorf("derived: %d, want %d", got, want)
	}
}
