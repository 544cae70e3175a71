package runner

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestSecretFrom(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "s3cret\n")
	empty := write("empty", " \n")
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	tests := []struct {
		name       string
		file       string
		env        map[string]string
		want       string
		wantSource string
		wantErr    bool
	}{
		{"file, newline trimmed", good, nil, "s3cret", SecretFromFile, false},
		{"file wins over env", good, map[string]string{SecretEnv: "other"}, "s3cret", SecretFromFile, false},
		{"env", "", map[string]string{SecretEnv: " envsecret "}, "envsecret", SecretFromEnv, false},
		{"none", "", nil, "", SecretNone, false},
		{"empty file", empty, nil, "", "", true},
		{"missing file", filepath.Join(dir, "absent"), nil, "", "", true},
		{"empty env", "", map[string]string{SecretEnv: ""}, "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, src, err := SecretFrom(tt.file, env(tt.env))
			if tt.wantErr {
				if !errors.Is(err, ErrConfig) {
					t.Fatalf("err = %v, want ErrConfig", err)
				}
				return
			}
			if err != nil || string(got) != tt.want || src != tt.wantSource {
				t.Fatalf("SecretFrom = %q, %q, %v; want %q, %q", got, src, err, tt.want, tt.wantSource)
			}
		})
	}
}

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.0.0.2": true, "::1": true, "localhost": true,
		"": false, "0.0.0.0": false, "::": false, "10.0.0.7": false, "example.com": false,
	} {
		if got := LoopbackHost(host); got != want {
			t.Errorf("LoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}
