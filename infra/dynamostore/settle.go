package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/limiter"
)

// maxTransactItems is DynamoDB's limit of actions in one transaction.
const maxTransactItems = 100

// Settle implements limiter.Store. Each lease's settled marker is written
// in the same transaction as the counter changes, so a settlement is
// applied exactly once however often it is replayed, and a process that
// dies mid-way leaves either all of it or none. Deltas of one batch are
// summed per counter, so a hot window takes one write per batch rather
// than one per request.
func (s *Store) Settle(ctx context.Context, settlements []limiter.Settlement) (int, error) {
	todo := make([]settlement, 0, len(settlements))
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
		todo = append(todo, settlement{st: st, at: i, corrections: limiter.Corrections(st), released: limiter.Released(st)})
	}
	var errs []error
	applied := 0
	// floors holds, for counters a summed refund would have taken below
	// zero, what they held when read: the refund takes them to zero at
	// most (as the embedded store does).
	floors := map[string]int64{}
	// sides guesses, for a bucket an overshoot lands on, whether it is
	// full (its arrival time before the overshoot's floor) or refilling.
	sides := map[string]bool{}
	for attempt := 0; len(todo) > 0 && attempt < 4; attempt++ {
		var err error
		if todo, err = s.unsettled(ctx, todo); err != nil {
			return applied, err
		}
		var retry []settlement
		for _, chunk := range chunkSettlements(todo) {
			items, counters := s.settleItems(chunk, floors, sides)
			err := s.transact(ctx, items)
			switch {
			case err == nil:
				applied += len(chunk)
				for _, t := range chunk {
					settlements[t.at].Applied = true
				}
			case markerRace(err, len(chunk)):
				// Another reconciler settled some of these meanwhile: look
				// again at which are left.
				retry = append(retry, chunk...)
			case floorFailed(err, len(chunk)):
				// A refund would take a counter below zero (it cannot, by
				// construction, unless the counter was changed by hand):
				// settle the chunk refunding those counters to zero only.
				var low []string
				for _, k := range failedCounters(err, len(chunk), counters) {
					if full, bucket := sides[k]; bucket {
						sides[k] = !full // the other side of the bucket's max
						continue
					}
					low = append(low, k)
				}
				if err := s.readFloors(ctx, low, floors); err != nil {
					return applied, err
				}
				retry = append(retry, chunk...)
			default:
				errs = append(errs, awserr.Classify("settle", err))
			}
		}
		todo = retry
	}
	if len(todo) > 0 {
		errs = append(errs, fmt.Errorf("settle: %d settlements still racing after retries: %w", len(todo), limiter.ErrContention))
	}
	return applied, errors.Join(errs...)
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

// chunkSettlements groups settlements so that each group's markers plus
// distinct counters fit in one transaction.
func chunkSettlements(todo []settlement) [][]settlement {
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
		if len(cur) > 0 && len(cur)+1+len(counters)+added > maxTransactItems {
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

// settleItems builds one transaction: a marker per lease and one summed
// ADD per counter, the counter keys of which it returns in their order
// after the markers. A refund is conditioned on leaving the counter at or
// above zero; for counters in floors, it refunds at most what they held.
// An overshoot on a token bucket moves it to max(value, floor) +
// overshoot, floor being the latest admission among the leases: one of
// two conditional updates, as in addBucket, the side guessed in sides
// (settleUpdate).
func (s *Store) settleItems(chunk []settlement, floors map[string]int64, sides map[string]bool) ([]types.TransactWriteItem, []string) {
	var items []types.TransactWriteItem
	sums := map[string]int64{}
	releases := map[string]int64{}
	charge := map[string]*limiter.Charge{}
	var order []string
	for _, t := range chunk {
		items = append(items, types.TransactWriteItem{Put: &types.Put{
			TableName: &s.tables.Counters,
			Item: map[string]types.AttributeValue{
				attrPK:  sv(settledKey(t.st.Lease.ID)),
				attrTTL: n(s.ttlAfter(t.st.Lease.ExpiresAt)),
			},
			ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
			ExpressionAttributeNames: map[string]string{"#pk": attrPK},
		}})
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

// markerRace reports whether a transaction was cancelled because a settled
// marker (one of the first markers items) already existed.
func markerRace(err error, markers int) bool {
	for i, r := range awserr.CancellationReasons(err) {
		if i < markers && r.Code != nil && *r.Code == "ConditionalCheckFailed" {
			return true
		}
	}
	return false
}

// floorFailed reports whether a transaction was cancelled because a refund
// would have taken a counter (an item after the markers) below zero.
func floorFailed(err error, markers int) bool {
	for i, r := range awserr.CancellationReasons(err) {
		if i >= markers && r.Code != nil && *r.Code == "ConditionalCheckFailed" {
			return true
		}
	}
	return false
}

// failedCounters names the counters whose refund condition failed.
func failedCounters(err error, markers int, counters []string) []string {
	var out []string
	for i, r := range awserr.CancellationReasons(err) {
		if j := i - markers; j >= 0 && j < len(counters) && r.Code != nil && *r.Code == "ConditionalCheckFailed" {
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
