package policybench

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPolicies(t *testing.T) {
	o := Full()
	o.Policies = []string{"kv_hints", "round_robin", "kv"}
	ps, err := o.policies()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	// Canonical order whatever the flag's: the baselines first.
	if got := strings.Join(names, ","); got != "round_robin,kv,kv_hints" {
		t.Fatalf("policies %s", got)
	}
	// Only --routing and --hint-policy tell the policies apart.
	for _, p := range Policies {
		if len(p.Flags) != 4 || p.Flags[0] != "--routing" || p.Flags[2] != "--hint-policy" {
			t.Errorf("%s: flags %q", p.Name, p.Flags)
		}
		if want := p.Name == Reference; (p.Flags[3] == "cost") != want {
			t.Errorf("%s: --hint-policy %s", p.Name, p.Flags[3])
		}
	}
}

func TestCheckNamesTheFlag(t *testing.T) {
	for flag, edit := range map[string]func(*Options){
		"--engines":       func(o *Options) { o.Engines = 1 },
		"--speedup":       func(o *Options) { o.Speedup = -1 },
		"--workload":      func(o *Options) { o.Workload = "chat" },
		"--trace":         func(o *Options) { o.Trace = "x.jsonl" },
		"--policies":      func(o *Options) { o.Policies = []string{"kv", "kv-hints"} },
		"--time-scale":    func(o *Options) { o.TimeScale = -2 },
		"--gpu-blocks":    func(o *Options) { o.GPUBlocks = -1 },
		"--hint-setup-ms": func(o *Options) { o.HintSetup = -time.Millisecond },
	} {
		o := Full()
		edit(&o)
		o.fill()
		err := o.check()
		if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: err %v, want ErrOptions naming the flag", flag, err)
		}
	}
	o := Quick()
	o.fill()
	if err := o.check(); err != nil {
		t.Fatalf("the quick preset: %v", err)
	}
}

func TestFillTakesThePreset(t *testing.T) {
	o := Options{Quick: true, Engines: 3}
	o.Agentic.Sessions = 5
	o.fill()
	q := Quick()
	if o.Engines != 3 || o.Agentic.Sessions != 5 {
		t.Fatalf("set values overwritten: %d engines, %d sessions", o.Engines, o.Agentic.Sessions)
	}
	if o.Speedup != q.Speedup || o.Agentic.Turns != q.Agentic.Turns || o.MaxRequests != q.MaxRequests ||
		o.GPUBlocks != q.GPUBlocks || o.Agentic.Vocab != demoVocab {
		t.Fatalf("quick preset not taken: %+v", o)
	}
}
