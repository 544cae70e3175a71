// This file holds the tenants scenario: salted and unsalted tenants sharing system prompts, and whether any block crosses tenants.

package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"

	"kvrouter/internal/cluster"
)

// Sizes of the tenants scenario: system prompts of 32 full blocks, long
// enough for the router's prior to hint them, and a short message after.
const (
	tenantsPrompts   = 2
	tenantsPromptLen = 2048
	tenantsSuffixLen = 40
)

// TenantsOptions configure the tenants scenario.
type TenantsOptions struct {
	Binary string // kvrouter executable; empty re-executes this one
	// Flavours are the engines imitated, one cluster each (default vllm
	// and sglang).
	Flavours []string
	LogDir   string
	Logger   *slog.Logger
}

// TenantsResult is the scenario's verdict, printed as JSON.
type TenantsResult struct {
	Flavours map[string]TenantsFlavour `json:"flavours"`
}

// TenantsFlavour is what one flavour's cluster did with the tenants'
// requests. A restore (or a hint) is cross-tenant when its source engine
// never served that tenant's prompt, or it named blocks outside the
// request's own chain: the scenario knows where each tenant's prompt went
// because it forces every request's worker.
type TenantsFlavour struct {
	Requests int `json:"requests"`
	Errors   int `json:"errors"`
	// Hints counts the requests whose engine got a hint with blocks to
	// pull (usage.kvrouter.pull).
	Hints                     int    `json:"hints"`
	CrossTenantHints          int    `json:"cross_tenant_hints"`
	CrossTenantRestoredTokens int    `json:"cross_tenant_restored_tokens"`
	SameTenantRestoredTokens  int    `json:"same_tenant_restored_tokens"`
	FirstError                string `json:"first_error,omitempty"`
	LogDir                    string `json:"log_dir,omitempty"`
}

// OK is the pass condition: in every flavour nothing crossed tenants, the
// salted tenants still reused their own runner inventory, and nothing
// failed.
func (r TenantsResult) OK() bool {
	for _, f := range r.Flavours {
		if !f.ok() {
			return false
		}
	}
	return len(r.Flavours) > 0
}

func (f TenantsFlavour) ok() bool {
	return f.Errors == 0 && f.CrossTenantHints == 0 && f.CrossTenantRestoredTokens == 0 && f.SameTenantRestoredTokens > 0
}

// pullUsage is usage.kvrouter.pull as the engines report it.
type pullUsage struct {
	SourceEndpoint string `json:"source_endpoint"`
	WantedBlocks   int    `json:"wanted_blocks"`
	PulledBlocks   int    `json:"pulled_blocks"`
	ForeignBlocks  int    `json:"foreign_blocks"`
}

// tenantCompletion is the part of an answer the scenario reads.
type tenantCompletion struct {
	Usage struct {
		KVRouter struct {
			PeerRestoredTokens int        `json:"peer_restored_tokens"`
			SourceEndpoint     *string    `json:"source_endpoint"`
			Pull               *pullUsage `json:"pull"`
		} `json:"kvrouter"`
	} `json:"usage"`
}

// Tenants runs the scenario once per flavour. The error is for a scenario
// that could not run at all; what crossed tenants shows in the result.
func Tenants(ctx context.Context, o TenantsOptions) (TenantsResult, error) {
	if len(o.Flavours) == 0 {
		o.Flavours = []string{"vllm", "sglang"}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	res := TenantsResult{Flavours: map[string]TenantsFlavour{}}
	for _, fl := range o.Flavours {
		f, err := tenantsFlavour(ctx, o, fl)
		if err != nil {
			return res, fmt.Errorf("tenants scenario, %s: %w", fl, err)
		}
		res.Flavours[fl] = f
	}
	return res, nil
}

// tenantStep is one request: a tenant's prompt forced to an engine.
type tenantStep struct {
	tenant string // "" is unsalted
	engine int
}

// tenantSteps: tenant a's prompt lands on engine 0, whose GPU copy is then
// evicted so that only its runner (a cache owner) holds it; then the
// unsalted tenant and tenant b ask for the same prompt elsewhere, where only
// another tenant's copy exists, and tenant a asks on engine 1, where its own
// runner copy on engine 0 is worth pulling.
var tenantSteps = []tenantStep{
	{"tenant-a", 0}, // evict engine 0's GPU copy after this one
	{"", 1},
	{"tenant-b", 2},
	{"tenant-a", 1},
	{"", 2},
	{"tenant-b", 0},
	{"", 0},
}

func tenantsFlavour(ctx context.Context, o TenantsOptions, flavour string) (TenantsFlavour, error) {
	dir := o.LogDir
	if dir != "" {
		dir = filepath.Join(dir, flavour)
	}
	c, err := cluster.Start(ctx, cluster.Options{
		Binary: o.Binary, Engines: 3, Flavor: flavour,
		BlockSize: DefaultBlockSize, KVBytesPerToken: DefaultKVBytesPerToken,
		GPUBlocks: DefaultGPUBlocks, RunnerBlocks: DefaultRunnerBlocks,
		// The scenario forces each request's worker; no hint flag.
		RouterFlags: [][]string{{"--allow-target-override"}},
		LogDir:      dir, KeepLogs: true, Logger: o.Logger,
	})
	if err != nil {
		return TenantsFlavour{}, err
	}
	t := &tenantsRun{c: c, router: c.RouterURL(), admin: c.RouterAdminURL(), engines: c.Engines(), served: map[served]bool{}}
	t.res.LogDir = c.LogDir()
	rng := rand.New(rand.NewPCG(2026, 11))
	for p := range tenantsPrompts {
		t.prompt(ctx, rng, p)
	}
	err = c.Stop()
	if t.res.ok() && o.LogDir == "" {
		os.RemoveAll(c.LogDir())
		t.res.LogDir = ""
	}
	return t.res, err
}

// served is a (engine, tenant, prompt) whose copy the engine computed or
// pulled.
type served struct {
	engine int
	tenant string
	prompt int
}

type tenantsRun struct {
	c       *cluster.Cluster
	router  string
	admin   string // the router's operator views
	engines []cluster.Engine
	served  map[served]bool
	res     TenantsFlavour
}

func (t *tenantsRun) failed(err error) {
	t.res.Errors++
	if t.res.FirstError == "" {
		t.res.FirstError = err.Error()
	}
}

// prompt runs every step on one shared system prompt.
func (t *tenantsRun) prompt(ctx context.Context, rng *rand.Rand, p int) {
	system := randomTokens(rng, tenantsPromptLen)
	for i, s := range tenantSteps {
		body := map[string]any{"model": cluster.Model, "prompt": append(append([]uint32(nil), system...),
			randomTokens(rng, tenantsSuffixLen)...), "max_tokens": 4, "temperature": 0}
		if s.tenant != "" {
			body["cache_salt"] = s.tenant
		}
		if i > 0 {
			// Every copy sent so far has reached the router: what a
			// request may be hinted is all there.
			t.awaitIndexed(ctx, p, system)
		}
		t.send(ctx, s, p, body)
		if i == 0 {
			t.evictGPU(ctx, s, system)
		}
	}
}

func randomTokens(rng *rand.Rand, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = seedVocabLo + uint32(rng.IntN(seedVocabHi-seedVocabLo))
	}
	return out
}

// send posts one step's request through the router, forced to its engine,
// and classifies what its engine pulled.
func (t *tenantsRun) send(ctx context.Context, s tenantStep, p int, body map[string]any) {
	t.res.Requests++
	target := t.engines[s.engine]
	var out tenantCompletion
	h, err := cluster.PostJSON(ctx, t.router+pathComplete, target.ID, body, &out)
	if err != nil {
		t.failed(fmt.Errorf("prompt %d, tenant %q on %s: %w", p, s.tenant, target.ID, err))
		return
	}
	if got := h.Get(headerWorker); got != target.ID {
		t.failed(fmt.Errorf("prompt %d, tenant %q forced to %s went to %q", p, s.tenant, target.ID, got))
		return
	}
	k := out.Usage.KVRouter
	if pl := k.Pull; pl != nil {
		t.res.Hints++
		src := t.engineOf(pl.SourceEndpoint)
		cross := pl.ForeignBlocks > 0 || src < 0 || !t.served[served{src, s.tenant, p}]
		if cross {
			t.res.CrossTenantHints++
		}
		if k.PeerRestoredTokens > 0 && cross {
			t.res.CrossTenantRestoredTokens += k.PeerRestoredTokens
		} else {
			t.res.SameTenantRestoredTokens += k.PeerRestoredTokens
		}
	} else if k.PeerRestoredTokens > 0 {
		t.failed(fmt.Errorf("prompt %d, tenant %q on %s restored %d tokens with no pull report", p, s.tenant, target.ID, k.PeerRestoredTokens))
	}
	t.served[served{s.engine, s.tenant, p}] = true
}

// engineOf is the engine whose runner serves endpoint, -1 for none.
func (t *tenantsRun) engineOf(endpoint string) int {
	for i, e := range t.engines {
		for d := range e.DP {
			if e.ControlEndpoint(d) == endpoint {
				return i
			}
		}
	}
	return -1
}

type tenantEvicted struct {
	GPU    int `json:"gpu"`
	Runner int `json:"runner"`
}

// evictGPU drops the step's tenant's copy of the system prompt from its
// engine's GPU pool: only the engine's runner holds it then, as a cache
// owner's inventory.
func (t *tenantsRun) evictGPU(ctx context.Context, s tenantStep, system []uint32) {
	body := map[string]any{"tier": "gpu", "tokens": system}
	if s.tenant != "" {
		body["cache_salt"] = s.tenant
	}
	var ev tenantEvicted
	if _, err := cluster.PostJSON(ctx, t.engines[s.engine].URL+pathEvict, "", body, &ev); err != nil {
		t.failed(fmt.Errorf("evict from %s: %w", t.engines[s.engine].ID, err))
		return
	}
	if ev.GPU < tenantsPromptLen/DefaultBlockSize {
		t.failed(fmt.Errorf("evicted %d GPU blocks from %s, want %d", ev.GPU, t.engines[s.engine].ID, tenantsPromptLen/DefaultBlockSize))
	}
}

// awaitIndexed waits until the router would hint every tenant's own copy
// sent so far of prompt p to an engine without it: each copy's events have
// reached the router, so that a later request could be hinted anything the
// fleet holds.
func (t *tenantsRun) awaitIndexed(ctx context.Context, p int, system []uint32) {
	for key := range t.served {
		if key.prompt != p {
			continue
		}
		target := -1
		for i := range t.engines {
			if !t.served[served{i, key.tenant, p}] {
				target = i
				break
			}
		}
		if target < 0 {
			continue // every engine holds this tenant's copy
		}
		body := map[string]any{"model": cluster.Model, "prompt": system, "max_tokens": 1}
		if key.tenant != "" {
			body["cache_salt"] = key.tenant
		}
		err := poll(ctx, func() (bool, error) {
			var v routeView
			_, err := cluster.PostJSON(ctx, t.admin+pathRoute, t.engines[target].ID, body, &v)
			return err == nil && v.hinted(), err
		})
		if err != nil && !errors.Is(ctx.Err(), context.Canceled) {
			t.failed(fmt.Errorf("prompt %d: tenant %q's copy on %s never reached the router: %w", p, key.tenant, t.engines[key.engine].ID, err))
		}
	}
}
