package router

import (
	"errors"
	"slices"
	"testing"

	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

// loraStore is the op an engine's event for an adapter's blocks becomes:
// the local hashes mixed with the adapter's name (index.OpsFromEvent).
func loraStore(toks []uint32, lora string) index.Op {
	op := storeOp(toks, "", kvevents.TierDevice)
	op.Local = kvhash.LocalHashes(toks, bs, kvhash.SeedFor(lora, ""))
	for i := range op.Hashes {
		op.Hashes[i] ^= kvhash.SeedFor(lora, "")
	}
	return op
}

// TestLoRA: a request names its adapter as its engine reads it and finds
// the blocks stored under that adapter, on the workers that serve it, and
// not the base model's blocks, nor another adapter's.
func TestLoRA(t *testing.T) {
	r := newRouter(t, nil)
	a, b, c := agg("a", 1), agg("b", 1), agg("c", 1)
	a.LoRAs, b.LoRAs = []string{"sql"}, []string{"sql", "chat"}
	f := newFleet(t, r, a, b, c)
	prompt := tokens(100, 8)
	f.store("a", index.WorkerRank("a", 0), loraStore(prompt, "sql"))
	f.store("b", index.WorkerRank("b", 0), loraStore(prompt, "chat"))
	f.store("c", index.WorkerRank("c", 0), storeOp(prompt, "", kvevents.TierDevice))
	for _, tc := range []struct {
		name          string
		req           Request
		model, lora   string
		target        string
		overlap       int
		candidatesFor []string
	}{
		{"base model", Request{Model: "m"}, "m", "", "c/0", 8, []string{"a", "b", "c"}},
		{"vLLM: the model names the adapter", Request{Model: "sql"}, "m", "sql", "a/0", 8, []string{"a", "b"}},
		{"vLLM: another adapter", Request{Model: "chat"}, "m", "chat", "b/0", 8, []string{"b"}},
		{"SGLang: lora_path", Request{Model: "m", LoRA: "sql"}, "m", "sql", "a/0", 8, []string{"a", "b", "c"}},
		{"SGLang: base:adapter", Request{Model: "m:chat", LoRA: "sql"}, "m", "chat", "b/0", 8, []string{"b"}},
		{"SGLang: base:unlisted adapter", Request{Model: "m:other"}, "m", "other", "", 0, []string{"a", "b", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Tokens, tc.req.Explain = prompt, true
			d := decide(t, r, tc.req)
			if d.Model != tc.model || d.LoRA != tc.lora || d.Overlap != tc.overlap || (tc.target != "" && target(d) != tc.target) {
				t.Fatalf("decision %s %q %q overlap %d, want %s %q %q overlap %d", target(d), d.Model, d.LoRA, d.Overlap,
					tc.target, tc.model, tc.lora, tc.overlap)
			}
			var got []string
			for _, cand := range d.Candidates {
				got = append(got, cand.Worker)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.candidatesFor) {
				t.Errorf("candidates %v, want %v", got, tc.candidatesFor)
			}
			if err := r.CheckModel(tc.req.Model); err != nil {
				t.Errorf("CheckModel: %v", err)
			}
			base, lora, ok := r.Resolve(tc.req.Model, tc.req.LoRA)
			if !ok || base != tc.model || lora != tc.lora {
				t.Errorf("Resolve: %q %q %v", base, lora, ok)
			}
		})
	}
	_, err := r.Decide(Request{Model: "nope", Tokens: prompt})
	var me *ModelError
	if !errors.As(err, &me) || !slices.Equal(me.Served, []string{"chat", "m", "sql"}) {
		t.Fatalf("unknown model: %v", err)
	}
	if got := r.Adapters(); len(got) != 2 || got["sql"] != "m" || got["chat"] != "m" {
		t.Fatalf("adapters %v", got)
	}
	// An adapter unloaded from its last worker is gone.
	b.LoRAs = []string{"sql"}
	if err := r.Upsert(b, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := r.Resolve("chat", ""); ok {
		t.Fatal("chat still resolves")
	}
}
