// This file holds the sequence tracker: gaps, restarts and replay requests per publisher.

package kvstream

import "sort"

// Tracker limits.
const (
	// DefaultMaxHeld bounds the live messages held for a key while its replay
	// runs; past it the replay is abandoned (its gaps become Unrecoverable)
	// rather than letting a stalled replay grow memory without bound.
	DefaultMaxHeld = 1 << 16
	// maxRounds bounds replays for one gap episode. A second round is only
	// needed when the publisher answered before a later gap's batches were
	// buffered; more than a few rounds means a misbehaving replay endpoint.
	maxRounds = 3
)

// Tracker is the per-publisher sequence state machine, free of I/O. Feed it
// live messages (Live) and replay outcomes (Replayed); it returns the items
// to deliver, in order, and the replays to start.
//
// Rules, per key:
//   - The first seq seen is accepted as is: a subscriber that joins late, or
//     a publisher that counts from 1, is not a gap.
//   - seq == last+1 is delivered.
//   - seq > last+1 opens Gap{last+1, seq-1}. Without replay the gap is at
//     once Unrecoverable and seq is delivered. With replay the key enters
//     replay: seq and every later live message of the key are held until
//     the replay outcome arrives.
//   - seq <= last is a Restart: ZMQ never duplicates a message on a
//     connection and replay overlap is removed before this rule applies, so
//     an old seq can only come from a new publisher process. seq is
//     delivered and becomes last.
//   - While replaying, a live seq beyond the highest held opens a further
//     Gap; a live seq at or below it is a Restart that abandons the replay.
//   - A replay outcome is merged with the held messages: replayed batches
//     above last and up to the highest live seq seen fill the gaps (a live
//     copy wins over a replayed one; replayed batches past the highest live
//     seq are dropped, they will arrive live). Delivery runs in seq order;
//     each hole left is Unrecoverable, each gap left without a hole is Gap
//     Healed. A hole beyond every replayed seq of a complete answer means the
//     publisher answered before buffering it, so it is asked again instead.
//   - Outcomes of abandoned replays are ignored (matched by ReplayRequest.ID).
//   - With CatchUp, a publisher's history is asked for before any live
//     message at its first connection (Start), and again from seq 0 when
//     the connection is made anew (Reconnect).
type Tracker struct {
	// MaxHeld: see DefaultMaxHeld. Zero means DefaultMaxHeld.
	MaxHeld int
	// CatchUp makes a key's first live message with seq > 0 open a gap
	// from seq 0 when replay is possible: ZMQ drops what a publisher sent
	// before the subscription was connected (the slow joiner), and a
	// subscriber that joins a running engine wants its buffered history.
	// What the buffer no longer holds is reported Unrecoverable.
	CatchUp bool

	keys   map[string]*keyState
	nextID uint64
}

// ReplayRequest asks the caller to fetch every buffered batch of Key with
// seq >= From and report the outcome to Replayed with the same ID.
type ReplayRequest struct {
	ID   uint64
	Key  string
	From uint64
}

// ReplayResult is the outcome of a ReplayRequest.
type ReplayResult struct {
	ID  uint64
	Key string
	// Messages are the batches received, in any order; only Seq and Payload
	// are used.
	Messages []Message
	// Complete is set when the end marker arrived; a replay that failed or
	// timed out reports what it received with Complete false.
	Complete bool
}

type keyState struct {
	last   uint64 // last delivered seq
	fresh  bool   // nothing delivered yet: a catch-up replay from seq 0 runs
	replay *replayState
	// unanchored: a catch-up at start delivered up to last and no live
	// message has been delivered since (see Start).
	unanchored bool
}

type replayState struct {
	id     uint64
	rounds int
	topic  string    // topic of the live message that opened the gap
	gaps   []span    // open gaps, ascending, all above last
	held   []Message // live messages, ascending, above last
	top    uint64    // highest live seq seen, == held[len(held)-1].Seq
}

type span struct {
	from, to uint64
	lost     bool
}

// Live feeds a message received live for key and appends the items to
// deliver to dst. canReplay says whether a replay may be requested for key.
func (t *Tracker) Live(dst []Item, key string, m Message, canReplay bool) ([]Item, *ReplayRequest) {
	m.Key = key
	m.Replayed = false
	st := t.keys[key]
	if st != nil && st.fresh && st.replay == nil {
		// A catch-up at start delivered nothing: this is the first message.
		st = nil
	}
	if st != nil && st.unanchored && st.replay == nil {
		if m.Seq <= st.last {
			return dst, nil // a live copy of a batch the catch-up delivered
		}
		st.unanchored = false
	}
	if st == nil {
		if t.keys == nil {
			t.keys = make(map[string]*keyState)
		}
		if t.CatchUp && canReplay && m.Seq > 0 {
			st = &keyState{fresh: true}
			t.keys[key] = st
			return t.openReplay(dst, st, key, m, span{from: 0, to: m.Seq - 1})
		}
		t.keys[key] = &keyState{last: m.Seq}
		return append(dst, m), nil
	}
	if st.replay != nil {
		return t.liveReplaying(dst, st, key, m)
	}
	switch {
	case m.Seq > st.last && m.Seq-st.last == 1:
		st.last = m.Seq
		return append(dst, m), nil
	case m.Seq > st.last:
		g := span{from: st.last + 1, to: m.Seq - 1}
		if !canReplay {
			st.last = m.Seq
			return append(dst, Gap{Key: key, From: g.from, To: g.to}, Unrecoverable{Key: key, From: g.from, To: g.to}, m), nil
		}
		return t.openReplay(dst, st, key, m, g)
	default:
		old := st.last
		st.last = m.Seq
		return append(dst, Restart{Key: key, OldSeq: old, NewSeq: m.Seq}, m), nil
	}
}

// openReplay holds m and asks for the batches of gap g.
func (t *Tracker) openReplay(dst []Item, st *keyState, key string, m Message, g span) ([]Item, *ReplayRequest) {
	dst = append(dst, Gap{Key: key, From: g.from, To: g.to})
	t.nextID++
	st.replay = &replayState{
		id:     t.nextID,
		rounds: 1,
		topic:  m.Topic,
		gaps:   []span{g},
		held:   []Message{m},
		top:    m.Seq,
	}
	return dst, &ReplayRequest{ID: t.nextID, Key: key, From: g.from}
}

func (t *Tracker) liveReplaying(dst []Item, st *keyState, key string, m Message) ([]Item, *ReplayRequest) {
	r := st.replay
	if len(r.held) == 0 && st.fresh {
		// A catch-up at start: the first live message anchors the stream.
		r.topic, r.held, r.top = m.Topic, append(r.held, m), m.Seq
		return dst, nil
	}
	switch {
	case m.Seq > r.top && m.Seq-r.top == 1:
	case m.Seq > r.top:
		g := span{from: r.top + 1, to: m.Seq - 1}
		r.gaps = append(r.gaps, g)
		dst = append(dst, Gap{Key: key, From: g.from, To: g.to})
	default:
		dst, _ = t.resolve(dst, st, key, nil, false, false)
		old := st.last
		st.last = m.Seq
		return append(dst, Restart{Key: key, OldSeq: old, NewSeq: m.Seq}, m), nil
	}
	r.held = append(r.held, m)
	r.top = m.Seq
	if len(r.held) > t.maxHeld() {
		dst, _ = t.resolve(dst, st, key, nil, false, false)
	}
	return dst, nil
}

// Replayed feeds the outcome of a replay and appends the items to deliver
// to dst. It may ask for a further replay (see the rules on Tracker).
func (t *Tracker) Replayed(dst []Item, res ReplayResult, canReplay bool) ([]Item, *ReplayRequest) {
	st := t.keys[res.Key]
	if st == nil || st.replay == nil || st.replay.id != res.ID {
		return dst, nil
	}
	return t.resolve(dst, st, res.Key, res.Messages, res.Complete, canReplay)
}

// Replaying reports whether key waits for a replay outcome.
func (t *Tracker) Replaying(key string) bool {
	st := t.keys[key]
	return st != nil && st.replay != nil
}

// Forget drops key's state, returning the last seq delivered for it; the
// next message of key is taken as its first. It refuses (ok false) a key
// that waits for a replay outcome, or that it does not know.
func (t *Tracker) Forget(key string) (last uint64, ok bool) {
	st := t.keys[key]
	if st == nil || st.replay != nil {
		return 0, false
	}
	delete(t.keys, key)
	return st.last, true
}

// Last returns the last seq delivered for key.
func (t *Tracker) Last(key string) (seq uint64, ok bool) {
	st := t.keys[key]
	if st == nil {
		return 0, false
	}
	return st.last, true
}

func (t *Tracker) maxHeld() int {
	if t.MaxHeld > 0 {
		return t.MaxHeld
	}
	return DefaultMaxHeld
}

// resolve merges replayed batches into the held ones and delivers them.
func (t *Tracker) resolve(dst []Item, st *keyState, key string, replayed []Message, complete, canReplay bool) ([]Item, *ReplayRequest) {
	r := st.replay
	// Held first so that the stable sort keeps the live copy of a seq.
	cand := make([]Message, 0, len(r.held)+len(replayed))
	cand = append(cand, r.held...)
	var maxReplayed uint64
	haveReplayed := false
	for _, m := range replayed {
		if !haveReplayed || m.Seq > maxReplayed {
			maxReplayed, haveReplayed = m.Seq, true
		}
		// With nothing held (a catch-up at start that no live message
		// anchored yet) every replayed batch is history.
		if (st.fresh || m.Seq > st.last) && (m.Seq <= r.top || len(r.held) == 0) {
			cand = append(cand, Message{Key: key, Topic: r.topic, Seq: m.Seq, Payload: m.Payload, Replayed: true})
		}
	}
	sort.SliceStable(cand, func(i, j int) bool { return cand[i].Seq < cand[j].Seq })

	gi := 0
	for i, m := range cand {
		expected := st.last + 1
		if st.fresh {
			expected = 0
		}
		if m.Seq < expected {
			continue // duplicate of a seq already delivered
		}
		if m.Seq > expected {
			hole := span{from: expected, to: m.Seq - 1}
			if complete && haveReplayed && hole.from > maxReplayed && canReplay && r.rounds < maxRounds {
				t.nextID++
				r.id = t.nextID
				r.rounds++
				r.held = append([]Message(nil), cand[i:]...)
				// Gaps keep their full range so that the Healed signal
				// names the range that was opened.
				r.gaps = r.gaps[gi:]
				return dst, &ReplayRequest{ID: r.id, Key: key, From: hole.from}
			}
			dst = append(dst, Unrecoverable{Key: key, From: hole.from, To: hole.to})
			for j := gi; j < len(r.gaps) && r.gaps[j].from <= hole.to; j++ {
				if r.gaps[j].to >= hole.from {
					r.gaps[j].lost = true
				}
			}
		}
		dst = append(dst, m)
		st.last, st.fresh = m.Seq, false
		for gi < len(r.gaps) && r.gaps[gi].to <= st.last {
			if g := r.gaps[gi]; !g.lost {
				dst = append(dst, Gap{Key: key, From: g.from, To: g.to, Healed: true})
			}
			gi++
		}
	}
	st.unanchored = len(r.held) == 0 && !st.fresh
	st.replay = nil
	return dst, nil
}
