package admission

import (
	"sync"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A refusal whose Retry-After fits the request's class may be waited out
// instead of answered, but the Retry-After is exact for one request: room
// that one waiter will take at that instant is not room for the next. So
// each instance keeps, per refusing counter, what its waiters are
// promised, and a request waits only until the instant the counter will
// have room for it after them (if nothing else arrives), when that fits
// its class; otherwise it gets its 429 at once. The waiters of one counter
// are bounded too, and so are the counters followed: a flood of waiters
// costs a few entries, not a connection each for the whole wait.

// maxWaitersPerCounter bounds the requests of one instance waiting on one
// counter; maxWaitCounters the counters with waiters (counters are keyed
// by what clients choose: paths, tags, keys).
const (
	maxWaitersPerCounter = 64
	maxWaitCounters      = 4096
)

// waitBook is one instance's promises to waiting requests.
type waitBook struct {
	mu    sync.Mutex
	seq   uint64
	byKey map[string][]waitClaim
}

type waitClaim struct {
	id     uint64
	amount int64
}

// claim promises ref's counter's room to a request of ref.Amount at now
// that may wait at most bound, after what is promised to the requests
// already waiting on it. It returns how long to wait and the function
// that gives the promise back (when the request tries again), or false
// when the room comes too late (or not at all: a counter whose room
// cannot be known waits one request at a time). With record false it
// only answers (a dry run): nothing is promised.
func (b *waitBook) claim(now time.Time, ref *limiter.Refusal, bound time.Duration, record bool) (time.Duration, func(), bool) {
	key := string(ref.Rule.Key()) + "|" + ref.Child + "|" + ref.Kind.String()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byKey == nil {
		b.byKey = map[string][]waitClaim{}
	}
	waiting := b.byKey[key]
	if len(waiting) >= maxWaitersPerCounter || (waiting == nil && len(b.byKey) >= maxWaitCounters) {
		return 0, nil, false
	}
	var promised int64
	for _, c := range waiting {
		promised = limiter.SatAdd(promised, c.amount)
	}
	need := limiter.SatAdd(promised, ref.Amount)
	wait := ref.RetryAfter
	switch room := ref.RoomAt(now.Add(wait)); {
	case room < 0 && len(waiting) > 0:
		return 0, nil, false
	case room >= 0 && room < need:
		// Later, when the room grows to what the waiters before it and it
		// need: the earliest such instant within the bound.
		lo, hi := wait, bound
		if ref.RoomAt(now.Add(hi)) < need {
			return 0, nil, false
		}
		for hi-lo > time.Millisecond {
			mid := lo + (hi-lo)/2
			if ref.RoomAt(now.Add(mid)) >= need {
				hi = mid
			} else {
				lo = mid
			}
		}
		wait = hi
	}
	if !record {
		return wait, func() {}, true
	}
	b.seq++
	id := b.seq
	b.byKey[key] = append(waiting, waitClaim{id: id, amount: ref.Amount})
	return wait, func() { b.release(key, id) }, true
}

func (b *waitBook) release(key string, id uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	waiting := b.byKey[key]
	for i, c := range waiting {
		if c.id == id {
			waiting = append(waiting[:i:i], waiting[i+1:]...)
			break
		}
	}
	if len(waiting) == 0 {
		delete(b.byKey, key)
		return
	}
	b.byKey[key] = waiting
}
