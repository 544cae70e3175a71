// This file holds the NATS credential and TLS flags of the commands that join the bus.

package main

import (
	"os"

	"github.com/spf13/pflag"

	"kvrouter/internal/bus"
)

// natsAuthFlags are the NATS credential and TLS flags of every command that
// joins the bus.
type natsAuthFlags struct {
	auth         bus.Auth
	passwordFile string
}

func addNATSAuthFlags(f *pflag.FlagSet) *natsAuthFlags {
	n := &natsAuthFlags{}
	a := &n.auth
	f.StringVar(&a.CredsFile, "nats-creds", "", "NATS .creds file (user JWT and nkey seed) to present to an external NATS")
	f.StringVar(&a.NKeySeedFile, "nats-nkey", "", "file holding a NATS user nkey seed (SU...) to present to an external NATS")
	f.StringVar(&a.User, "nats-user", "", "NATS user; its password from --nats-password-file or "+bus.PasswordEnv)
	f.StringVar(&n.passwordFile, "nats-password-file", "", "file holding the --nats-user password (else "+bus.PasswordEnv+")")
	f.StringVar(&a.TokenFile, "nats-token-file", "", "file holding the NATS token (else "+bus.TokenEnv+"); an embedded server listening beyond loopback "+
		"without a credential writes the token it generates there (default kvrouter/nats-token in the user's configuration directory, e.g. ~/.config)")
	f.StringVar(&a.TLSCA, "nats-tls-ca", "", "CA certificate (PEM) that signed the NATS server's certificate; for an embedded server, its clients' (they must present one)")
	f.StringVar(&a.TLSCert, "nats-tls-cert", "", "certificate (PEM) presented to NATS; for an embedded server, its own (it then speaks TLS)")
	f.StringVar(&a.TLSKey, "nats-tls-key", "", "private key (PEM) of --nats-tls-cert")
	return n
}

// resolve reads the secrets the flags or the environment hold; embedded
// says the command starts its own server.
func (n *natsAuthFlags) resolve(embedded bool) (bus.Auth, error) {
	a := n.auth
	err := a.ReadSecrets(n.passwordFile, embedded, os.LookupEnv)
	return a, err
}
