package bus

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// roundTrip checks that b can publish and receive.
func roundTrip(t *testing.T, b *Bus) {
	t.Helper()
	sub, err := b.Conn.SubscribeSync("t")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Conn.Publish("t", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, o Options) (*Bus, error) {
	t.Helper()
	o.Logger, o.ConnectTimeout = quiet(), 2*time.Second
	b, err := Open(context.Background(), o)
	if err == nil {
		t.Cleanup(b.Close)
	}
	return b, err
}

// loopbackURL is the embedded server's URL on 127.0.0.1.
func loopbackURL(t *testing.T, b *Bus) string {
	t.Helper()
	scheme, hostPort, _ := strings.Cut(b.URL, "://")
	_, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		t.Fatal(err)
	}
	return scheme + "://127.0.0.1:" + port
}

// TestEmbeddedBeyondLoopbackRequiresToken: an embedded server that others
// can reach generates a token at start, writes it where agents read it
// (readable by its owner only), and refuses clients without it.
func TestEmbeddedBeyondLoopbackRequiresToken(t *testing.T) {
	file := filepath.Join(t.TempDir(), "kvrouter", "nats-token")
	b, err := open(t, Options{Host: "0.0.0.0", Auth: Auth{TokenFile: file}})
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, b)
	if b.TokenFile != file {
		t.Fatalf("token file %q, want %q", b.TokenFile, file)
	}
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", st, err)
	}
	url := loopbackURL(t, b)
	if nc, err := nats.Connect(url, nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Fatal("a client without the token was let in")
	}
	if _, err := open(t, Options{URL: url}); !errors.Is(err, ErrAuth) {
		t.Fatalf("without the token: %v, want ErrAuth", err)
	}
	if _, err := open(t, Options{URL: url, Auth: Auth{Token: "guess"}}); !errors.Is(err, ErrAuth) {
		t.Fatalf("with a wrong token: %v, want ErrAuth", err)
	}
	// An agent reads the file.
	agent := Auth{TokenFile: file}
	if err := agent.ReadSecrets("", false, noEnv); err != nil {
		t.Fatal(err)
	}
	c, err := open(t, Options{URL: url, Auth: agent})
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c)
}

// TestEmbeddedLoopbackOpen: on loopback, as before, no credential.
func TestEmbeddedLoopbackOpen(t *testing.T) {
	b, err := open(t, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b.TokenFile != "" {
		t.Fatalf("a loopback server generated %s", b.TokenFile)
	}
	c, err := open(t, Options{URL: b.URL})
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c)
}

// TestUserPassword: the embedded server takes a user and password.
func TestUserPassword(t *testing.T) {
	b, err := open(t, Options{Auth: Auth{User: "kv", Password: "s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open(t, Options{URL: b.URL}); !errors.Is(err, ErrAuth) {
		t.Fatalf("anonymous: %v, want ErrAuth", err)
	}
	if _, err := open(t, Options{URL: b.URL, Auth: Auth{User: "kv", Password: "wrong"}}); !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong password: %v, want ErrAuth", err)
	}
	c, err := open(t, Options{URL: b.URL, Auth: Auth{User: "kv", Password: "s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c)
}

// TestNKey: a client proves an nkey seed to an external server.
func TestNKey(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(), Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server did not start")
	}
	if _, err := open(t, Options{URL: srv.ClientURL()}); !errors.Is(err, ErrAuth) {
		t.Fatalf("without the seed: %v, want ErrAuth", err)
	}
	c, err := open(t, Options{URL: srv.ClientURL(), Auth: Auth{NKeySeedFile: seedFile}})
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c)
	if _, err := open(t, Options{URL: srv.ClientURL(), Auth: Auth{CredsFile: filepath.Join(t.TempDir(), "missing.creds")}}); err == nil ||
		!strings.Contains(err.Error(), "--nats-creds") {
		t.Fatalf("a missing creds file: %v", err)
	}
}

// pki writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, PEM, into dir.
func pki(t *testing.T, dir string) (ca, serverCert, serverKey, clientCert, clientKey string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kvrouter test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, _ := x509.MarshalECPrivateKey(key)
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kb)
	}
	ca = write("ca.pem", "CERTIFICATE", caDER)
	serverCert, serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	clientCert, clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return
}

// TestTLS: an embedded server with a certificate, verifying its clients'
// (mutual TLS); clients trust its CA and present theirs.
func TestTLS(t *testing.T) {
	ca, sc, sk, cc, ck := pki(t, t.TempDir())
	b, err := open(t, Options{Auth: Auth{TLSCA: ca, TLSCert: sc, TLSKey: sk}})
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, b) // its own, in-process client
	url := loopbackURL(t, b)
	for name, tc := range map[string]struct {
		auth Auth
		ok   bool
	}{
		"trusted, with a certificate": {Auth{TLSCA: ca, TLSCert: cc, TLSKey: ck}, true},
		"without a certificate":       {Auth{TLSCA: ca}, false},
		"not trusting the CA":         {Auth{TLSCert: cc, TLSKey: ck}, false},
		"plain":                       {Auth{}, false},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := open(t, Options{URL: url, Auth: tc.auth})
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok %v", err, tc.ok)
			}
			if err == nil {
				roundTrip(t, c)
			}
		})
	}
}

func noEnv(string) (string, bool) { return "", false }

func TestAuthOptions(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		o    Options
		says string
	}{
		"two credentials":                                {Options{URL: "nats://127.0.0.1:1", Auth: Auth{User: "u", Token: "t"}}, "one NATS credential"},
		"a password without a user":                      {Options{URL: "nats://127.0.0.1:1", Auth: Auth{Password: "p"}}, "--nats-user"},
		"a certificate without its key":                  {Options{URL: "nats://127.0.0.1:1", Auth: Auth{TLSCert: "c"}}, "--nats-tls-key"},
		"creds for the embedded server":                  {Options{Auth: Auth{CredsFile: "x.creds"}}, "external NATS"},
		"a CA without the embedded server's certificate": {Options{Auth: Auth{TLSCA: "ca.pem"}}, "--nats-tls-cert"},
		"an unreadable seed":                             {Options{URL: "nats://127.0.0.1:1", Auth: Auth{NKeySeedFile: filepath.Join(dir, "none")}}, "--nats-nkey"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := open(t, tc.o); !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err %v, want ErrAuth saying %q", err, tc.says)
			}
		})
	}
}

func TestReadSecrets(t *testing.T) {
	dir := t.TempDir()
	tokenFile, empty := filepath.Join(dir, "token"), filepath.Join(dir, "empty")
	os.WriteFile(tokenFile, []byte(" tok\n"), 0o600)
	os.WriteFile(empty, nil, 0o600)
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	tests := []struct {
		name         string
		a            Auth
		passwordFile string
		embedded     bool
		env          map[string]string
		token, pass  string
		err          string
	}{
		{name: "token file", a: Auth{TokenFile: tokenFile}, token: "tok"},
		{name: "token from the environment", env: map[string]string{TokenEnv: "e"}, token: "e"},
		{name: "the file wins", a: Auth{TokenFile: tokenFile}, env: map[string]string{TokenEnv: "e"}, token: "tok"},
		{name: "password from the environment", a: Auth{User: "u"}, env: map[string]string{PasswordEnv: "pw"}, pass: "pw"},
		{name: "an empty file", a: Auth{TokenFile: empty}, err: "empty"},
		{name: "an empty variable", env: map[string]string{TokenEnv: " "}, err: TokenEnv},
		{name: "a missing token file", a: Auth{TokenFile: filepath.Join(dir, "none")}, err: "--nats-token-file"},
		{name: "a token file the embedded server will write", a: Auth{TokenFile: filepath.Join(dir, "none")}, embedded: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.a
			err := a.ReadSecrets(tc.passwordFile, tc.embedded, env(tc.env))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || a.Token != tc.token || a.Password != tc.pass {
				t.Fatalf("token %q password %q err %v", a.Token, a.Password, err)
			}
		})
	}
}

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{"127.0.0.1": true, "::1": true, "[::1]": true, "localhost": true, "127.1.2.3": true,
		"0.0.0.0": false, "": false, "10.0.0.1": false, "::": false, "nats.internal": false} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v", host, got)
		}
	}
}

// TestCreds: a client presents a .creds file (user JWT and seed) to a
// server in operator mode.
func TestCreds(t *testing.T) {
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	op := jwt.NewOperatorClaims(opub)
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ajwt, err := jwt.NewAccountClaims(apub).Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	ujwt, err := jwt.NewUserClaims(upub).Encode(akp)
	if err != nil {
		t.Fatal(err)
	}
	useed, _ := ukp.Seed()
	creds, err := jwt.FormatUserConfig(ujwt, useed)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "user.creds")
	if err := os.WriteFile(file, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	if err := resolver.Store(apub, ajwt); err != nil {
		t.Fatal(err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		TrustedOperators: []*jwt.OperatorClaims{op}, AccountResolver: resolver})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server did not start")
	}
	if _, err := open(t, Options{URL: srv.ClientURL()}); !errors.Is(err, ErrAuth) {
		t.Fatalf("without creds: %v, want ErrAuth", err)
	}
	c, err := open(t, Options{URL: srv.ClientURL(), Auth: Auth{CredsFile: file}})
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c)
}
