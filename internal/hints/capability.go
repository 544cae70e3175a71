// This file holds what workers advertise about hints: worker type, capability, descriptor keys.

package hints

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
)

// ErrBadCapability marks registration runtime data that cannot be trusted for
// hints. A worker whose data fails to parse takes part in routing but neither
// sends nor receives hints.
var ErrBadCapability = errors.New("hints: bad hint capability")

// WorkerType is a worker's role in disaggregated serving. Hints only flow
// between workers of the same type: a prefill worker's KV is laid out for
// prefill, and a decode worker pulls from decode peers.
type WorkerType uint8

const (
	TypeUnknown WorkerType = iota
	TypeAggregated
	TypePrefill
	TypeDecode
)

func (t WorkerType) String() string {
	switch t {
	case TypeAggregated:
		return workerTypeAggregated
	case TypePrefill:
		return workerTypePrefill
	case TypeDecode:
		return workerTypeDecode
	}
	return workerTypeUnknownLabel
}

// ParseWorkerType reads a worker type as advertised; vLLM's "agg" is
// aggregated.
func ParseWorkerType(s string) (WorkerType, error) {
	switch s {
	case workerTypeAggregated, workerTypeAggShort:
		return TypeAggregated, nil
	case workerTypePrefill:
		return TypePrefill, nil
	case workerTypeDecode:
		return TypeDecode, nil
	}
	return TypeUnknown, fmt.Errorf("%w: %s %q: want %q, %q or %q",
		ErrBadCapability, keyWorkerType, s, workerTypeAggregated, workerTypePrefill, workerTypeDecode)
}

// Capability is what one worker advertises about hints, for all its ranks.
type Capability struct {
	CanConsume bool           // router_hint: the worker accepts kv.fetch hints
	Type       WorkerType     // TypeUnknown when not advertised
	Endpoints  map[int]string // global DP rank → source control endpoint
}

// ParseCapability reads a worker's registration runtime data as decoded from
// JSON. Keys absent from data leave the matching field zero; current names
// win over older ones, and a worker that advertises both with different
// values is refused rather than guessed about.
func ParseCapability(data map[string]any) (Capability, error) {
	var c Capability
	if v, ok, err := lookup(data, keyCapability, keyCapabilityOld); err != nil {
		return Capability{}, err
	} else if ok {
		b, isBool := v.(bool)
		if !isBool {
			return Capability{}, fmt.Errorf("%w: %s: want a bool, got %T", ErrBadCapability, keyCapability, v)
		}
		c.CanConsume = b
	}
	if v, ok, err := lookup(data, keyWorkerType, keyWorkerTypeOld); err != nil {
		return Capability{}, err
	} else if ok {
		s, isString := v.(string)
		if !isString {
			return Capability{}, fmt.Errorf("%w: %s: want a string, got %T", ErrBadCapability, keyWorkerType, v)
		}
		t, err := ParseWorkerType(s)
		if err != nil {
			return Capability{}, err
		}
		c.Type = t
	}
	if v, ok, err := lookup(data, keySourceEndpoints, keySourceEndpointsOld); err != nil {
		return Capability{}, err
	} else if ok {
		eps, err := parseEndpoints(v)
		if err != nil {
			return Capability{}, err
		}
		c.Endpoints = eps
	}
	return c, nil
}

func lookup(data map[string]any, key, old string) (any, bool, error) {
	v, ok := data[key]
	w, okOld := data[old]
	if ok && okOld && !reflect.DeepEqual(v, w) {
		return nil, false, fmt.Errorf("%w: %s and its older name %s disagree; publish one of them",
			ErrBadCapability, key, old)
	}
	if ok {
		return v, true, nil
	}
	return w, okOld, nil
}

func parseEndpoints(v any) (map[int]string, error) {
	var raw map[string]any
	switch m := v.(type) {
	case map[string]any:
		raw = m
	case map[string]string:
		raw = make(map[string]any, len(m))
		for k, s := range m {
			raw[k] = s
		}
	default:
		return nil, fmt.Errorf("%w: %s: want an object of rank → endpoint, got %T",
			ErrBadCapability, keySourceEndpoints, v)
	}
	eps := make(map[int]string, len(raw))
	for k, e := range raw {
		rank, err := strconv.ParseUint(k, 10, 31)
		if err != nil || strconv.FormatUint(rank, 10) != k {
			return nil, fmt.Errorf("%w: %s: key %q is not a global DP rank", ErrBadCapability, keySourceEndpoints, k)
		}
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("%w: %s[%q]: want an endpoint string, got %T",
				ErrBadCapability, keySourceEndpoints, k, e)
		}
		eps[int(rank)] = s
	}
	return eps, nil
}

// Meta returns what Select needs to know about one of the worker's ranks.
// Readiness is not part of the advertisement: the caller sets Ready from the
// state of the rank's event stream.
func (c Capability) Meta(rank int) Meta {
	return Meta{CanConsume: c.CanConsume, Type: c.Type, Endpoint: c.Endpoints[rank]}
}

// Descriptor is what a hint-capable worker publishes about itself.
type Descriptor struct {
	Type      WorkerType
	Endpoints map[int]string // global DP rank → source control endpoint
	// AlsoOld writes the older key names too, for routers that predate the
	// rename.
	AlsoOld bool
}

// Field is one key of registration runtime data.
type Field struct {
	Key   string
	Value any
}

// RuntimeData returns the descriptor's registration keys in the order they
// must be published: endpoints, then worker type, then the capability flag,
// so that a half-written registration never claims the capability without
// the data a source needs.
func (d Descriptor) RuntimeData() ([]Field, error) {
	if d.Type == TypeUnknown {
		return nil, fmt.Errorf("%w: %s: descriptor has no worker type", ErrBadCapability, keyWorkerType)
	}
	if len(d.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: %s: descriptor has no endpoints", ErrBadCapability, keySourceEndpoints)
	}
	eps := make(map[string]string, len(d.Endpoints))
	for _, rank := range slices.Sorted(maps.Keys(d.Endpoints)) {
		e := d.Endpoints[rank]
		if rank < 0 || e == "" {
			return nil, fmt.Errorf("%w: %s: rank %d needs a non-negative rank and a non-empty endpoint",
				ErrBadCapability, keySourceEndpoints, rank)
		}
		eps[strconv.Itoa(rank)] = e
	}
	out := []Field{{keySourceEndpoints, eps}}
	if d.AlsoOld {
		out = append(out, Field{keySourceEndpointsOld, maps.Clone(eps)})
	}
	out = append(out, Field{keyWorkerType, d.Type.String()})
	if d.AlsoOld {
		out = append(out, Field{keyWorkerTypeOld, d.Type.String()})
	}
	out = append(out, Field{keyCapability, true})
	if d.AlsoOld {
		out = append(out, Field{keyCapabilityOld, true})
	}
	return out, nil
}
