// This file holds the waits until engines answer and the routers list every worker ready.

package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

const (
	pollEvery = 50 * time.Millisecond
	// pollTimeout bounds one poll, so that a port that accepts but never
	// answers (someone else's, or a wedged child) does not hide the exit
	// of the process that should have bound it.
	pollTimeout = time.Second
	// pokeEvery spaces the resets that make an idle engine publish.
	pokeEvery = 500 * time.Millisecond
)

var client = &http.Client{Timeout: pollTimeout}

// waitEngines waits until every engine answers GET /health.
func (c *Cluster) waitEngines(ctx context.Context) error {
	for i, e := range c.engines {
		p := c.engineProcs[i]
		for !healthy(ctx, e.URL+"/health") {
			if err := c.exitedProc(); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("cluster: engine %s at %s not healthy: %w\n%s", e.ID, e.URL, context.Cause(ctx), p.failure("never answered /health"))
			case <-time.After(pollEvery):
			}
		}
	}
	return nil
}

func healthy(ctx context.Context, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// workersView is the part of the router's GET /debug/workers that tells
// readiness.
type workersView struct {
	Workers []struct {
		ID    string `json:"id"`
		Mode  string `json:"mode"`
		Ranks []struct {
			DPRank int  `json:"dp_rank"`
			Ready  bool `json:"ready"`
		} `json:"ranks"`
		Owners []struct {
			ID    string `json:"id"`
			Ready bool   `json:"ready"`
		} `json:"owners"`
	} `json:"workers"`
}

// waitRouter waits until router r lists every engine's worker with every
// DP rank and cache owner ready. Sources turn ready on the first event
// their agent relays, and an idle engine publishes none, so with poke an
// engine whose sources are not ready yet is reset now and then: its cache
// is empty at start, and the reset publishes a clear.
func (c *Cluster) waitRouter(ctx context.Context, r Router, poke bool) error {
	poked := map[string]time.Time{}
	var missing []string
	for {
		if r.proc.exited() {
			return r.proc.failure("exited while starting")
		}
		if err := c.exitedProc(); err != nil {
			return err
		}
		var v workersView
		err := getJSON(ctx, r.Admin+"/debug/workers", &v)
		if err == nil {
			missing = c.notReady(v)
			if len(missing) == 0 {
				return nil
			}
			if poke {
				c.poke(ctx, v, poked)
			}
		} else {
			missing = []string{"router: " + err.Error()}
		}
		select {
		case <-ctx.Done():
			return c.notReadyError(ctx, r, missing)
		case <-time.After(pollEvery):
		}
	}
}

// notReady lists what keeps the router from being ready, one line per
// worker.
func (c *Cluster) notReady(v workersView) []string {
	var out []string
	for _, e := range c.engines {
		i := -1
		for j := range v.Workers {
			if v.Workers[j].ID == e.ID {
				i = j
			}
		}
		if i < 0 {
			out = append(out, "worker "+e.ID+": not registered")
			continue
		}
		w := v.Workers[i]
		var why []string
		if w.Mode != "events" {
			why = append(why, "mode "+w.Mode)
		}
		if len(w.Ranks) != e.DP {
			why = append(why, fmt.Sprintf("%d of %d DP ranks", len(w.Ranks), e.DP))
		}
		for _, rk := range w.Ranks {
			if !rk.Ready {
				why = append(why, fmt.Sprintf("rank %d not ready", rk.DPRank))
			}
		}
		if len(w.Owners) == 0 {
			why = append(why, "no cache owner")
		}
		for _, o := range w.Owners {
			if !o.Ready {
				why = append(why, "owner "+o.ID+" not ready")
			}
		}
		if len(why) > 0 {
			out = append(out, "worker "+e.ID+": "+strings.Join(why, ", "))
		}
	}
	return out
}

// poke resets the registered engines whose sources are not ready yet.
func (c *Cluster) poke(ctx context.Context, v workersView, last map[string]time.Time) {
	registered := map[string]bool{}
	for _, w := range v.Workers {
		registered[w.ID] = true
	}
	for _, line := range c.notReady(v) {
		id := strings.TrimPrefix(line[:strings.IndexByte(line, ':')], "worker ")
		if !registered[id] || time.Since(last[id]) < pokeEvery {
			continue
		}
		last[id] = time.Now()
		for _, e := range c.engines {
			if e.ID == id {
				if err := post(ctx, e.URL+"/admin/reset"); err != nil {
					c.log.Debug("cluster: reset to wake an idle engine failed", "engine", id, "err", err)
				}
			}
		}
	}
}

// notReadyError explains a timeout with the logs most likely to say why:
// the router's and the agent of the first worker not ready.
func (c *Cluster) notReadyError(ctx context.Context, r Router, missing []string) error {
	msg := fmt.Sprintf("cluster: router %s not ready: %v:\n  %s\n%s", r.URL, context.Cause(ctx),
		strings.Join(missing, "\n  "), r.proc.failure("log tail"))
	for i, e := range c.engines {
		if len(missing) > 0 && strings.HasPrefix(missing[0], "worker "+e.ID+":") {
			msg += "\n" + c.agentProcs[i].failure("log tail").Error()
		}
	}
	return errors.New(msg)
}

// exitedProc returns the failure of the first engine or agent that ended.
func (c *Cluster) exitedProc() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.exited() {
			return p.failure("exited while the cluster started")
		}
	}
	return nil
}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func post(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	return nil
}
