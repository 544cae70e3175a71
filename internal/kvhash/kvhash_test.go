package kvhash

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"
)

func TestSeedFor(t *testing.T) {
	lora := xxh3.HashStringSeed("lora-a", 0)
	salt := xxh3.HashStringSeed("tenant-a", 1)
	tests := []struct {
		name       string
		lora, salt string
		want       uint64
	}{
		{"neither", "", "", Seed},
		{"lora only", "lora-a", "", Seed + lora},
		{"salt only", "", "tenant-a", Seed + salt},
		{"both", "lora-a", "tenant-a", Seed + lora + salt},
	}
	for _, tc := range tests {
		if got := SeedFor(tc.lora, tc.salt); got != tc.want {
			t.Errorf("%s: SeedFor = %#x, want %#x", tc.name, got, tc.want)
		}
	}
}

func TestLocalHashes(t *testing.T) {
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	le := func(ts ...uint32) []byte {
		var b []byte
		for _, t := range ts {
			b = binary.LittleEndian.AppendUint32(b, t)
		}
		return b
	}
	tests := []struct {
		name      string
		tokens    []uint32
		blockSize int
		seed      uint64
		want      []uint64
	}{
		{"partial tail dropped", tokens, 4, Seed,
			[]uint64{xxh3.HashSeed(le(1, 2, 3, 4), Seed), xxh3.HashSeed(le(5, 6, 7, 8), Seed)}},
		{"block size 1", tokens[:2], 1, Seed,
			[]uint64{xxh3.HashSeed(le(1), Seed), xxh3.HashSeed(le(2), Seed)}},
		{"large block uses heap buffer", append(make([]uint32, 100), 7), 100, Seed,
			[]uint64{xxh3.HashSeed(make([]byte, 400), Seed)}},
		{"too short", tokens[:3], 4, Seed, []uint64{}},
		{"zero block size", tokens, 0, Seed, nil},
		{"negative block size", tokens, -4, Seed, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := LocalHashes(tc.tokens, tc.blockSize, tc.seed)
			if !slices.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Errorf("LocalHashes = %#x, want %#x", got, tc.want)
			}
		})
	}
}

func TestSaltAndLoRAIsolate(t *testing.T) {
	tokens := []uint32{10, 20, 30, 40}
	seeds := map[string]uint64{
		"plain":       SeedFor("", ""),
		"salt a":      SeedFor("", "a"),
		"salt b":      SeedFor("", "b"),
		"lora a":      SeedFor("a", ""),
		"lora+salt a": SeedFor("a", "a"),
	}
	seen := map[uint64]string{}
	for name, seed := range seeds {
		h := LocalHashes(tokens, 4, seed)[0]
		if other, ok := seen[h]; ok {
			t.Errorf("%s and %s hash the same block equal", name, other)
		}
		seen[h] = name
	}
	// A LoRA name and a salt of the same text must not collide either: they
	// are hashed with different seeds.
	if SeedFor("x", "") == SeedFor("", "x") {
		t.Error("lora name and cache salt of the same text give the same seed")
	}
}

func TestAppendLocalHashesAppends(t *testing.T) {
	dst := []uint64{42}
	got := AppendLocalHashes(dst, []uint32{1, 2}, 2, Seed)
	want := append([]uint64{42}, LocalHashes([]uint32{1, 2}, 2, Seed)...)
	if !slices.Equal(got, want) {
		t.Errorf("AppendLocalHashes = %v, want %v", got, want)
	}
}

func TestSequenceHashes(t *testing.T) {
	local := LocalHashes([]uint32{1, 2, 3, 4, 5, 6}, 2, Seed)
	seq := SequenceHashes(local)
	if seq[0] != local[0] {
		t.Errorf("seq[0] = %#x, want local[0] %#x", seq[0], local[0])
	}
	for i := 1; i < len(seq); i++ {
		var b [16]byte
		binary.LittleEndian.PutUint64(b[:8], seq[i-1])
		binary.LittleEndian.PutUint64(b[8:], local[i])
		if want := xxh3.HashSeed(b[:], Seed); seq[i] != want {
			t.Errorf("seq[%d] = %#x, want %#x", i, seq[i], want)
		}
		if seq[i] != SequenceHash(seq[i-1], local[i]) {
			t.Errorf("seq[%d] differs from SequenceHash", i)
		}
	}
	// The same block after a different prefix has a different sequence hash.
	other := SequenceHashes(LocalHashes([]uint32{9, 9, 3, 4}, 2, Seed))
	if other[1] == seq[1] {
		t.Error("sequence hash does not commit to the prefix")
	}
	if len(SequenceHashes(nil)) != 0 {
		t.Error("SequenceHashes(nil) not empty")
	}
}

func benchTokens(n int) []uint32 {
	tokens := make([]uint32, n)
	for i := range tokens {
		tokens[i] = uint32(i*2654435761) >> 7
	}
	return tokens
}

func BenchmarkLocalHashes10k(b *testing.B) {
	tokens := benchTokens(10_000)
	dst := make([]uint64, 0, len(tokens)/16)
	b.ReportAllocs()
	b.SetBytes(int64(len(tokens) * 4))
	for b.Loop() {
		dst = AppendLocalHashes(dst[:0], tokens, 16, Seed)
	}
}

// sequenceHashRef is SequenceHash as the library computes it.
func sequenceHashRef(parent, local uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], parent)
	binary.LittleEndian.PutUint64(b[8:], local)
	return xxh3.HashSeed(b[:], Seed)
}

func TestSequenceHashIsXXH3(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cases := [][2]uint64{{0, 0}, {^uint64(0), ^uint64(0)}, {1, 0}, {0, 1}, {Seed, Seed}}
	for range 10_000 {
		cases = append(cases, [2]uint64{r.Uint64(), r.Uint64()})
	}
	for _, c := range cases {
		if got, want := SequenceHash(c[0], c[1]), sequenceHashRef(c[0], c[1]); got != want {
			t.Fatalf("SequenceHash(%#x, %#x) = %#x, xxh3.HashSeed gives %#x", c[0], c[1], got, want)
		}
	}
}

func FuzzSequenceHash(f *testing.F) {
	f.Add(uint64(0), uint64(0))
	f.Add(uint64(0x1f67b3b7a4a44072), uint64(0x8e2443f7744608b8))
	f.Fuzz(func(t *testing.T, parent, local uint64) {
		if got, want := SequenceHash(parent, local), sequenceHashRef(parent, local); got != want {
			t.Fatalf("SequenceHash(%#x, %#x) = %#x, xxh3.HashSeed gives %#x", parent, local, got, want)
		}
	})
}

func BenchmarkSequenceHash(b *testing.B) {
	var h uint64
	for b.Loop() {
		h = SequenceHash(h, 12345)
	}
}

func BenchmarkSequenceHashRef(b *testing.B) {
	var h uint64
	for b.Loop() {
		h = sequenceHashRef(h, 12345)
	}
}
