package policybench

import (
	"errors"
	"slices"
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

func TestParsePolicy(t *testing.T) {
	tests := []struct {
		in    string
		want  Policy
		error string
	}{
		{in: "kv_pls2=--routing kv --hint-policy off --prefill-load-scale 2",
			want: Policy{Name: "kv_pls2", Flags: []string{"--routing", "kv", "--hint-policy", "off", "--prefill-load-scale", "2"}}},
		{in: "kv-oc0.5=--overlap-credit=0.5", want: Policy{Name: "kv-oc0.5", Flags: []string{"--overlap-credit=0.5"}}},
		{in: "--prefill-load-scale 2", error: "NAME=FLAGS"},
		{in: "=--request-weight 1", error: "NAME=FLAGS"},
		{in: "a b=--request-weight 1", error: "letters, digits"},
		{in: "x=", error: "router service's flags"},
		{in: "x=kv", error: "router service's flags"},
		{in: "x=--listen :9000", error: "--listen is the benchmark's"},
		{in: "x=--nats=nats://h:4222", error: "--nats=nats://h:4222 is the benchmark's"},
	}
	for _, tc := range tests {
		got, err := ParsePolicy(tc.in)
		switch {
		case tc.error != "":
			if err == nil || !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), tc.error) {
				t.Errorf("%q: err %v, want one saying %q", tc.in, err, tc.error)
			}
		case err != nil || got.Name != tc.want.Name || !slices.Equal(got.Flags, tc.want.Flags):
			t.Errorf("%q: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestCustomPolicies(t *testing.T) {
	o := Options{Policies: []string{"kv_hints", "kv"}, Custom: []Policy{{Name: "kv_pls2", Flags: []string{"--prefill-load-scale", "2"}}}}
	got, err := o.policies()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, p.Name)
	}
	if want := []string{"kv", "kv_hints", "kv_pls2"}; !slices.Equal(names, want) {
		t.Fatalf("policies %v, want %v", names, want)
	}
	for _, taken := range []string{"random", "kv_pls2"} {
		o := Options{Custom: []Policy{{Name: "kv_pls2", Flags: []string{"-x"}}, {Name: taken, Flags: []string{"-y"}}}}
		if _, err := o.policies(); err == nil || !strings.Contains(err.Error(), "taken") {
			t.Errorf("a second %s: %v", taken, err)
		}
	}
}
