// This file holds Set: one Index per (model, block size) and the source each one serves.

package index

import (
	"fmt"
	"sync"
)

// Set keeps one Index per (model, block size) and knows which index each
// source registered with, so that a source whose events carry another
// block size than it advertised is refused (docs/wire.md §3.5).
type Set struct {
	maxBlocks int
	maxBytes  int64

	mu      sync.RWMutex
	indexes map[setKey]*Index
	sources map[Source]setKey
}

type setKey struct {
	model     string
	blockSize int
}

// NewSet returns an empty set whose indexes each cap at maxBlocks blocks
// and maxBytes of estimated memory (Config; 0: unbounded).
func NewSet(maxBlocks int, maxBytes int64) *Set {
	return &Set{
		maxBlocks: max(maxBlocks, 0),
		maxBytes:  max(maxBytes, 0),
		indexes:   make(map[setKey]*Index),
		sources:   make(map[Source]setKey),
	}
}

// Register binds src to the index of (model, blockSize), creating it. A
// source already registered with another block size is refused with
// ErrBlockSize, another model with ErrSource: remove it first.
func (st *Set) Register(src Source, model string, blockSize int) (*Index, error) {
	if err := src.validate(); err != nil {
		return nil, err
	}
	key := setKey{model, blockSize}
	st.mu.Lock()
	defer st.mu.Unlock()
	if old, ok := st.sources[src]; ok && old != key {
		if old.blockSize != blockSize {
			return nil, fmt.Errorf("%w: %s registered block size %d, now %d", ErrBlockSize, src, old.blockSize, blockSize)
		}
		return nil, fmt.Errorf("%w: %s registered for model %q, now %q", ErrSource, src, old.model, model)
	}
	ix := st.indexes[key]
	if ix == nil {
		var err error
		if ix, err = New(Config{BlockSize: blockSize, MaxBlocks: st.maxBlocks, MaxBytes: st.maxBytes}); err != nil {
			return nil, err
		}
		st.indexes[key] = ix
	}
	st.sources[src] = key
	return ix, nil
}

// Index returns the index of (model, blockSize), or nil.
func (st *Set) Index(model string, blockSize int) *Index {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.indexes[setKey{model, blockSize}]
}

// IndexOf returns the index src registered with.
func (st *Set) IndexOf(src Source) (*Index, bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	key, ok := st.sources[src]
	if !ok {
		return nil, false
	}
	return st.indexes[key], true
}

// Apply applies src's ops to the index it registered with. A store whose
// block size differs from the registered one fails with ErrBlockSize.
func (st *Set) Apply(src Source, ops ...Op) error {
	ix, ok := st.IndexOf(src)
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnregistered, src)
	}
	return ix.Apply(src, ops...)
}

// Remove drops src's residency and registration.
func (st *Set) Remove(src Source) {
	st.mu.Lock()
	key, ok := st.sources[src]
	delete(st.sources, src)
	ix := st.indexes[key]
	st.mu.Unlock()
	if ok && ix != nil {
		ix.RemoveSource(src)
	}
}
