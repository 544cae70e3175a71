// This file holds the catch-ups: the publisher's buffered history replayed before any live message, at start and at every new connection.

package kvstream

// Start begins key's catch-up at once, before any live message: an idle
// publisher sends none, and its history is the consumer's initial
// inventory. It returns the replay to run (every buffered batch from seq
// 0), or nil when CatchUp is off or key is known already. Until the answer
// arrives, live messages are held; the answer is delivered as history
// (every replayed batch, up to the held ones), and the held ones follow.
// With none held, a live message among the batches the answer delivered
// is a copy of the history, sent before the replay was answered and read
// after it, until a newer one arrives or the connection is made anew
// (Reconnect). An answer that delivered nothing leaves key as if unknown.
func (t *Tracker) Start(key string) *ReplayRequest {
	if !t.CatchUp || t.keys[key] != nil {
		return nil
	}
	if t.keys == nil {
		t.keys = make(map[string]*keyState)
	}
	t.nextID++
	t.keys[key] = &keyState{fresh: true, replay: &replayState{id: t.nextID, rounds: 1, open: true}}
	return &ReplayRequest{ID: t.nextID, Key: key, From: 0}
}

// Reconnect tells the tracker that key's connection was made anew. A seq
// at or below the last one is a new publisher from now on, not a copy of
// a catch-up's history.
//
// With CatchUp and canReplay it also returns the replay to run at once:
// the batches published while the connection was down reach no new
// connection, and an idle publisher sends no live message whose seq would
// reveal them. It asks for every batch after the last one delivered (from
// 0 when nothing was, as Start does) and replaces a replay under way,
// keeping the messages it holds: that replay's answer is ignored. The
// answer is taken as Start's is: until a live message arrives, every
// replayed batch after the last one delivered is delivered; a live one
// arriving meanwhile follows the usual rules against the last seq seen
// (the next one is held, a later one opens a Gap the same answer fills,
// an older one is a Restart that abandons the replay). An empty answer
// delivers nothing: a publisher that restarted with fewer batches than
// were seen shows it with its next live message, a Restart.
func (t *Tracker) Reconnect(key string, canReplay bool) *ReplayRequest {
	st := t.keys[key]
	if st != nil {
		st.unanchored = false
	}
	if !t.CatchUp || !canReplay {
		return nil
	}
	if st == nil {
		return t.Start(key)
	}
	r := st.replay
	if r == nil {
		r = &replayState{top: st.last}
		st.replay = r
	}
	t.nextID++
	r.id, r.rounds, r.open = t.nextID, 1, true
	from := st.last + 1
	if st.fresh {
		from = 0
	}
	return &ReplayRequest{ID: r.id, Key: key, From: from}
}
