package hints

import (
	"slices"
	"testing"

	"kvrouter/internal/index"
)

// The fleet every selection case starts from: target w1/0 (aggregated)
// holding 2 blocks of a 12-block request; w1/1, w2/0, w3/0 aggregated peers;
// p1/0 a prefill worker; d1/0 a decode worker; two cache owners.
var (
	target  = index.Source{Worker: "w1", Rank: 0}
	w1r1    = index.Source{Worker: "w1", Rank: 1}
	w2      = index.Source{Worker: "w2", Rank: 0}
	w3      = index.Source{Worker: "w3", Rank: 0}
	p1      = index.Source{Worker: "p1", Rank: 0}
	d1      = index.Source{Worker: "d1", Rank: 0}
	ownerA  = index.Source{Owner: "aaaa:0001/00/01"}
	ownerB  = index.Source{Owner: "bbbb:0001/00/02"}
	unknown = index.Source{Worker: "ghost", Rank: 0}
)

func fleet() map[index.Source]Meta {
	agg := func(ep string) Meta { return Meta{CanConsume: true, Type: TypeAggregated, Endpoint: ep, Ready: true} }
	return map[index.Source]Meta{
		target: agg("tcp://10.0.0.1:25000"),
		w1r1:   agg("tcp://10.0.0.1:25001"),
		w2:     agg("tcp://10.0.0.2:25000"),
		w3:     agg("tcp://10.0.0.3:25000"),
		p1:     {CanConsume: true, Type: TypePrefill, Endpoint: "tcp://10.0.0.4:25000", Ready: true},
		d1:     {CanConsume: true, Type: TypeDecode, Endpoint: "tcp://10.0.0.5:25000", Ready: true},
		ownerA: agg("tcp://10.0.0.6:25000"),
		ownerB: agg("tcp://10.0.0.7:25000"),
	}
}

// chain is the request's engine hashes; the top bit is set on some so that
// values ≥ 2^63 travel through every path.
func chain(n int) []uint64 {
	c := make([]uint64, n)
	for i := range c {
		c[i] = uint64(i+1)*0x9e3779b97f4a7c15 | uint64(i%2)<<63
	}
	return c
}

func prefix(s index.Source, depth int) Candidate {
	return Candidate{Source: s, Depth: depth, Chain: chain(12)[:depth], SaltKnown: true}
}

func TestSelect(t *testing.T) {
	tests := []struct {
		name  string
		cands []Candidate
		edit  func(r *Request, metas map[index.Source]Meta)
		// want
		reason Reason
		src    index.Source
		end    int // the decision's reach; the payload is chain[:end] when hinted
	}{
		{name: "no candidates", reason: ReasonNoCandidate},
		{name: "other DP rank of the target's worker is a source",
			cands: []Candidate{prefix(w1r1, 6)}, src: w1r1, end: 6},
		{name: "the target itself is never a source",
			cands: []Candidate{prefix(target, 9)}, reason: ReasonSelf, src: target, end: 9},
		{name: "a cache owner on the target's own endpoint is the target",
			cands: []Candidate{prefix(ownerA, 9)}, reason: ReasonSelf, src: ownerA, end: 9,
			edit: func(r *Request, m map[index.Source]Meta) {
				a := m[ownerA]
				a.Endpoint = r.TargetMeta.Endpoint
				m[ownerA] = a
			}},
		{name: "longest prefix wins",
			cands: []Candidate{prefix(w2, 5), prefix(w3, 7), prefix(w1r1, 3)}, src: w3, end: 7},
		{name: "equal length: smaller source wins whatever the input order",
			cands: []Candidate{prefix(w3, 6), prefix(w2, 6)}, src: w2, end: 6},
		{name: "equal length: worker rank beats cache owner",
			cands: []Candidate{prefix(ownerA, 6), prefix(w3, 6)}, src: w3, end: 6},
		{name: "equal length between owners: smaller owner id",
			cands: []Candidate{prefix(ownerB, 6), prefix(ownerA, 6)}, src: ownerA, end: 6},
		{name: "equal to the target's prefix is not beyond it",
			cands: []Candidate{prefix(w2, 2), prefix(w3, 1)}, reason: ReasonNotBeyondTarget},
		{name: "aggregated target refuses a prefill source",
			cands: []Candidate{prefix(p1, 9)}, reason: ReasonTypeMismatch, src: p1, end: 9},
		{name: "prefill to decode refused",
			cands: []Candidate{prefix(p1, 9)}, reason: ReasonTypeMismatch, src: p1, end: 9,
			edit: func(r *Request, m map[index.Source]Meta) { r.TargetMeta.Type = TypeDecode }},
		{name: "decode to decode allowed",
			cands: []Candidate{prefix(d1, 9), prefix(p1, 10)}, src: d1, end: 9,
			edit: func(r *Request, m map[index.Source]Meta) { r.TargetMeta.Type = TypeDecode }},
		{name: "a refused deeper source leaves the eligible one",
			cands: []Candidate{prefix(p1, 11), prefix(w2, 5)}, src: w2, end: 5},
		{name: "target without the capability flag",
			cands: []Candidate{prefix(w2, 6)}, reason: ReasonNoCapability,
			edit: func(r *Request, m map[index.Source]Meta) { r.TargetMeta.CanConsume = false }},
		{name: "target without a worker type",
			cands: []Candidate{prefix(w2, 6)}, reason: ReasonNoCapability,
			edit: func(r *Request, m map[index.Source]Meta) { r.TargetMeta.Type = TypeUnknown }},
		{name: "target needs no endpoint of its own",
			cands: []Candidate{prefix(w2, 6)}, src: w2, end: 6,
			edit: func(r *Request, m map[index.Source]Meta) { r.TargetMeta.Endpoint = "" }},
		{name: "a cache owner is never a target",
			cands: []Candidate{prefix(w2, 6)}, reason: ReasonBadTarget,
			edit: func(r *Request, m map[index.Source]Meta) { r.Target = ownerB }},
		{name: "source without an endpoint",
			cands: []Candidate{prefix(w2, 6)}, reason: ReasonSourceNotCapable, src: w2, end: 6,
			edit: func(r *Request, m map[index.Source]Meta) { e := m[w2]; e.Endpoint = ""; m[w2] = e }},
		{name: "source without the capability flag",
			cands: []Candidate{prefix(w2, 6)}, reason: ReasonSourceNotCapable, src: w2, end: 6,
			edit: func(r *Request, m map[index.Source]Meta) { e := m[w2]; e.CanConsume = false; m[w2] = e }},
		{name: "source without a worker type",
			cands: []Candidate{prefix(w2, 6)}, reason: ReasonTypeMismatch, src: w2, end: 6,
			edit: func(r *Request, m map[index.Source]Meta) { e := m[w2]; e.Type = TypeUnknown; m[w2] = e }},
		{name: "unknown source",
			cands: []Candidate{prefix(unknown, 6)}, reason: ReasonSourceNotCapable, src: unknown, end: 6},
		{name: "source still catching up",
			cands: []Candidate{prefix(w2, 6)}, reason: ReasonNotReady, src: w2, end: 6,
			edit: func(r *Request, m map[index.Source]Meta) { e := m[w2]; e.Ready = false; m[w2] = e }},
		{name: "detached cache owner is still a source",
			cands: []Candidate{prefix(ownerA, 8)}, src: ownerA, end: 8,
			edit: func(r *Request, m map[index.Source]Meta) { e := m[ownerA]; e.Detached = true; m[ownerA] = e }},
		{name: "detached worker rank is not",
			cands: []Candidate{prefix(w2, 8)}, reason: ReasonNotReady, src: w2, end: 8,
			edit: func(r *Request, m map[index.Source]Meta) { e := m[w2]; e.Detached = true; m[w2] = e }},
		{name: "hash conflict is never a source",
			cands:  []Candidate{func() Candidate { c := prefix(w2, 9); c.HashConflict = true; return c }()},
			reason: ReasonConflict, src: w2, end: 9},
		{name: "a source holding blocks of unknown salt is never a source",
			cands:  []Candidate{func() Candidate { c := prefix(ownerA, 9); c.SaltKnown = false; return c }()},
			reason: ReasonSaltUnknown, src: ownerA, end: 9},
		{name: "unknown salt gives way to a shorter source whose salts are known",
			cands: []Candidate{func() Candidate { c := prefix(w2, 9); c.SaltKnown = false; return c }(), prefix(w3, 4)},
			src:   w3, end: 4},
		{name: "hash conflict gives way to a shorter clean source",
			cands: []Candidate{func() Candidate { c := prefix(w2, 9); c.HashConflict = true; return c }(), prefix(w3, 4)},
			src:   w3, end: 4},
		{name: "winner's chain disagrees with the request's: fail closed",
			cands: []Candidate{func() Candidate {
				c := prefix(w2, 9)
				c.Chain = slices.Clone(c.Chain)
				c.Chain[1]++
				return c
			}(), prefix(w3, 4)},
			reason: ReasonChainMismatch, src: w2, end: 9},
		{name: "winner deeper than its retained chain: no hint, no runner-up",
			cands:  []Candidate{func() Candidate { c := prefix(w2, 9); c.Chain = c.Chain[:5]; return c }(), prefix(w3, 8)},
			reason: ReasonChainTruncated, src: w2, end: 9},
		{name: "a truncated loser does not matter",
			cands: []Candidate{func() Candidate { c := prefix(w2, 7); c.Chain = c.Chain[:5]; return c }(), prefix(w3, 8)},
			src:   w3, end: 8},
		{name: "negative prefix to beat counts as none",
			cands: []Candidate{prefix(w2, 1)}, src: w2, end: 1,
			edit: func(r *Request, m map[index.Source]Meta) { r.PrefixToBeat = -3 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			metas := fleet()
			req := Request{
				Target: target, TargetMeta: metas[target], PrefixToBeat: 2,
				Chain: chain(12), Candidates: tt.cands,
			}
			if tt.edit != nil {
				tt.edit(&req, metas)
			}
			req.Meta = func(s index.Source) (Meta, bool) { m, ok := metas[s]; return m, ok }
			h, d := Select(req, MinBlocks(1))
			if d.Reason != tt.reason {
				t.Fatalf("reason = %v, want %v (decision %+v)", d.Reason, tt.reason, d)
			}
			if d.Hinted() != (tt.reason == ReasonHinted) {
				t.Errorf("Hinted() = %v with reason %v", d.Hinted(), d.Reason)
			}
			if d.Source != tt.src || d.Reach != tt.end {
				t.Errorf("decision source %v reach %d, want %v reach %d", d.Source, d.Reach, tt.src, tt.end)
			}
			if tt.reason != ReasonHinted {
				if h.Endpoint != "" || h.BlockHashes != nil {
					t.Errorf("no hint wanted, got %+v", h)
				}
				return
			}
			if want := metas[tt.src].Endpoint; h.Endpoint != want {
				t.Errorf("endpoint = %q, want %q", h.Endpoint, want)
			}
			if want := chain(12)[:tt.end]; !slices.Equal(h.BlockHashes, want) {
				t.Errorf("block hashes = %v, want chain[:%d] = %v", h.BlockHashes, tt.end, want)
			}
			if d.Estimate.ExtraBlocks != tt.end-max(req.PrefixToBeat, 0) {
				t.Errorf("estimate extra blocks = %d, want %d", d.Estimate.ExtraBlocks, tt.end-req.PrefixToBeat)
			}
		})
	}
}

// The hint must not alias the candidate's chain: the index may reuse it.
func TestSelectCopiesPayload(t *testing.T) {
	metas := fleet()
	c := prefix(w2, 6)
	c.Chain = slices.Clone(c.Chain)
	req := Request{Target: target, TargetMeta: metas[target], PrefixToBeat: 2, Chain: chain(12),
		Candidates: []Candidate{c}, Meta: func(s index.Source) (Meta, bool) { m, ok := metas[s]; return m, ok }}
	h, d := Select(req, MinBlocks(1))
	if !d.Hinted() {
		t.Fatalf("no hint: %+v", d)
	}
	c.Chain[0] = 0
	if h.BlockHashes[0] == 0 {
		t.Fatal("hint aliases the candidate's chain")
	}
}

func TestSourceCompare(t *testing.T) {
	ordered := []index.Source{
		{Worker: "a", Rank: 0}, {Worker: "a", Rank: 1}, {Worker: "a", Rank: 10}, {Worker: "b", Rank: 0},
		{Owner: "0"}, {Owner: "a"}, {Owner: "b", Worker: "a"}, {Owner: "b", Worker: "b"},
	}
	for i, s := range ordered {
		for j, o := range ordered {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := s.Compare(o); got != want {
				t.Errorf("%v.Compare(%v) = %d, want %d", s, o, got, want)
			}
		}
	}
}

func TestReasonString(t *testing.T) {
	seen := map[string]Reason{}
	for r := ReasonHinted; r <= ReasonDisabled; r++ {
		s := r.String()
		if s == "" || s == "unknown" {
			t.Errorf("reason %d has no name", r)
		}
		if prev, dup := seen[s]; dup {
			t.Errorf("reasons %d and %d share the name %q", prev, r, s)
		}
		seen[s] = r
	}
	if got := Reason(200).String(); got != "unknown" {
		t.Errorf("Reason(200) = %q", got)
	}
}
