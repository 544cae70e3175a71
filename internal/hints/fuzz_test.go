package hints

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"testing"
)

// FuzzParse: a consumer never panics on a hint, and what it accepts it can
// re-encode and accept again unchanged.
func FuzzParse(f *testing.F) {
	f.Add([]byte(specEnvelope))
	f.Add(AppendEnvelope(nil, "r", Hint{Endpoint: "tcp://h:1", BlockHashes: []uint64{1<<64 - 1, 0}}))
	f.Add(AppendFlat(nil, Hint{Endpoint: "tcp://h:1", BlockHashes: []uint64{3, 3}}))
	f.Add([]byte(`{"actions":[{"action_type":"kv.evict"},{"action_type":"kv.fetch","action_version":"9","payload":{"source_control_endpoint":"x","block_hashes":[1,1.5]}}]}`))
	f.Add([]byte(`{"source_control_endpoint":"x","block_hashes":[true],"mode":"move"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		samePaths(t, data, p, err)
		if err != nil {
			return
		}
		h := p.Hint
		if h.Endpoint == "" || len(h.BlockHashes) == 0 {
			t.Fatalf("accepted an incomplete hint %+v", h)
		}
		if len(slices.Compact(slices.Sorted(slices.Values(h.BlockHashes)))) != len(h.BlockHashes) {
			t.Fatalf("duplicates survived: %v", h.BlockHashes)
		}
		var again []byte
		if p.Flat {
			again = AppendFlat(nil, h)
		} else {
			again = AppendEnvelope(nil, p.MessageID, h)
		}
		q, err := Parse(again)
		if err != nil {
			t.Fatalf("re-encoded %s: %v", again, err)
		}
		if !reflect.DeepEqual(q.Hint, h) || q.Flat != p.Flat || len(q.Warnings) != 0 {
			t.Fatalf("%s → %+v → %s → %+v", data, p, again, q)
		}
		if err := h.check(); err != nil {
			t.Fatalf("a parsed hint fails Hint's own check: %v", err)
		}
	})
}

// FuzzStrip: request bodies come from clients. Strip and Attach never
// panic, never leave a client hint behind, and change nothing else.
func FuzzStrip(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"kv_hints":1}`, ` {"kv_transfer_params":{"router_hint":{},"x":[1e400]},"a":"\u0041"} `,
		`{"kv\u005fhints":{},"kv_transfer_params":null}`, `{"kv_transfer_params":"s","kv_router_hint":[]}`,
		`{"a":{"kv_hints":1},"kv_transfer_params":{"kv_hint":1},"kv_transfer_params":{"b":2}}`, `[]`, `{"a":`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		out, stripped, err := Strip(body)
		if err != nil {
			if _, _, _, xerr := Extract(body, allPlacements...); xerr == nil {
				t.Fatalf("Strip refuses what Extract reads: %v", err)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("Strip wrote invalid JSON %s", out)
		}
		if _, _, found, _ := Extract(out, allPlacements...); found {
			t.Fatalf("a hint survived in %s", out)
		}
		if want, got := withoutHints(decode(t, body)), decode(t, out); !reflect.DeepEqual(got, want) {
			t.Fatalf("Strip(%s) = %s changed more than hints", body, out)
		}
		if again, more, err := Strip(out); err != nil || more || string(again) != string(out) {
			t.Fatalf("Strip is not idempotent on %s: %s, %v, %v", out, again, more, err)
		}
		if stripped == (string(out) == string(body)) {
			t.Fatalf("stripped=%v for %s → %s", stripped, body, out)
		}
		for _, p := range allPlacements {
			with, err := Attach(body, p, "r", bodyHint)
			if err != nil {
				continue // only a kv_transfer_params that is no object
			}
			raw, got, found, err := Extract(with, p)
			if err != nil || !found || got != p {
				t.Fatalf("Attach(%v) wrote %s; Extract = %v, %v, %v", p, with, got, found, err)
			}
			if parsed, err := Parse(raw); err != nil || !reflect.DeepEqual(parsed.Hint, bodyHint) {
				t.Fatalf("Attach(%v) wrote %s; it parses as %+v, %v", p, with, parsed, err)
			}
		}
	})
}

// FuzzCapability: registration data comes from other processes. Parsing
// never panics, and a complete advertisement survives publication.
func FuzzCapability(f *testing.F) {
	f.Add([]byte(`{"router_hint_source_control_endpoints":{"0":"tcp://h:1"},"router_hint_worker_type":"agg","router_hint":true}`))
	f.Add([]byte(`{"kv_hint_transfer_source_control_endpoints":{"7":"tcp://h:2"},"kv_hint_transfer_worker_type":"decode","kv_hint.transfer.v1":true}`))
	f.Add([]byte(`{"router_hint":true,"kv_hint.transfer.v1":false,"router_hint_source_control_endpoints":{"x":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m map[string]any
		if json.Unmarshal(data, &m) != nil {
			return
		}
		c, err := ParseCapability(m)
		if err != nil || c.Type == TypeUnknown || len(c.Endpoints) == 0 || slices.Contains(slices.Collect(maps.Values(c.Endpoints)), "") {
			return
		}
		fields, err := Descriptor{Type: c.Type, Endpoints: c.Endpoints, AlsoOld: true}.RuntimeData()
		if err != nil {
			t.Fatalf("cannot republish %+v: %v", c, err)
		}
		back := map[string]any{}
		for _, fl := range fields {
			back[fl.Key] = fl.Value
		}
		d, err := ParseCapability(back)
		if err != nil || !d.CanConsume || d.Type != c.Type || !maps.Equal(d.Endpoints, c.Endpoints) {
			t.Fatalf("%+v republished as %+v, %v", c, d, err)
		}
	})
}
