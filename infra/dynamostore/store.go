// Package dynamostore is the DynamoDB limiter.Store: window counters and
// in-flight gauges as conditional counters, one item each, and a lease
// table holding one record per completed request that held a slot or a
// token reservation.
//
// One admission is one round of parallel single-item writes: a conditional
// UpdateItem (ADD with a ConditionExpression) per charged counter, nothing
// else (gauge.go says why no lease item is needed before completion). If
// any condition fails, the writes that succeeded are compensated; the limit can be under-used for the few milliseconds
// that takes, never over-admitted. A failed condition returns the item
// (ReturnValuesOnConditionCheckFailure=ALL_OLD), so a refusal carries the
// numbers for Retry-After with no second read. docs/design/storage.md has
// the measurements behind choosing this over TransactWriteItems.
//
// The sliding estimate needs the previous window's final count. A closed
// request window never changes, so it is read once per window and cached
// for the life of the process (a Lambda environment); a closed token window
// still takes settlements, so it is re-read after TokenPrevRefresh.
package dynamostore

import (
	"bytes"
	"context"
	"errors"
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
	"github.com/tollgate/tollgate/infra/lru"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/reconcile"
)

// API is the part of the DynamoDB client the store calls.
type API interface {
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// Options configure a Store.
type Options struct {
	API         API
	TablePrefix string
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
	// LeaseRetention is how long a lease's record is kept after its
	// expiry, for the reconciler and for inspection. Default 48 h.
	LeaseRetention time.Duration
	// CompensationTimeout bounds the writes that undo a refused charge,
	// which run even when the caller's context is done. Default 5 s.
	CompensationTimeout time.Duration
	// ChargeTimeout bounds one admission's writes: after it a write that
	// has not landed is taken not to land. Default 3 s.
	ChargeTimeout time.Duration
	Logger        *slog.Logger
}

// Store is a limiter.Store on DynamoDB. It is safe for concurrent use.
type Store struct {
	api    API
	tables TableNames
	opts   Options
	log    *slog.Logger

	prev    *lru.Cache[string, prevEntry]
	rejects rejectCache
	buckets *lru.Cache[string, int64] // each bucket's last value seen, to guess its side

	wall func() time.Time // for TTLs only, never for decisions

	roundTrips        atomic.Int64
	eventualItemReads atomic.Int64
	wcuMilli          atomic.Int64 // consumed capacity × 1000
	indexWCUMilli     atomic.Int64
	txItems           atomic.Int64
	itemReads         atomic.Int64
	rcuMilli          atomic.Int64
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
	if o.ChargeTimeout <= 0 {
		o.ChargeTimeout = 3 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Store{
		api:     o.API,
		tables:  Names(o.TablePrefix),
		opts:    o,
		log:     o.Logger,
		prev:    lru.New[string, prevEntry](maxPrevEntries),
		rejects: rejectCache{lru.New[string, rejectEntry](maxRejectEntries)},
		buckets: lru.New[string, int64](maxBucketEntries),
		wall:    time.Now,
	}, nil
}

// Tables returns the table names the store uses.
func (s *Store) Tables() TableNames { return s.tables }

// Stats are the store's counts since it was created.
type Stats struct {
	RoundTrips int64 // API calls
	// Capacity the successful calls consumed as the engine reports it:
	// standard writes on the tables and on their indexes (tollgate's
	// tables have none any more), and queries.
	WCU, IndexWCU, RCU float64
	// ItemReads counts the items asked for by strongly consistent batch
	// reads. AWS bills each 1 read unit (up to 4 KB), found or not;
	// DynamoDB Local reports nothing for absent items, so these are
	// counted here rather than taken from the engine.
	ItemReads int64
	// EventualItemReads counts the items asked for by eventually
	// consistent batch reads (the dashboard's stats): half a unit each.
	EventualItemReads int64
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
	return st.RCU + float64(st.ItemReads) + float64(st.EventualItemReads)/2
}

// Stats returns the store's counts.
func (s *Store) Stats() Stats {
	return Stats{
		RoundTrips:        s.roundTrips.Load(),
		WCU:               float64(s.wcuMilli.Load()) / 1000,
		IndexWCU:          float64(s.indexWCUMilli.Load()) / 1000,
		RCU:               float64(s.rcuMilli.Load()) / 1000,
		TransactItems:     s.txItems.Load(),
		ItemReads:         s.itemReads.Load(),
		EventualItemReads: s.eventualItemReads.Load(),
	}
}

func milli(v *float64) int64 {
	if v == nil {
		return 0
	}
	return int64(math.Round(*v * 1000))
}

// account adds what a call consumed. Reads and writes are told apart by
// the call: isRead for reads.
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
	if err := limiter.CheckCharges(charges); err != nil {
		return limiter.Outcome{}, err
	}
	if err := limiter.CheckLease(lease); err != nil {
		return limiter.Outcome{}, err
	}
	keys := make([]string, len(charges))
	for i := range charges {
		c := &charges[i]
		if c.IsGauge() && (lease == nil || c.Amount != 1) {
			return limiter.Outcome{}, errors.New("dynamostore: a slot is one unit held by a lease")
		}
		keys[i] = CounterKey(c.Counter)
	}
	if out, ok := s.rejects.check(now, s.opts.RejectCacheTTL, charges, keys); ok {
		return out, nil
	}
	// The admission's writes land within ChargeTimeout or not at all: what
	// lets the previous window's count be final (cache.go).
	ctx, cancel := context.WithTimeout(ctx, s.opts.ChargeTimeout)
	defer cancel()
	prevs, err := s.prevs(ctx, now, charges)
	if err != nil {
		return limiter.Outcome{}, err
	}
	out, full, err := s.charge(ctx, now, charges, keys, prevs, lease)
	if err == nil && !out.Admitted && len(full) > 0 {
		// A full gauge may hold slots no request uses any more: those past
		// their expiry (their process died, or their release failed).
		// Give those back; the limiter tries once more under a new lease.
		reclaimed := 0
		for _, g := range full {
			n, rerr := s.reclaim(ctx, now, g.key, g.entries)
			if rerr != nil {
				s.log.Warn("could not give back the expired slots of a full gauge", "counter", g.key, "err", rerr)
			}
			reclaimed += n
		}
		out.Reclaimed = reclaimed > 0
	}
	if err == nil && !out.Admitted {
		s.rejects.remember(now, s.opts.RejectCacheTTL, charges, keys, out.States)
	}
	return out, err
}

// applied says whether a write took effect.
type applied uint8

const (
	notApplied applied = iota
	wasApplied
	// mayHaveApplied: the write failed ambiguously and could not be
	// verified.
	mayHaveApplied
)

type addResult struct {
	cur int64
	// reserved is a budget counter's reservations (attribute r) as the
	// write found or left them.
	reserved int64
	refused  bool
	absent   bool // refused, and the counter does not exist
	applied  applied
	err      error
}

// fullGauge is a gauge that refused, with the slots it holds, for
// reclaiming the expired ones.
type fullGauge struct {
	key     string
	entries [][]byte
}

// charge runs one round of parallel conditional writes, and compensates
// them if any was refused or failed. It returns the gauges that refused.
func (s *Store) charge(ctx context.Context, now time.Time, charges []limiter.Charge, keys []string, prevs []int64, lease *limiter.Lease) (limiter.Outcome, []fullGauge, error) {
	res := make([]addResult, len(charges))
	held := make([][][]byte, len(charges)) // a refused gauge's slots
	parallel(len(charges), func(i int) {
		c := &charges[i]
		if c.IsGauge() {
			res[i], held[i] = s.acquire(ctx, keys[i], c, lease, now)
			return
		}
		res[i] = s.add(ctx, keys[i], c, c.Ceiling(prevs[i], now), now)
	})
	states := make([]limiter.State, len(charges))
	admitted := true
	var failure error
	var full []fullGauge
	for i, r := range res {
		states[i] = limiter.State{Prev: prevs[i], Cur: r.cur, Reserved: r.reserved, Refused: r.refused}
		switch {
		case r.err != nil:
			failure = errors.Join(failure, r.err)
			admitted = false
		case r.refused:
			admitted = false
			if charges[i].IsGauge() {
				full = append(full, fullGauge{key: keys[i], entries: held[i]})
			}
		}
	}
	if admitted {
		return limiter.Outcome{Admitted: true, States: states}, nil, nil
	}
	// Undo, even if the caller has gone: give back the slots (idempotent,
	// so also those whose write may or may not have landed) and take back
	// the window charges known to have landed. The caller waits for it only as long as its own deadline allows: a store
	// that stopped answering delays no answer past it, and the undo goes
	// on within its own timeout (the store's: CompensationTimeout).
	// The undo may outlive this call, and charges are the caller's only
	// until it returns (limiter.Store): it undoes its own copy.
	done := make(chan struct{})
	undone := slices.Clone(charges)
	go func() {
		defer close(done)
		s.undo(ctx, undone, keys, res, lease)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.log.Warn("answering before a refused charge's undo finished: the store is slow; it goes on", "err", ctx.Err())
	}
	for i, r := range res {
		if r.applied == wasApplied && r.err == nil && !r.refused {
			states[i].Cur -= charges[i].Amount
			if charges[i].Counter.Kind == limiter.KindCost {
				states[i].Reserved -= charges[i].Amount
			}
		}
	}
	if failure != nil {
		return limiter.Outcome{}, nil, failure
	}
	return limiter.Outcome{States: states}, full, nil
}

// undo takes back what a charge that was not admitted wrote (see charge).
func (s *Store) undo(ctx context.Context, charges []limiter.Charge, keys []string, res []addResult, lease *limiter.Lease) {
	undo, cancel := s.undoContext(ctx)
	defer cancel()
	parallel(len(charges), func(i int) {
		c, r := &charges[i], res[i]
		switch {
		case r.applied == notApplied:
		case c.IsGauge():
			if _, err := s.deleteEntries(undo, keys[i], slotEntry(lease)); err != nil {
				s.log.Warn("could not give back a refused request's slot; it is reclaimed at its expiry", "counter", keys[i], "err", err)
			}
		case r.applied == wasApplied:
			if err := s.compensate(undo, keys[i], c); err != nil {
				s.log.Error("could not take back a refused charge; the counter holds it until its window closes",
					"counter", keys[i], "amount", c.Amount, "err", err)
			}
		default:
			s.log.Warn("a charge's answer was lost and it could not be verified; it is kept (the counter may hold it until its window closes)",
				"counter", keys[i], "amount", c.Amount)
		}
	})
}

// undoContext bounds writes that must happen even when the caller has gone.
func (s *Store) undoContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.opts.CompensationTimeout)
}

// add is the unit of truth: ADD amount to a counter if its value is at most
// ceiling, in one conditional UpdateItem that also records a fresh writer
// token. The SDK never resends it blindly; after an ambiguous failure the
// token tells whether it landed.
func (s *Store) add(ctx context.Context, key string, c *limiter.Charge, ceiling int64, now time.Time) addResult {
	if c.Shape == limiter.ShapeBucket {
		return s.addBucket(ctx, key, c, ceiling, now)
	}
	cond := "attribute_not_exists(#n) OR #n <= :m"
	if ceiling < 0 {
		cond = "#n <= :m" // nothing admits, not even an empty counter
	}
	update := "ADD #n :a SET #t = if_not_exists(#t, :t), #w = :w"
	names := map[string]string{"#n": attrN, "#t": attrTTL, "#w": attrWriter}
	if c.Counter.Kind == limiter.KindCost {
		// A budget keeps what is reserved beside what is counted, in the
		// same write.
		update = "ADD #n :a, #r :a SET #t = if_not_exists(#t, :t), #w = :w"
		names["#r"] = attrReserved
	}
	return s.conditionalAdd(ctx, key, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: map[string]types.AttributeValue{":a": n(c.Amount), ":m": n(ceiling), ":t": n(s.counterTTL(c, now))},
	})
}

// conditionalAdd sends one conditional update of a counter with a fresh
// writer token (the input's table, key, token and return values are set
// here). The SDK never resends it blindly; after an ambiguous failure the
// token tells whether it landed.
func (s *Store) conditionalAdd(ctx context.Context, key string, in *dynamodb.UpdateItemInput) addResult {
	tok := writeToken()
	in.TableName = &s.tables.Counters
	in.Key = keyOf(key)
	in.ExpressionAttributeNames["#w"] = writerSlot(key, tok)
	in.ExpressionAttributeValues[":w"] = bin(tok)
	in.ReturnValues = types.ReturnValueUpdatedNew
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityIndexes
	s.roundTrips.Add(1)
	out, err := s.api.UpdateItem(ctx, in, noBlindRetry)
	switch {
	case err == nil:
		s.accountOut(out.ConsumedCapacity)
		cur, derr := number(out.Attributes, attrN)
		reserved, rerr := number(out.Attributes, attrReserved)
		return addResult{cur: cur, reserved: reserved, applied: wasApplied, err: errors.Join(derr, rerr)}
	case awserr.IsConditionFailed(err):
		var ccf *types.ConditionalCheckFailedException
		errors.As(err, &ccf)
		cur, derr := number(ccf.Item, attrN)
		reserved, rerr := number(ccf.Item, attrReserved)
		_, exists := ccf.Item[attrN]
		return addResult{cur: cur, reserved: reserved, refused: true, absent: !exists, err: errors.Join(derr, rerr)}
	case awserr.NotApplied(err):
		return addResult{err: awserr.Classify("charge "+key, err)}
	}
	cur, ok := s.landed(ctx, key, tok)
	if ok {
		return addResult{cur: cur, applied: wasApplied}
	}
	return addResult{applied: mayHaveApplied, err: awserr.Classify("charge "+key, err)}
}

// landed reads whether a counter's last write is the one with token tok,
// and the counter's value.
func (s *Store) landed(ctx context.Context, key string, tok []byte) (int64, bool) {
	// Even for a caller that has gone, but no longer than its deadline:
	// an answer that cannot be verified in time is treated as lost.
	vctx, cancel := s.undoContext(ctx)
	if dl, ok := ctx.Deadline(); ok {
		cancel()
		vctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), dl)
	}
	defer cancel()
	slot := writerSlot(key, tok)
	got, err := s.getItems(vctx, s.tables.Counters, []string{key}, attrPK, attrN, slot)
	if err != nil {
		return 0, false
	}
	item := got[key]
	w, _ := item[slot].(*types.AttributeValueMemberB)
	if w == nil || !bytes.Equal(w.Value, tok) {
		return 0, false
	}
	cur, err := number(item, attrN)
	return cur, err == nil
}

func (s *Store) accountOut(cc *types.ConsumedCapacity) {
	if cc != nil {
		s.account(false, *cc)
	}
}

// counterTTL is when a counter item may be deleted: a window counter one
// period after its window closes (it is then no longer anyone's prev) plus
// time for late settlements; a gauge well after any lease could hold it.
func (s *Store) counterTTL(c *limiter.Charge, now time.Time) int64 {
	if c.IsGauge() {
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

// compensate takes back a window charge that landed, never below zero.
// Like the charge it is never resent blindly: resent after it landed, it
// would take the charge back twice and let the window admit more than its
// limit. A compensation whose answer is lost and cannot be verified leaves
// the charge counted, the safe side.
func (s *Store) compensate(ctx context.Context, key string, c *limiter.Charge) error {
	tok := writeToken()
	// A bucket's charge set it to max(value, now) + amount: taking the
	// amount back leaves max(value, now), the same bucket (one at or
	// before now is full either way).
	update := "ADD #n :a SET #w = :w"
	names := map[string]string{"#n": attrN, "#w": writerSlot(key, tok)}
	if c.Counter.Kind == limiter.KindCost {
		update = "ADD #n :a, #r :a SET #w = :w"
		names["#r"] = attrReserved
	}
	err := retryUnapplied(ctx, 3, func() error {
		s.roundTrips.Add(1)
		out, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 &s.tables.Counters,
			Key:                       keyOf(key),
			UpdateExpression:          aws.String(update),
			ConditionExpression:       aws.String("#n >= :min"),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: map[string]types.AttributeValue{":a": n(-c.Amount), ":min": n(c.Amount), ":w": bin(tok)},
			ReturnConsumedCapacity:    types.ReturnConsumedCapacityIndexes,
		}, noBlindRetry)
		if err == nil {
			s.accountOut(out.ConsumedCapacity)
		}
		return err
	})
	switch {
	case err == nil:
		return nil
	case awserr.IsConditionFailed(err):
		s.log.Error("taking back a charge would take the counter below zero; skipped", "counter", key)
		return nil
	case awserr.NotApplied(err):
		return awserr.Classify("compensate "+key, err)
	}
	if _, ok := s.landed(ctx, key, tok); ok {
		return nil
	}
	return awserr.Classify("compensate "+key+" (unverified; the charge stays counted)", err)
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
