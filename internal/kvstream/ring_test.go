package kvstream

import (
	"slices"
	"testing"
)

func TestRing(t *testing.T) {
	tests := []struct {
		size     int
		first, n uint64 // seqs first..first+n-1 added
		start    uint64
		wantSeqs []uint64
	}{
		{size: 4, first: 0, n: 2, start: 0, wantSeqs: []uint64{0, 1}},
		{size: 4, first: 0, n: 2, start: 1, wantSeqs: []uint64{1}},
		{size: 4, first: 0, n: 10, start: 0, wantSeqs: []uint64{6, 7, 8, 9}},
		{size: 4, first: 0, n: 10, start: 8, wantSeqs: []uint64{8, 9}},
		{size: 4, first: 0, n: 10, start: 10, wantSeqs: nil},
		{size: 4, first: 100, n: 3, start: 0, wantSeqs: []uint64{100, 101, 102}},
		{size: 1, first: 5, n: 3, start: 0, wantSeqs: []uint64{7}},
		{size: 0, first: 5, n: 3, start: 0, wantSeqs: nil},
		{size: 3, first: 0, n: 0, start: 0, wantSeqs: nil},
	}
	for _, tc := range tests {
		r := newRing(tc.size)
		for s := tc.first; s < tc.first+tc.n; s++ {
			r.add(s, []byte{byte(s)})
		}
		var got []uint64
		for _, e := range r.from(nil, tc.start) {
			if len(e.payload) != 1 || e.payload[0] != byte(e.seq) {
				t.Errorf("seq %d carries payload %v", e.seq, e.payload)
			}
			got = append(got, e.seq)
		}
		if !slices.Equal(got, tc.wantSeqs) {
			t.Errorf("size %d, seqs %d+%d, from %d: got %v, want %v", tc.size, tc.first, tc.n, tc.start, got, tc.wantSeqs)
		}
	}
}
