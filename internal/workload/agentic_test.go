package workload

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestAgenticShape(t *testing.T) {
	tests := []struct {
		name string
		cfg  AgenticConfig
	}{
		{"quick", Quick()},
		{"bursts only", AgenticConfig{Sessions: 10, Turns: 3, SystemPrompts: 2, SystemTokensMin: 100, SystemTokensMax: 100,
			UserTokens: 7, OutputTokens: 5, ThinkTime: time.Second, BurstSize: 4, BurstInterval: time.Minute, Seed: 9}},
		{"background only, no think time, no user tokens", AgenticConfig{Sessions: 7, Turns: 2, SystemPrompts: 3, SystemTokensMin: 10, SystemTokensMax: 50,
			OutputTokens: 3, ArrivalRate: 100, Vocab: Vocab{Lo: 1, Hi: 3}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			reqs, err := Agentic(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(reqs) != cfg.Sessions*cfg.Turns {
				t.Fatalf("%d requests, want %d", len(reqs), cfg.Sessions*cfg.Turns)
			}
			if !slices.IsSortedFunc(reqs, func(a, b Request) int { return int(a.Arrival - b.Arrival) }) {
				t.Fatal("not sorted by arrival")
			}
			v := cfg.Vocab.orDefault()
			type state struct {
				turn    int
				arrival time.Duration
				prompt  []uint32
				system  int
			}
			sessions := map[string]*state{}
			ids := map[string]bool{}
			for _, r := range reqs {
				if ids[r.ID] {
					t.Fatalf("duplicate id %s", r.ID)
				}
				ids[r.ID] = true
				if r.MaxTokens != cfg.OutputTokens {
					t.Fatalf("%s: max tokens %d", r.ID, r.MaxTokens)
				}
				for _, tok := range r.Prompt {
					if tok < v.Lo || tok >= v.Hi {
						t.Fatalf("%s: token %d outside %v", r.ID, tok, v)
					}
				}
				s := sessions[r.Session]
				if s == nil {
					if r.Turn != 0 {
						t.Fatalf("%s: session starts at turn %d", r.ID, r.Turn)
					}
					sys := len(r.Prompt) - cfg.UserTokens
					if sys < cfg.SystemTokensMin || sys > cfg.SystemTokensMax {
						t.Fatalf("%s: system prompt of %d tokens", r.ID, sys)
					}
					sessions[r.Session] = &state{arrival: r.Arrival, prompt: r.Prompt, system: sys}
					continue
				}
				if r.Turn != s.turn+1 {
					t.Fatalf("%s: turn %d after %d", r.ID, r.Turn, s.turn)
				}
				gap := r.Arrival - s.arrival
				if gap < cfg.ThinkTime/2 || gap > cfg.ThinkTime*3/2 {
					t.Fatalf("%s: %v after the previous turn, think time %v", r.ID, gap, cfg.ThinkTime)
				}
				if len(r.Prompt) != len(s.prompt)+cfg.OutputTokens+cfg.UserTokens || !slices.Equal(s.prompt, r.Prompt[:len(s.prompt)]) {
					t.Fatalf("%s: prompt of %d tokens does not extend the previous %d by answer and message", r.ID, len(r.Prompt), len(s.prompt))
				}
				s.turn, s.arrival, s.prompt = r.Turn, r.Arrival, r.Prompt
			}
			if len(sessions) != cfg.Sessions {
				t.Fatalf("%d sessions, want %d", len(sessions), cfg.Sessions)
			}
			// Sessions share system prompts: no more distinct prefixes than
			// configured.
			systems := map[string]bool{}
			for _, r := range reqs {
				if r.Turn == 0 {
					systems[fmt.Sprint(r.Prompt[:len(r.Prompt)-cfg.UserTokens])] = true
				}
			}
			if len(systems) > cfg.SystemPrompts {
				t.Fatalf("%d system prompts, configured %d", len(systems), cfg.SystemPrompts)
			}
		})
	}
}

// Bursts: BurstSize sessions start at the same instant on one system
// prompt and stay in step, turn after turn.
func TestAgenticBursts(t *testing.T) {
	cfg := AgenticConfig{Sessions: 20, Turns: 3, SystemPrompts: 4, SystemTokensMin: 64, SystemTokensMax: 64,
		UserTokens: 8, OutputTokens: 4, ThinkTime: 2 * time.Second, BurstSize: 5, BurstInterval: 3 * time.Second, ArrivalRate: 2, Seed: 5}
	reqs, err := Agentic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	byArrival := map[time.Duration][]Request{}
	for _, r := range reqs {
		byArrival[r.Arrival] = append(byArrival[r.Arrival], r)
	}
	bursts := map[int]int{} // turn → bursts seen at that turn
	for at, group := range byArrival {
		if len(group) == 1 {
			continue
		}
		// The last burst is cut short when Sessions runs out.
		if len(group) > cfg.BurstSize {
			t.Fatalf("%d requests due at %v, more than a burst of %d", len(group), at, cfg.BurstSize)
		}
		for _, r := range group[1:] {
			if r.Turn != group[0].Turn || !slices.Equal(r.Prompt[:64], group[0].Prompt[:64]) {
				t.Fatalf("burst at %v mixes turns or system prompts: %s and %s", at, group[0].ID, r.ID)
			}
		}
		if group[0].Turn == 0 && at%cfg.BurstInterval != 0 {
			t.Fatalf("burst starts at %v, not a multiple of %v", at, cfg.BurstInterval)
		}
		if len(group) == cfg.BurstSize {
			bursts[group[0].Turn]++
		}
	}
	if bursts[0] == 0 || bursts[0] != bursts[cfg.Turns-1] {
		t.Fatalf("bursts per turn %v: want the same number (> 0) at every turn", bursts)
	}
}

// WarmPrompts: the first background sessions take the system prompts in
// turn, so every prompt is sent once before any burst on it.
func TestAgenticWarmPrompts(t *testing.T) {
	cfg := AgenticConfig{Sessions: 24, Turns: 1, SystemPrompts: 4, SystemTokensMin: 64, SystemTokensMax: 64,
		UserTokens: 8, OutputTokens: 4, BurstSize: 4, BurstInterval: 10 * time.Second, ArrivalRate: 2, Seed: 5,
		WarmPrompts: true}
	reqs, err := Agentic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var systems [][]uint32
	prompt := func(r Request) int {
		for i, s := range systems {
			if slices.Equal(r.Prompt[:64], s) {
				return i
			}
		}
		systems = append(systems, r.Prompt[:64])
		return len(systems) - 1
	}
	// Background sessions arrive alone; the first four take four prompts.
	var background []int
	first := map[int]time.Duration{}
	count := map[time.Duration]int{}
	for _, r := range reqs {
		count[r.Arrival]++
	}
	for _, r := range reqs {
		p := prompt(r)
		if _, ok := first[p]; !ok {
			first[p] = r.Arrival
		}
		if count[r.Arrival] == 1 {
			background = append(background, p)
		}
	}
	if len(background) < 4 || len(systems) != 4 {
		t.Fatalf("%d background sessions over %d prompts", len(background), len(systems))
	}
	if got := background[:4]; !(got[0] != got[1] && got[0] != got[2] && got[0] != got[3] && got[1] != got[2] && got[1] != got[3] && got[2] != got[3]) {
		t.Fatalf("first background prompts %v, want four distinct", got)
	}
	for _, r := range reqs {
		if count[r.Arrival] > 1 && first[prompt(r)] >= r.Arrival {
			t.Fatalf("burst at %v on a prompt first sent at %v", r.Arrival, first[prompt(r)])
		}
	}
	// Off, the same seed draws random prompts from the first session on.
	cfg.WarmPrompts = false
	cold, err := Agentic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if slices.EqualFunc(reqs, cold, func(a, b Request) bool { return slices.Equal(a.Prompt, b.Prompt) }) {
		t.Fatal("WarmPrompts changed nothing")
	}
}

func TestAgenticDeterministic(t *testing.T) {
	same := func(a, b []Request) bool {
		return slices.EqualFunc(a, b, func(x, y Request) bool {
			return x.ID == y.ID && x.Session == y.Session && x.Turn == y.Turn && x.Arrival == y.Arrival &&
				x.MaxTokens == y.MaxTokens && slices.Equal(x.Prompt, y.Prompt)
		})
	}
	a, _ := Agentic(Quick())
	b, _ := Agentic(Quick())
	if !same(a, b) {
		t.Fatal("two runs of one config differ")
	}
	cfg := Quick()
	cfg.Seed++
	c, _ := Agentic(cfg)
	if same(a, c) {
		t.Fatal("seeds differ, workloads do not")
	}
	if last := a[len(a)-1].Arrival; last > 20*time.Second {
		t.Fatalf("Quick's last request is due at %v; it is meant to be quick", last)
	}
}

func TestAgenticConfigErrors(t *testing.T) {
	tests := []struct {
		field string
		edit  func(*AgenticConfig)
	}{
		{"Sessions", func(c *AgenticConfig) { c.Sessions = 0 }},
		{"Turns", func(c *AgenticConfig) { c.Turns = -1 }},
		{"SystemPrompts", func(c *AgenticConfig) { c.SystemPrompts = 0 }},
		{"SystemTokensMin", func(c *AgenticConfig) { c.SystemTokensMin = 0 }},
		{"SystemTokensMax", func(c *AgenticConfig) { c.SystemTokensMax = c.SystemTokensMin - 1 }},
		{"UserTokens", func(c *AgenticConfig) { c.UserTokens = -1 }},
		{"OutputTokens", func(c *AgenticConfig) { c.OutputTokens = 0 }},
		{"ThinkTime", func(c *AgenticConfig) { c.ThinkTime = -time.Second }},
		{"BurstSize", func(c *AgenticConfig) { c.BurstSize = -1 }},
		{"BurstInterval", func(c *AgenticConfig) { c.BurstInterval = 0 }},
		{"ArrivalRate", func(c *AgenticConfig) { c.ArrivalRate = -1 }},
		{"ArrivalRate, or BurstSize", func(c *AgenticConfig) { c.ArrivalRate, c.BurstSize = 0, 0 }},
		{"lower Turns", func(c *AgenticConfig) { c.Turns = 1 << 40; c.UserTokens = 1 << 40 }},
		{"Vocab", func(c *AgenticConfig) { c.Vocab = Vocab{Lo: 9, Hi: 1} }},
	}
	for _, tt := range tests {
		cfg := Quick()
		tt.edit(&cfg)
		_, err := Agentic(cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: got %v, want ErrConfig naming it", tt.field, err)
		}
	}
}

// TestAgenticWarmup: with WarmPrompts, exactly the first request on each
// system prompt is a warm-up, and it comes before any other on its prompt.
func TestAgenticWarmup(t *testing.T) {
	cfg := Quick()
	cfg.WarmPrompts = true
	reqs, err := Agentic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{} // system prompt, by its first tokens
	warm := 0
	for _, r := range reqs {
		key := fmt.Sprint(r.Prompt[:cfg.SystemTokensMin])
		if r.Warmup {
			warm++
			if seen[key] {
				t.Fatalf("%s: warm-up on a prompt already sent", r.ID)
			}
		}
		seen[key] = true
	}
	if warm != cfg.SystemPrompts {
		t.Fatalf("%d warm-up requests, want %d", warm, cfg.SystemPrompts)
	}
	cfg.WarmPrompts = false
	reqs, _ = Agentic(cfg)
	for _, r := range reqs {
		if r.Warmup {
			t.Fatalf("%s: warm-up without WarmPrompts", r.ID)
		}
	}
}
