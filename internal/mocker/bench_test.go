package mocker

import "testing"

// BenchmarkPrefill2000 is the scheduler's own cost of a cold 2,000-token
// prompt at 64-token blocks: filling 31 blocks of KV bytes, writing them
// through to the runner, the output digest and 16 decode steps.
func BenchmarkPrefill2000(b *testing.B) {
	lower := testShards(b, 1, 64)
	s := testSched(8192, 8, 64, lower)
	tokens := make([]uint32, 2000)
	for i := range tokens {
		tokens[i] = uint32(i % 700)
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Evict(nil)
		lower.evict(nil)
		q := seqTokens("a", tokens, 16)
		if err := s.Add(q); err != nil {
			b.Fatal(err)
		}
		for s.Busy() {
			s.Step()
		}
	}
}
