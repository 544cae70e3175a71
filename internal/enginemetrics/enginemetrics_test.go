package enginemetrics

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"kvrouter/internal/router"
)

// TestParseEngineMetrics reads testdata/enginemetrics/NAME.prom and
// compares with NAME.json.
func TestParseEngineMetrics(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "enginemetrics", "*.prom"))
	if len(files) == 0 {
		t.Fatal("no cases")
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".prom")
		t.Run(name, func(t *testing.T) {
			text, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(strings.TrimSuffix(f, ".prom") + ".json")
			if err != nil {
				t.Fatal(err)
			}
			var tc struct {
				Worker router.Worker
				Want   map[string]router.EngineLoad
			}
			if err := json.Unmarshal(raw, &tc); err != nil {
				t.Fatal(err)
			}
			want := map[int]router.EngineLoad{}
			for k, v := range tc.Want {
				r, _ := strconv.Atoi(k)
				want[r] = v
			}
			if got := parseEngineMetrics(text, tc.Worker); !reflect.DeepEqual(got, want) {
				t.Fatalf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}
