package hints

import (
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
)

func TestParseCapability(t *testing.T) {
	tests := []struct {
		name    string
		data    string // runtime data as the discovery layer decodes it
		want    Capability
		wantErr string // substring naming the field; "" for success
	}{
		{name: "nothing advertised", data: `{"other":1}`},
		{name: "current names",
			data: `{"router_hint_source_control_endpoints":{"0":"tcp://10.0.0.7:25000","1":"tcp://10.0.0.7:25001"},
				"router_hint_worker_type":"aggregated","router_hint":true}`,
			want: Capability{CanConsume: true, Type: TypeAggregated,
				Endpoints: map[int]string{0: "tcp://10.0.0.7:25000", 1: "tcp://10.0.0.7:25001"}}},
		{name: "older names",
			data: `{"kv_hint_transfer_source_control_endpoints":{"4":"tcp://[fd00::1]:23280"},
				"kv_hint_transfer_worker_type":"decode","kv_hint.transfer.v1":true}`,
			want: Capability{CanConsume: true, Type: TypeDecode, Endpoints: map[int]string{4: "tcp://[fd00::1]:23280"}}},
		{name: "both names agreeing",
			data: `{"router_hint":true,"kv_hint.transfer.v1":true,"router_hint_worker_type":"prefill",
				"kv_hint_transfer_worker_type":"prefill"}`,
			want: Capability{CanConsume: true, Type: TypePrefill}},
		{name: "names mixed across keys",
			data: `{"router_hint":true,"kv_hint_transfer_worker_type":"prefill"}`,
			want: Capability{CanConsume: true, Type: TypePrefill}},
		{name: "vLLM agg is aggregated", data: `{"router_hint_worker_type":"agg"}`,
			want: Capability{Type: TypeAggregated}},
		{name: "capability false", data: `{"router_hint":false,"router_hint_worker_type":"decode"}`,
			want: Capability{Type: TypeDecode}},
		{name: "empty endpoint kept, so the rank is no source", data: `{"router_hint_source_control_endpoints":{"0":""}}`,
			want: Capability{Endpoints: map[int]string{0: ""}}},
		{name: "both names disagreeing", data: `{"router_hint":true,"kv_hint.transfer.v1":false}`,
			wantErr: "router_hint and its older name kv_hint.transfer.v1 disagree"},
		{name: "capability as a string", data: `{"router_hint":"true"}`, wantErr: "router_hint: want a bool"},
		{name: "worker type unknown", data: `{"router_hint_worker_type":"mixed"}`, wantErr: `router_hint_worker_type "mixed"`},
		{name: "worker type not a string", data: `{"kv_hint_transfer_worker_type":1}`, wantErr: "router_hint_worker_type: want a string"},
		{name: "endpoints as a list", data: `{"router_hint_source_control_endpoints":["tcp://a:1"]}`,
			wantErr: "router_hint_source_control_endpoints: want an object"},
		{name: "rank not a number", data: `{"router_hint_source_control_endpoints":{"zero":"tcp://a:1"}}`,
			wantErr: `key "zero" is not a global DP rank`},
		{name: "negative rank", data: `{"router_hint_source_control_endpoints":{"-1":"tcp://a:1"}}`,
			wantErr: `key "-1"`},
		{name: "rank with a leading zero", data: `{"router_hint_source_control_endpoints":{"01":"tcp://a:1"}}`,
			wantErr: `key "01"`},
		{name: "endpoint not a string", data: `{"router_hint_source_control_endpoints":{"0":25000}}`,
			wantErr: `router_hint_source_control_endpoints["0"]: want an endpoint string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var data map[string]any
			if err := json.Unmarshal([]byte(tt.data), &data); err != nil {
				t.Fatal(err)
			}
			got, err := ParseCapability(data)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrBadCapability) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrBadCapability naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.CanConsume != tt.want.CanConsume || got.Type != tt.want.Type || !maps.Equal(got.Endpoints, tt.want.Endpoints) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestCapabilityMeta(t *testing.T) {
	c := Capability{CanConsume: true, Type: TypeDecode, Endpoints: map[int]string{2: "tcp://h:3"}}
	if m := c.Meta(2); m != (Meta{CanConsume: true, Type: TypeDecode, Endpoint: "tcp://h:3"}) {
		t.Errorf("Meta(2) = %+v", m)
	}
	if m := c.Meta(0); m.Endpoint != "" || !m.CanConsume {
		t.Errorf("Meta(0) = %+v, want no endpoint", m)
	}
}

func TestRuntimeData(t *testing.T) {
	tests := []struct {
		name    string
		d       Descriptor
		want    string // the fields written as a JSON object, in publish order
		wantErr string
	}{
		{name: "current names, endpoints first and the flag last",
			d:    Descriptor{Type: TypePrefill, Endpoints: map[int]string{1: "tcp://10.0.0.7:25001", 0: "tcp://10.0.0.7:25000"}},
			want: `{"router_hint_source_control_endpoints":{"0":"tcp://10.0.0.7:25000","1":"tcp://10.0.0.7:25001"},"router_hint_worker_type":"prefill","router_hint":true}`},
		{name: "with the older names, still phase by phase",
			d: Descriptor{Type: TypeAggregated, Endpoints: map[int]string{0: "tcp://h:1"}, AlsoOld: true},
			want: `{"router_hint_source_control_endpoints":{"0":"tcp://h:1"},"kv_hint_transfer_source_control_endpoints":{"0":"tcp://h:1"},` +
				`"router_hint_worker_type":"aggregated","kv_hint_transfer_worker_type":"aggregated","router_hint":true,"kv_hint.transfer.v1":true}`},
		{name: "no worker type", d: Descriptor{Endpoints: map[int]string{0: "tcp://h:1"}}, wantErr: "router_hint_worker_type"},
		{name: "no endpoints", d: Descriptor{Type: TypeDecode}, wantErr: "router_hint_source_control_endpoints"},
		{name: "empty endpoint", d: Descriptor{Type: TypeDecode, Endpoints: map[int]string{0: "tcp://h:1", 1: ""}},
			wantErr: "rank 1"},
		{name: "negative rank", d: Descriptor{Type: TypeDecode, Endpoints: map[int]string{-1: "tcp://h:1"}},
			wantErr: "rank -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fields, err := tt.d.RuntimeData()
			if tt.wantErr != "" {
				if !errors.Is(err, ErrBadCapability) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrBadCapability naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			b.WriteByte('{')
			for i, f := range fields {
				if i > 0 {
					b.WriteByte(',')
				}
				k, _ := json.Marshal(f.Key)
				v, _ := json.Marshal(f.Value)
				b.Write(k)
				b.WriteByte(':')
				b.Write(v)
			}
			b.WriteByte('}')
			if b.String() != tt.want {
				t.Fatalf("published\n%s\nwant\n%s", b.String(), tt.want)
			}
			// What we publish, we read back.
			var data map[string]any
			if err := json.Unmarshal([]byte(b.String()), &data); err != nil {
				t.Fatal(err)
			}
			c, err := ParseCapability(data)
			if err != nil {
				t.Fatal(err)
			}
			if !c.CanConsume || c.Type != tt.d.Type || !maps.Equal(c.Endpoints, tt.d.Endpoints) {
				t.Fatalf("read back %+v from %+v", c, tt.d)
			}
		})
	}
}

func TestParseWorkerType(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want WorkerType
		ok   bool
	}{
		{"aggregated", TypeAggregated, true}, {"agg", TypeAggregated, true}, {"prefill", TypePrefill, true},
		{"decode", TypeDecode, true}, {"Decode", TypeUnknown, false}, {"", TypeUnknown, false}, {"null", TypeUnknown, false},
	} {
		got, err := ParseWorkerType(tt.in)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("ParseWorkerType(%q) = %v, %v", tt.in, got, err)
		}
		if tt.ok && tt.in != "agg" && got.String() != tt.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tt.in)
		}
	}
}
