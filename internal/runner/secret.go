// This file holds where a runner's shared secret comes from: a file or the environment, never argv.

package runner

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
)

// SecretEnv is the environment variable that carries the runner's shared
// secret when no secret file is given.
const SecretEnv = "KVROUTER_RUNNER_SECRET"

// Secret sources, as SecretFrom reports them.
const (
	SecretFromFile = "file"
	SecretFromEnv  = "env"
	SecretNone     = ""
)

// ErrNoSecret: a runner serves peers beyond loopback without a shared secret
// and without the explicit insecure opt-out.
var ErrNoSecret = errors.New("runner listens beyond loopback without a shared secret")

// SecretFrom reads the runner's shared secret from file when it is set,
// else from the SecretEnv variable (lookup is os.LookupEnv at the edge).
// Surrounding whitespace, such as the newline an editor or echo leaves, is
// not part of the secret. It reports where the secret came from, SecretNone
// when neither is set. A file that is set but unreadable or empty is an
// error: a typo must not silently turn authentication off.
func SecretFrom(file string, lookup func(string) (string, bool)) (secret []byte, source string, err error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, "", fmt.Errorf("%w: secret file: %w", ErrConfig, err)
		}
		if b = bytes.TrimSpace(b); len(b) == 0 {
			return nil, "", fmt.Errorf("%w: secret file %s is empty", ErrConfig, file)
		}
		return b, SecretFromFile, nil
	}
	if v, ok := lookup(SecretEnv); ok {
		b := bytes.TrimSpace([]byte(v))
		if len(b) == 0 {
			return nil, "", fmt.Errorf("%w: %s is set but empty; unset it or give a secret", ErrConfig, SecretEnv)
		}
		return b, SecretFromEnv, nil
	}
	return nil, SecretNone, nil
}

// LoopbackHost reports whether a listener bound to host is reachable from
// this machine only: a loopback address or "localhost". The empty host (every
// interface) and any other name are not.
func LoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
