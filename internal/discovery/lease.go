// This file holds a registration's lifetime: staged announcement, then lease refreshes.

package discovery

import (
	"context"
	"log/slog"
	"time"
)

// Announce registers w, publishing its runtime data one key more per write,
// in order. Watchers may observe any of these states; because the keys are
// ordered endpoints, worker type, capability flag (docs/wire.md §5.1), no observed
// state is ever a capability flag without the endpoints behind it.
func Announce(ctx context.Context, reg Registry, w Worker) error {
	full := w.RuntimeData
	for n := 1; n < len(full); n++ {
		staged := w
		staged.RuntimeData = full[:n:n]
		if err := reg.Put(ctx, staged); err != nil {
			return err
		}
	}
	return reg.Put(ctx, w)
}

// Keep refreshes w's lease every interval until ctx ends, then deletes the
// registration so routers drop the worker at once instead of after the TTL.
// Refresh failures are logged and retried at the next tick: the lease may
// run out meanwhile, which is the correct outcome for an agent that cannot
// reach the registry.
func Keep(ctx context.Context, reg Registry, w Worker, every time.Duration, log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := reg.Delete(dctx, w.ID); err != nil && err != ErrNotFound {
				log.Warn("discovery: deregister failed; the lease will expire instead", "worker", w.ID, "err", err)
			}
			cancel()
			return
		case <-t.C:
			if err := reg.Put(ctx, w); err != nil && ctx.Err() == nil {
				log.Warn("discovery: lease refresh failed", "worker", w.ID, "err", err)
			}
		}
	}
}
