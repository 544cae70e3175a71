// This file holds the deterministic token streams: the vocabulary range and seeded SplitMix64.

package workload

import "fmt"

// Vocab is the half-open range [Lo, Hi) token ids are drawn from. Keeping
// clear of the low ids avoids the special tokens most tokenizers put there,
// and staying under 30000 keeps ids valid in any modern vocabulary.
type Vocab struct{ Lo, Hi uint32 }

// DefaultVocab is used when a configuration leaves its Vocab zero.
var DefaultVocab = Vocab{Lo: 1000, Hi: 30000}

func (v Vocab) orDefault() Vocab {
	if v == (Vocab{}) {
		return DefaultVocab
	}
	return v
}

func (v Vocab) check(field string) error {
	if v.Lo >= v.Hi {
		return fmt.Errorf("%w: %s: empty range [%d, %d)", ErrConfig, field, v.Lo, v.Hi)
	}
	return nil
}

// rng is SplitMix64. The workloads must stay byte-identical across Go
// releases (committed traces, cross-run comparisons), which math/rand does
// not promise for its derived methods; SplitMix64 is a few lines and fixed.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// intn returns a value in [0, n) by Lemire's multiply-shift; n ≤ 2^32.
func (r *rng) intn(n int) int { return int((r.next() >> 32) * uint64(n) >> 32) }

// between returns a value in [lo, hi]; lo when hi ≤ lo.
func (r *rng) between(lo, hi int) int {
	if hi <= lo {
		return lo
	}
	return lo + r.intn(hi-lo+1)
}

// float returns a value in [0, 1).
func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }

func (r *rng) token(v Vocab) uint32 { return v.Lo + uint32((r.next()>>32)*uint64(v.Hi-v.Lo)>>32) }

// Domains keep the streams of different uses apart: block 5 of a trace and
// session 5 of an agentic workload must not produce the same tokens.
const (
	domainBlock uint64 = 0x6d6f6f6e63616b65 // "mooncake"
	domainAgent uint64 = 0x6167656e74696321 // "agentic!"
)

// seeded returns a generator whose stream depends on every part.
func seeded(parts ...uint64) rng {
	r := rng{}
	for _, p := range parts {
		r.s ^= p
		r.s = r.next()
	}
	return r
}

// appendBlock appends the first n tokens of hash block id. A block's
// tokens depend only on id and v, so equal ids give equal tokens and a
// truncated block is a prefix of the full one.
func appendBlock(dst []uint32, id uint64, n int, v Vocab) []uint32 {
	r := seeded(domainBlock, id)
	for range n {
		dst = append(dst, r.token(v))
	}
	return dst
}

// appendTokens appends n tokens from r.
func appendTokens(dst []uint32, r *rng, n int, v Vocab) []uint32 {
	for range n {
		dst = append(dst, r.token(v))
	}
	return dst
}
