package workerconfig

import (
	"strings"
	"testing"
)

// Vectors computed by an independent implementation (Python hashlib) of the
// derivation documented on DeriveOwnerID: SHA-256 over uvarint-length-
// prefixed fields, truncated per component.
func TestDeriveOwnerIDVectors(t *testing.T) {
	tests := []struct {
		engine   Engine
		model    string
		bs       int
		endpoint string
		rank     int
		want     string
	}{
		{EngineSGLang, "Qwen/Qwen3-32B", 16, "tcp://10.0.0.7:25000", 0,
			"ccebfb9879087a06793e286074a6e335:e905e5a7ae64f9865e0a19b6bf19bb0d/fc9281477d70e676/9b82da189b0b389bccd901d2513ec94e"},
		// A 200-byte model name needs a two-byte length prefix.
		{EngineVLLM, strings.Repeat("m", 200), 16, "tcp://[fd00::1]:23280", 7,
			"979da2ec980b0ec58c9c4ad6201a35f1:4cdb4ef0883db2db4e2f23fbc385b894/455dda2f06c3782f/267a22b76494257efb6687f7425f6890"},
	}
	for _, tt := range tests {
		got := DeriveOwnerID(tt.engine, tt.model, tt.bs, tt.endpoint, tt.rank)
		if got != tt.want {
			t.Errorf("DeriveOwnerID(%s, %.20s, %d, %s, %d) = %s, want %s", tt.engine, tt.model, tt.bs, tt.endpoint, tt.rank, got, tt.want)
		}
		if !ValidOwnerID(got) {
			t.Errorf("derived owner %s is not canonical", got)
		}
	}
}

// Which inputs move which component: the indexer domain (semantics:scope)
// must not depend on where a runner lives, or owners of one model could
// never be compared; the slot must depend on everything that tells runners
// apart.
func TestDeriveOwnerIDComponents(t *testing.T) {
	base := DeriveOwnerID(EngineSGLang, "m", 16, "tcp://10.0.0.7:25000", 0)
	tests := []struct {
		name       string
		id         string
		sameDomain bool
	}{
		{"other rank", DeriveOwnerID(EngineSGLang, "m", 16, "tcp://10.0.0.7:25000", 1), true},
		{"other port", DeriveOwnerID(EngineSGLang, "m", 16, "tcp://10.0.0.7:25002", 0), true},
		{"other host", DeriveOwnerID(EngineSGLang, "m", 16, "tcp://10.0.0.8:25000", 0), true},
		{"other model", DeriveOwnerID(EngineSGLang, "m2", 16, "tcp://10.0.0.7:25000", 0), false},
		{"other block size", DeriveOwnerID(EngineSGLang, "m", 32, "tcp://10.0.0.7:25000", 0), false},
		{"other engine", DeriveOwnerID(EngineVLLM, "m", 16, "tcp://10.0.0.7:25000", 0), false},
	}
	for _, tt := range tests {
		if tt.id == base {
			t.Errorf("%s: same owner id as the base", tt.name)
		}
		if got := OwnerDomain(tt.id) == OwnerDomain(base); got != tt.sameDomain {
			t.Errorf("%s: same domain = %v, want %v", tt.name, got, tt.sameDomain)
		}
	}
	if again := DeriveOwnerID(EngineSGLang, "m", 16, "tcp://10.0.0.7:25000", 0); again != base {
		t.Errorf("a restart with the same configuration changed the owner: %s then %s", base, again)
	}
	// The dc component groups one host's runners.
	dc := func(id string) string { return strings.Split(id, "/")[1] }
	if dc(tests[0].id) != dc(base) || dc(tests[2].id) == dc(base) {
		t.Errorf("dc should follow the host only: base %s, other rank %s, other host %s", dc(base), dc(tests[0].id), dc(tests[2].id))
	}
}

func TestValidOwnerID(t *testing.T) {
	const ok = "0123456789abcdef0123456789abcdef:fedcba9876543210fedcba9876543210/0011223344556677/00000000000000000000000000000001"
	tests := []struct {
		id   string
		want bool
	}{
		{ok, true},
		{strings.ToUpper(ok), false},
		{ok[:len(ok)-1], false},
		{ok + "0", false},
		{strings.Replace(ok, ":", "/", 1), false},
		{strings.Replace(ok, "/0011", ":0011", 1), false},
		{strings.Replace(ok, "0123", "g123", 1), false},
		{ok + "\n", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := ValidOwnerID(tt.id); got != tt.want {
			t.Errorf("ValidOwnerID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
	if got, want := OwnerDomain(ok), ok[:65]; got != want {
		t.Errorf("OwnerDomain = %q, want %q", got, want)
	}
}
