// This file holds Follow: a Subscriber run anew, after a hook, whenever its publisher comes back.

package kvstream

import "context"

// Follow runs sub and hands its items to handle, in order, until ctx ends
// (it returns nil) or Run fails. With before set, before runs first; and
// whenever the publisher comes back (a Reconnected, maybe a new process,
// or a Restart), that item is handed to handle, the run is stopped, before
// runs again, and sub is run anew with fresh sequence state, so that its
// catch-up (Config.CatchUp) replays the publisher's history from seq 0
// after before. That is where an SGLang engine's snapshot-v1 cut is
// fetched: the replay must be asked for after the cut so that it reaches
// the cut's barrier. Without before, a Reconnected is followed by the
// catch-up of what was missed (Tracker.Reconnect).
func Follow(ctx context.Context, sub *Subscriber, before func(context.Context), handle func(Item)) error {
	for {
		if before != nil {
			before(ctx)
		}
		if ctx.Err() != nil {
			return nil
		}
		again, err := followOnce(ctx, sub, before != nil, handle)
		if !again {
			return err
		}
	}
}

// followOnce runs sub until ctx ends or, with anew, until the publisher
// comes back; again says to run it anew.
func followOnce(ctx context.Context, sub *Subscriber, anew bool, handle func(Item)) (again bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	items := make(chan Item, 256)
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx, items) }()
	for {
		select {
		case err := <-done:
			return false, err
		case it := <-items:
			handle(it)
			switch it.(type) {
			case Reconnected, Restart:
				if !anew {
					continue
				}
				cancel()
				// What the run delivers after this item is dropped: the
				// next run brings it again, after before.
				if err := <-done; err != nil {
					return false, err
				}
				return true, nil
			}
		}
	}
}
