package dynamostore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/reconcile"
)

// Slots. An in-flight gauge is an item holding a string set of the slots
// it admitted, one entry per lease (see slotEntry); its count is the set's
// size. Taking a slot is ADD of the lease's entry on the condition that the
// set is smaller than the limit and does not hold the entry yet; giving it
// back is DELETE of the entry. Both are idempotent: resent after they
// landed, the first finds its entry there (success, not a refusal) and the
// second removes nothing. So no lost answer can count a slot twice or give
// one back twice, and a set cannot go below empty.
//
// What can still go wrong is a slot nobody gives back: a process that dies
// between taking it and writing its lease, or a release that fails after
// the lease ended. Leases that end say in their item whether their slots
// were given back (rel), and the reconciler gives back those that were
// not; leases past their expiry are found through the by_expiry index; and
// a gauge that refuses because it is full is audited for entries whose
// lease has ended or never came to be.

// acquire takes one slot of a gauge for lease. A refused result also
// returns the entries the gauge holds.
func (s *Store) acquire(ctx context.Context, key string, c *limiter.Charge, lease *limiter.Lease, now time.Time) (addResult, []string) {
	entry := slotEntry(lease)
	ceiling := c.Ceiling(0, now)
	cond := "(attribute_not_exists(#s) OR size(#s) <= :m) AND NOT contains(#s, :e)"
	if ceiling < 0 {
		cond = "size(#s) <= :m AND NOT contains(#s, :e)"
	}
	s.roundTrips.Add(1)
	out, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           &s.tables.Counters,
		Key:                                 keyOf(key),
		UpdateExpression:                    aws.String("ADD #s :es SET #t = :t"),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            map[string]string{"#s": attrSlots, "#t": attrTTL},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":es": ss(entry), ":e": sv(entry), ":m": n(ceiling), ":t": n(s.counterTTL(c, now))},
		ReturnValues:                        types.ReturnValueUpdatedNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              types.ReturnConsumedCapacityIndexes,
	})
	if err == nil {
		s.accountOut(out.ConsumedCapacity)
		return addResult{cur: int64(len(stringSet(out.Attributes, attrSlots))), applied: wasApplied}, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		held := stringSet(ccf.Item, attrSlots)
		if slices.Contains(held, entry) {
			// A resend of a write that landed: the slot is ours.
			return addResult{cur: int64(len(held)), applied: wasApplied}, nil
		}
		return addResult{cur: int64(len(held)), refused: true}, held
	}
	return addResult{applied: mayHaveApplied, err: awserr.Classify("take slot "+key, err)}, nil
}

// releaseSlot gives back slot entries; idempotent. It reports whether
// the gauge held any of them.
func (s *Store) releaseSlot(ctx context.Context, key string, entries ...string) (bool, error) {
	s.roundTrips.Add(1)
	out, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.tables.Counters,
		Key:                       keyOf(key),
		UpdateExpression:          aws.String("DELETE #s :es"),
		ExpressionAttributeNames:  map[string]string{"#s": attrSlots},
		ExpressionAttributeValues: map[string]types.AttributeValue{":es": ss(entries...)},
		ReturnValues:              types.ReturnValueUpdatedOld,
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityIndexes,
	})
	if err != nil {
		return false, awserr.Classify("give back slot "+key, err)
	}
	s.accountOut(out.ConsumedCapacity)
	held := stringSet(out.Attributes, attrSlots)
	return slices.ContainsFunc(entries, func(e string) bool { return slices.Contains(held, e) }), nil
}

// release gives back every slot a lease holds, in parallel, and reports
// whether any was still held.
func (s *Store) release(ctx context.Context, l *limiter.Lease) (bool, error) {
	var gauges []string
	for _, c := range l.Charges {
		if c.Counter.Kind == limiter.KindInFlight {
			gauges = append(gauges, CounterKey(c.Counter))
		}
	}
	errs := make([]error, len(gauges))
	var any atomic.Bool
	entry := slotEntry(l)
	parallel(len(gauges), func(i int) {
		held, err := s.releaseSlot(ctx, gauges[i], entry)
		errs[i] = err
		if held {
			any.Store(true)
		}
	})
	return any.Load(), errors.Join(errs...)
}

// Complete implements limiter.Store: the lease's slots are given back,
// then one conditional write moves the lease from active to completed with
// its usage (the stream record the reconciler settles from) and whether
// the slots were given back (if not, the reconciler does). Both steps are
// idempotent, so the caller may repeat Complete until it succeeds. A lease
// that expired before its completion arrived keeps its expiry's release
// and takes the usage, so the reconciler still settles it.
func (s *Store) Complete(ctx context.Context, now time.Time, l *limiter.Lease, used limiter.Usage) error {
	released := true
	if l.HoldsSlots() {
		if _, err := s.release(ctx, l); err != nil {
			released = false
			s.log.Warn("could not give back a completed request's slots; the reconciler will", "lease", l.ID, "err", err)
		}
	}
	old, err := s.finishLease(ctx, now, l.ID, StatusCompleted, StatusActive, &used, &released)
	switch {
	case err != nil:
		return err
	case old == nil:
		return nil // completed now (or the lease is gone)
	case old.Status != StatusExpired:
		return nil // completed before (a resend that landed), or refused
	}
	// Late: it expired (its slots were released then) and is settled now.
	_, err = s.finishLease(ctx, now, l.ID, StatusCompleted, StatusExpired, &used, nil)
	if err == nil {
		s.log.Info("a request completed after its lease expired; its usage is settled", "lease", l.ID)
	}
	return err
}

// finishLease moves a lease from status from to status, recording the
// usage and whether its slots were released when given. When the lease is
// not in status from, it returns the item as it is (nil if absent) and no
// error.
func (s *Store) finishLease(ctx context.Context, now time.Time, id, status, from string, used *limiter.Usage, released *bool) (*LeaseRecord, error) {
	set := []string{"#s = :s", attrFinishedAt + " = :f"}
	values := map[string]types.AttributeValue{
		":s":    sv(status),
		":f":    n(unixMilli(now)),
		":from": sv(from),
	}
	if used != nil {
		set = append(set, attrUsedIn+" = :ui", attrUsedOut+" = :uo", attrUsedCached+" = :uc", attrExact+" = :ex", attrCachedIn+" = :ci")
		values[":ci"] = b(used.CachedInInput)
		values[":ui"] = n(used.InputTokens)
		values[":uo"] = n(used.OutputTokens)
		values[":uc"] = n(used.CachedInputTokens)
		values[":ex"] = b(used.Exact)
		if used.CacheWriteInputTokens > 0 {
			set = append(set, attrUsedWrite+" = :uw")
			values[":uw"] = n(used.CacheWriteInputTokens)
		}
	}
	if released != nil {
		set = append(set, attrReleased+" = :rel")
		values[":rel"] = b(*released)
	}
	if from == StatusExpired {
		set = append(set, attrLate+" = :late")
		values[":late"] = b(true)
	}
	s.roundTrips.Add(1)
	out, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           &s.tables.Leases,
		Key:                                 map[string]types.AttributeValue{attrID: sv(id)},
		UpdateExpression:                    aws.String("SET " + strings.Join(set, ", ") + " REMOVE #a"),
		ConditionExpression:                 aws.String("#s = :from"),
		ExpressionAttributeNames:            map[string]string{"#s": attrStatus, "#a": attrActive},
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              types.ReturnConsumedCapacityIndexes,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if len(ccf.Item) == 0 {
			return nil, nil
		}
		rec, derr := DecodeLease(ccf.Item)
		return &rec, derr
	}
	if err != nil {
		return nil, awserr.Classify("finish lease", err)
	}
	s.accountOut(out.ConsumedCapacity)
	return nil, nil
}

// Renew implements limiter.Store: one conditional write moves an active,
// unexpired lease's expiry (and its place in the by_expiry index).
func (s *Store) Renew(ctx context.Context, now time.Time, l *limiter.Lease, until time.Time) (bool, error) {
	s.roundTrips.Add(1)
	out, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.tables.Leases,
		Key:                       map[string]types.AttributeValue{attrID: sv(l.ID)},
		UpdateExpression:          aws.String("SET #e = :until, #t = :t"),
		ConditionExpression:       aws.String("#s = :active AND #e > :now"),
		ExpressionAttributeNames:  map[string]string{"#s": attrStatus, "#e": attrExpiresAt, "#t": attrTTL},
		ExpressionAttributeValues: map[string]types.AttributeValue{":active": sv(StatusActive), ":now": n(unixMilli(now)), ":until": n(unixMilli(until)), ":t": n(s.ttlAfter(until))},
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityIndexes,
	})
	if awserr.IsConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, awserr.Classify("renew lease", err)
	}
	s.accountOut(out.ConsumedCapacity)
	return true, nil
}

// markRefused records that a lease's admission was refused, creating the
// item if its write never landed: a lease write that lands late then finds
// it and fails, and no sweep takes it for a live request.
func (s *Store) markRefused(ctx context.Context, now time.Time, l *limiter.Lease, released bool) error {
	item := leaseItem(l, "", s.ttlAfter(l.ExpiresAt))
	item[attrStatus] = sv(StatusRefused)
	item[attrFinishedAt] = n(unixMilli(now))
	item[attrReleased] = b(released)
	delete(item, attrID)
	names := map[string]string{"#id": attrID, "#s": attrStatus, "#a": attrActive}
	values := map[string]types.AttributeValue{":active": sv(StatusActive), ":adm": n(unixMilli(l.AdmittedAt))}
	var set []string
	for i, k := range sortedKeys(item) {
		p := strconv.Itoa(i)
		names["#k"+p] = k
		values[":v"+p] = item[k]
		set = append(set, "#k"+p+" = :v"+p)
	}
	s.roundTrips.Add(1)
	out, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.tables.Leases,
		Key:                       map[string]types.AttributeValue{attrID: sv(l.ID)},
		UpdateExpression:          aws.String("SET " + strings.Join(set, ", ") + " REMOVE #a"),
		ConditionExpression:       aws.String("attribute_not_exists(#id) OR (#s = :active AND " + attrAdmitted + " = :adm)"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityIndexes,
	})
	if awserr.IsConditionFailed(err) {
		return nil // marked before
	}
	if err != nil {
		return awserr.Classify("mark lease refused", err)
	}
	s.accountOut(out.ConsumedCapacity)
	return nil
}

// How much reclaiming one call may do: on the admission path only a
// little, so a refusal stays fast; the reconciler sweeps the rest.
const (
	reclaimOnAdmission = 25
	reclaimSweep       = 1000
)

// Expire releases the slots of leases past their expiry that were never
// completed (the process died), keeping their token reservations charged,
// and returns how many it released. It finds them through the by_expiry
// index, never by waiting for TTL deletion.
func (s *Store) Expire(ctx context.Context, now time.Time) (int, error) {
	return s.reclaim(ctx, now, reclaimSweep)
}

// reclaim expires up to limit leases per index shard whose expiry is at or
// before now.
func (s *Store) reclaim(ctx context.Context, now time.Time, limit int) (int, error) {
	shards := s.opts.LeaseIndexShards
	found := make([][]LeaseRecord, shards)
	errs := make([]error, shards)
	parallel(shards, func(i int) {
		found[i], errs[i] = s.expiredLeases(ctx, now, "a"+strconv.Itoa(i), limit)
	})
	released := 0
	for _, recs := range found {
		for _, rec := range recs {
			ok, err := s.expireLease(ctx, now, rec)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if ok {
				released++
			}
		}
	}
	return released, errors.Join(errs...)
}

func (s *Store) expiredLeases(ctx context.Context, now time.Time, shard string, limit int) ([]LeaseRecord, error) {
	var out []LeaseRecord
	var start map[string]types.AttributeValue
	for len(out) < limit {
		s.roundTrips.Add(1)
		page, err := s.api.Query(ctx, &dynamodb.QueryInput{
			TableName:                 &s.tables.Leases,
			IndexName:                 aws.String(indexByExpiry),
			KeyConditionExpression:    aws.String("#a = :a AND #e <= :now"),
			ExpressionAttributeNames:  map[string]string{"#a": attrActive, "#e": attrExpiresAt},
			ExpressionAttributeValues: map[string]types.AttributeValue{":a": sv(shard), ":now": n(unixMilli(now))},
			Limit:                     aws.Int32(int32(min(limit-len(out), 100))),
			ExclusiveStartKey:         start,
			ReturnConsumedCapacity:    types.ReturnConsumedCapacityIndexes,
		})
		if err != nil {
			return out, awserr.Classify("query expired leases", err)
		}
		if page.ConsumedCapacity != nil {
			s.account(true, *page.ConsumedCapacity)
		}
		for _, item := range page.Items {
			rec, err := DecodeLease(item)
			if err != nil {
				s.log.Error("skipping an undecodable lease", "err", err)
				continue
			}
			out = append(out, rec)
		}
		if page.LastEvaluatedKey == nil {
			break
		}
		start = page.LastEvaluatedKey
	}
	return out, nil
}

// expireLease gives back an expired lease's slots, then moves it to
// expired with whether that worked. Past its expiry a lease can be neither
// renewed nor hold a slot, so releasing first is safe, and it saves the
// reconciler a second release. It returns false when another process
// expired it first.
func (s *Store) expireLease(ctx context.Context, now time.Time, rec LeaseRecord) (bool, error) {
	_, err := s.release(ctx, &rec.Lease)
	released := err == nil
	s.roundTrips.Add(1)
	out, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           &s.tables.Leases,
		Key:                 map[string]types.AttributeValue{attrID: sv(rec.Lease.ID)},
		UpdateExpression:    aws.String("SET #s = :expired, " + attrFinishedAt + " = :f, " + attrReleased + " = :rel REMOVE #a"),
		ConditionExpression: aws.String("#s = :active AND #e <= :now"),
		ExpressionAttributeNames: map[string]string{
			"#s": attrStatus, "#a": attrActive, "#e": attrExpiresAt,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":expired": sv(StatusExpired), ":active": sv(StatusActive), ":now": n(unixMilli(now)), ":f": n(unixMilli(now)), ":rel": b(released),
		},
		ReturnConsumedCapacity: types.ReturnConsumedCapacityIndexes,
	})
	if awserr.IsConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, awserr.Classify("expire lease", err)
	}
	s.accountOut(out.ConsumedCapacity)
	s.log.Info("released the slots of a lease whose request never completed; its reservation stays charged",
		"lease", rec.Lease.ID, "user_path", rec.Lease.UserPath, "expired_at", rec.Lease.ExpiresAt)
	return true, nil
}

// audit looks, in each full gauge it was not looking at a moment ago, for
// slots that no request holds: entries whose lease has ended, or whose
// lease does not exist though it was admitted longer than OrphanGrace ago.
// It gives them back and returns how many.
func (s *Store) audit(ctx context.Context, now time.Time, full []fullGauge) int {
	type orphanCheck struct {
		gauge, entry, id string
		admitted         time.Time
	}
	var checks []orphanCheck
	for _, g := range full {
		if last, ok := s.audits.Get(g.key); ok && now.Sub(last) < s.opts.AuditInterval && !now.Before(last) {
			continue
		}
		s.audits.Put(g.key, now)
		for _, e := range g.entries {
			if at, id, ok := parseSlotEntry(e); ok {
				checks = append(checks, orphanCheck{gauge: g.key, entry: e, id: id, admitted: at})
			} else {
				checks = append(checks, orphanCheck{gauge: g.key, entry: e}) // not ours: drop it
			}
		}
	}
	if len(checks) == 0 {
		return 0
	}
	var ids []string
	for _, c := range checks {
		if c.id != "" {
			ids = append(ids, c.id)
		}
	}
	leases, err := s.getItems(ctx, s.tables.Leases, ids, attrID, attrStatus, attrAdmitted, attrExpiresAt)
	if err != nil {
		s.log.Warn("could not audit a full gauge for orphaned slots", "err", err)
		return 0
	}
	orphans := map[string][]string{}
	for _, c := range checks {
		item, found := leases[c.id]
		switch {
		case c.id == "":
		case !found:
			if now.Sub(c.admitted) < s.opts.OrphanGrace {
				continue // its lease may still be on its way
			}
		default:
			exp, _ := number(item, attrExpiresAt)
			adm, _ := number(item, attrAdmitted)
			if str(item, attrStatus) == StatusActive && adm == unixMilli(c.admitted) && fromMilli(exp).After(now) {
				continue // held by a live request
			}
		}
		orphans[c.gauge] = append(orphans[c.gauge], c.entry)
	}
	freed := 0
	for gauge, entries := range orphans {
		if _, err := s.releaseSlot(ctx, gauge, entries...); err != nil {
			s.log.Warn("could not give back orphaned slots", "counter", gauge, "err", err)
			continue
		}
		freed += len(entries)
		s.log.Warn("gave back slots no request held (their lease ended, expired or was never written)",
			"counter", gauge, "slots", len(entries))
	}
	return freed
}

// Release implements reconcile.Store: it gives back the slots of leases
// that ended without doing so, or that TTL deleted while active, and
// counts those that still held one. Giving a slot back is idempotent, so a
// record read twice changes nothing.
func (s *Store) Release(ctx context.Context, leases []limiter.Lease) (int, error) {
	released := 0
	var errs []error
	for i := range leases {
		held, err := s.release(ctx, &leases[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if held {
			released++
			s.log.Info("released the slots of a lease that ended without giving them back", "lease", leases[i].ID, "user_path", leases[i].UserPath)
		}
	}
	return released, errors.Join(errs...)
}

// ChangeOf classifies one stream record of the lease table from its old
// and new images (either may be nil).
func ChangeOf(old, new map[string]types.AttributeValue) (reconcile.Change, error) {
	switch {
	case len(new) == 0 && len(old) > 0:
		// A deletion. TTL deletions are the only ones tollgate makes; on
		// DynamoDB Local they come with an event name of their own and no
		// user identity, so the images alone decide.
		rec, err := DecodeLease(old)
		if err != nil || rec.Status != StatusActive {
			return reconcile.Change{Kind: reconcile.Other}, err
		}
		return reconcile.Change{Kind: reconcile.Removed, Lease: rec.Lease}, nil
	case len(new) == 0:
		return reconcile.Change{Kind: reconcile.Other}, nil
	}
	rec, err := DecodeLease(new)
	if err != nil {
		return reconcile.Change{Kind: reconcile.Other}, err
	}
	prev := ""
	if len(old) > 0 {
		prev = str(old, attrStatus)
	}
	kind := reconcile.Other
	switch {
	case rec.Status == StatusCompleted && (prev == StatusActive || prev == StatusExpired):
		kind = reconcile.Completed
	case prev == StatusActive && rec.Status == StatusExpired:
		kind = reconcile.Expired
	case (prev == "" || prev == StatusActive) && rec.Status == StatusRefused:
		kind = reconcile.Refused
	}
	return reconcile.Change{Kind: kind, Lease: rec.Lease, Used: rec.Used, Released: rec.Released}, nil
}
