// Package dynamostore is the DynamoDB limiter.Store: window counters and
// in-flight gauges as conditional counters, one item each, and a lease
// table for the requests that hold a slot or a token reservation.
//
// One admission is one round of parallel single-item writes: a conditional
// UpdateItem (ADD with a ConditionExpression) per charged counter and a
// PutItem of the lease. If any condition fails, the writes that succeeded
// are compensated; the limit can be under-used for the few milliseconds
// that takes, never over-admitted. A failed condition returns the item
// (ReturnValuesOnConditionCheckFailure=ALL_OLD), so a refusal carries the
// numbers for Retry-After with no second read. README.md has the
// measurements behind choosing this over TransactWriteItems.
//
// The sliding estimate needs the previous window's final count. A closed
// request window never changes, so it is read once per window and cached
// for the life of the process (a Lambda environment); a closed token window
// still takes settlements, so it is re-read after TokenPrevRefresh.
package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/reconcile"
)

// API is the part of the DynamoDB client the store calls.
type API interface {
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// Options configure a Store.
type Options struct {
	API         API
	TablePrefix string
	// LeaseIndexShards spreads active leases over this many partitions of
	// the by_expiry index, so that index is not one hot partition. Default 4.
	LeaseIndexShards int
	// RejectCacheTTL, when positive, lets this process refuse a charge on a
	// window counter that refused within this long without a round trip,
	// from the numbers the refusal returned. At most one second. Counters
	// only grow within a window (but for settlement refunds), so the cache
	// can only refuse what a refund in that second would have admitted. It
	// never admits.
	RejectCacheTTL time.Duration
	// TokenPrevRefresh is how long a closed token window's count is trusted
	// before it is read again. Default 10 s.
	TokenPrevRefresh time.Duration
	// LeaseRetention is how long a finished or expired lease item is kept
	// after its expiry, for the reconciler and for audits. Default 48 h.
	LeaseRetention time.Duration
	// CompensationTimeout bounds the writes that undo a refused charge,
	// which run even when the caller's context is done. Default 5 s.
	CompensationTimeout time.Duration
	Logger              *slog.Logger
}

// Store is a limiter.Store on DynamoDB. It is safe for concurrent use.
type Store struct {
	api    API
	tables TableNames
	opts   Options
	log    *slog.Logger

	prev    prevCache
	rejects rejectCache

	wall func() time.Time // for TTLs only, never for decisions

	roundTrips    atomic.Int64
	wcuMilli      atomic.Int64 // consumed capacity × 1000
	indexWCUMilli atomic.Int64
	txItems       atomic.Int64
	itemReads     atomic.Int64
	rcuMilli      atomic.Int64
}

var (
	_ limiter.Store   = (*Store)(nil)
	_ reconcile.Store = (*Store)(nil)
)

// New returns a Store.
func New(o Options) (*Store, error) {
	if o.API == nil {
		return nil, errors.New("dynamostore: no API client")
	}
	if o.LeaseIndexShards <= 0 {
		o.LeaseIndexShards = 4
	}
	if o.RejectCacheTTL > time.Second {
		return nil, errors.New("dynamostore: RejectCacheTTL over one second")
	}
	if o.TokenPrevRefresh <= 0 {
		o.TokenPrevRefresh = 10 * time.Second
	}
	if o.LeaseRetention <= 0 {
		o.LeaseRetention = 48 * time.Hour
	}
	if o.CompensationTimeout <= 0 {
		o.CompensationTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Store{
		api:     o.API,
		tables:  Names(o.TablePrefix),
		opts:    o,
		log:     o.Logger,
		prev:    prevCache{m: map[string]prevEntry{}},
		rejects: rejectCache{m: map[string]rejectEntry{}},
		wall:    time.Now,
	}, nil
}

// Tables returns the table names the store uses.
func (s *Store) Tables() TableNames { return s.tables }

// Stats are the store's counts since it was created.
type Stats struct {
	RoundTrips int64 // API calls
	// Capacity the successful calls consumed as the engine reports it:
	// standard writes on the tables and on their indexes, and queries.
	WCU, IndexWCU, RCU float64
	// ItemReads counts the items asked for by strongly consistent batch
	// reads. AWS bills each 1 read unit (up to 4 KB), found or not;
	// DynamoDB Local reports nothing for absent items, so these are
	// counted here rather than taken from the engine.
	ItemReads int64
	// TransactItems counts the items written by TransactWriteItems, whose
	// capacity is not in WCU: DynamoDB Local reports a flat 2 units per
	// table per transaction whatever its size, while AWS bills 2 write
	// units per item of up to 1 KB (all of tollgate's are).
	TransactItems int64
}

// BilledWRU is what AWS bills for the writes counted: standard writes,
// index writes, and 2 units per transactional item.
func (st Stats) BilledWRU() float64 {
	return st.WCU + st.IndexWCU + 2*float64(st.TransactItems)
}

// BilledRRU is what AWS bills for the reads counted.
func (st Stats) BilledRRU() float64 {
	return st.RCU + float64(st.ItemReads)
}

// Stats returns the store's counts.
func (s *Store) Stats() Stats {
	return Stats{
		RoundTrips:    s.roundTrips.Load(),
		WCU:           float64(s.wcuMilli.Load()) / 1000,
		IndexWCU:      float64(s.indexWCUMilli.Load()) / 1000,
		RCU:           float64(s.rcuMilli.Load()) / 1000,
		TransactItems: s.txItems.Load(),
		ItemReads:     s.itemReads.Load(),
	}
}

func milli(v *float64) int64 {
	if v == nil {
		return 0
	}
	return int64(math.Round(*v * 1000))
}

// account adds what a call consumed. Reads and writes are told apart by
// the call: isRead for BatchGetItem and Query.
func (s *Store) account(isRead bool, cc ...types.ConsumedCapacity) {
	for _, c := range cc {
		table := milli(c.CapacityUnits)
		var index int64
		if c.Table != nil {
			table = milli(c.Table.CapacityUnits)
		}
		for _, ix := range c.GlobalSecondaryIndexes {
			index += milli(ix.CapacityUnits)
		}
		if c.Table == nil && index > 0 {
			table -= index // only the total was given
		}
		if isRead {
			s.rcuMilli.Add(table + index)
			continue
		}
		s.wcuMilli.Add(table)
		s.indexWCUMilli.Add(index)
	}
}

// Charge implements limiter.Store.
func (s *Store) Charge(ctx context.Context, now time.Time, charges []limiter.Charge, lease *limiter.Lease) (limiter.Outcome, error) {
	keys := make([]string, len(charges))
	for i := range charges {
		keys[i] = CounterKey(charges[i].Counter)
	}
	if out, ok := s.rejects.check(now, s.opts.RejectCacheTTL, charges, keys); ok {
		return out, nil
	}
	prevs, err := s.prevs(ctx, now, charges)
	if err != nil {
		return limiter.Outcome{}, err
	}
	out, err := s.charge(ctx, now, charges, keys, prevs, lease)
	if err == nil && !out.Admitted && inFlightRefused(charges, out) {
		// Leases whose process died hold their slots until they expire,
		// and not a moment longer: release the expired ones and try once
		// more.
		released, rerr := s.reclaim(ctx, now, reclaimOnAdmission)
		if rerr != nil {
			s.log.Warn("reclaiming expired leases failed", "err", rerr)
		}
		if released > 0 {
			out, err = s.charge(ctx, now, charges, keys, prevs, lease)
		}
	}
	if err == nil && !out.Admitted {
		s.rejects.remember(now, s.opts.RejectCacheTTL, charges, keys, out.States)
	}
	return out, err
}

func inFlightRefused(charges []limiter.Charge, out limiter.Outcome) bool {
	for i, st := range out.States {
		if st.Refused && charges[i].Counter.Kind == limiter.KindInFlight {
			return true
		}
	}
	return false
}

type addResult struct {
	cur     int64
	refused bool
	err     error
}

// charge runs one round of parallel conditional writes, and compensates
// them if any was refused or failed.
func (s *Store) charge(ctx context.Context, now time.Time, charges []limiter.Charge, keys []string, prevs []int64, lease *limiter.Lease) (limiter.Outcome, error) {
	res := make([]addResult, len(charges))
	var leaseErr error
	calls := len(charges)
	if lease != nil {
		calls++
	}
	parallel(calls, func(i int) {
		if i == len(charges) {
			leaseErr = s.putLease(ctx, lease)
			return
		}
		c := &charges[i]
		res[i] = s.add(ctx, keys[i], c, c.Ceiling(prevs[i], now), now)
	})
	states := make([]limiter.State, len(charges))
	admitted := true
	var failure error
	for i, r := range res {
		states[i] = limiter.State{Prev: prevs[i], Cur: r.cur, Refused: r.refused}
		switch {
		case r.err != nil:
			failure = errors.Join(failure, r.err)
			admitted = false
		case r.refused:
			admitted = false
		}
	}
	if leaseErr != nil {
		failure = errors.Join(failure, leaseErr)
		admitted = false
	}
	if admitted {
		return limiter.Outcome{Admitted: true, States: states}, nil
	}
	// Undo, even if the caller has gone: first the lease (so the orphan
	// sweep will not release slots this request never held), then the
	// counters that took the charge.
	undo, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.CompensationTimeout)
	defer cancel()
	if lease != nil && leaseErr == nil {
		if err := s.finishLease(undo, now, lease.ID, StatusRefused, nil); err != nil {
			s.log.Error("could not mark a refused lease; its slots stay charged until it expires", "lease", lease.ID, "err", err)
		}
	}
	var undone []int
	for i, r := range res {
		if r.err == nil && !r.refused {
			undone = append(undone, i)
		}
	}
	parallel(len(undone), func(j int) {
		i := undone[j]
		c := &charges[i]
		if err := s.compensate(undo, keys[i], c); err != nil {
			s.log.Error("could not compensate a refused charge; the counter holds it until its window closes",
				"counter", keys[i], "amount", c.Amount, "err", err)
		}
	})
	for _, i := range undone {
		states[i].Cur -= charges[i].Amount
	}
	if failure != nil {
		return limiter.Outcome{}, failure
	}
	return limiter.Outcome{States: states}, nil
}

// add is the unit of truth: ADD amount to a counter if its value is at most
// ceiling, in one conditional UpdateItem.
func (s *Store) add(ctx context.Context, key string, c *limiter.Charge, ceiling int64, now time.Time) addResult {
	cond := "attribute_not_exists(#n) OR #n <= :m"
	if ceiling < 0 {
		cond = "#n <= :m" // nothing admits, not even an empty counter
	}
	update := "ADD #n :a SET #t = if_not_exists(#t, :t)"
	if c.Period == limiter.Concurrent {
		update = "ADD #n :a SET #t = :t" // a live gauge keeps itself alive
	}
	s.roundTrips.Add(1)
	out, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           &s.tables.Counters,
		Key:                                 keyOf(key),
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            map[string]string{"#n": attrN, "#t": attrTTL},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":a": n(c.Amount), ":m": n(ceiling), ":t": n(s.counterTTL(c, now))},
		ReturnValues:                        types.ReturnValueUpdatedNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              types.ReturnConsumedCapacityIndexes,
	})
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			cur, derr := number(ccf.Item, attrN)
			return addResult{cur: cur, refused: true, err: derr}
		}
		return addResult{err: awserr.Classify("charge "+key, err)}
	}
	if out.ConsumedCapacity != nil {
		s.account(false, *out.ConsumedCapacity)
	}
	cur, err := number(out.Attributes, attrN)
	return addResult{cur: cur, err: err}
}

// counterTTL is when a counter item may be deleted: a window counter one
// period after its window closes (it is then no longer anyone's prev) plus
// time for late settlements; a gauge well after any lease could hold it.
func (s *Store) counterTTL(c *limiter.Charge, now time.Time) int64 {
	if c.Period == limiter.Concurrent {
		return s.ttlAfter(now.Add(limiter.DefaultLeaseTTL))
	}
	return s.ttlAfter(c.WindowEnd().Add(c.Period))
}

// ttlAfter returns the TTL of an item nobody needs after t: LeaseRetention
// later, and never earlier than that from the wall clock. TTL only
// collects garbage, so the wall clock may decide it; a process whose clock
// lags (or a test stepping through instants in the past) must not write
// TTLs that delete live items.
func (s *Store) ttlAfter(t time.Time) int64 {
	if wall := s.wall(); t.Before(wall) {
		t = wall
	}
	return unixSec(t.Add(s.opts.LeaseRetention))
}

// compensate takes back a charge: unconditional for windows; a gauge never
// goes below zero.
func (s *Store) compensate(ctx context.Context, key string, c *limiter.Charge) error {
	in := &dynamodb.UpdateItemInput{
		TableName:                 &s.tables.Counters,
		Key:                       keyOf(key),
		UpdateExpression:          aws.String("ADD #n :a"),
		ExpressionAttributeNames:  map[string]string{"#n": attrN},
		ExpressionAttributeValues: map[string]types.AttributeValue{":a": n(-c.Amount)},
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityIndexes,
	}
	if c.Period == limiter.Concurrent {
		in.ConditionExpression = aws.String("#n >= :min")
		in.ExpressionAttributeValues[":min"] = n(c.Amount)
	}
	s.roundTrips.Add(1)
	out, err := s.api.UpdateItem(ctx, in)
	if awserr.IsConditionFailed(err) {
		s.log.Error("gauge release would go below zero; skipped", "counter", key)
		return nil
	}
	if err != nil {
		return awserr.Classify("compensate "+key, err)
	}
	if out.ConsumedCapacity != nil {
		s.account(false, *out.ConsumedCapacity)
	}
	return nil
}

// indexShard names the by_expiry partition of a lease that holds a slot,
// and is "" for one that holds none: only slots need releasing when a
// process dies; a reservation stays charged anyway.
func (s *Store) indexShard(l *limiter.Lease) string {
	if !slices.ContainsFunc(l.Charges, func(c limiter.Charge) bool { return c.Counter.Kind == limiter.KindInFlight }) {
		return ""
	}
	id := l.ID
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return fmt.Sprintf("a%d", h%uint32(s.opts.LeaseIndexShards))
}

func (s *Store) putLease(ctx context.Context, l *limiter.Lease) error {
	s.roundTrips.Add(1)
	out, err := s.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.tables.Leases,
		Item:      leaseItem(l, s.indexShard(l), s.ttlAfter(l.ExpiresAt)),
		// A lease refused a moment ago is written again when the charge is
		// retried after reclaiming expired slots.
		ConditionExpression:       aws.String("attribute_not_exists(#id) OR #s = :refused"),
		ExpressionAttributeNames:  map[string]string{"#id": attrID, "#s": attrStatus},
		ExpressionAttributeValues: map[string]types.AttributeValue{":refused": sv(StatusRefused)},
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityIndexes,
	})
	if awserr.IsConditionFailed(err) {
		return fmt.Errorf("lease %q already exists", l.ID)
	}
	if err != nil {
		return awserr.Classify("put lease", err)
	}
	if out.ConsumedCapacity != nil {
		s.account(false, *out.ConsumedCapacity)
	}
	return nil
}

// parallel runs fn(0..n-1) concurrently and waits for all.
func parallel(n int, fn func(i int)) {
	switch n {
	case 0:
		return
	case 1:
		fn(0)
		return
	}
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Go(func() { fn(i) })
	}
	fn(0)
	wg.Wait()
}
