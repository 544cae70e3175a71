package mocker

import (
	"errors"
	"net/http"
	"slices"
	"testing"

	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

// TestAdapter: each flavour reads the adapter where its engine does.
func TestAdapter(t *testing.T) {
	for _, tc := range []struct {
		flavor      Flavor
		model, path string
		want        string
		err         error
	}{
		{VLLM, "", "", "", nil},
		{VLLM, DefaultModel, "", "", nil},
		{VLLM, "sql", "", "sql", nil},
		{VLLM, DefaultModel + ":sql", "", "", errModelNotFound},
		{VLLM, "nope", "", "", errModelNotFound},
		{VLLM, DefaultModel, "sql", "", nil}, // vLLM has no lora_path
		{SGLang, DefaultModel + ":sql", "", "sql", nil},
		{SGLang, DefaultModel + ":sql", "chat", "sql", nil}, // the model's adapter wins
		{SGLang, DefaultModel, "chat", "chat", nil},
		{SGLang, "", "sql", "sql", nil},
		{SGLang, "sql", "", "", errModelNotFound},
		{SGLang, DefaultModel, "nope", "", errBadRequest},
		{SGLang, DefaultModel + ":nope", "", "", errModelNotFound},
	} {
		c := Config{Flavor: tc.flavor, LoRAs: []string{"sql", "chat"}}
		c.setDefaults()
		got, err := c.adapter(tc.model, tc.path)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
			t.Errorf("%s model %q lora_path %q: %q, %v; want %q, %v", tc.flavor, tc.model, tc.path, got, err, tc.want, tc.err)
		}
	}
	for _, loras := range [][]string{{""}, {"a", "a"}, {DefaultModel}, {"a:b"}} {
		c := Config{LoRAs: loras}
		c.setDefaults()
		if err := c.validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("LoRAs %q: %v, want a config error", loras, err)
		}
	}
	c := Config{LoRAs: []string{"a"}, EventFormat: FormatArray}
	c.setDefaults()
	if err := c.validate(); !errors.Is(err, ErrConfig) {
		t.Errorf("LoRA with SGLang's array events: %v, want a config error", err)
	}
}

// TestLoRAEvents: a request naming an adapter is cached apart from the
// base model's, under engine hashes of its own, and its events say so as
// the engine's do (lora_name; vLLM's lora_id and extra keys): the blocks
// the router indexes from them have the identity it gives the request.
func TestLoRAEvents(t *testing.T) {
	for _, tc := range []struct {
		name   string
		flavor Flavor
		body   map[string]any
	}{
		{"vllm model", VLLM, map[string]any{"model": "sql"}},
		{"sglang model", SGLang, map[string]any{"model": DefaultModel + ":sql"}},
		{"sglang lora_path", SGLang, map[string]any{"lora_path": "sql"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startEngine(t, func(c *Config) { c.Flavor, c.LoRAs, c.BlockSize = tc.flavor, []string{"chat", "sql"}, 16 })
			var models modelList
			req, _ := http.NewRequest(http.MethodGet, e.URL()+pathModels, nil)
			doJSON(t, req, &models)
			if len(models.Data) != 3 ||
				models.Data[2].ID != "sql" || models.Data[2].Parent == nil || *models.Data[2].Parent != DefaultModel {
				t.Fatalf("/v1/models %+v", models)
			}
			s := subscribe(t, e.EventEndpoint(0))
			warm(t, e, s)
			prompt := longPrompt(t, e, tc.name, 100)
			tokens := tokenize(t, e, prompt)
			keys := e.cfg.engineHashes(tokens, "", "sql")
			if base := e.cfg.engineHashes(tokens, "", ""); slices.ContainsFunc(keys, func(k uint64) bool { return slices.Contains(base, k) }) {
				t.Fatal("an adapter's blocks hash like the base model's")
			}
			body := peerBody(prompt, nil)
			for k, v := range tc.body {
				body[k] = v
			}
			complete(t, e, body)
			gpu := eventFilter{kind: kvevents.KindStored, tier: kvevents.TierDevice}
			var local []uint64
			for _, r := range s.collectKeys(map[eventFilter][]uint64{gpu: keys}) {
				for _, ev := range r.batch.Events {
					if ev.Kind != kvevents.KindStored || ev.Tier != kvevents.TierDevice {
						continue
					}
					if ev.LoRAName != "sql" || (tc.flavor == VLLM) != ev.HasLoRAID || (ev.HasLoRAID && ev.LoRAID != 2) {
						t.Fatalf("event %+v: want lora_name sql (and vLLM's lora_id 2)", ev)
					}
					local = append(local, kvhash.LocalHashes(ev.TokenIDs, ev.BlockSize, kvhash.SeedFor(ev.LoRAName, ev.CacheSalt))...)
				}
			}
			// The router's identity for the request, from the events.
			want := kvhash.LocalHashes(tokens, 16, kvhash.SeedFor("sql", ""))
			if !slices.Equal(local, want) {
				t.Fatalf("indexed local hashes %v, want the request's %v", local, want)
			}
		})
	}
}
