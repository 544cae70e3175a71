package index

import (
	"runtime"
	"testing"

	"kvrouter/internal/kvevents"
)

// lowerMapAt maps tables from size bytes on until the returned func runs.
func lowerMapAt(t *testing.T, size int) func() {
	t.Helper()
	old := mapAt
	mapAt = size
	return func() { mapAt = old }
}

func TestMakeTable(t *testing.T) {
	small, m := makeTable[node](16)
	if m != nil || len(small) != 16 {
		t.Fatalf("16 nodes: mapping %v, len %d; want the heap", m, len(small))
	}
	n := mapAt / 32 * 2
	big, m := makeTable[node](n)
	if len(big) != n {
		t.Fatalf("len %d, want %d", len(big), n)
	}
	if runtime.GOOS == "linux" {
		if m == nil {
			t.Fatalf("a %d-byte table is not mapped", n*32)
		}
		if got := m.mappedBytes(); got != int64(n*32) {
			t.Fatalf("mappedBytes %d, want %d", got, n*32)
		}
	}
	for i := range big {
		if big[i] != (node{}) {
			t.Fatalf("node %d not zero: %+v", i, big[i])
		}
		big[i].seq = uint64(i) + 1
	}
	if big[n-1].seq != uint64(n) {
		t.Fatal("last node not written")
	}
	m.free()
	m.free() // a mapping freed twice, or nil, is a no-op
	var none *mapping
	none.free()
}

// A shard whose table grows past mapAt moves it off the heap, frees the old
// mapping at each later grow, and Stats counts exactly what it maps.
func TestStatsMapped(t *testing.T) {
	defer lowerMapAt(t, 4<<10)()
	ix, err := New(Config{BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	src := WorkerRank("w", 0)
	for k := range 20 {
		var local, engine []uint64
		for i := range 500 {
			local = append(local, uint64(k*1000+i+1))
			engine = append(engine, uint64(k*1000+i+1))
		}
		if err := ix.Apply(src, Op{Kind: OpStore, Tier: kvevents.TierDevice, Hashes: engine, Local: local}); err != nil {
			t.Fatal(err)
		}
	}
	var want int64
	for i := range ix.shards {
		if sh := &ix.shards[i]; len(sh.dir)*16 >= mapAt {
			want += int64(len(sh.dir) * 16)
		}
	}
	for _, c := range ix.nodes.chunks {
		if len(c.nodes)*32 >= mapAt {
			want += int64(len(c.nodes) * 32)
		}
	}
	st := ix.Stats()
	if runtime.GOOS == "linux" && (st.Mapped != want || want == 0) {
		t.Fatalf("Mapped %d, want %d (tables of 4 KiB and more)", st.Mapped, want)
	}
	if got := ix.Match([]uint64{19001, 19002}, MatchOptions{}); len(got) != 1 || got[0].Depth != 2 {
		t.Fatalf("match after grows: %+v", got)
	}
}
