package kvevents

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestBatchJSON(t *testing.T) {
	var d Decoder
	v1, err := d.Decode(mustHex(t, specV1))
	if err != nil {
		t.Fatal(err)
	}
	v1.Events = append(v1.Events, Event{Kind: KindCleared})
	tests := []struct {
		name string
		view BatchJSON
		want string
	}{
		{"V1 plus cleared", BatchJSON{Batch: v1},
			`{"ts":1700000000.5,"dp_rank":0,"events":[` +
				`{"type":"BlockStored","block_hashes":[9561501211280363793],"parent_block_hash":null,"token_ids":[1,2,3,4],"block_size":4,"tier":"device","ownership":null,"lora_name":null,"cache_salt":null,"group_idx":0},` +
				`{"type":"BlockRemoved","block_hashes":[9561501211280363793],"tier":"device","ownership":null},` +
				`{"type":"AllBlocksCleared","ownership":null}]}`},
		{"frame, no rank, every value set", BatchJSON{
			Frame: &Frame{Topic: "kv@h:1@m", Seq: 7},
			Batch: Batch{TS: 2, Events: []Event{
				{Kind: KindStored, BlockHashes: []uint64{1<<64 - 1, 0}, ParentHash: 5, HasParent: true, BlockSize: 16,
					Placeholder: true, Tier: TierHost, Ownership: OwnedByRunner, LoRAName: "a\"b", CacheSalt: "t\x01\xff", GroupIdx: 2},
				{Kind: KindRemoved, Tier: TierExternal, Ownership: OwnedByRunner}}}},
			`{"topic":"kv@h:1@m","seq":7,"ts":2,"dp_rank":null,"events":[` +
				`{"type":"BlockStored","block_hashes":[18446744073709551615,0],"parent_block_hash":5,"token_ids":[],"block_size":16,"tier":"host","ownership":"kvcr","lora_name":"a\"b","cache_salt":"t\u0001\ufffd","group_idx":2},` +
				`{"type":"BlockRemoved","block_hashes":[],"tier":"external","ownership":"kvcr"}]}`},
		{"non-finite ts", BatchJSON{Batch: Batch{TS: math.NaN()}}, `{"ts":null,"dp_rank":null,"events":[]}`},
		{"tiny ts", BatchJSON{Batch: Batch{TS: 1e-9, DPRank: 3, HasDPRank: true}}, `{"ts":1e-9,"dp_rank":3,"events":[]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(tc.view)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("JSON =\n%s\nwant\n%s", got, tc.want)
			}
			// Whatever we print must be JSON that encoding/json agrees on.
			var v map[string]any
			if err := json.Unmarshal(got, &v); err != nil {
				t.Errorf("output is not JSON: %v", err)
			}
		})
	}
}

func TestWriteJSON(t *testing.T) {
	v1 := mustHex(t, specV1)
	good := string(AppendFrame(nil, Frame{Topic: "kv", Seq: 4, Payload: batch()}))
	tests := []struct {
		name      string
		src       Source
		withFrame bool
		want      string
		err       string
	}{
		{"single payload", SinglePayload(v1), false,
			`{"ts":1700000000.5,"dp_rank":0,"events":[{"type":"BlockStored","block_hashes":[9561501211280363793],"parent_block_hash":null,"token_ids":[1,2,3,4],"block_size":4,"tier":"device","ownership":null,"lora_name":null,"cache_salt":null,"group_idx":0},{"type":"BlockRemoved","block_hashes":[9561501211280363793],"tier":"device","ownership":null}]}` + "\n", ""},
		{"frames", NewFrameReader(strings.NewReader(good + good)), true,
			`{"topic":"kv","seq":4,"ts":1700000000.5,"dp_rank":0,"events":[]}` + "\n" +
				`{"topic":"kv","seq":4,"ts":1700000000.5,"dp_rank":0,"events":[]}` + "\n", ""},
		{"bad payload after a good one", NewFrameReader(strings.NewReader(good + "kv 0000000000000005 90\n")), true,
			`{"topic":"kv","seq":4,"ts":1700000000.5,"dp_rank":0,"events":[]}` + "\n",
			`topic "kv" seq 5: kvevents: decode envelope: malformed payload: 0-element envelope, want [ts, events] or [ts, events, data_parallel_rank]`},
		{"bad line", NewFrameReader(strings.NewReader("nonsense\n")), true, "",
			"line 1: bad capture line: want <topic> <seq> <payload hex>"},
		{"bad single payload", SinglePayload(v1[:10]), false, "", "kvevents: decode envelope field events: malformed payload: truncated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			err := WriteJSON(&out, tc.src, &Decoder{}, tc.withFrame)
			if out.String() != tc.want {
				t.Errorf("output =\n%s\nwant\n%s", out.String(), tc.want)
			}
			if got := fmt.Sprint(err); (tc.err == "" && err != nil) || (tc.err != "" && got != tc.err) {
				t.Errorf("error = %v\nwant    %s", err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Error("error spans lines; the CLI promises one")
			}
		})
	}
}
