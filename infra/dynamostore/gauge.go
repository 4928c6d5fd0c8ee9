package dynamostore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/limiter"
)

// Slots. An in-flight gauge is one item (gaugeKey) holding a binary set,
// attribute b, of the slots it admitted: one 9-byte entry per lease, the
// lease's tag (5 bytes of a hash of its id) and its expiry (Unix seconds,
// rounded up, 4 bytes). The gauge's count is the set's size. So a gauge
// with 200 slots held weighs about 1.9 KB, two write units, and one of
// 50 about 500 bytes, one (TestGaugeItemSize).
//
// Taking a slot is ADD of the lease's entry on the condition that the set
// holds at most the ceiling and not the entry yet; giving it back is
// DELETE of the entry. Both are idempotent: resent after they landed, the
// first finds its entry there (success, not a refusal) and the second
// removes nothing. So no lost answer counts a slot twice or gives one back
// twice, and a set cannot go below empty.
//
// A slot nobody gives back (its process died, or its release failed and
// the reconciler has not run yet) carries its expiry: from then on reads
// do not count it, and the admission that finds the gauge full removes it
// and is charged again (Outcome.Reclaimed). No index and no lease item are
// needed to find it, and no audit: a slot cannot outlive its expiry
// (TestDeadSlotReclaimedAtItsExpiry). Renewing a lease replaces its
// entries by ones with the new expiry.

const (
	tagBytes   = 5
	entryBytes = tagBytes + 4
)

// gaugeKey is the item of a gauge counter. The suffix keeps gauges apart
// from the string sets of lease ids earlier versions kept under the
// counter key itself, which TTL collects.
func gaugeKey(counterKey string) string { return counterKey + "#b" }

// leaseTag is the part of a slot entry that names the lease: 5 bytes of
// the FNV-1a hash of its id. Two leases of one gauge share a tag with odds
// of 1 in 2^40 (and then also need the same expiry second for their
// entries to be one); a lease id is the gateway's random request id.
func leaseTag(id string) [tagBytes]byte {
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint64(id[i])) * 1099511628211
	}
	var out [tagBytes]byte
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], h)
	copy(out[:], b[:tagBytes])
	return out
}

// expirySeconds is an expiry as an entry holds it: Unix seconds rounded
// up (a slot is held to the end of its second, never less), within what
// 4 bytes hold.
func expirySeconds(t time.Time) uint32 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return uint32(min(max(s, 0), math.MaxUint32))
}

// newEntry is the slot entry of a lease id expiring at exp.
func newEntry(id string, exp time.Time) []byte {
	e := make([]byte, entryBytes)
	tag := leaseTag(id)
	copy(e, tag[:])
	binary.BigEndian.PutUint32(e[tagBytes:], expirySeconds(exp))
	return e
}

// slotEntry is the entry of a lease's slots.
func slotEntry(l *limiter.Lease) []byte { return newEntry(l.ID, l.ExpiresAt) }

// entryExpired reports whether a slot entry's lease has expired at now; an
// entry that is not one of ours counts as expired.
func entryExpired(e []byte, now time.Time) bool {
	if len(e) != entryBytes {
		return true
	}
	return !now.Before(time.Unix(int64(binary.BigEndian.Uint32(e[tagBytes:])), 0))
}

// sameTag reports whether entry e belongs to the lease tagged tag.
func sameTag(e []byte, tag [tagBytes]byte) bool {
	return len(e) == entryBytes && bytes.Equal(e[:tagBytes], tag[:])
}

// liveSlots counts the entries not expired at now.
func liveSlots(entries [][]byte, now time.Time) int64 {
	var n int64
	for _, e := range entries {
		if !entryExpired(e, now) {
			n++
		}
	}
	return n
}

func binarySet(item map[string]types.AttributeValue, name string) [][]byte {
	if v, ok := item[name].(*types.AttributeValueMemberBS); ok {
		return v.Value
	}
	return nil
}

func bs(v ...[]byte) types.AttributeValue { return &types.AttributeValueMemberBS{Value: v} }

// acquire takes one slot of a gauge for lease. A refused result also
// returns the entries the gauge holds.
func (s *Store) acquire(ctx context.Context, key string, c *limiter.Charge, lease *limiter.Lease, now time.Time) (addResult, [][]byte) {
	entry := slotEntry(lease)
	ceiling := c.Ceiling(0, now)
	cond := "(attribute_not_exists(#b) OR size(#b) <= :m) AND NOT contains(#b, :e)"
	if ceiling < 0 {
		cond = "size(#b) <= :m AND NOT contains(#b, :e)"
	}
	s.roundTrips.Add(1)
	out, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           &s.tables.Counters,
		Key:                                 keyOf(gaugeKey(key)),
		UpdateExpression:                    aws.String("ADD #b :es SET #t = :t"),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            map[string]string{"#b": attrSlotSet, "#t": attrTTL},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":es": bs(entry), ":e": &types.AttributeValueMemberB{Value: entry}, ":m": n(ceiling), ":t": n(s.counterTTL(c, now))},
		ReturnValues:                        types.ReturnValueUpdatedNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              types.ReturnConsumedCapacityIndexes,
	})
	if err == nil {
		s.accountOut(out.ConsumedCapacity)
		return addResult{cur: liveSlots(binarySet(out.Attributes, attrSlotSet), now), applied: wasApplied}, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		held := binarySet(ccf.Item, attrSlotSet)
		if slices.ContainsFunc(held, func(e []byte) bool { return bytes.Equal(e, entry) }) {
			// A resend of a write that landed: the slot is ours.
			return addResult{cur: liveSlots(held, now), applied: wasApplied}, nil
		}
		return addResult{cur: liveSlots(held, now), refused: true}, held
	}
	return addResult{applied: mayHaveApplied, err: awserr.Classify("take slot "+key, err)}, nil
}

// deleteEntries removes entries from a gauge; idempotent. It returns the
// entries the gauge held before.
func (s *Store) deleteEntries(ctx context.Context, key string, entries ...[]byte) ([][]byte, error) {
	s.roundTrips.Add(1)
	out, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.tables.Counters,
		Key:                       keyOf(gaugeKey(key)),
		UpdateExpression:          aws.String("DELETE #b :es"),
		ExpressionAttributeNames:  map[string]string{"#b": attrSlotSet},
		ExpressionAttributeValues: map[string]types.AttributeValue{":es": bs(entries...)},
		ReturnValues:              types.ReturnValueUpdatedOld,
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityIndexes,
	})
	if err != nil {
		return nil, awserr.Classify("give back slot "+key, err)
	}
	s.accountOut(out.ConsumedCapacity)
	return binarySet(out.Attributes, attrSlotSet), nil
}

// releaseSlot gives back a lease's slot on one gauge, whatever expiry its
// entry carries (a renewal whose answer was lost can leave one with an
// expiry the caller never learnt), and reports whether the gauge held it.
// One write, and a second only when such a stray entry is found.
func (s *Store) releaseSlot(ctx context.Context, key string, l *limiter.Lease) (bool, error) {
	entry := slotEntry(l)
	old, err := s.deleteEntries(ctx, key, entry)
	if err != nil {
		return false, err
	}
	tag := leaseTag(l.ID)
	held := false
	var stray [][]byte
	for _, e := range old {
		switch {
		case bytes.Equal(e, entry):
			held = true
		case sameTag(e, tag):
			stray = append(stray, e)
		}
	}
	if len(stray) > 0 {
		if _, err := s.deleteEntries(ctx, key, stray...); err != nil {
			return held, err
		}
		held = true
	}
	return held, nil
}

// gauges returns the counter keys of a lease's in-flight charges.
func gauges(l *limiter.Lease) []string {
	var out []string
	for _, c := range l.Charges {
		if c.Counter.Kind == limiter.KindInFlight {
			out = append(out, CounterKey(c.Counter))
		}
	}
	return out
}

func holdsSlots(l *limiter.Lease) bool {
	return slices.ContainsFunc(l.Charges, func(c limiter.Charge) bool { return c.Counter.Kind == limiter.KindInFlight })
}

// release gives back every slot a lease holds, in parallel, and reports
// whether any was still held.
func (s *Store) release(ctx context.Context, l *limiter.Lease) (bool, error) {
	keys := gauges(l)
	errs := make([]error, len(keys))
	var any atomic.Bool
	parallel(len(keys), func(i int) {
		held, err := s.releaseSlot(ctx, keys[i], l)
		errs[i] = err
		if held {
			any.Store(true)
		}
	})
	return any.Load(), errors.Join(errs...)
}

// reclaim removes from a full gauge the entries that expired at now (their
// requests never gave them back) and returns how many it removed.
func (s *Store) reclaim(ctx context.Context, now time.Time, key string, held [][]byte) (int, error) {
	var dead [][]byte
	for _, e := range held {
		if entryExpired(e, now) {
			dead = append(dead, e)
		}
	}
	if len(dead) == 0 {
		return 0, nil
	}
	if _, err := s.deleteEntries(ctx, key, dead...); err != nil {
		return 0, err
	}
	s.log.Info("gave back the slots of requests that never completed, at their expiry; their reservations stay charged",
		"counter", key, "slots", len(dead))
	return len(dead), nil
}

// Renew implements limiter.Store: on each of the lease's gauges, one
// conditional write adds an entry with the new expiry while the old one is
// still there, and a second removes the old. Between the two the gauge
// counts the lease twice, the safe side. A lease that holds no slot has
// nothing in the store to extend: it stays active until its expiry.
func (s *Store) Renew(ctx context.Context, now time.Time, l *limiter.Lease, until time.Time) (bool, error) {
	if !now.Before(l.ExpiresAt) {
		return false, nil
	}
	keys := gauges(l)
	old, renewed := slotEntry(l), newEntry(l.ID, until)
	held := make([]bool, len(keys))
	errs := make([]error, len(keys))
	parallel(len(keys), func(i int) {
		held[i], errs[i] = s.renewSlot(ctx, now, keys[i], l, old, renewed)
	})
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	return !slices.Contains(held, false), nil
}

// renewSlot replaces a lease's entry old by renewed on one gauge, and
// reports whether the gauge still held the lease's slot.
func (s *Store) renewSlot(ctx context.Context, now time.Time, key string, l *limiter.Lease, old, renewed []byte) (bool, error) {
	tag := leaseTag(l.ID)
	var out *dynamodb.UpdateItemOutput
	for attempt := 0; ; attempt++ {
		var err error
		s.roundTrips.Add(1)
		out, err = s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                           &s.tables.Counters,
			Key:                                 keyOf(gaugeKey(key)),
			UpdateExpression:                    aws.String("ADD #b :es"),
			ConditionExpression:                 aws.String("contains(#b, :old)"),
			ExpressionAttributeNames:            map[string]string{"#b": attrSlotSet},
			ExpressionAttributeValues:           map[string]types.AttributeValue{":es": bs(renewed), ":old": &types.AttributeValueMemberB{Value: old}},
			ReturnValues:                        types.ReturnValueUpdatedNew,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			ReturnConsumedCapacity:              types.ReturnConsumedCapacityIndexes,
		})
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			// The entry the caller knows is gone. An earlier renewal whose
			// answer was lost may have replaced it: the slot is still held
			// by that entry if it has not expired. Else it was given back,
			// or reclaimed at its expiry.
			i := slices.IndexFunc(binarySet(ccf.Item, attrSlotSet), func(e []byte) bool {
				return sameTag(e, tag) && !bytes.Equal(e, old) && !entryExpired(e, now)
			})
			if i < 0 || attempt > 0 {
				return false, nil
			}
			old = binarySet(ccf.Item, attrSlotSet)[i]
			continue
		}
		if err != nil {
			return false, awserr.Classify("renew slot "+key, err)
		}
		break
	}
	s.accountOut(out.ConsumedCapacity)
	// Every other entry of this lease goes: the old one, and any a renewal
	// whose answer was lost left.
	var stale [][]byte
	for _, e := range binarySet(out.Attributes, attrSlotSet) {
		if sameTag(e, tag) && !bytes.Equal(e, renewed) {
			stale = append(stale, e)
		}
	}
	if len(stale) > 0 {
		if _, err := s.deleteEntries(ctx, key, stale...); err != nil {
			// Held twice until the old entry's expiry: counted, never
			// over-admitted.
			s.log.Warn("a renewed lease's old slot entry stays until its expiry", "counter", key, "lease", l.ID, "err", err)
		}
	}
	return true, nil
}
