// This file holds the topics of a TP rank's runner inventory shard: their writing and parsing.

package kvevents

import (
	"strconv"
	"strings"
)

// runnerShardSep separates an engine's topic from the tensor-parallel rank
// of a runner shard's inventory. Engines publish one event stream per DP
// rank and their wire has no TP field, but with TP > 1 each TP rank's
// runner holds only its shard of every block, so a block is restorable only
// while all shards hold it. kvrouter's engines therefore publish each
// shard's runner-owned inventory on the DP rank's socket under
// "<topic>|kvcr-tp<rank>"; framework-owned events keep the plain topic.
// SUB filtering is by prefix, so a subscriber of <topic> receives both.
const runnerShardSep = "|kvcr-tp"

// RunnerShardTopic is the topic of TP rank tp's runner inventory.
func RunnerShardTopic(topic string, tp int) string {
	return topic + runnerShardSep + strconv.Itoa(tp)
}

// ParseRunnerShardTopic splits a topic into the engine's topic and the TP
// rank of a runner shard; ok is false for a plain topic.
func ParseRunnerShardTopic(topic string) (base string, tp int, ok bool) {
	i := strings.LastIndex(topic, runnerShardSep)
	if i < 0 {
		return topic, 0, false
	}
	n, err := strconv.Atoi(topic[i+len(runnerShardSep):])
	if err != nil || n < 0 {
		return topic, 0, false
	}
	return topic[:i], n, true
}
