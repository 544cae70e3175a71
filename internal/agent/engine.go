// This file holds the agent's HTTP dealings with its engine: configuration fetch and health probes.

package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"kvrouter/internal/kvstream"
	"kvrouter/internal/workerconfig"
)

// Engine HTTP paths the agent reads.
const (
	// PathSGLangServerInfo returns SGLang's server arguments.
	PathSGLangServerInfo = "/get_server_info"
	// PathVLLMEngineArgs returns the engine arguments of kvrouter's vLLM
	// engines (vLLM itself serves none: pass --config).
	PathVLLMEngineArgs = "/kvrouter/engine_args"
	// PathHealth is both engines' liveness endpoint.
	PathHealth = "/health"

	maxConfigBytes = 8 << 20
)

// ErrEngineConfig wraps every failure to obtain the engine's configuration.
var ErrEngineConfig = errors.New("engine configuration unavailable")

// errPermanent marks an answer that retrying will not change.
var errPermanent = errors.New("permanent")

func configPath(e workerconfig.Engine) string {
	if e == workerconfig.EngineVLLM {
		return PathVLLMEngineArgs
	}
	return PathSGLangServerInfo
}

// fetchConfig reads the engine's configuration from its HTTP front,
// retrying while the engine is not up yet (it may be loading its model for
// minutes) until wait passes (0: until ctx ends).
func fetchConfig(ctx context.Context, client *http.Client, engine workerconfig.Engine, base string, wait time.Duration, backoff kvstream.Backoff, log *slog.Logger) ([]byte, error) {
	u := base + configPath(engine)
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	start := time.Now()
	var last error // the engine's last answer, not our own deadline
	for attempt := 0; ; attempt++ {
		body, err := getConfig(ctx, client, u)
		if err == nil {
			return body, nil
		}
		if errors.Is(err, errPermanent) {
			return nil, fmt.Errorf("%w: %v", ErrEngineConfig, err)
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		log.Info("agent: engine not answering yet, retrying", "url", u, "attempt", attempt+1, "waited", time.Since(start).Round(time.Millisecond), "err", err)
		select {
		case <-ctx.Done():
			if wait > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("%w: %s did not answer within --engine-wait %v (check --engine-url and that the engine is starting): %v", ErrEngineConfig, u, wait, last)
			}
			return nil, ctx.Err()
		case <-time.After(backoff.Delay(attempt)):
		}
	}
}

func getConfig(ctx context.Context, client *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: --engine-url: %v", errPermanent, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxConfigBytes+1))
	switch {
	case err != nil:
		return nil, err
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%w: GET %s: 404 Not Found: check --engine (SGLang serves %s; vLLM serves no configuration, pass --config, except kvrouter's engines at %s)",
			errPermanent, u, PathSGLangServerInfo, PathVLLMEngineArgs)
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%w: GET %s: %s", errPermanent, u, resp.Status)
	case len(body) > maxConfigBytes:
		return nil, fmt.Errorf("%w: GET %s: configuration larger than %d bytes", errPermanent, u, maxConfigBytes)
	}
	return body, nil
}

// engineHostPort validates --engine-url and returns its host:port, the
// default worker id.
func engineHostPort(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Port() == "" {
		return "", fmt.Errorf("--engine-url %q: want http://HOST:PORT of the engine's HTTP server", raw)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		return "", fmt.Errorf("--engine-url %q: give the server's root, without a path or query", raw)
	}
	return u.Host, nil
}

// liveness turns health probe results into the engine being up or down:
// down once probes have failed for the whole grace period, up at the first
// success. The grace period rides out a slow answer or a brief restart of
// the HTTP front without throwing away the inventory.
type liveness struct {
	grace   time.Duration
	down    bool
	failing bool
	since   time.Time
}

// observe records one probe result at now and reports whether the
// engine's state changed, and whether it is up.
func (l *liveness) observe(ok bool, now time.Time) (changed, up bool) {
	if ok {
		l.failing = false
		if l.down {
			l.down = false
			return true, true
		}
		return false, true
	}
	if !l.failing {
		l.failing, l.since = true, now
	}
	if !l.down && now.Sub(l.since) >= l.grace {
		l.down = true
		return true, false
	}
	return false, !l.down
}

// probe asks the engine's health endpoint once.
func probe(ctx context.Context, client *http.Client, u string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
