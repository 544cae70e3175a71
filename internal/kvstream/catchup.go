// This file holds the catch-ups: the publisher's buffered history replayed before any live message, at start and at every new connection.

package kvstream

// Start begins key's catch-up at once, before any live message: an idle
// publisher sends none, and its history is the consumer's initial
// inventory. It returns the replay to run (every buffered batch from seq
// 0), or nil when CatchUp is off or key is known already. Until the answer
// arrives, live messages are held; the answer is delivered as history
// (every replayed batch, up to the held ones), and the held ones follow.
// With none held, a live message at or below the last batch delivered is
// a copy of the history, sent before the replay was answered and read
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
	t.keys[key] = &keyState{fresh: true, replay: &replayState{id: t.nextID, rounds: 1}}
	return &ReplayRequest{ID: t.nextID, Key: key, From: 0}
}

// Reconnect tells the tracker that key's connection was made anew. A seq
// at or below the last one is a new publisher from now on, not a copy of
// a catch-up's history.
//
// With CatchUp and canReplay it also returns the catch-up to run at once,
// as Start's at the first connection: every buffered batch from seq 0.
// The new connection may be to a new process, whose seq tells nothing
// against the old one's, and the consumer starts the key over at a
// Reconnected (package ingest rebuilds the rank): the publisher's whole
// history is its inventory again. An idle publisher sends no live message,
// so nothing else would bring it, nor the batches it published while the
// connection was down. A replay under way is abandoned with the messages
// it held: they were the old connection's, and the history has them.
func (t *Tracker) Reconnect(key string, canReplay bool) *ReplayRequest {
	st := t.keys[key]
	if st != nil {
		st.unanchored = false
	}
	if !t.CatchUp || !canReplay {
		return nil
	}
	delete(t.keys, key)
	return t.Start(key)
}
