// Package layering holds no code, only the test that keeps kvrouter's
// pure cores free of I/O: they take events, registrations and the time
// from their callers, and the conversions from wire or registry types
// happen at the edge, in the packages that own the sockets.
package layering

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// cores are the packages that must not reach the network, processes or
// the message planes, directly or through their imports.
var cores = []string{
	"kvrouter/internal/router",
	"kvrouter/internal/index",
	"kvrouter/internal/hints",
	"kvrouter/internal/kvhash",
	"kvrouter/internal/kvevents",
	"kvrouter/internal/cost",   // the routing cost
	"kvrouter/internal/ingest", // engine stream → ordered inventory ops
}

// forbidden are the packages that bring sockets or processes, "/..."
// meaning the package and every one below it, as in go's patterns.
// net/url and net/netip are values and parsers, not sockets: allowed.
var forbidden = []string{
	"net",
	"net/http/...",
	"os/exec",
	"github.com/nats-io/...",
	"github.com/go-zeromq/...",
}

// isForbidden returns the rule of forbidden that path matches.
func isForbidden(path string) (rule string, ok bool) {
	for _, r := range forbidden {
		if prefix, tree := strings.CutSuffix(r, "/..."); tree && (path == prefix || strings.HasPrefix(path, prefix+"/")) || path == r {
			return r, true
		}
	}
	return "", false
}

// TestCoresLinkNoIO fails when a core package depends, directly or not,
// on a forbidden package, and names the import chain that brings it.
func TestCoresLinkNoIO(t *testing.T) {
	graph, err := imports(cores)
	if err != nil {
		t.Fatal(err)
	}
	for _, core := range cores {
		if _, ok := graph[core]; !ok {
			t.Errorf("go list -deps did not list %s: update cores in this file when a core package moves", core)
			continue
		}
		chains := forbiddenChains(graph, core)
		if len(chains) == 0 {
			continue
		}
		var msg strings.Builder
		var through []string
		for _, chain := range chains {
			fmt.Fprintf(&msg, "\n\t%s", strings.Join(chain, " → "))
			if !slices.Contains(through, chain[1]) {
				through = append(through, chain[1])
			}
		}
		t.Errorf("%s depends on packages that do I/O:%s\n"+
			"convert at the edge: let the caller that owns the I/O turn its types into %s's, so that %s stops importing %s",
			core, msg.String(), core, core, strings.Join(through, " and "))
	}
}

// TestForbiddenChains checks the search on a made-up graph, so that a
// clean tree does not hide a search that can find nothing.
func TestForbiddenChains(t *testing.T) {
	graph := map[string][]string{
		"core":                       {"fmt", "helper", "net/url"},
		"helper":                     {"registry", "net/netip"},
		"registry":                   {"github.com/nats-io/nats.go", "net/http"},
		"github.com/nats-io/nats.go": {"net"},
		"net/http":                   {"net"},
		"clean":                      {"fmt", "net/url"},
		"subprocess":                 {"os/exec"},
		"tracer":                     {"net/http/httptrace", "net/netip"},
	}
	tests := []struct {
		from string
		want []string
	}{
		{"core", []string{
			"core helper registry github.com/nats-io/nats.go",
			"core helper registry github.com/nats-io/nats.go net",
			"core helper registry net/http",
		}},
		{"clean", nil},
		{"subprocess", []string{"subprocess os/exec"}},
		{"tracer", []string{"tracer net/http/httptrace"}},
	}
	for _, tt := range tests {
		var got []string
		for _, c := range forbiddenChains(graph, tt.from) {
			got = append(got, strings.Join(c, " "))
		}
		slices.Sort(got)
		if !slices.Equal(got, tt.want) {
			t.Errorf("from %s: chains %q, want %q", tt.from, got, tt.want)
		}
	}
}

// forbiddenChains returns, for each forbidden rule that a package
// reachable from root matches, one shortest import chain from root to
// the first such package.
func forbiddenChains(graph map[string][]string, root string) [][]string {
	parent := map[string]string{root: ""}
	queue := []string{root}
	found := map[string]bool{}
	var chains [][]string
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if rule, bad := isForbidden(p); bad && !found[rule] {
			found[rule] = true
			var chain []string
			for q := p; q != ""; q = parent[q] {
				chain = append(chain, q)
			}
			slices.Reverse(chain)
			chains = append(chains, chain)
		}
		for _, imp := range graph[p] {
			if _, seen := parent[imp]; !seen {
				parent[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	return chains
}

// imports lists pkgs and everything they depend on, each with its
// imports, as the go command that runs this test resolves them (go test
// puts its own toolchain first on PATH).
func imports(pkgs []string) (map[string][]string, error) {
	args := append([]string{"list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`}, pkgs...)
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	graph := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 {
			graph[f[0]] = f[1:]
		}
	}
	return graph, sc.Err()
}
