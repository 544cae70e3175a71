// This file holds set tokens: equal holder sets share a token, so Match skips loading them.

package index

import "sync"

// Set tokens. A node whose holders are a sparse block in the arena carries
// a token in h1, and two such nodes carry the same token only if their
// holder sets are equal: Match then steps from one to the next without
// loading either set. Along a shared system prompt, block after block has
// the same holders, and each would otherwise cost a random arena line
// (about a tenth of a conversation's cold match).
//
// The rule is exact, never probabilistic: tokens are counted references,
// a node whose set changes takes a fresh token, and two nodes share one
// only when a writer knows their sets are equal. A memo (per source, for
// one op) remembers that a set of token T0 (or inline words P) became
// token T1 when the source's holder word became W, so that any other node
// of token T0 (or words P) given the same word W gets T1, in whatever
// order the op visits them (a clear's is the engine table's). The memo
// holds a reference on T0 and T1 so that neither is freed and reused for
// another set while it names them.
//
// Tokens are global, not per shard, because consecutive blocks of a chain
// live in different shards. The mutex is taken for sparse sets only, under
// a shard's write lock (never the other way round).
type tokens struct {
	mu   sync.Mutex
	refs []uint32 // refs[t]: nodes and memos holding t; 0 is no token
	free []uint32
}

// take returns a token nobody holds, with one reference. mu held.
func (tk *tokens) take() uint32 {
	if n := len(tk.free); n > 0 {
		t := tk.free[n-1]
		tk.free = tk.free[:n-1]
		tk.refs[t] = 1
		return t
	}
	if len(tk.refs) == 0 {
		tk.refs = append(tk.refs, 0) // token 0 is none
	}
	tk.refs = append(tk.refs, 1)
	return uint32(len(tk.refs) - 1)
}

// unref drops a reference to t (none for 0). mu held.
func (tk *tokens) unref(t uint32) {
	if t == 0 {
		return
	}
	if tk.refs[t]--; tk.refs[t] == 0 {
		tk.free = append(tk.free, t)
	}
}

// ref adds a reference to t (none for 0). mu held.
func (tk *tokens) ref(t uint32) {
	if t != 0 {
		tk.refs[t]++
	}
}

// bytes estimates the tokens' memory.
func (tk *tokens) bytes() int64 {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	return int64(cap(tk.refs)+cap(tk.free)) * 4
}

// setMemo remembers, for one op of one source, the changes of holder sets
// that ended in the arena: a set of token was (or, was 0, the inline words
// packed) whose source's word became word is now a set of token now. A
// store or removal visits chains in order, so the last change is the one
// to remember; a clear visits blocks in the engine table's order and
// remembers all (wide).
//
// References move as nodes do, under the tokens' mutex: deferring a
// node's move to the memo's release would let another source's writer
// count that node out of a class before this memo counted it in, and
// free a token still carried.
type setMemo struct {
	lastKey memoKey
	lastNow uint32 // 0: none
	wide    bool
	all     map[memoKey]uint32 // with wide
}

type memoKey struct {
	was, word uint32
	packed    uint64
}

// find returns the token change k led to, 0 if not remembered.
func (m *setMemo) find(k memoKey) uint32 {
	if m.lastNow != 0 && k == m.lastKey {
		return m.lastNow
	}
	return m.all[k]
}

// before is what a node's set was before a change: its token, or its
// inline words, or dense.
type before struct {
	tok    uint32
	packed uint64
	dense  bool
}

func beforeOf(sh *shard, n *node) before {
	switch {
	case n.meta&metaMore == 0:
		return before{packed: n.packed()}
	case sh.isDense(n):
		return before{dense: true}
	}
	return before{tok: n.h1}
}

// settle gives n, whose holder set has just changed from b (under the
// shard's write lock), the token its new set earns; word is the changed
// source's holder word now (its id with no tiers if it left), m the
// source's memo. Only changes that involve a token get here (tokened).
func (ix *Index) settle(sh *shard, n *node, b before, word uint32, m *setMemo) {
	tk := &ix.tokens
	tk.mu.Lock()
	defer tk.mu.Unlock()
	if n.meta&metaMore == 0 || sh.isDense(n) {
		tk.unref(b.tok)
		if n.meta&metaMore != 0 {
			n.h1 = 0
		}
		return
	}
	k := memoKey{was: b.tok, word: word, packed: b.packed}
	if now := m.find(k); now != 0 && !b.dense {
		// The same change of the same set: the same set.
		tk.ref(now)
		tk.unref(b.tok)
		n.h1 = now
		return
	}
	// A fresh token, held by n and by the memo, which also takes over the
	// reference n had on its old token (see the type comment). A set that
	// was dense has no token to key a memo by.
	t := tk.take()
	n.h1 = t
	switch {
	case b.dense:
	case m.wide:
		tk.ref(t)
		if m.all == nil {
			m.all = make(map[memoKey]uint32)
		}
		m.all[k] = t
	default:
		tk.ref(t)
		tk.unref(m.lastKey.was)
		tk.unref(m.lastNow)
		m.lastKey, m.lastNow = k, t
	}
}

// tokened reports whether a change of n's holders from b involves set
// tokens: a sparse set in the arena before or after. Dense sets carry
// none: Match compares them by fingerprint, and a hot document's blocks
// change set one by one (each source holds a prefix of its own length),
// so tokens would cost every store a lock and rarely be shared.
func tokened(sh *shard, n *node, b before) bool {
	return b.tok != 0 || n.meta&metaMore != 0 && !sh.isDense(n)
}

// forget releases m's references at the end of an op.
func (ix *Index) forget(m *setMemo) {
	if m.lastNow == 0 && len(m.all) == 0 {
		m.wide = false
		return
	}
	ix.tokens.mu.Lock()
	ix.tokens.unref(m.lastKey.was)
	ix.tokens.unref(m.lastNow)
	for k, now := range m.all {
		ix.tokens.unref(k.was)
		ix.tokens.unref(now)
	}
	ix.tokens.mu.Unlock()
	*m = setMemo{}
}

// dropToken releases the token of n, a node leaving the index (0 unless
// its holders are sparse in the arena). Shard write lock held.
func (ix *Index) dropToken(n *node) {
	if n.meta&metaMore != 0 {
		ix.unrefToken(n.h1)
	}
}

// unrefToken releases a reference to token t (none for 0).
func (ix *Index) unrefToken(t uint32) {
	if t == 0 {
		return
	}
	ix.tokens.mu.Lock()
	ix.tokens.unref(t)
	ix.tokens.mu.Unlock()
}
