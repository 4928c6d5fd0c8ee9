package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/limiter"
)

// maxTransactItems is DynamoDB's limit of actions in one transaction.
const maxTransactItems = 100

// Settle implements limiter.Store. Deltas of one batch are summed per
// counter, so a hot window takes one write per batch rather than one per
// request, and every counter change is written in a transaction with what
// makes it exactly once, so a process that dies mid-way leaves either all
// of it or none, however often a settlement is replayed:
//
//   - settlements with a Position (the reconciler's, read from the lease
//     table's stream) advance their log's cursor, an item holding how far
//     along the log settlements were applied, on the condition that it is
//     before the first of them: one guard item per transaction of up to 99
//     counters, however many leases it settles (TestSettleCursorExactlyOnce);
//   - the others (Bill's, a Lambda event's, and records of leases an
//     earlier version wrote at admission) each write a marker item, on the
//     condition that it does not exist.
func (s *Store) Settle(ctx context.Context, settlements []limiter.Settlement) (int, error) {
	var marked []settlement
	logs := map[string][]settlement{}
	var order []string
	seen := map[string]bool{}
	for i, st := range settlements {
		id := st.Lease.ID
		if seen[id] {
			continue
		}
		seen[id] = true
		if !limiter.NeedsSettling(st) {
			continue // nothing to change, nothing to guard
		}
		t := settlement{st: st, at: i, corrections: limiter.Corrections(st), released: limiter.Released(st)}
		if log := st.Position.Log; log != "" {
			if _, ok := logs[log]; !ok {
				order = append(order, log)
			}
			logs[log] = append(logs[log], t)
			continue
		}
		marked = append(marked, t)
	}
	st := &settling{s: s, settlements: settlements, floors: map[string]int64{}, sides: map[string]bool{}}
	var errs []error
	if len(marked) > 0 {
		errs = append(errs, st.marked(ctx, marked))
	}
	for _, log := range order {
		errs = append(errs, st.log(ctx, log, logs[log]))
	}
	return st.applied, errors.Join(errs...)
}

// settling is one Settle call's state.
type settling struct {
	s           *Store
	settlements []limiter.Settlement
	applied     int
	// floors holds, for counters a summed refund would have taken below
	// zero, what they held when read: the refund takes them to zero at
	// most (as the embedded store does).
	floors map[string]int64
	// sides guesses, for a bucket an overshoot lands on, whether it is
	// full (its arrival time before the overshoot's floor) or refilling.
	sides map[string]bool
}

// settleAttempts bounds the rounds of a Settle call that races other
// reconcilers or finds a counter lower than a refund.
const settleAttempts = 4

func (st *settling) done(chunk []settlement) {
	st.applied += len(chunk)
	for _, t := range chunk {
		st.settlements[t.at].Applied = true
	}
}

// retryable handles what a cancelled transaction's reasons say: another
// reconciler applied the guard first (raced), or a refund would take a
// counter below zero (its floor is read for the next round). It reports
// which, or false for an error to give up on.
func (st *settling) retryable(ctx context.Context, err error, guards int, counters []string) (raced bool, retry bool, rerr error) {
	switch {
	case guardFailed(err, guards):
		return true, true, nil
	case floorFailed(err, guards):
		// A refund would take a counter below zero (it cannot, by
		// construction, unless the counter was changed by hand): settle
		// refunding those counters to zero only.
		var low []string
		for _, k := range failedCounters(err, guards, counters) {
			if full, bucket := st.sides[k]; bucket {
				st.sides[k] = !full // the other side of the bucket's max
				continue
			}
			low = append(low, k)
		}
		return false, true, st.s.readFloors(ctx, low, st.floors)
	}
	return false, false, awserr.Classify("settle", err)
}

// marked settles with a marker per lease.
func (st *settling) marked(ctx context.Context, todo []settlement) error {
	s := st.s
	var errs []error
	for attempt := 0; len(todo) > 0 && attempt < settleAttempts; attempt++ {
		var err error
		if todo, err = s.unsettled(ctx, todo); err != nil {
			return errors.Join(append(errs, err)...)
		}
		var retry []settlement
		for _, chunk := range chunkSettlements(todo, true) {
			items, counters := s.settleItems(chunk, st.floors, st.sides)
			guards := s.markers(chunk)
			err := s.transact(ctx, append(guards, items...))
			if err == nil {
				st.done(chunk)
				continue
			}
			_, again, rerr := st.retryable(ctx, err, len(guards), counters)
			switch {
			case rerr != nil:
				errs = append(errs, rerr)
			case again:
				retry = append(retry, chunk...)
			}
		}
		todo = retry
	}
	if len(todo) > 0 {
		errs = append(errs, fmt.Errorf("settle: %d settlements still racing after retries: %w", len(todo), limiter.ErrContention))
	}
	return errors.Join(errs...)
}

// log settles one log's settlements in its order, each chunk in one
// transaction that moves the log's cursor from before its first to its
// last. A chunk that fails stops the log there: the caller passes the rest
// again (limiter.Position).
func (st *settling) log(ctx context.Context, log string, todo []settlement) error {
	s := st.s
	slices.SortStableFunc(todo, func(a, b settlement) int { return strings.Compare(a.st.Position.Order, b.st.Position.Order) })
	todo = slices.CompactFunc(todo, func(a, b settlement) bool { return a.st.Position.Order == b.st.Position.Order })
	for attempt := 0; len(todo) > 0; attempt++ {
		if attempt == settleAttempts {
			return fmt.Errorf("settle: %d settlements of %s still racing after retries: %w", len(todo), log, limiter.ErrContention)
		}
		for len(todo) > 0 {
			chunk := chunkSettlements(todo, false)[0]
			items, counters := s.settleItems(chunk, st.floors, st.sides)
			guard := s.advanceCursor(log, chunk)
			err := s.transact(ctx, append([]types.TransactWriteItem{guard}, items...))
			if err == nil {
				st.done(chunk)
				todo = todo[len(chunk):]
				continue
			}
			raced, again, rerr := st.retryable(ctx, err, 1, counters)
			if rerr != nil || !again {
				return rerr
			}
			if raced {
				// Another reconciler settled some of these: go on after
				// what it applied.
				at, err := s.cursor(ctx, log)
				if err != nil {
					return err
				}
				todo = slices.DeleteFunc(todo, func(t settlement) bool { return t.st.Position.Order <= at })
			}
			break
		}
	}
	return nil
}

// cursorKey is the item of a log's settlement cursor.
func cursorKey(log string) string { return "cursor|" + log }

// advanceCursor is the guard of a chunk of one log's settlements, in
// order: the cursor moves to the chunk's last if it is before its first.
func (s *Store) advanceCursor(log string, chunk []settlement) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                &s.tables.Counters,
		Key:                      keyOf(cursorKey(log)),
		UpdateExpression:         aws.String("SET #o = :last, #t = :t"),
		ConditionExpression:      aws.String("attribute_not_exists(#o) OR #o < :first"),
		ExpressionAttributeNames: map[string]string{"#o": attrCursor, "#t": attrTTL},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":first": sv(chunk[0].st.Position.Order),
			":last":  sv(chunk[len(chunk)-1].st.Position.Order),
			// A log is re-read for at most the stream's 24 h retention.
			":t": n(s.ttlAfter(s.wall())),
		},
	}}
}

// cursor reads how far along log settlements were applied ("" for none).
func (s *Store) cursor(ctx context.Context, log string) (string, error) {
	got, err := s.getItems(ctx, s.tables.Counters, []string{cursorKey(log)}, attrPK, attrCursor)
	if err != nil {
		return "", err
	}
	return str(got[cursorKey(log)], attrCursor), nil
}

// markers are the guards of a chunk settled with a marker per lease.
func (s *Store) markers(chunk []settlement) []types.TransactWriteItem {
	items := make([]types.TransactWriteItem, len(chunk))
	for i, t := range chunk {
		items[i] = types.TransactWriteItem{Put: &types.Put{
			TableName: &s.tables.Counters,
			Item: map[string]types.AttributeValue{
				attrPK:  sv(settledKey(t.st.Lease.ID)),
				attrTTL: n(s.ttlAfter(t.st.Lease.ExpiresAt)),
			},
			ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
			ExpressionAttributeNames: map[string]string{"#pk": attrPK},
		}}
	}
	return items
}

type settlement struct {
	st          limiter.Settlement
	at          int // its index among Settle's settlements
	corrections []int64
	released    []int64 // a budget's reservation turned into spending
}

// touches reports whether the settlement writes charge i's counter.
func (t settlement) touches(i int) bool { return t.corrections[i] != 0 || t.released[i] != 0 }

// unsettled drops the settlements whose marker exists.
func (s *Store) unsettled(ctx context.Context, todo []settlement) ([]settlement, error) {
	keys := make([]string, len(todo))
	for i, t := range todo {
		keys[i] = settledKey(t.st.Lease.ID)
	}
	got, err := s.getItems(ctx, s.tables.Counters, keys, attrPK)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(todo, func(t settlement) bool {
		_, done := got[settledKey(t.st.Lease.ID)]
		return done
	}), nil
}

// readFloors reads what the counters keys hold into floors.
func (s *Store) readFloors(ctx context.Context, keys []string, floors map[string]int64) error {
	if len(keys) == 0 {
		return nil
	}
	got, err := s.getItems(ctx, s.tables.Counters, keys, attrPK, attrN)
	if err != nil {
		return err
	}
	for _, k := range keys {
		v, _ := number(got[k], attrN)
		s.log.Error("a settlement refund would take a counter below zero; refunding it to zero only", "counter", k, "holds", v)
		floors[k] = max(v, 0)
	}
	return nil
}

// chunkSettlements groups settlements so that each group's guards (a
// marker each when marked, else one cursor) plus distinct counters fit in
// one transaction.
func chunkSettlements(todo []settlement, marked bool) [][]settlement {
	guards := func(n int) int {
		if marked {
			return n
		}
		return 1
	}
	var chunks [][]settlement
	var cur []settlement
	counters := map[string]bool{}
	for _, t := range todo {
		added := 0
		for i, c := range t.st.Lease.Charges {
			if k := CounterKey(c.Counter); t.touches(i) && !counters[k] {
				added++
			}
		}
		if len(cur) > 0 && guards(len(cur)+1)+len(counters)+added > maxTransactItems {
			chunks = append(chunks, cur)
			cur, counters = nil, map[string]bool{}
		}
		cur = append(cur, t)
		for i, c := range t.st.Lease.Charges {
			if t.touches(i) {
				counters[CounterKey(c.Counter)] = true
			}
		}
	}
	if len(cur) > 0 {
		chunks = append(chunks, cur)
	}
	return chunks
}

// settleItems builds a transaction's counter changes: one summed ADD per
// counter, whose keys it returns in their order. A refund is conditioned
// on leaving the counter at or above zero; for counters in floors, it
// refunds at most what they held. An overshoot on a token bucket moves it
// to max(value, floor) + overshoot, floor being the latest admission among
// the leases: one of two conditional updates, as in addBucket, the side
// guessed in sides.
func (s *Store) settleItems(chunk []settlement, floors map[string]int64, sides map[string]bool) ([]types.TransactWriteItem, []string) {
	var items []types.TransactWriteItem
	sums := map[string]int64{}
	releases := map[string]int64{}
	charge := map[string]*limiter.Charge{}
	var order []string
	for _, t := range chunk {
		for i := range t.st.Lease.Charges {
			if !t.touches(i) {
				continue
			}
			c := &t.st.Lease.Charges[i]
			k := CounterKey(c.Counter)
			if _, ok := charge[k]; !ok {
				order = append(order, k)
				charge[k] = c
			}
			sums[k] = limiter.SatAdd(sums[k], t.corrections[i])
			releases[k] = limiter.SatAdd(releases[k], t.released[i])
			if c.Shape == limiter.ShapeBucket && c.Floor > charge[k].Floor {
				charge[k] = c
			}
		}
	}
	var counters []string
	for _, k := range order {
		d, rel := sums[k], releases[k]
		if floor, low := floors[k]; low && d < 0 {
			d = max(d, -floor)
		}
		if d == 0 && rel == 0 {
			continue
		}
		u := s.settleUpdate(k, charge[k], d, rel, sides)
		items = append(items, types.TransactWriteItem{Update: u})
		counters = append(counters, k)
	}
	return items, counters
}

// settleUpdate is the update of counter k by d, the settlement's summed
// correction, releasing rel of what was reserved; c is the charge of the
// counter the leases share (for a bucket, the latest admission's).
func (s *Store) settleUpdate(k string, c *limiter.Charge, d, rel int64, sides map[string]bool) *types.Update {
	u := &types.Update{
		TableName:                 &s.tables.Counters,
		Key:                       keyOf(k),
		UpdateExpression:          aws.String("ADD #n :d SET #t = if_not_exists(#t, :t)"),
		ExpressionAttributeNames:  map[string]string{"#n": attrN, "#t": attrTTL},
		ExpressionAttributeValues: map[string]types.AttributeValue{":d": n(d), ":t": n(s.ttlAfter(c.WindowEnd().Add(c.Period)))},
	}
	if rel != 0 {
		// What was reserved is now spent (or refunded, by d).
		u.UpdateExpression = aws.String("ADD #n :d, #r :rel SET #t = if_not_exists(#t, :t)")
		u.ExpressionAttributeNames["#r"] = attrReserved
		u.ExpressionAttributeValues[":rel"] = n(-rel)
	}
	switch {
	case d < 0:
		// An overshoot is charged even past the limit; a refund never
		// takes the counter below zero.
		u.ConditionExpression = aws.String("#n >= :r")
		u.ExpressionAttributeValues[":r"] = n(-d)
	case d > 0 && c.Shape == limiter.ShapeBucket:
		full, guessed := sides[k]
		if !guessed {
			v, seen := s.buckets.Get(k)
			full = !seen || v < c.Floor
			sides[k] = full
		}
		u.ExpressionAttributeValues[":f"] = n(c.Floor)
		if full {
			u.UpdateExpression = aws.String("SET #n = :v, #t = if_not_exists(#t, :t)")
			u.ConditionExpression = aws.String("attribute_not_exists(#n) OR #n < :f")
			u.ExpressionAttributeValues[":v"] = n(limiter.SatAdd(c.Floor, d))
			delete(u.ExpressionAttributeValues, ":d")
		} else {
			u.ConditionExpression = aws.String("#n >= :f")
		}
	}
	return u
}

// guardFailed reports whether a transaction was cancelled because a guard
// (one of its first guards items: a marker that exists, a cursor already
// past the chunk) failed its condition: another reconciler settled first.
func guardFailed(err error, guards int) bool {
	for i, r := range awserr.CancellationReasons(err) {
		if i < guards && r.Code != nil && *r.Code == "ConditionalCheckFailed" {
			return true
		}
	}
	return false
}

// floorFailed reports whether a transaction was cancelled because a refund
// would have taken a counter (an item after the guards) below zero.
func floorFailed(err error, guards int) bool {
	for i, r := range awserr.CancellationReasons(err) {
		if i >= guards && r.Code != nil && *r.Code == "ConditionalCheckFailed" {
			return true
		}
	}
	return false
}

// failedCounters names the counters whose refund condition failed.
func failedCounters(err error, guards int, counters []string) []string {
	var out []string
	for i, r := range awserr.CancellationReasons(err) {
		if j := i - guards; j >= 0 && j < len(counters) && r.Code != nil && *r.Code == "ConditionalCheckFailed" {
			out = append(out, counters[j])
		}
	}
	return out
}

// transact runs one TransactWriteItems, retrying conflicts a few times with
// backoff (the SDK retries throttling itself; its idempotency token makes
// its resends of a transaction that landed change nothing).
func (s *Store) transact(ctx context.Context, items []types.TransactWriteItem) error {
	var err error
	for attempt := range 4 {
		if attempt > 0 {
			if werr := sleep(ctx, backoff(attempt)); werr != nil {
				return werr
			}
		}
		s.roundTrips.Add(1)
		// The engine's consumed capacity for transactions is not counted
		// (see Stats.TransactItems); the items are.
		_, err = s.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if err == nil {
			s.txItems.Add(int64(len(items)))
			return nil
		}
		if !awserr.IsConflict(err) {
			return err
		}
	}
	return err
}
