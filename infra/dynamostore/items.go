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
// shard, child); a shard of a split counter is "shard/layout", "3/8".
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
	if c.Shards > 1 {
		b.WriteByte('/')
		b.WriteString(strconv.Itoa(c.Shards))
	}
	b.WriteByte('|')
	b.WriteString(c.Child)
	return b.String()
}

// settledKey is the marker of a lease whose tokens were settled.
func settledKey(leaseID string) string { return "settled|" + leaseID }

func sv(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func b(v bool) types.AttributeValue       { return &types.AttributeValueMemberBOOL{Value: v} }
func bin(v []byte) types.AttributeValue   { return &types.AttributeValueMemberB{Value: v} }
func ss(v ...string) types.AttributeValue { return &types.AttributeValueMemberSS{Value: v} }

func unixSec(t time.Time) int64    { return t.Unix() }
func unixMilli(t time.Time) int64  { return t.UnixMilli() }
func fromMilli(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
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
	attrKeyID       = "key_id"
	attrReservedIn  = "reserved_in"
	attrReservedOut = "reserved_out"
	attrCharges     = "charges"
	attrUsedIn      = "used_in"
	attrUsedOut     = "used_out"
	attrUsedCached  = "used_cached"
	attrExact       = "exact"
	attrFinishedAt  = "finished_at"
	attrAdmitted    = "adm"              // Unix milliseconds of the admission
	attrReleased    = "rel"              // the lease's slots were given back when it ended
	attrLate        = "late"             // completed after it had expired
	attrPrice       = "price"            // "input output cached" µ$ per million tokens, for budgets
	attrCachedIn    = "used_cached_in"   // the cached tokens are counted in used_in
	attrUsedWrite   = "used_cache_write" // of used_in, written to the prompt cache; absent for none
)

// leaseItem encodes a lease. Each charge is one short string, "amount
// period key", which keeps a lease of several rules under 1 KB: one write
// unit (TestLeaseItemRoundTripAndSize).
func leaseItem(l *limiter.Lease, ttl int64) map[string]types.AttributeValue {
	charges := make([]types.AttributeValue, len(l.Charges))
	for i := range l.Charges {
		charges[i] = sv(encodeCharge(&l.Charges[i]))
	}
	item := map[string]types.AttributeValue{
		attrID:          sv(l.ID),
		attrStatus:      sv(StatusActive),
		attrExpiresAt:   n(unixMilli(l.ExpiresAt)),
		attrAdmitted:    n(unixMilli(l.AdmittedAt)),
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
	if l.Key != "" {
		item[attrKeyID] = sv(l.Key)
	}
	if !l.Price.IsZero() {
		item[attrPrice] = sv(strconv.FormatInt(l.Price.Input, 10) + " " + strconv.FormatInt(l.Price.Output, 10) + " " + strconv.FormatInt(l.Price.CachedInput, 10))
	}
	return item
}

// completionItem is a lease's record: the lease, completed at now with
// the usage its request reported and whether its slots were given back.
func completionItem(l *limiter.Lease, now time.Time, used limiter.Usage, released, late bool, ttl int64) map[string]types.AttributeValue {
	item := leaseItem(l, ttl)
	item[attrStatus] = sv(StatusCompleted)
	item[attrFinishedAt] = n(unixMilli(now))
	item[attrUsedIn] = n(used.InputTokens)
	item[attrUsedOut] = n(used.OutputTokens)
	item[attrUsedCached] = n(used.CachedInputTokens)
	item[attrCachedIn] = b(used.CachedInInput)
	item[attrExact] = b(used.Exact)
	if used.CacheWriteInputTokens > 0 {
		item[attrUsedWrite] = n(used.CacheWriteInputTokens)
	}
	item[attrReleased] = b(released)
	if late {
		item[attrLate] = b(true)
	}
	return item
}

// encodeCharge writes what settling a charge needs: "amount period key",
// where a fixed window's period is followed by "f" and its end (Unix
// seconds), a bucket's by "b" and its nanoseconds per unit: "1 86400f1767225600 …";
// then, for a charge at Bedrock's arithmetic, "x" and its output burndown:
// "5100 60x5 …".
func encodeCharge(c *limiter.Charge) string {
	period := strconv.FormatInt(int64(c.Period/time.Second), 10)
	switch c.Shape {
	case limiter.ShapeFixed:
		period += "f" + strconv.FormatInt(c.End.Unix(), 10)
	case limiter.ShapeBucket:
		period += "b" + strconv.FormatInt(c.Unit, 10)
	}
	if c.Burndown > 0 {
		period += "x" + strconv.FormatInt(c.Burndown, 10)
	}
	return strconv.FormatInt(c.Amount, 10) + " " + period + " " + CounterKey(c.Counter)
}

// LeaseRecord is a lease item decoded: the lease, its status, and the
// usage its request reported on completion.
type LeaseRecord struct {
	Lease  limiter.Lease
	Status string
	Used   limiter.Usage
	// Released says the slots were given back when the lease ended.
	Released bool
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
	r.Lease.AdmittedAt = fromMilli(num(attrAdmitted))
	r.Released = boolean(item, attrReleased)
	r.Lease.UserPath = str(item, attrUserPath)
	r.Lease.Provider = str(item, attrProvider)
	r.Lease.Model = str(item, attrModel)
	r.Lease.Route = str(item, attrRoute)
	r.Lease.Key = str(item, attrKeyID)
	r.Lease.Reserved = limiter.Usage{InputTokens: num(attrReservedIn), OutputTokens: num(attrReservedOut)}
	if p := str(item, attrPrice); p != "" {
		var err error
		if r.Lease.Price, err = parsePrice(p); err != nil {
			errs = append(errs, err)
		}
	}
	r.Used = limiter.Usage{
		InputTokens:       num(attrUsedIn),
		OutputTokens:      num(attrUsedOut),
		CachedInputTokens: num(attrUsedCached),
		CachedInInput:     boolean(item, attrCachedIn),
		Exact:             boolean(item, attrExact),
		// Absent for none, and in the records of older versions.
		CacheWriteInputTokens: num(attrUsedWrite),
	}
	if r.Lease.ID == "" {
		errs = append(errs, errors.New("lease item without id"))
	}
	list, _ := item[attrCharges].(*types.AttributeValueMemberL)
	if list != nil {
		for _, v := range list.Value {
			c, err := decodeCharge(v)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if c.Shape == limiter.ShapeBucket {
				c.Floor = r.Lease.AdmittedAt.UnixNano() // an overshoot's floor
			}
			r.Lease.Charges = append(r.Lease.Charges, c)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return r, fmt.Errorf("lease %q: %w", r.Lease.ID, err)
	}
	return r, nil
}

func decodeCharge(v types.AttributeValue) (limiter.Charge, error) {
	sv, ok := v.(*types.AttributeValueMemberS)
	if !ok {
		return limiter.Charge{}, errors.New("charge is not a string")
	}
	bad := fmt.Errorf("bad charge %q", sv.Value)
	amount, rest, ok1 := strings.Cut(sv.Value, " ")
	period, key, ok2 := strings.Cut(rest, " ")
	a, err1 := strconv.ParseInt(amount, 10, 64)
	c, err3 := ParseCounterKey(key)
	if !ok1 || !ok2 || err1 != nil || err3 != nil {
		return limiter.Charge{}, bad
	}
	ch := limiter.Charge{Counter: c, Amount: a}
	if p, burndown, ok := strings.Cut(period, "x"); ok {
		b, err := strconv.ParseInt(burndown, 10, 64)
		if err != nil || b < 1 || b > limiter.MaxBurndown {
			return limiter.Charge{}, bad
		}
		period, ch.Burndown = p, b
	}
	secs, shape := period, ""
	if i := strings.IndexAny(period, "fb"); i >= 0 {
		secs, shape = period[:i], period[i:]
	}
	p, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		return limiter.Charge{}, bad
	}
	ch.Period = time.Duration(p) * time.Second
	if shape != "" {
		v, err := strconv.ParseInt(shape[1:], 10, 64)
		if err != nil {
			return limiter.Charge{}, bad
		}
		if shape[0] == 'f' {
			ch.Shape, ch.End = limiter.ShapeFixed, time.Unix(v, 0).UTC()
		} else {
			ch.Shape, ch.Unit = limiter.ShapeBucket, v
		}
	}
	return ch, nil
}

// parsePrice is the inverse of the price attribute.
func parsePrice(s string) (limiter.Price, error) {
	f := strings.Fields(s)
	var v [3]int64
	if len(f) != 3 {
		return limiter.Price{}, fmt.Errorf("bad price %q", s)
	}
	for i := range f {
		var err error
		if v[i], err = strconv.ParseInt(f[i], 10, 64); err != nil || v[i] < 0 {
			return limiter.Price{}, fmt.Errorf("bad price %q", s)
		}
	}
	return limiter.Price{Input: v[0], Output: v[1], CachedInput: v[2]}, nil
}

// ParseCounterKey is the inverse of CounterKey.
func ParseCounterKey(key string) (limiter.Counter, error) {
	bad := fmt.Errorf("bad counter key %q", key)
	lenStr, rest, ok := strings.Cut(key, ":")
	size, err := strconv.Atoi(lenStr)
	if !ok || err != nil || size < 0 || size > len(rest) {
		return limiter.Counter{}, bad
	}
	c := limiter.Counter{Rule: rest[:size]}
	parts := strings.SplitN(rest[size:], "|", 5)
	if len(parts) != 5 || parts[0] != "" {
		return limiter.Counter{}, bad
	}
	c.Kind = kindByName[parts[1]]
	w, err1 := strconv.ParseInt(parts[2], 10, 64)
	shard, layout, split := strings.Cut(parts[3], "/")
	sh, err2 := strconv.Atoi(shard)
	var err3 error
	if split {
		c.Shards, err3 = strconv.Atoi(layout)
		if err3 == nil && c.Shards < 2 {
			err3 = bad
		}
	}
	if c.Kind == 0 || err1 != nil || err2 != nil || err3 != nil {
		return limiter.Counter{}, bad
	}
	c.Window, c.Shard, c.Child = w, sh, parts[4]
	return c, nil
}

var kindByName = func() map[string]limiter.Kind {
	m := map[string]limiter.Kind{}
	for k := limiter.KindRequests; k <= limiter.KindCost; k++ {
		m[k.String()] = k
	}
	return m
}()
