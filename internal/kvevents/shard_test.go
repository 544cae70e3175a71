package kvevents

import "testing"

func TestRunnerShardTopic(t *testing.T) {
	for _, tc := range []struct {
		base string
		tp   int
	}{{"", 0}, {"kv@h:1@m", 3}, {"a|kvcr-tpx", 1}} {
		got := RunnerShardTopic(tc.base, tc.tp)
		b, tp, ok := ParseRunnerShardTopic(got)
		if !ok || b != tc.base || tp != tc.tp {
			t.Errorf("%q: parsed (%q, %d, %v)", got, b, tp, ok)
		}
	}
	for _, plain := range []string{"", "kv@h:1@m", "x|kvcr-tp", "x|kvcr-tp-1", "x|kvcr-tpq"} {
		if _, _, ok := ParseRunnerShardTopic(plain); ok {
			t.Errorf("%q parsed as a shard topic", plain)
		}
	}
}
