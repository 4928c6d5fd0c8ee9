package dynamostore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/limiter"
)

// CounterKey returns the item key of a counter. The rule's length comes
// first so that no two counters share a key whatever their strings hold:
// "26:user_path:/team/alpha:60|req|29523456|0|" (rule, kind, window,
// shard, child).
func CounterKey(c limiter.Counter) string {
	var b strings.Builder
	b.Grow(len(c.Rule) + len(c.Child) + 40)
	b.WriteString(strconv.Itoa(len(c.Rule)))
	b.WriteByte(':')
	b.WriteString(c.Rule)
	b.WriteByte('|')
	b.WriteString(c.Kind.String())
	b.WriteByte('|')
	b.WriteString(strconv.FormatInt(c.Window, 10))
	b.WriteByte('|')
	b.WriteString(strconv.Itoa(c.Shard))
	b.WriteByte('|')
	b.WriteString(c.Child)
	return b.String()
}

// settledKey is the marker of a lease whose tokens were settled.
func settledKey(leaseID string) string { return "settled|" + leaseID }

// orphanKey is the marker of a lease whose slots were released after TTL
// deleted it while still active.
func orphanKey(leaseID string) string { return "orphan|" + leaseID }

func sv(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func b(v bool) types.AttributeValue { return &types.AttributeValueMemberBOOL{Value: v} }
func unixSec(t time.Time) int64     { return t.Unix() }
func unixMilli(t time.Time) int64   { return t.UnixMilli() }
func fromMilli(ms int64) time.Time  { return time.UnixMilli(ms).UTC() }
func keyOf(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: sv(pk)}
}

// number reads an N attribute; absent is 0.
func number(item map[string]types.AttributeValue, name string) (int64, error) {
	v, ok := item[name]
	if !ok {
		return 0, nil
	}
	nv, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("attribute %s is not a number", name)
	}
	return strconv.ParseInt(nv.Value, 10, 64)
}

func str(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func boolean(item map[string]types.AttributeValue, name string) bool {
	v, ok := item[name].(*types.AttributeValueMemberBOOL)
	return ok && v.Value
}

// Lease statuses.
const (
	StatusActive    = "active"
	StatusCompleted = "completed"
	StatusExpired   = "expired"
	StatusRefused   = "refused"
)

// Lease attribute names (beyond the keys).
const (
	attrUserPath    = "user_path"
	attrProvider    = "provider"
	attrModel       = "model"
	attrRoute       = "route"
	attrReservedIn  = "reserved_in"
	attrReservedOut = "reserved_out"
	attrCharges     = "charges"
	attrUsedIn      = "used_in"
	attrUsedOut     = "used_out"
	attrUsedCached  = "used_cached"
	attrExact       = "exact"
	attrFinishedAt  = "finished_at"
)

// leaseItem encodes an active lease. active names its partition of the
// by_expiry index.
func leaseItem(l *limiter.Lease, active string, ttl int64) map[string]types.AttributeValue {
	charges := make([]types.AttributeValue, len(l.Charges))
	for i, c := range l.Charges {
		charges[i] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"r": sv(c.Counter.Rule),
			"c": sv(c.Counter.Child),
			"k": n(int64(c.Counter.Kind)),
			"s": n(int64(c.Counter.Shard)),
			"w": n(c.Counter.Window),
			"p": n(int64(c.Period / time.Second)),
			"l": n(c.Limit),
			"a": n(c.Amount),
		}}
	}
	item := map[string]types.AttributeValue{
		attrID:          sv(l.ID),
		attrStatus:      sv(StatusActive),
		attrActive:      sv(active),
		attrExpiresAt:   n(unixMilli(l.ExpiresAt)),
		attrTTL:         n(ttl),
		attrUserPath:    sv(l.UserPath),
		attrRoute:       sv(l.Route),
		attrReservedIn:  n(l.Reserved.InputTokens),
		attrReservedOut: n(l.Reserved.OutputTokens),
		attrCharges:     &types.AttributeValueMemberL{Value: charges},
	}
	if l.Provider != "" {
		item[attrProvider] = sv(l.Provider)
	}
	if l.Model != "" {
		item[attrModel] = sv(l.Model)
	}
	return item
}

// LeaseRecord is a lease item decoded: the lease, its status, and the
// usage its request reported on completion.
type LeaseRecord struct {
	Lease  limiter.Lease
	Status string
	Used   limiter.Usage
}

// DecodeLease decodes a lease item, as read from the table or a stream
// image.
func DecodeLease(item map[string]types.AttributeValue) (LeaseRecord, error) {
	var r LeaseRecord
	var errs []error
	num := func(name string) int64 {
		v, err := number(item, name)
		errs = append(errs, err)
		return v
	}
	r.Lease.ID = str(item, attrID)
	r.Status = str(item, attrStatus)
	r.Lease.ExpiresAt = fromMilli(num(attrExpiresAt))
	r.Lease.UserPath = str(item, attrUserPath)
	r.Lease.Provider = str(item, attrProvider)
	r.Lease.Model = str(item, attrModel)
	r.Lease.Route = str(item, attrRoute)
	r.Lease.Reserved = limiter.Usage{InputTokens: num(attrReservedIn), OutputTokens: num(attrReservedOut)}
	r.Used = limiter.Usage{
		InputTokens:       num(attrUsedIn),
		OutputTokens:      num(attrUsedOut),
		CachedInputTokens: num(attrUsedCached),
		Exact:             boolean(item, attrExact),
	}
	if r.Lease.ID == "" {
		errs = append(errs, errors.New("lease item without id"))
	}
	list, _ := item[attrCharges].(*types.AttributeValueMemberL)
	if list != nil {
		for _, v := range list.Value {
			m, ok := v.(*types.AttributeValueMemberM)
			if !ok {
				errs = append(errs, errors.New("charge is not a map"))
				continue
			}
			f := func(name string) int64 {
				x, err := number(m.Value, name)
				errs = append(errs, err)
				return x
			}
			r.Lease.Charges = append(r.Lease.Charges, limiter.Charge{
				Counter: limiter.Counter{
					Rule:   str(m.Value, "r"),
					Child:  str(m.Value, "c"),
					Kind:   limiter.Kind(f("k")),
					Shard:  int(f("s")),
					Window: f("w"),
				},
				Period: time.Duration(f("p")) * time.Second,
				Limit:  f("l"),
				Amount: f("a"),
			})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return r, fmt.Errorf("lease %q: %w", r.Lease.ID, err)
	}
	return r, nil
}
