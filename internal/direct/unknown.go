// This file holds the bounded, expiring record of --events-bind topics that name no worker.

package direct

import "time"

// Limits of what topics naming no worker may cost: anyone who reaches
// --events-bind can invent topics.
const (
	// maxUnknownTopics bounds the topics remembered as warned about.
	maxUnknownTopics = 1024
	// unknownTopicTTL is how long a topic warned about is not warned
	// about again.
	unknownTopicTTL = 10 * time.Minute
	// unknownWarnBurst warnings at most per unknownWarnWindow; the next
	// one after says how many topics went unlogged meanwhile.
	unknownWarnBurst  = 5
	unknownWarnWindow = 10 * time.Second
	// unknownSweepEvery spaces the searches for expired topics.
	unknownSweepEvery = time.Second
)

// unknownTopics decides which messages of topics naming no worker are
// worth a warning: a topic's first, within a rate limit. It takes no
// clock: callers pass the time.
type unknownTopics struct {
	seen        map[string]time.Time // topic → when warned about (or suppressed)
	lastSweep   time.Time
	windowStart time.Time
	warned      int    // warnings in the window
	suppressed  uint64 // new topics not warned about since the last warning
}

// note records a message of topic at now. It reports whether to warn, and
// how many new topics went unlogged since the last warning.
func (u *unknownTopics) note(topic string, now time.Time) (warn bool, unlogged uint64) {
	if u.seen == nil {
		u.seen = make(map[string]time.Time)
	}
	if t, ok := u.seen[topic]; ok && now.Sub(t) < unknownTopicTTL {
		return false, 0
	}
	if now.Sub(u.lastSweep) >= unknownSweepEvery {
		u.lastSweep = now
		for k, t := range u.seen {
			if now.Sub(t) >= unknownTopicTTL {
				delete(u.seen, k)
			}
		}
	}
	if len(u.seen) < maxUnknownTopics {
		u.seen[topic] = now
	}
	if now.Sub(u.windowStart) >= unknownWarnWindow {
		u.windowStart, u.warned = now, 0
	}
	if u.warned >= unknownWarnBurst {
		u.suppressed++
		return false, 0
	}
	u.warned++
	unlogged, u.suppressed = u.suppressed, 0
	return true, unlogged
}

// len is the number of topics remembered.
func (u *unknownTopics) len() int { return len(u.seen) }
