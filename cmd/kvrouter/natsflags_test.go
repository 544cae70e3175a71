package main

import (
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"kvrouter/internal/bus"
)

// TestNATSAuthFlags: the commands that join the bus share the flags, and
// their secrets are read once parsed.
func TestNATSAuthFlags(t *testing.T) {
	for _, c := range []*cobra.Command{newServeCmd(), newAgentCmd()} {
		for _, flag := range []string{"nats-creds", "nats-nkey", "nats-user", "nats-password-file", "nats-token-file",
			"nats-tls-ca", "nats-tls-cert", "nats-tls-key"} {
			if c.Flags().Lookup(flag) == nil {
				t.Errorf("%s has no --%s", c.Name(), flag)
			}
		}
	}
	parse := func(args ...string) *natsAuthFlags {
		f := pflag.NewFlagSet("x", pflag.ContinueOnError)
		n := addNATSAuthFlags(f)
		if err := f.Parse(args); err != nil {
			t.Fatal(err)
		}
		return n
	}
	missing := filepath.Join(t.TempDir(), "token")
	n := parse("--nats-token-file", missing, "--nats-tls-ca", "ca.pem")
	if _, err := n.resolve(false); err == nil {
		t.Fatal("a client took a token file that does not exist")
	}
	if a, err := n.resolve(true); err != nil || a.TokenFile != missing || a.Token != "" || a.TLSCA != "ca.pem" {
		t.Fatalf("embedded: %+v %v", a, err)
	}
	t.Setenv(bus.PasswordEnv, "pw")
	if a, err := parse("--nats-user", "u").resolve(false); err != nil || a.User != "u" || a.Password != "pw" {
		t.Fatalf("user and password: %+v %v", a, err)
	}
}
