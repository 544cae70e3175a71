// This file holds Agentic: a synthetic multi-turn agentic workload with shared system prompts.

package workload

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// AgenticConfig shapes a synthetic multi-turn agentic workload.
//
// Sessions start in two ways. Background sessions arrive as a Poisson
// process at ArrivalRate per second, each on a random system prompt.
// Every BurstInterval, BurstSize sessions start at the same instant on the
// same system prompt and keep the same think times, so their later turns
// fire together too. A burst lands on whichever worker holds that prompt
// and overloads it: a router must then break cache affinity and move
// sessions elsewhere, where pulling the prefix from a peer beats computing
// it again. The first burst comes after one BurstInterval, once background
// sessions have warmed the caches; with ArrivalRate 0 it comes at once.
type AgenticConfig struct {
	Sessions int
	// Turns is the number of requests per session.
	Turns int
	// SystemPrompts is the number of distinct shared system prompts; each
	// is between SystemTokensMin and SystemTokensMax tokens long.
	SystemPrompts   int
	SystemTokensMin int
	SystemTokensMax int
	// UserTokens is the length of the new user message of every turn.
	UserTokens int
	// OutputTokens is every request's max_tokens, and the length of the
	// filler standing in for the answer in the next turn's prompt.
	OutputTokens int
	// ThinkTime is the mean gap between the due times of a session's
	// turns, each gap uniform in [ThinkTime/2, 3*ThinkTime/2). A turn due
	// while its predecessor still runs waits for it (see loadgen.Driver).
	ThinkTime     time.Duration
	BurstSize     int
	BurstInterval time.Duration
	// ArrivalRate is background sessions started per second.
	ArrivalRate float64
	// WarmPrompts makes the first SystemPrompts background sessions take
	// the prompts in turn (then random, as always), so that each burst's
	// prompt was sent before the burst, as in a service whose agents'
	// system prompts are always cached somewhere, rather than bursts on
	// prompts no engine has seen yet, which no routing can help. The first
	// request on each prompt is then marked Warmup.
	WarmPrompts bool
	Seed        uint64
	// Vocab is the token id range (default DefaultVocab).
	Vocab Vocab
}

// Quick is a workload that runs in about ten seconds against a local
// cluster: 32 sessions of 4 turns on 3 system prompts of 2-4k tokens, with
// bursts of 8 sessions every 2.5 s.
func Quick() AgenticConfig {
	return AgenticConfig{
		Sessions:        32,
		Turns:           4,
		SystemPrompts:   3,
		SystemTokensMin: 2048,
		SystemTokensMax: 4096,
		UserTokens:      128,
		OutputTokens:    64,
		ThinkTime:       time.Second,
		BurstSize:       8,
		BurstInterval:   2500 * time.Millisecond,
		ArrivalRate:     4,
		Seed:            1,
	}
}

func (c AgenticConfig) check() error {
	positive := []struct {
		name  string
		value int
	}{
		{"Sessions", c.Sessions},
		{"Turns", c.Turns},
		{"SystemPrompts", c.SystemPrompts},
		{"SystemTokensMin", c.SystemTokensMin},
		{"OutputTokens", c.OutputTokens},
	}
	for _, f := range positive {
		if f.value < 1 {
			return fmt.Errorf("%w: AgenticConfig.%s: %d, want at least 1", ErrConfig, f.name, f.value)
		}
	}
	// In floats: the product of absurd settings must not wrap around.
	total := float64(c.SystemTokensMax) + float64(c.Turns)*(float64(c.UserTokens)+float64(c.OutputTokens))
	switch {
	case c.SystemTokensMax < c.SystemTokensMin:
		return fmt.Errorf("%w: AgenticConfig.SystemTokensMax: %d is below SystemTokensMin %d", ErrConfig, c.SystemTokensMax, c.SystemTokensMin)
	case c.UserTokens < 0:
		return fmt.Errorf("%w: AgenticConfig.UserTokens: %d is negative", ErrConfig, c.UserTokens)
	case total > maxLengthTokens:
		return fmt.Errorf("%w: AgenticConfig: a last turn of %.0f tokens exceeds %d; lower Turns, UserTokens, OutputTokens or SystemTokensMax", ErrConfig, total, maxLengthTokens)
	case c.ThinkTime < 0:
		return fmt.Errorf("%w: AgenticConfig.ThinkTime: %v is negative", ErrConfig, c.ThinkTime)
	case c.BurstSize < 0:
		return fmt.Errorf("%w: AgenticConfig.BurstSize: %d is negative", ErrConfig, c.BurstSize)
	case c.BurstSize > 0 && c.BurstInterval <= 0:
		return fmt.Errorf("%w: AgenticConfig.BurstInterval: %v, want > 0 with BurstSize %d", ErrConfig, c.BurstInterval, c.BurstSize)
	case c.ArrivalRate < 0 || math.IsNaN(c.ArrivalRate) || math.IsInf(c.ArrivalRate, 0):
		return fmt.Errorf("%w: AgenticConfig.ArrivalRate: %v is not a finite non-negative rate", ErrConfig, c.ArrivalRate)
	case c.ArrivalRate == 0 && c.BurstSize == 0:
		return fmt.Errorf("%w: AgenticConfig: set ArrivalRate, or BurstSize and BurstInterval, for sessions to start", ErrConfig)
	}
	return c.Vocab.orDefault().check("AgenticConfig.Vocab")
}

// sessionStart is when a session begins, on which prompt, and whose think
// times it follows (sessions of one burst share them).
type sessionStart struct {
	at     time.Duration
	system int
	think  uint64
}

// Agentic generates the workload cfg describes; the same cfg always gives
// the same requests.
//
// A turn's prompt is the previous turn's prompt, then the previous answer,
// then the new user message. The real answer is the engine's, unknown until
// it runs, so a fixed-length filler of OutputTokens stands in for it. The
// next turn therefore shares the previous prompt as a prefix (what an
// engine caches after prefill) but not the blocks the engine decoded: hit
// ratios come out slightly below those of real conversations, by at most
// one answer per turn, and alike under every routing policy.
func Agentic(cfg AgenticConfig) ([]Request, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	vocab := cfg.Vocab.orDefault()
	r := seeded(domainAgent, cfg.Seed)
	systems := make([][]uint32, cfg.SystemPrompts)
	for i := range systems {
		sr := seeded(domainAgent, cfg.Seed, 1, uint64(i))
		systems[i] = appendTokens(nil, &sr, r.between(cfg.SystemTokensMin, cfg.SystemTokensMax), vocab)
	}
	starts := sessionStarts(cfg, &r)
	width := len(strconv.Itoa(cfg.Sessions))
	systemOf := make(map[string]int, len(starts))
	reqs := make([]Request, 0, cfg.Sessions*cfg.Turns)
	for s, st := range starts {
		session := fmt.Sprintf("agentic-%0*d", width, s+1)
		systemOf[session] = st.system
		sys := systems[st.system]
		// One backing array per session: every turn's prompt is a prefix
		// of the last turn's.
		full := make([]uint32, 0, len(sys)+cfg.Turns*cfg.UserTokens+(cfg.Turns-1)*cfg.OutputTokens)
		full = append(full, sys...)
		tr := seeded(domainAgent, cfg.Seed, 2, uint64(s))
		think := seeded(domainAgent, cfg.Seed, 3, st.think)
		at := st.at
		for t := range cfg.Turns {
			if t > 0 {
				full = appendTokens(full, &tr, cfg.OutputTokens, vocab)
				at += cfg.ThinkTime/2 + time.Duration(think.float()*float64(cfg.ThinkTime))
			}
			full = appendTokens(full, &tr, cfg.UserTokens, vocab)
			reqs = append(reqs, Request{
				ID:        session + "-t" + strconv.Itoa(t),
				Session:   session,
				Turn:      t,
				Arrival:   at,
				Prompt:    full[:len(full):len(full)],
				MaxTokens: cfg.OutputTokens,
			})
		}
	}
	// Session-major order before the stable sort makes ties resolve by
	// session, then turn.
	sortByArrival(reqs)
	if cfg.WarmPrompts {
		// The first request on each system prompt computes it cold under
		// any policy: a warm-up, sent but not measured.
		seen := make([]bool, cfg.SystemPrompts)
		for i := range reqs {
			if sys := systemOf[reqs[i].Session]; !seen[sys] {
				seen[sys], reqs[i].Warmup = true, true
			}
		}
	}
	return reqs, nil
}

// sessionStarts merges the Poisson stream of background sessions with the
// bursts, in time order, until there are cfg.Sessions.
func sessionStarts(cfg AgenticConfig, r *rng) []sessionStart {
	starts := make([]sessionStart, 0, cfg.Sessions)
	draw := func(from time.Duration) time.Duration {
		if cfg.ArrivalRate == 0 {
			return math.MaxInt64
		}
		gap := -math.Log(1-r.float()) / cfg.ArrivalRate * float64(time.Second)
		return from + time.Duration(min(gap, float64(24*time.Hour)))
	}
	nextBackground := draw(0)
	// warm is the next prompt a warm-up session takes; past the last, the
	// prompts are random.
	warm := cfg.SystemPrompts
	if cfg.WarmPrompts {
		warm = 0
	}
	nextBurst, burst := time.Duration(math.MaxInt64), 0
	if cfg.BurstSize > 0 {
		nextBurst = cfg.BurstInterval
		if cfg.ArrivalRate == 0 {
			nextBurst = 0
		}
	}
	for len(starts) < cfg.Sessions {
		if nextBurst <= nextBackground {
			for range min(cfg.BurstSize, cfg.Sessions-len(starts)) {
				starts = append(starts, sessionStart{at: nextBurst, system: burst % cfg.SystemPrompts, think: uint64(burst) << 32})
			}
			burst++
			nextBurst += cfg.BurstInterval
			continue
		}
		system := warm
		if warm < cfg.SystemPrompts {
			warm++
		} else {
			system = r.intn(cfg.SystemPrompts)
		}
		starts = append(starts, sessionStart{at: nextBackground, system: system, think: uint64(len(starts)) | 1<<63})
		nextBackground = draw(nextBackground)
	}
	return starts
}
