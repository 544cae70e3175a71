// This file holds the seeded workload: the prompts the caches hold and the requests sent.

package servebench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"kvrouter/internal/frontdoor"
	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

// Workload shape. A prompt is a system prompt, a conversation's history and
// a new turn; the fleet's caches hold system prompts and histories.
const (
	blockSize = 16
	// systems is how many system prompts the fleet serves: each is shared
	// by a slice of the ranks, as tenants or apps share a deployment.
	systems = 8
	// convs is how many conversations each rank holds; the rank's runner
	// keeps the first one in its cache owner as well.
	convs = 8
	// newEvery: one request in newEvery starts a conversation (it matches
	// its system prompt only); the others continue one.
	newEvery = 8
	// bodies is how many distinct requests the client cycles through.
	bodies = 2048
)

// workload generates the prompts of the fleet's caches and of the requests
// from a seed, so that an agent can rebuild what it holds whenever a router
// asks for a snapshot rather than keeping it in memory.
type workload struct {
	seed            uint64
	text            bool
	tok             *frontdoor.Local // the router's tokenizer, for text
	system, history int              // in blocks
	fresh           int              // new turn, in blocks
	sys             [systems][]uint32
	sysText         [systems]string
}

func newWorkload(seed uint64, promptTokens int, tok *frontdoor.Local) (*workload, error) {
	blocks := promptTokens / blockSize
	if blocks < 3 {
		return nil, fmt.Errorf("--prompt-tokens %d: want at least %d (three blocks)", promptTokens, 3*blockSize)
	}
	w := &workload{seed: seed, text: tok != nil, tok: tok, system: blocks / 3, history: blocks / 2}
	w.fresh = blocks - w.system - w.history
	for s := range systems {
		w.sys[s], w.sysText[s] = w.piece(0, uint64(s), w.system*blockSize)
	}
	return w, nil
}

// piece returns about n tokens of content identified by (kind, id): token
// ids, or with text the words they came from. Text pieces are tokenized
// only as part of a whole prompt, so that the blocks the agents hold are
// exactly those the router's tokenizer produces.
func (w *workload) piece(kind, id uint64, n int) ([]uint32, string) {
	r := rand.New(rand.NewPCG(w.seed^kind<<56, id))
	if !w.text {
		out := make([]uint32, n)
		for i := range out {
			out[i] = 1000 + r.Uint32N(100_000)
		}
		return out, ""
	}
	var sb strings.Builder
	for range n {
		sb.WriteByte(' ')
		sb.WriteString(words[r.IntN(len(words))])
	}
	return nil, sb.String()
}

// systemOf is the system prompt of a rank.
func systemOf(rank int) int { return rank % systems }

// conversation returns the prompt a rank holds for its c-th conversation:
// its system prompt and the history, as tokens.
func (w *workload) conversation(rank, c int) []uint32 {
	hist, histText := w.piece(1, uint64(rank*convs+c), w.history*blockSize)
	s := systemOf(rank)
	if !w.text {
		return append(append([]uint32(nil), w.sys[s]...), hist...)
	}
	return w.tok.Text(w.sysText[s]+histText, true)
}

// store is the op storing a prompt's full blocks from the root.
func store(toks []uint32, tier kvevents.Tier) index.Op {
	local := kvhash.LocalHashes(toks, blockSize, kvhash.SeedFor("", ""))
	// Engine hashes: any function of the prefix that peers agree on.
	eng := kvhash.SequenceHashes(local)
	for i := range eng {
		eng[i] ^= 0x5bd1e995
	}
	return index.Op{Kind: index.OpStore, Tier: tier, Hashes: eng, Local: local, BlockSize: blockSize}
}

// rankOps are the ops that rebuild what a rank's device cache holds.
func (w *workload) rankOps(rank int) []index.Op {
	ops := make([]index.Op, convs)
	for c := range convs {
		ops[c] = store(w.conversation(rank, c), kvevents.TierDevice)
	}
	return ops
}

// ownerOps are the ops of the rank's cache owner: its runner keeps the
// rank's first conversation.
func (w *workload) ownerOps(rank int) []index.Op {
	return []index.Op{store(w.conversation(rank, 0), kvevents.TierExternal)}
}

// request is one request body and where its prompt's history lives.
type request struct {
	body []byte
	rank int
	conv int // the rank's conversation it continues; -1 for a new one
	// tokens is the prompt's length in tokens.
	tokens int
}

// request returns the i-th request: a conversation of a random rank
// continued by a new turn, or now and then a new conversation under a
// system prompt.
func (w *workload) request(i, ranks int) (request, error) {
	r := rand.New(rand.NewPCG(w.seed^3<<56, uint64(i)))
	q := request{rank: r.IntN(ranks), conv: -1}
	s := systemOf(q.rank)
	n := w.fresh * blockSize
	toks, text := w.sys[s], w.sysText[s]
	if i%newEvery == 0 {
		// A new conversation: no history anywhere.
		n += w.history * blockSize
	} else {
		q.conv = r.IntN(convs)
		hist, histText := w.piece(1, uint64(q.rank*convs+q.conv), w.history*blockSize)
		toks, text = append(append([]uint32(nil), toks...), hist...), text+histText
	}
	turn, turnText := w.piece(2, uint64(i), n)
	ids := append(append([]uint32(nil), toks...), turn...)
	var prompt any = ids
	q.tokens = len(ids)
	if w.text {
		prompt = text + turnText
		q.tokens = len(w.tok.Text(text+turnText, true))
	}
	var err error
	q.body, err = json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": 1})
	return q, err
}

// words are common English words: most are one token each (with a leading
// space) in the demo vocabulary and in real ones, so that a text prompt is
// about as long in tokens as in words.
var words = strings.Fields(`the of and to in is you that it he was for on are as with his they at be this
have from or one had by word but not what all were we when your can said there use an each which she do how
their if will up other about out many then them these so some her would make like him into time has look two
more write go see number no way could people my than first water been call who oil its now find long down day
did get come made may part over new sound take only little work know place year live me back give most very
after thing our just name good sentence man think say great where help through much before line right too
mean old any same tell boy follow came want show also around form three small set put end does another well
large must big even such because turn here why ask went men read need land different home us move try kind
hand picture again change off play spell air away animal house point page letter mother answer found study
still learn should america world high every near add food between own below country plant last school father
keep tree never start city earth eye light thought head under story saw left few while along might close
something seem next hard open example begin life always those both paper together got group often run`)
