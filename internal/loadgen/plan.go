// This file holds the plan of which request may go next: arrivals, and turns after their session's.

package loadgen

import (
	"cmp"
	"container/heap"
	"slices"
	"time"

	"kvrouter/internal/workload"
)

// plan decides which request may go next: a session's turn becomes ready
// only once the previous turn completed, and ready requests leave in order
// of arrival (then workload order).
type plan struct {
	reqs  []workload.Request
	after []int // after[i]: the turn that follows request i in its session, or -1
	ready readyQueue
}

func newPlan(reqs []workload.Request) *plan {
	p := &plan{reqs: reqs, after: make([]int, len(reqs)), ready: readyQueue{reqs: reqs}}
	sessions := map[string][]int{}
	for i, r := range reqs {
		p.after[i] = -1
		if r.Session == "" {
			p.ready.idx = append(p.ready.idx, i)
			continue
		}
		sessions[r.Session] = append(sessions[r.Session], i)
	}
	for _, turns := range sessions {
		slices.SortStableFunc(turns, func(a, b int) int { return cmp.Compare(reqs[a].Turn, reqs[b].Turn) })
		for k := 1; k < len(turns); k++ {
			p.after[turns[k-1]] = turns[k]
		}
		p.ready.idx = append(p.ready.idx, turns[0])
	}
	heap.Init(&p.ready)
	return p
}

// next returns the earliest ready request and when it is due.
func (p *plan) next() (i int, due time.Duration, ok bool) {
	if len(p.ready.idx) == 0 {
		return 0, 0, false
	}
	i = p.ready.idx[0]
	return i, p.reqs[i].Arrival, true
}

// take removes the request next returned.
func (p *plan) take() { heap.Pop(&p.ready) }

// complete releases the turn that waited for request i.
func (p *plan) complete(i int) {
	if j := p.after[i]; j >= 0 {
		heap.Push(&p.ready, j)
	}
}

type readyQueue struct {
	reqs []workload.Request
	idx  []int
}

func (q readyQueue) Len() int { return len(q.idx) }
func (q readyQueue) Less(a, b int) bool {
	ra, rb := q.reqs[q.idx[a]].Arrival, q.reqs[q.idx[b]].Arrival
	return ra < rb || ra == rb && q.idx[a] < q.idx[b]
}
func (q readyQueue) Swap(a, b int) { q.idx[a], q.idx[b] = q.idx[b], q.idx[a] }
func (q *readyQueue) Push(x any)   { q.idx = append(q.idx, x.(int)) }
func (q *readyQueue) Pop() any {
	i := q.idx[len(q.idx)-1]
	q.idx = q.idx[:len(q.idx)-1]
	return i
}
