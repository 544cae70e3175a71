package mocker

import (
	"encoding/json"
	"testing"
)

// TestReportsContextLength: the context length is where routers read it:
// max_model_len on the /v1/models card (vLLM's and recent SGLang's shape),
// and for the SGLang flavour also context_length in /get_server_info.
func TestReportsContextLength(t *testing.T) {
	for _, flavor := range []Flavor{SGLang, VLLM} {
		t.Run(string(flavor), func(t *testing.T) {
			e := startEngine(t, func(c *Config) { c.Flavor, c.MaxModelLen = flavor, 5000 })
			var models struct {
				Data []struct {
					ID          string `json:"id"`
					MaxModelLen int    `json:"max_model_len"`
				} `json:"data"`
			}
			if err := json.Unmarshal(getBody(t, e.URL()+pathModels), &models); err != nil {
				t.Fatal(err)
			}
			if len(models.Data) != 1 || models.Data[0].ID != e.cfg.Model || models.Data[0].MaxModelLen != 5000 {
				t.Fatalf("/v1/models: %+v", models)
			}
			if flavor != SGLang {
				return
			}
			var info struct {
				ContextLength int `json:"context_length"`
			}
			if err := json.Unmarshal(getBody(t, e.URL()+pathServerInfo), &info); err != nil || info.ContextLength != 5000 {
				t.Fatalf("/get_server_info: %+v %v", info, err)
			}
		})
	}
}
