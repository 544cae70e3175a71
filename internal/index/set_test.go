package index

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestSet(t *testing.T) {
	set := NewSet(0, 0)
	ixA, err := set.Register(w0, "llama", 16)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.Register(w1, "llama", 16); err != nil {
		t.Fatal(err)
	}
	ixB, _ := set.Register(w2, "llama", 32)
	if ixA == ixB || set.Index("llama", 16) != ixA || set.Index("qwen", 16) != nil {
		t.Fatalf("indexes not keyed by (model, block size)")
	}
	if _, err := set.Register(w0, "llama", 32); !errors.Is(err, ErrBlockSize) || !strings.Contains(err.Error(), "16") {
		t.Fatalf("re-registering with another block size: %v", err)
	}
	if _, err := set.Register(w0, "qwen", 16); !errors.Is(err, ErrSource) {
		t.Fatalf("re-registering with another model: %v", err)
	}
	if _, err := set.Register(Source{}, "llama", 16); !errors.Is(err, ErrSource) {
		t.Fatalf("invalid source: %v", err)
	}
	// The source's events must carry its registered block size.
	if err := set.Apply(w0, Op{Kind: OpStore, Local: []uint64{1}, Hashes: []uint64{1}, BlockSize: 32}); !errors.Is(err, ErrBlockSize) {
		t.Fatalf("wrong block size accepted: %v", err)
	}
	if err := set.Apply(w0, Op{Kind: OpStore, Local: []uint64{1}, Hashes: []uint64{1}, BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	if err := set.Apply(o1, root(dev, 1)); !errors.Is(err, ErrUnregistered) {
		t.Fatalf("unregistered source: %v", err)
	}
	if ixA.Len() != 1 || ixB.Len() != 0 {
		t.Fatalf("op went to the wrong index")
	}
	set.Remove(w0)
	if ixA.Len() != 0 {
		t.Fatalf("Remove kept the source's blocks")
	}
	if _, ok := set.IndexOf(w0); ok {
		t.Fatalf("Remove kept the registration")
	}
	if _, err := set.Register(w0, "llama", 32); err != nil {
		t.Fatalf("a removed source could not register anew: %v", err)
	}
}

func TestSourceString(t *testing.T) {
	if got := w2.String(); got != "w0/1" {
		t.Errorf("worker rank: %q", got)
	}
	if got := CacheOwner("ab").String(); got != "owner:ab" {
		t.Errorf("owner: %q", got)
	}
	if !o1.IsOwner() || w0.IsOwner() {
		t.Errorf("IsOwner")
	}
	order := []Source{w0, w2, w1, CacheOwner("a"), CacheOwner("b")}
	if !slices.IsSortedFunc(order, Source.Compare) {
		t.Errorf("workers must sort before owners, then by id and rank")
	}
}
