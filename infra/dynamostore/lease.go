package dynamostore

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/reconcile"
)

// Complete implements limiter.Store: one conditional write moves the lease
// from active to completed with its usage (the stream record the
// reconciler settles from), then its in-flight gauges are released. Only
// the call that made the transition releases, so completing twice, or
// after the lease expired and was reclaimed, releases nothing.
//
// The two steps are not one transaction on purpose: a gauge that every
// request of a provider charges is a hot item, and a transaction holding it
// would make concurrent admissions fail with TransactionConflict. If the
// process dies between the two writes, the slot stays charged (never
// over-admits) until the gauge's window of activity ends; see README.md.
func (s *Store) Complete(ctx context.Context, now time.Time, leaseID string, used limiter.Usage) error {
	rec := &LeaseRecord{}
	err := s.finishLease(ctx, now, leaseID, StatusCompleted, &used, rec)
	if errors.Is(err, errNotActive) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.release(ctx, rec.Lease.Charges)
}

var errNotActive = errors.New("lease is not active")

// finishLease moves an active lease to status. With used, it records the
// usage; with into, it decodes the new item there. It returns errNotActive
// when the lease is not active (finished before, or never written).
func (s *Store) finishLease(ctx context.Context, now time.Time, id, status string, used *limiter.Usage, into ...*LeaseRecord) error {
	update := "SET #s = :s, " + attrFinishedAt + " = :f REMOVE #a"
	values := map[string]types.AttributeValue{
		":s":      &types.AttributeValueMemberS{Value: status},
		":f":      n(unixMilli(now)),
		":active": &types.AttributeValueMemberS{Value: StatusActive},
	}
	if used != nil {
		update = "SET #s = :s, " + attrFinishedAt + " = :f, " + attrUsedIn + " = :ui, " + attrUsedOut + " = :uo, " +
			attrUsedCached + " = :uc, " + attrExact + " = :ex REMOVE #a"
		values[":ui"] = n(used.InputTokens)
		values[":uo"] = n(used.OutputTokens)
		values[":uc"] = n(used.CachedInputTokens)
		values[":ex"] = b(used.Exact)
	}
	in := &dynamodb.UpdateItemInput{
		TableName:                 &s.tables.Leases,
		Key:                       map[string]types.AttributeValue{attrID: &types.AttributeValueMemberS{Value: id}},
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String("#s = :active"),
		ExpressionAttributeNames:  map[string]string{"#s": attrStatus, "#a": attrActive},
		ExpressionAttributeValues: values,
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityIndexes,
	}
	if len(into) > 0 {
		in.ReturnValues = types.ReturnValueAllNew
	}
	s.roundTrips.Add(1)
	out, err := s.api.UpdateItem(ctx, in)
	if awserr.IsConditionFailed(err) {
		return errNotActive
	}
	if err != nil {
		return awserr.Classify("finish lease", err)
	}
	if out.ConsumedCapacity != nil {
		s.account(false, *out.ConsumedCapacity)
	}
	if len(into) > 0 {
		rec, err := DecodeLease(out.Attributes)
		if err != nil {
			return err
		}
		*into[0] = rec
	}
	return nil
}

// release gives back the in-flight charges among charges.
func (s *Store) release(ctx context.Context, charges []limiter.Charge) error {
	var gauges []int
	for i, c := range charges {
		if c.Counter.Kind == limiter.KindInFlight {
			gauges = append(gauges, i)
		}
	}
	errs := make([]error, len(gauges))
	parallel(len(gauges), func(j int) {
		c := &charges[gauges[j]]
		errs[j] = s.compensate(ctx, CounterKey(c.Counter), c)
	})
	return errors.Join(errs...)
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

// expireLease moves one expired lease to expired and releases its gauges,
// in one transaction, so the release happens exactly once however many
// processes sweep at the same time. Orphans are rare, so a transaction on
// a hot gauge here costs little. It returns false when another process got
// there first.
func (s *Store) expireLease(ctx context.Context, now time.Time, rec LeaseRecord) (bool, error) {
	items := []types.TransactWriteItem{{Update: &types.Update{
		TableName:           &s.tables.Leases,
		Key:                 map[string]types.AttributeValue{attrID: sv(rec.Lease.ID)},
		UpdateExpression:    aws.String("SET #s = :expired, " + attrFinishedAt + " = :f REMOVE #a"),
		ConditionExpression: aws.String("#s = :active AND #e <= :now"),
		ExpressionAttributeNames: map[string]string{
			"#s": attrStatus, "#a": attrActive, "#e": attrExpiresAt,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":expired": sv(StatusExpired), ":active": sv(StatusActive), ":now": n(unixMilli(now)), ":f": n(unixMilli(now)),
		},
	}}}
	items = append(items, s.slotReleases(rec.Lease.Charges)...)
	err := s.transact(ctx, items)
	if err == nil {
		s.log.Info("released the slots of a lease whose request never completed; its reservation stays charged",
			"lease", rec.Lease.ID, "user_path", rec.Lease.UserPath, "expired_at", rec.Lease.ExpiresAt)
		return true, nil
	}
	if reasons := awserr.CancellationReasons(err); len(reasons) > 0 && reasons[0].Code != nil && *reasons[0].Code == "ConditionalCheckFailed" {
		return false, nil
	}
	return false, awserr.Classify("expire lease", err)
}

// slotReleases are the transaction items that give back the in-flight
// gauges among charges.
func (s *Store) slotReleases(charges []limiter.Charge) []types.TransactWriteItem {
	var items []types.TransactWriteItem
	for _, c := range charges {
		if c.Counter.Kind != limiter.KindInFlight {
			continue
		}
		items = append(items, types.TransactWriteItem{Update: &types.Update{
			TableName:                 &s.tables.Counters,
			Key:                       keyOf(CounterKey(c.Counter)),
			UpdateExpression:          aws.String("ADD #n :a"),
			ExpressionAttributeNames:  map[string]string{"#n": attrN},
			ExpressionAttributeValues: map[string]types.AttributeValue{":a": n(-c.Amount)},
		}})
	}
	return items
}

// transact runs one TransactWriteItems, retrying conflicts a few times with
// backoff (the SDK retries throttling itself).
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

// backoff is the wait before retry attempt (1-based): jittered, growing,
// bounded.
func backoff(attempt int) time.Duration {
	base := time.Duration(10<<min(attempt, 5)) * time.Millisecond
	return base/2 + time.Duration(rand.Int64N(int64(base/2)+1))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ReleaseRemoved implements reconcile.Store: the slots of leases that were
// deleted while still active (TTL collected a lease no sweep expired) are
// released exactly once each, guarded by an orphan marker written in the
// same transaction.
func (s *Store) ReleaseRemoved(ctx context.Context, leases []limiter.Lease) (int, error) {
	released := 0
	var errs []error
	for _, l := range leases {
		items := []types.TransactWriteItem{{Put: &types.Put{
			TableName: &s.tables.Counters,
			Item: map[string]types.AttributeValue{
				attrPK:  sv(orphanKey(l.ID)),
				attrTTL: n(s.ttlAfter(l.ExpiresAt)),
			},
			ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
			ExpressionAttributeNames: map[string]string{"#pk": attrPK},
		}}}
		releases := s.slotReleases(l.Charges)
		if len(releases) == 0 {
			continue
		}
		items = append(items, releases...)
		err := s.transact(ctx, items)
		switch {
		case err == nil:
			released++
			s.log.Info("released the slots of a lease deleted while active", "lease", l.ID, "user_path", l.UserPath)
		case markerRace(err):
			// Released before.
		default:
			errs = append(errs, awserr.Classify("release removed lease", err))
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
	case prev == StatusActive && rec.Status == StatusCompleted:
		kind = reconcile.Completed
	case prev == StatusActive && rec.Status == StatusExpired:
		kind = reconcile.Expired
	}
	return reconcile.Change{Kind: kind, Lease: rec.Lease, Used: rec.Used}, nil
}
