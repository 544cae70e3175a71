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

// ClusterReplicas is how many servers of a NATS cluster hold the bucket:
// it survives the loss of one. A single server, or a cluster with fewer
// JetStream servers, holds it alone.
const ClusterReplicas = 3

// JetStream API error codes that say the replicas asked for cannot be
// placed: the server is not clustered, or too few servers take part.
const (
	errCodeNoPeers               jetstream.ErrorCode = 10005
	errCodeInsufficientResources jetstream.ErrorCode = 10023
	errCodeReplicasNotSupported  jetstream.ErrorCode = 10074
	// errCodeStreamNameInUse: another process created the bucket, with
	// another configuration, since we found it missing.
	errCodeStreamNameInUse jetstream.ErrorCode = 10058
)

// NATS is a Registry in a JetStream key-value bucket whose TTL is the lease.
type NATS struct {
	js  jetstream.JetStream
	cfg jetstream.KeyValueConfig
	log *slog.Logger

	mu     sync.Mutex
	kv     jetstream.KeyValue
	ttl    time.Duration // the lease: cfg's, or an existing bucket's
	warned bool          // the bucket's other lease was logged
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
		// On a cluster, a server lost loses no registration: the others
		// hold it.
		Replicas: ClusterReplicas,
	}, ttl: ttl}
	if _, err := n.open(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// Creating the bucket: concurrent creations of a replicated bucket leave
// all but one waiting for an answer that never comes, so each attempt is
// bounded and retried.
const (
	openAttemptTimeout = 2 * time.Second
	openAttempts       = 8
)

func (n *NATS) open(ctx context.Context) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	var err error
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, openAttemptTimeout)
		kv, err = n.createOrOpen(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) || attempt == openAttempts {
			break
		}
		n.log.Debug("discovery: bucket not answered in time; retrying", "bucket", n.cfg.Bucket, "attempt", attempt)
	}
	if err != nil {
		return nil, fmt.Errorf("discovery: bucket %q: %w", n.cfg.Bucket, err)
	}
	n.mu.Lock()
	n.kv = kv
	n.mu.Unlock()
	return kv, nil
}

// createOrOpen opens the bucket, creating it when missing; an existing
// one, a degraded cluster's included, is taken as it is (existing).
func (n *NATS) createOrOpen(ctx context.Context) (jetstream.KeyValue, error) {
	if kv, err := n.existing(ctx); kv != nil || err != nil {
		return kv, err
	}
	cfg := n.config()
	kv, err := n.js.CreateKeyValue(ctx, cfg)
	if cannotPlace(err) {
		n.log.Info("discovery: the NATS server is not a cluster of 3 or more JetStream servers; registrations are held by one server",
			"bucket", n.cfg.Bucket)
		one := cfg
		one.Replicas = 1
		kv, err = n.js.CreateKeyValue(ctx, one)
	}
	if createdMeanwhile(err) {
		if kv, err = n.existing(ctx); kv == nil && err == nil {
			err = jetstream.ErrBucketNotFound // created and deleted meanwhile
		}
	}
	return kv, err
}

// existing returns the bucket if it exists, taking its lease; nil and no
// error when it does not.
//
// The bucket is the fleet's, whoever made it: its TTL is the lease every
// agent lives by. Updating it to this process's --lease would make each
// process that starts set the fleet's lease (a shorter one expiring agents
// that refresh at their own pace), and NATS refuses some updates of a
// bucket in use.
func (n *NATS) existing(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := n.js.KeyValue(ctx, n.cfg.Bucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	n.adopt(ctx, kv)
	return kv, nil
}

// createdMeanwhile reports an error saying another process created the
// bucket, with another configuration, since it was found missing.
func createdMeanwhile(err error) bool {
	if errors.Is(err, jetstream.ErrBucketExists) {
		return true
	}
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == errCodeStreamNameInUse
}

// adopt takes an existing bucket's TTL as the lease, saying so when it is
// not the one this process was given.
func (n *NATS) adopt(ctx context.Context, kv jetstream.KeyValue) {
	st, err := kv.Status(ctx)
	if err != nil {
		return
	}
	ttl := st.TTL()
	n.mu.Lock()
	defer n.mu.Unlock()
	if ttl <= 0 || ttl == n.ttl {
		return
	}
	if !n.warned {
		n.warned = true
		n.log.Warn("discovery: the registrations bucket exists with another lease; keeping the bucket's (set the same --lease on every agent and router service, or delete the bucket to change it)",
			"bucket", n.cfg.Bucket, "bucket_lease", ttl, "lease", n.cfg.TTL)
	}
	n.ttl = ttl
}

// config is the bucket's configuration to create it with: the lease
// adopted last, so that a bucket a restarted server lost comes back as
// the fleet had it.
func (n *NATS) config() jetstream.KeyValueConfig {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.cfg
	c.TTL, c.LimitMarkerTTL = n.ttl, n.ttl
	return c
}

// Lease is the registrations' lease: the bucket's TTL, which an existing
// bucket keeps whatever lease this process was given. Agents refresh
// their registration well within it.
func (n *NATS) Lease() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ttl
}

// cannotPlace reports an error saying the bucket's replicas cannot be
// placed on the servers there are.
func cannotPlace(err error) bool {
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode {
	case errCodeNoPeers, errCodeInsufficientResources, errCodeReplicasNotSupported:
		return true
	}
	return false
}

// Replicas is how many servers hold the bucket now.
func (n *NATS) Replicas(ctx context.Context) (int, error) {
	st, err := n.bucket().Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("discovery: bucket %q: %w", n.cfg.Bucket, err)
	}
	if s, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		return s.StreamInfo().Config.Replicas, nil
	}
	return 0, fmt.Errorf("discovery: bucket %q: status of type %T", n.cfg.Bucket, st)
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
