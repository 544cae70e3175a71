// This file holds Ident: a held block's identity and depth, by a source's engine hash.
package index

// Ident returns the identity (rolling sequence hash) and depth of the block
// src holds under engine hash e. A store that names a parent its own
// source lacks can then be stated by identities (Op.Seqs, Op.Depths) when
// another source of the same engine holds the parent: engine hashes and
// identities both follow from a block's content and prefix.
func (ix *Index) Ident(src Source, e uint64) (seq uint64, depth uint32, ok bool) {
	s := ix.reg.lookup(src)
	if s == nil {
		return 0, 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return 0, 0, false
	}
	if seq, ok = s.engine.get(e); !ok {
		return 0, 0, false
	}
	sh := &ix.shards[shardOf(seq)]
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	pos, _, ok := sh.holds(seq, s.id, e)
	if !ok {
		return 0, 0, false
	}
	return seq, sh.at(pos).depth(), true
}
