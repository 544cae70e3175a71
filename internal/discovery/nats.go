// This file holds the Registry in a JetStream key-value bucket whose TTL is the lease.

package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultBucket is the JetStream key-value bucket holding registrations.
const DefaultBucket = "kvrouter_workers"

// NATS is a Registry in a JetStream key-value bucket whose TTL is the lease.
type NATS struct {
	js  jetstream.JetStream
	cfg jetstream.KeyValueConfig
	log *slog.Logger

	mu sync.Mutex
	kv jetstream.KeyValue
}

var _ Registry = (*NATS)(nil)

// OpenNATS opens (creating when missing) the registration bucket. ttl is
// the lease: an agent must Put more often than that. NATS needs ttl ≥ 1s.
func OpenNATS(ctx context.Context, js jetstream.JetStream, bucket string, ttl time.Duration, log *slog.Logger) (*NATS, error) {
	if bucket == "" {
		bucket = DefaultBucket
	}
	if ttl < time.Second {
		return nil, fmt.Errorf("discovery: lease %v is below the 1s NATS minimum (raise --lease)", ttl)
	}
	if log == nil {
		log = slog.Default()
	}
	n := &NATS{js: js, log: log, cfg: jetstream.KeyValueConfig{
		Bucket:  bucket,
		TTL:     ttl,
		History: 1,
		// Registrations live no longer than a lease, so memory storage
		// loses nothing a restarted server would need: agents re-announce
		// at their next refresh, recreating the bucket (see Put).
		Storage: jetstream.MemoryStorage,
		// Markers make expiries visible to watchers, which is how a router
		// learns that an agent stopped heartbeating.
		LimitMarkerTTL: ttl,
	}}
	if _, err := n.open(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *NATS) open(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := n.js.CreateOrUpdateKeyValue(ctx, n.cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery: bucket %q: %w", n.cfg.Bucket, err)
	}
	n.mu.Lock()
	n.kv = kv
	n.mu.Unlock()
	return kv, nil
}

func (n *NATS) bucket() jetstream.KeyValue {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.kv
}

// Put implements Registry.
func (n *NATS) Put(ctx context.Context, w Worker) error {
	if err := w.Validate(); err != nil {
		return err
	}
	raw, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("discovery: encode %q: %w", w.ID, err)
	}
	_, err = n.bucket().Put(ctx, keyFor(w.ID), raw)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		// The server restarted and lost the in-memory bucket.
		var kv jetstream.KeyValue
		if kv, err = n.open(ctx); err == nil {
			_, err = kv.Put(ctx, keyFor(w.ID), raw)
		}
	}
	if err != nil {
		return fmt.Errorf("discovery: put %q: %w", w.ID, err)
	}
	return nil
}

// Delete implements Registry.
func (n *NATS) Delete(ctx context.Context, id string) error {
	kv := n.bucket()
	if _, err := kv.Get(ctx, keyFor(id)); errors.Is(err, jetstream.ErrKeyNotFound) {
		return ErrNotFound
	}
	if err := kv.Delete(ctx, keyFor(id)); err != nil {
		return fmt.Errorf("discovery: delete %q: %w", id, err)
	}
	return nil
}

// Watch implements Registry.
func (n *NATS) Watch(ctx context.Context) (<-chan Change, error) {
	w, err := n.bucket().WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("discovery: watch: %w", err)
	}
	out := make(chan Change, 64)
	go func() {
		defer close(out)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				c, ok := n.change(e)
				if !ok {
					continue
				}
				select {
				case out <- c:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

func (n *NATS) change(e jetstream.KeyValueEntry) (Change, bool) {
	if e == nil {
		return Change{Op: OpSynced}, true
	}
	id, err := idFor(e.Key())
	if err != nil {
		n.log.Warn("discovery: skipping foreign key", "key", e.Key(), "err", err)
		return Change{}, false
	}
	switch e.Operation() {
	case jetstream.KeyValuePut:
		var w Worker
		if err := json.Unmarshal(e.Value(), &w); err != nil {
			n.log.Warn("discovery: skipping malformed registration", "id", id, "err", err)
			return Change{}, false
		}
		if err := w.Validate(); err != nil {
			n.log.Warn("discovery: skipping invalid registration", "id", id, "err", err)
			return Change{}, false
		}
		return Change{Op: OpPut, ID: id, Worker: w}, true
	default: // delete, purge, or a TTL marker
		return Change{Op: OpDelete, ID: id}, true
	}
}
