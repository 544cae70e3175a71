package workerconfig

import (
	"encoding/json"
	"os"
	"testing"
)

func benchConfig(b *testing.B, engine Engine, name string) ([]byte, Options) {
	raw, err := os.ReadFile("testdata/" + string(engine) + "/" + name + ".json")
	if err != nil {
		b.Fatal(err)
	}
	var c caseFile
	if err := json.Unmarshal(raw, &c); err != nil {
		b.Fatal(err)
	}
	return c.Config, c.Options.options()
}

// A state agent builds one descriptor per (re)start; these measure that cost
// for a realistic full server-info object.
func BenchmarkFromSGLang(b *testing.B) {
	for _, name := range []string{"linker_tp1_full", "dp_attention"} {
		b.Run(name, func(b *testing.B) {
			config, opt := benchConfig(b, EngineSGLang, name)
			b.SetBytes(int64(len(config)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := FromSGLang(config, opt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkFromVLLM(b *testing.B) {
	config, opt := benchConfig(b, EngineVLLM, "tier_full")
	b.SetBytes(int64(len(config)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := FromVLLM(config, opt); err != nil {
			b.Fatal(err)
		}
	}
}
