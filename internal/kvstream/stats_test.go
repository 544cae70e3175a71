package kvstream

import (
	"reflect"
	"testing"

	"kvrouter/internal/kvevents"
)

// A payload the decoder refuses must reach it (to be reported as such)
// rather than cut the stream at the transport.
func TestDefaultMaxMessageSizeFitsDecoder(t *testing.T) {
	if DefaultMaxMessageSize < kvevents.DefaultMaxPayload+1<<16 {
		t.Fatalf("DefaultMaxMessageSize %d leaves no room for a %d-byte payload and its topic", DefaultMaxMessageSize, kvevents.DefaultMaxPayload)
	}
}

// TestStatsAll: every counter is exported under one distinct name, with
// its value (the agent's metrics list them all).
func TestStatsAll(t *testing.T) {
	var st Stats
	v := reflect.ValueOf(&st).Elem()
	for i := range v.NumField() {
		v.Field(i).SetUint(uint64(100 + i))
	}
	seen := map[string]bool{}
	values := map[uint64]bool{}
	for name, val := range st.All() {
		if seen[name] {
			t.Fatalf("counter %q twice", name)
		}
		seen[name], values[val] = true, true
	}
	if len(seen) != v.NumField() || len(values) != v.NumField() {
		t.Fatalf("All yields %d names and %d distinct values for %d fields", len(seen), len(values), v.NumField())
	}
}
