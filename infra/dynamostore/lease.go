package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/reconcile"
)

// Leases. Admission writes no lease item: what a slot needs to be found
// again is in its gauge entry (gauge.go), and what settling a reservation
// needs is known only at completion. Completion writes the lease's one
// item, completed, with the counters it charged and the usage it reported:
// its stream record is what the reconciler settles from, once.

// Complete implements limiter.Store: the lease's slots are given back,
// then one conditional PutItem writes its record with its usage and
// whether the slots were given back (if not, the reconciler does, from the
// record). Both steps are idempotent, so the caller may repeat Complete
// until it succeeds: the record is written once, and the stream carries
// one completion per lease. A lease that expired before its completion
// arrived (its slots may have been reclaimed) is recorded all the same,
// marked late, and settled.
func (s *Store) Complete(ctx context.Context, now time.Time, l *limiter.Lease, used limiter.Usage) error {
	released := true
	if l.HoldsSlots() {
		if _, err := s.release(ctx, l); err != nil {
			released = false
			s.log.Warn("could not give back a completed request's slots; the reconciler will", "lease", l.ID, "err", err)
		}
	}
	late := !now.Before(l.ExpiresAt)
	err := s.putCompletion(ctx, now, l, used, released, late)
	if err == nil && late {
		s.log.Info("a request completed after its lease expired; its usage is settled", "lease", l.ID)
	}
	return err
}

// putCompletion writes a lease's record. Resent after it landed (or
// repeated by the caller), its condition fails on the item it wrote:
// recognised by the admission instant, that is success.
func (s *Store) putCompletion(ctx context.Context, now time.Time, l *limiter.Lease, used limiter.Usage, released, late bool) error {
	item := completionItem(l, now, used, released, late, s.ttlAfter(l.ExpiresAt))
	s.roundTrips.Add(1)
	out, err := s.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           &s.tables.Leases,
		Item:                                item,
		ConditionExpression:                 aws.String("attribute_not_exists(#id)"),
		ExpressionAttributeNames:            map[string]string{"#id": attrID},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              types.ReturnConsumedCapacityIndexes,
	})
	if err == nil {
		s.accountOut(out.ConsumedCapacity)
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if adm, _ := number(ccf.Item, attrAdmitted); adm == unixMilli(l.AdmittedAt) {
			return nil // recorded before
		}
		return fmt.Errorf("dynamostore: lease %q already exists for another admission (%s)", l.ID, str(ccf.Item, attrStatus))
	}
	return awserr.Classify("record completion", err)
}

// Expire implements reconcile.Store. There is nothing to sweep: a slot's
// entry carries its expiry, past which no read counts it and the first
// admission that finds its gauge full removes it (gauge.go), and a lease
// whose request never completed has no item. It returns 0.
func (s *Store) Expire(context.Context, time.Time) (int, error) { return 0, nil }

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
// and new images (either may be nil). A lease's record is written once, at
// its completion: an insertion of a completed lease. Records of a lease
// that an earlier version wrote at admission (active, then completed,
// expired or refused) are classified as they always were.
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
	case rec.Status == StatusCompleted && (prev == "" || prev == StatusActive || prev == StatusExpired):
		kind = reconcile.Completed
	case prev == StatusActive && rec.Status == StatusExpired:
		kind = reconcile.Expired
	case (prev == "" || prev == StatusActive) && rec.Status == StatusRefused:
		kind = reconcile.Refused
	}
	return reconcile.Change{Kind: kind, Lease: rec.Lease, Used: rec.Used, Released: rec.Released}, nil
}
