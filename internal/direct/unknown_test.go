package direct

import (
	"fmt"
	"testing"
	"time"
)

// TestUnknownTopics: a flood of topics naming no worker gets a few
// warnings per window, the count of the others in the next one, and the
// topics remembered stay bounded and expire.
func TestUnknownTopics(t *testing.T) {
	var u unknownTopics
	now := time.Unix(1_700_000_000, 0)
	warnings := 0
	for i := range 20000 {
		at := now.Add(time.Duration(i) * 150 * time.Microsecond) // 20,000 in 3 s
		if warn, _ := u.note(fmt.Sprint("kv@10.9.9.9:", i, "@m"), at); warn {
			warnings++
		}
	}
	if warnings != unknownWarnBurst {
		t.Fatalf("%d warnings for 20,000 topics in 3 s, want %d", warnings, unknownWarnBurst)
	}
	if u.len() != maxUnknownTopics {
		t.Fatalf("%d topics remembered, want the bound %d", u.len(), maxUnknownTopics)
	}
	// A topic warned about is not warned about again within the TTL.
	later := now.Add(unknownWarnWindow)
	if warn, _ := u.note("kv@10.9.9.9:0@m", later); warn {
		t.Fatal("warned twice about one topic")
	}
	warn, unlogged := u.note("kv@10.9.9.9:new@m", later)
	if !warn || unlogged != 20000-unknownWarnBurst {
		t.Fatalf("next window: warn %v, unlogged %d; want true, %d", warn, unlogged, 20000-unknownWarnBurst)
	}
	// After the TTL everything expires.
	u.note("kv@10.9.9.9:last@m", now.Add(unknownTopicTTL+time.Minute))
	if u.len() != 1 {
		t.Fatalf("%d topics remembered after the TTL, want 1", u.len())
	}
}
