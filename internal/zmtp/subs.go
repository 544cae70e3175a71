// This file holds subscription sets: a SUB peer's on the PUB side.

package zmtp

import (
	"fmt"
	"sync"
)

// subscriptions is a peer's set of topic prefixes, each with a count: as
// in ZMQ, a prefix subscribed twice needs two cancels.
type subscriptions struct {
	mu sync.Mutex
	m  map[string]int
}

// add subscribes topic; more than max distinct prefixes is an error.
func (s *subscriptions) add(topic []byte, max int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[string]int)
	}
	if _, ok := s.m[string(topic)]; !ok && len(s.m) >= max {
		return fmt.Errorf("%w: more than %d subscriptions (MaxSubscriptions)", ErrTooLarge, max)
	}
	s.m[string(topic)]++
	return nil
}

// cancel drops one subscription to topic; an unknown topic is ignored.
func (s *subscriptions) cancel(topic []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.m[string(topic)]; ok {
		if n <= 1 {
			delete(s.m, string(topic))
		} else {
			s.m[string(topic)] = n - 1
		}
	}
}

// match reports whether a message whose first frame is topic is wanted.
func (s *subscriptions) match(topic []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[""] > 0 {
		return true
	}
	for t := range s.m {
		if hasPrefix(topic, t) {
			return true
		}
	}
	return false
}

// hasPrefix is bytes.HasPrefix without converting prefix.
func hasPrefix(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && string(b[:len(prefix)]) == prefix
}

// matchAny reports whether topic starts with one of prefixes (the SUB
// side's own filter).
func matchAny(prefixes []string, topic []byte) bool {
	for _, p := range prefixes {
		if hasPrefix(topic, p) {
			return true
		}
	}
	return false
}
