package runner

import (
	"bytes"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"
)

// Seeds shared by f.Add and the committed corpus (testdata/fuzz).
func frameSeeds() [][]byte {
	return [][]byte{
		appendFetch(nil, []uint64{1, 2, 0xffffffffffffffff}),
		appendChallenge(nil, challenge{auth: true, blockBytes: testBlock, maxKeys: 8, nonce: [16]byte{1}, mac: [32]byte{2}}),
		appendError(nil, codeAuth, "wrong secret"),
		append(appendHeader(nil, msgHello, nonceLen), make([]byte, nonceLen)...),
		appendHeader(nil, msgAuth, 0),
		appendMissing(nil, 7),
		goodBlock(3),
		appendHeader(nil, msgFetch, 4+8*9),
		[]byte("KR\x01\x05\x00\x00\x00\x0c\x00\x00\x00\x02\x00"),
		[]byte("GET / HTTP/1.1\r\n"),
	}
}

// FuzzParseFrame decodes one frame with each side's limits; whatever
// decodes must re-encode to the same bytes.
func FuzzParseFrame(f *testing.F) {
	for _, s := range frameSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, limits := range []func(uint8) (int, int, bool){serverLimits(8), clientLimits(testBlock)} {
			h, err := parseHeader(data, limits)
			if err != nil || len(data)-headerLen < h.n {
				continue
			}
			frame := data[:headerLen+h.n]
			p := frame[headerLen:]
			switch h.typ {
			case msgFetch:
				keys, err := parseFetch(p, nil)
				if err != nil {
					continue
				}
				if len(keys) > 8 {
					t.Fatalf("%d keys passed a limit of 8", len(keys))
				}
				if re := appendFetch(nil, keys); !bytes.Equal(re, frame) {
					t.Fatalf("fetch re-encodes to %x, was %x", re, frame)
				}
			case msgChallenge:
				c, err := parseChallenge(p)
				if err != nil {
					continue
				}
				if re := appendChallenge(nil, c); !bytes.Equal(re, frame) {
					t.Fatalf("challenge re-encodes to %x, was %x", re, frame)
				}
			case msgError:
				pe, err := parseError(p)
				if err != nil {
					continue
				}
				for _, c := range []byte(pe.Text) {
					if c < 0x20 || c > 0x7e {
						t.Fatalf("unsanitised peer text %q", pe.Text)
					}
				}
			}
		}
	})
}

// FuzzReadAnswers feeds a byte stream to the client's answer reader writing
// into a real runner: whatever the stream, only blocks matching their
// checksum become readable, only asked keys, and no slot stays reserved.
func FuzzReadAnswers(f *testing.F) {
	keys := []uint64{1, 2, 3}
	end := appendHeader(nil, msgEnd, 0)
	valid := slices.Concat(goodBlock(1), appendMissing(nil, 2), goodBlock(3), end)
	badSum := goodBlock(1)
	badSum[len(badSum)-1] ^= 0x80
	f.Add(valid)
	f.Add(slices.Concat(badSum, goodBlock(2), appendMissing(nil, 3), end))
	f.Add(valid[:len(valid)-20])
	f.Add(slices.Concat(goodBlock(1), goodBlock(1)))
	f.Add(appendError(nil, codeProtocol, "busy"))
	for _, s := range frameSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := New(Config{BlockBytes: testBlock, Capacity: 2})
		if err != nil {
			t.Fatal(err)
		}
		op := &fetchOp{r: r, keys: keys, slots: map[uint64]int{}, done: make(chan struct{})}
		for _, k := range keys {
			op.slots[k] = slotWanted
			r.inflight[k] = op
		}
		r.transfers++
		var hdr [headerLen + blockHeadLen]byte
		_, err = readAnswers(bytes.NewReader(data), &hdr, keys, testBlock, op)
		op.finish(err)
		r.mu.Lock()
		op.unpinLocked() // as its Fetch would
		r.mu.Unlock()
		st := r.Stats()
		if st.Pinned != 0 || st.Pending != 0 || st.Free+st.Used != st.Slots || len(r.inflight) != 0 {
			t.Fatalf("slots leaked: %+v", st)
		}
		for k := uint64(0); k < 8; k++ {
			c, err := r.Read(k)
			if err != nil {
				continue
			}
			if k < 1 || k > 3 {
				t.Fatalf("unasked key %d committed", k)
			}
			sum, ok := r.pool.Sum(c.slot)
			if !ok || xxh3.Hash(c.Bytes()) != sum {
				t.Fatalf("key %d committed with a wrong checksum", k)
			}
			c.Release()
		}
	})
}
