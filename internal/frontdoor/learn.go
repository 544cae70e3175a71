// This file holds what the front door teaches the hint learner from each answer's usage: pulls and prefill timings.

package frontdoor

import (
	"encoding/json"
	"time"

	"kvrouter/internal/hints"
	"kvrouter/internal/index"
	"kvrouter/internal/rawjson"
	"kvrouter/internal/router"
)

// pullReport is usage.kvrouter.pull: what the hint's pull cost the engine
// (docs/wire.md §6.7).
type pullReport struct {
	SourceEndpoint string  `json:"source_endpoint"`
	WantedBlocks   int     `json:"wanted_blocks"`
	PulledBlocks   int     `json:"pulled_blocks"`
	PulledTokens   int     `json:"pulled_tokens"`
	Bytes          int64   `json:"bytes"`
	Seconds        float64 `json:"seconds"`
	Short          bool    `json:"short"`
}

// readKVRouter reads usage.kvrouter (valid JSON); ok is false where
// encoding/json would fail too.
func readKVRouter(raw []byte) (*kvrouterDetails, bool) {
	var buf [8]rawjson.Member
	ms, ok := rawjson.ScanObject(buf[:0], raw, nil)
	if !ok {
		return nil, false
	}
	k := &kvrouterDetails{}
	if k.PeerRestoredTokens, ok = intMember(ms, "peer_restored_tokens"); !ok {
		return nil, false
	}
	if v := lastMember(ms, "local_cached_tokens"); v != nil && !isNull(v) {
		n, ok := intMember(ms, "local_cached_tokens")
		if !ok {
			return nil, false
		}
		k.LocalCachedTokens = &n
	}
	if v := lastMember(ms, "pull"); v != nil && !isNull(v) {
		// Only hinted requests carry one: reflection is cheap enough.
		k.Pull = &pullReport{}
		if json.Unmarshal(v, k.Pull) != nil {
			return nil, false
		}
	}
	return k, true
}

// learn teaches the hint learner what one answer tells: the pull its hint
// caused, and, when the first token's arrival is known (ttft > 0), how
// long the target took to recompute what it did not have.
func (s *Server) learn(d *router.Decision, u *usage, ttft time.Duration) {
	if s.Learn == nil || u == nil {
		return
	}
	now := s.Now()
	target := index.WorkerRank(d.Target.Worker.ID, d.Target.Rank)
	var pullWall time.Duration
	if k := u.KVRouter; k != nil && k.Pull != nil && d.HintDecision.Hinted() && k.Pull.WantedBlocks > 0 &&
		k.Pull.SourceEndpoint == d.Hint.Endpoint && k.Pull.Seconds >= 0 {
		p := k.Pull
		pullWall = time.Duration(p.Seconds * float64(time.Second))
		bs := d.Target.Worker.BlockSize
		s.Learn.ObservePull(hints.PullSample{
			Source: d.HintDecision.Source, Target: target,
			Tokens: p.PulledTokens, Wanted: p.WantedBlocks * bs, Bytes: p.Bytes, Wall: pullWall,
			Short: p.Short || p.PulledBlocks < p.WantedBlocks,
		}, now)
	}
	if ttft <= 0 {
		return
	}
	recomputed := u.PromptTokens
	switch {
	case u.KVRouter != nil && u.KVRouter.LocalCachedTokens != nil:
		recomputed -= *u.KVRouter.LocalCachedTokens + u.KVRouter.PeerRestoredTokens
	case u.Details != nil:
		// Engines count tokens a connector loaded among the cached ones.
		recomputed -= u.Details.CachedTokens
	default:
		return // what was recomputed is unknown
	}
	s.Learn.ObservePrefill(target, recomputed, ttft-pullWall, now)
}
