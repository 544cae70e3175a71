// Package discovery owns the registry of workers: what each state agent
// announces about its worker (model, block size, DP ranks, hint capability
// and peer endpoints, cache owners), kept alive by a lease, and watched by
// routers. Two implementations share one behaviour suite: NATS JetStream
// key-value for real clusters and an in-memory one for single-process use.
package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrNotFound is returned when a worker id is not registered.
var ErrNotFound = errors.New("worker not registered")

// Worker is one registration. Its id is stable across agent restarts so that
// a restarted worker replaces its old entry instead of duplicating it.
type Worker struct {
	ID        string `json:"id"`
	Model     string `json:"model"`
	URL       string `json:"url"`    // the engine's HTTP front
	Engine    string `json:"engine"` // sglang | vllm
	BlockSize int    `json:"block_size"`
	DPStart   int    `json:"dp_start"`
	DPSize    int    `json:"dp_size"`
	// RuntimeData carries the hint keys of docs/wire.md §5.1 in publish order.
	RuntimeData RuntimeData `json:"runtime_data,omitempty"`
	// Owners maps a global DP rank (decimal) to the cache owner id whose
	// runner-owned blocks that rank's runner holds.
	Owners map[string]string `json:"owners,omitempty"`
	// Events is the event-plane subject prefix the worker's agent
	// republishes on; empty when the worker has no agent.
	Events string `json:"events,omitempty"`
	// Refusal says why the worker is a plain routing target without hints.
	Refusal string `json:"refusal,omitempty"`
	// Role is the worker's part in disaggregated serving: "prefill",
	// "decode" or "aggregated" (empty from agents that predate it: the
	// worker type of the runtime data, if any, stands in).
	Role string `json:"role,omitempty"`
	// BootstrapPort is an SGLang prefill worker's bootstrap server port.
	BootstrapPort int `json:"bootstrap_port,omitempty"`
}

// Validate checks what a router needs to route to the worker.
func (w Worker) Validate() error {
	switch {
	case w.ID == "":
		return errors.New("discovery: worker id is empty")
	case w.Model == "":
		return fmt.Errorf("discovery: worker %q: model is empty", w.ID)
	case w.URL == "":
		return fmt.Errorf("discovery: worker %q: url is empty", w.ID)
	case w.BlockSize <= 0:
		return fmt.Errorf("discovery: worker %q: block_size %d must be positive", w.ID, w.BlockSize)
	case w.DPSize <= 0 || w.DPStart < 0:
		return fmt.Errorf("discovery: worker %q: dp range start %d size %d is invalid", w.ID, w.DPStart, w.DPSize)
	}
	return nil
}

// Field is one runtime-data key and its JSON value.
type Field struct {
	Key   string
	Value json.RawMessage
}

// RuntimeData is an ordered JSON object: the order in which keys were added
// is the order in which they were published, which docs/wire.md §5.1 prescribes.
type RuntimeData []Field

// Set adds or replaces key with v's JSON encoding, keeping first-set order.
func (r RuntimeData) Set(key string, v any) (RuntimeData, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return r, fmt.Errorf("runtime data %q: %w", key, err)
	}
	for i := range r {
		if r[i].Key == key {
			r[i].Value = raw
			return r, nil
		}
	}
	return append(r, Field{Key: key, Value: raw}), nil
}

// Get returns the raw value of key.
func (r RuntimeData) Get(key string) (json.RawMessage, bool) {
	for _, f := range r {
		if f.Key == key {
			return f.Value, true
		}
	}
	return nil, false
}

// Map decodes the fields into a generic map (numbers as json.Number).
func (r RuntimeData) Map() (map[string]any, error) {
	m := make(map[string]any, len(r))
	for _, f := range r {
		d := json.NewDecoder(bytes.NewReader(f.Value))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			return nil, fmt.Errorf("runtime data %q: %w", f.Key, err)
		}
		m[f.Key] = v
	}
	return m, nil
}

// MarshalJSON writes the fields as one object in order.
func (r RuntimeData) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range r {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(f.Key)
		b.Write(k)
		b.WriteByte(':')
		if len(f.Value) == 0 {
			b.WriteString("null")
		} else {
			b.Write(f.Value)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads an object keeping its key order.
func (r *RuntimeData) UnmarshalJSON(data []byte) error {
	d := json.NewDecoder(bytes.NewReader(data))
	tok, err := d.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		*r = nil
		return nil
	}
	if delim, ok := tok.(json.Delim); !ok || delim != '{' {
		return errors.New("runtime_data: want a JSON object")
	}
	var out RuntimeData
	for d.More() {
		kt, err := d.Token()
		if err != nil {
			return err
		}
		key, _ := kt.(string)
		var raw json.RawMessage
		if err := d.Decode(&raw); err != nil {
			return fmt.Errorf("runtime_data %q: %w", key, err)
		}
		out = append(out, Field{Key: key, Value: raw})
	}
	*r = out
	return nil
}

// Op is what happened to a registration.
type Op uint8

const (
	// OpPut: a worker registered or refreshed its registration.
	OpPut Op = iota + 1
	// OpDelete: a worker left or its lease expired.
	OpDelete
	// OpSynced: every registration that existed when the watch started has
	// been delivered; what follows is live.
	OpSynced
)

// Change is one update seen by a watcher.
type Change struct {
	Op     Op
	ID     string
	Worker Worker // set for OpPut
}

// Registry stores registrations under a lease: an entry not refreshed
// within the registry's TTL disappears and watchers see OpDelete.
type Registry interface {
	// Put creates or refreshes a registration, renewing its lease.
	Put(ctx context.Context, w Worker) error
	// Delete removes a registration now.
	Delete(ctx context.Context, id string) error
	// Watch delivers every current registration, then OpSynced, then live
	// changes. The channel closes when ctx ends or the watch is lost; a
	// caller that needs certainty must treat a closed watch as unknown state.
	Watch(ctx context.Context) (<-chan Change, error)
}

// keyFor maps a worker id onto the NATS key alphabet, reversibly, because
// ids are usually host:port.
func keyFor(id string) string {
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "=%02x", c)
		}
	}
	return b.String()
}

func idFor(key string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		if key[i] != '=' {
			b.WriteByte(key[i])
			continue
		}
		if i+2 >= len(key) {
			return "", fmt.Errorf("discovery: malformed key %q", key)
		}
		var c byte
		if _, err := fmt.Sscanf(key[i+1:i+3], "%02x", &c); err != nil {
			return "", fmt.Errorf("discovery: malformed key %q: %w", key, err)
		}
		b.WriteByte(c)
		i += 2
	}
	return b.String(), nil
}
