package kvhash

import (
	"encoding/hex"
	"slices"
	"testing"
)

// Vectors from docs/wire.md §4.2.
func TestVLLMBlockHashes(t *testing.T) {
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	tests := []struct {
		name   string
		tokens []uint32
		seed   string
		want   []uint64
	}{
		{"default seed", tokens, VLLMDefaultSeed, []uint64{0x84b146b151d55111, 0xd43b57df56b58fb1}},
		{"PYTHONHASHSEED=0", tokens, "0", []uint64{0x1e0b2e028ef071cb, 0xefad121d154ab2d6}},
		{"partial tail dropped", append(slices.Clone(tokens), 9, 10), VLLMDefaultSeed, []uint64{0x84b146b151d55111, 0xd43b57df56b58fb1}},
		{"shorter than a block", tokens[:3], VLLMDefaultSeed, []uint64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := VLLMBlockHashes(tc.tokens, 4, tc.seed)
			if !slices.Equal(got, tc.want) {
				t.Errorf("VLLMBlockHashes = %#x, want %#x", got, tc.want)
			}
		})
	}
}

func TestVLLMChainMatchesBulk(t *testing.T) {
	// The simulated engine hashes block by block from a stored parent; the
	// result must be the bulk chain.
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	parent := VLLMNoneHash(VLLMDefaultSeed)
	var got []uint64
	for i := 0; i < len(tokens); i += 4 {
		parent = VLLMBlockDigest(parent, tokens[i:i+4], nil)
		got = append(got, VLLMEventHash(parent))
	}
	if want := VLLMBlockHashes(tokens, 4, VLLMDefaultSeed); !slices.Equal(got, want) {
		t.Errorf("chained = %#x, bulk = %#x", got, want)
	}
}

func TestVLLMBlockCBOR(t *testing.T) {
	tests := []struct {
		name   string
		tokens []uint32
		extra  []string
		want   string
	}{
		// The example of docs/wire.md §4.2: parent 0x00…00, tokens [1,2,3,4], no extra.
		{"wire.md example", []uint32{1, 2, 3, 4}, nil,
			"835820" + "0000000000000000000000000000000000000000000000000000000000000000" + "8401020304f6"},
		// Canonical CBOR picks the shortest integer head.
		{"token widths", []uint32{23, 24, 255, 256, 65535, 65536, 1<<32 - 1}, nil,
			"835820" + "0000000000000000000000000000000000000000000000000000000000000000" +
				"87" + "17" + "1818" + "18ff" + "190100" + "19ffff" + "1a00010000" + "1affffffff" + "f6"},
		{"extra keys", []uint32{1}, []string{"lora-a", "s"},
			"835820" + "0000000000000000000000000000000000000000000000000000000000000000" +
				"8101" + "82" + "666c6f72612d61" + "6173"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := hex.EncodeToString(appendVLLMBlockCBOR(nil, Digest{}, tc.tokens, tc.extra))
			if got != tc.want {
				t.Errorf("cbor = %s\nwant   %s", got, tc.want)
			}
		})
	}
}

func TestVLLMExtraKeysChangeHash(t *testing.T) {
	root := VLLMNoneHash(VLLMDefaultSeed)
	tokens := []uint32{1, 2, 3, 4}
	plain := VLLMBlockDigest(root, tokens, nil)
	if VLLMBlockDigest(root, tokens, []string{}) != plain {
		t.Error("empty extra keys must hash as None")
	}
	if VLLMBlockDigest(root, tokens, []string{"lora-a"}) == plain {
		t.Error("a LoRA extra key did not change the block hash")
	}
}

func TestCBORHead(t *testing.T) {
	tests := []struct {
		n    uint64
		want string
	}{
		{0, "00"}, {23, "17"}, {24, "1818"}, {0xff, "18ff"}, {0x100, "190100"},
		{0xffff, "19ffff"}, {0x10000, "1a00010000"}, {0xffffffff, "1affffffff"},
		{1 << 32, "1b0000000100000000"},
	}
	for _, tc := range tests {
		if got := hex.EncodeToString(appendCBORHead(nil, cborUint, tc.n)); got != tc.want {
			t.Errorf("head(%d) = %s, want %s", tc.n, got, tc.want)
		}
	}
}

func TestSGLangPageHashes(t *testing.T) {
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	tests := []struct {
		name   string
		tokens []uint32
		salt   string
		want   []int64
	}{
		{"unsalted", tokens, "", []int64{-3488128144981237669, 5674439469042975057}},
		{"salted", tokens[:4], "tenant-a", []int64{3718046898735569995}},
		{"partial tail dropped", tokens[:6], "", []int64{-3488128144981237669}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := SGLangPageHashes(tc.tokens, 4, tc.salt)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d hashes, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if int64(got[i]) != tc.want[i] {
					t.Errorf("hash[%d] = %d, want %d", i, int64(got[i]), tc.want[i])
				}
			}
		})
	}
}

func TestSGLangChainMatchesBulk(t *testing.T) {
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	for _, salt := range []string{"", "tenant-a"} {
		prior := SGLangSaltPrior(salt)
		var got []uint64
		for i := 0; i+2 <= len(tokens); i += 2 {
			d := SGLangPageDigest(prior, tokens[i:i+2])
			got = append(got, SGLangEventHash(d))
			prior = &d
		}
		if want := SGLangPageHashes(tokens, 2, salt); !slices.Equal(got, want) {
			t.Errorf("salt %q: chained = %#x, bulk = %#x", salt, got, want)
		}
	}
}

func TestEngineHashesRejectBadSize(t *testing.T) {
	for _, size := range []int{0, -1} {
		if got := VLLMBlockHashes([]uint32{1, 2}, size, VLLMDefaultSeed); got != nil {
			t.Errorf("VLLMBlockHashes(size %d) = %v, want nil", size, got)
		}
		if got := SGLangPageHashes([]uint32{1, 2}, size, ""); got != nil {
			t.Errorf("SGLangPageHashes(size %d) = %v, want nil", size, got)
		}
	}
}

func BenchmarkVLLMBlockHashes10k(b *testing.B) {
	tokens := benchTokens(10_000)
	b.ReportAllocs()
	for b.Loop() {
		VLLMBlockHashes(tokens, 16, VLLMDefaultSeed)
	}
}

func BenchmarkSGLangPageHashes10k(b *testing.B) {
	tokens := benchTokens(10_000)
	b.ReportAllocs()
	for b.Loop() {
		SGLangPageHashes(tokens, 16, "")
	}
}
