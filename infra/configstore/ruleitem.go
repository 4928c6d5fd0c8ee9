package configstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/limiter"
)

// A rule item keeps the attributes it has always kept, whatever the kind
// of the rule's limit, so that every item written before limits were
// kinds still loads (TestRuleItemsOfEveryVersionLoad), and an instance
// still running the old code reads what this one writes:
//
//	period                   a window's seconds; 0 for the other kinds
//	max_requests, max_tokens, max_input_tokens, max_output_tokens
//	                         a window's limits, a gauge's requests in
//	                         flight as max_requests; 0 otherwise
//	window, quota            "fixed", "bedrock", when not the default
//	capacity, refill_per_second, bucket_tokens
//	                         a bucket's (capacity tells a bucket)
//	max_cost, calendar       a budget's (calendar tells a budget)
//
// A bucket's or a budget's period is ignored: an older version could
// write the one the limiter derived for expiries. A gauge is a rule of
// period 0 that is neither.

func ruleItem(r Rule) map[string]types.AttributeValue {
	item := key(pkRule, string(r.Key()))
	item["scope"] = sv(r.Scope.String())
	item["subject"] = sv(r.Subject)
	putLimit(item, r.Limit)
	item["per_child"] = bv(r.PerChild)
	item["shards"] = nv(int64(r.Shards))
	if r.Priority != 0 {
		item["priority"] = nv(int64(r.Priority))
	}
	if r.Always {
		item["always"] = bv(true)
	}
	if r.Shadow {
		item["shadow"] = bv(true)
	}
	if p := r.Ramp; p != nil {
		item["ramp"] = sv(fmt.Sprintf("%d %d %d %d", p.Start, p.Step, p.Every.Milliseconds(), p.Max))
	}
	if f := r.FairShare; f != nil {
		b, _ := json.Marshal(f)
		item["fair_share"] = sv(string(b))
	}
	item["version"] = nv(r.Version)
	item["created_at"] = nv(r.CreatedAt.UnixMilli())
	item["updated_at"] = nv(r.UpdatedAt.UnixMilli())
	return item
}

// putLimit writes a rule's limit into its item (see above).
func putLimit(item map[string]types.AttributeValue, l limiter.Limit) {
	var w limiter.Window
	switch l := l.(type) {
	case limiter.Window:
		w = l
	case limiter.Gauge:
		w.MaxRequests = l.MaxInFlight
	case limiter.Bucket:
		item["capacity"] = nv(l.Capacity)
		item["refill_per_second"] = &types.AttributeValueMemberN{Value: strconv.FormatFloat(l.RefillPerSecond, 'g', -1, 64)}
		item["bucket_tokens"] = bv(l.Tokens)
	case limiter.Budget:
		item["max_cost"] = nv(l.MaxCost)
		item["calendar"] = sv(l.Calendar.String())
	}
	item["period"] = nv(int64(w.Period / time.Second))
	item["max_requests"] = nv(w.MaxRequests)
	item["max_tokens"] = nv(w.MaxTokens)
	item["max_input_tokens"] = nv(w.MaxInputTokens)
	item["max_output_tokens"] = nv(w.MaxOutputTokens)
	if w.Fixed {
		item["window"] = sv(w.Counting())
	}
	if w.Quota != limiter.QuotaStandard {
		item["quota"] = sv(w.Quota.String())
	}
}

func decodeRule(item map[string]types.AttributeValue) (Rule, error) {
	scope, err := limiter.ParseScope(getS(item, "scope"))
	if err != nil {
		return Rule{}, err
	}
	r := Rule{
		Rule: limiter.Rule{
			Scope:    scope,
			Subject:  getS(item, "subject"),
			PerChild: getB(item, "per_child"),
			Shards:   int(getN(item, "shards")),
			Source:   limiter.SourceManual,
		},
		Version:   getN(item, "version"),
		CreatedAt: time.UnixMilli(getN(item, "created_at")).UTC(),
		UpdatedAt: time.UnixMilli(getN(item, "updated_at")).UTC(),
	}
	var errs []error
	r.Limit, errs = decodeLimit(item)
	r.Priority = int(getN(item, "priority"))
	r.Always, r.Shadow = getB(item, "always"), getB(item, "shadow")
	if s := getS(item, "ramp"); s != "" {
		var p limiter.Ramp
		var every int64
		if _, err := fmt.Sscanf(s, "%d %d %d %d", &p.Start, &p.Step, &every, &p.Max); err != nil {
			errs = append(errs, fmt.Errorf("ramp %q: %w", s, err))
		}
		p.Every = time.Duration(every) * time.Millisecond
		r.Ramp = &p
	}
	if s := getS(item, "fair_share"); s != "" {
		r.FairShare = &limiter.FairShare{}
		errs = append(errs, json.Unmarshal([]byte(s), r.FairShare))
	}
	if err := errors.Join(errs...); err != nil {
		return Rule{}, fmt.Errorf("rule %s: %w", getS(item, "sk"), err)
	}
	return r, nil
}

// decodeLimit reads a rule's limit from its item (see above): a bucket,
// a budget, a gauge or a window, with a problem for each attribute its
// kind has not.
func decodeLimit(item map[string]types.AttributeValue) (limiter.Limit, []error) {
	var errs []error
	w := limiter.Window{
		Period:          time.Duration(getN(item, "period")) * time.Second,
		MaxRequests:     getN(item, "max_requests"),
		MaxTokens:       getN(item, "max_tokens"),
		MaxInputTokens:  getN(item, "max_input_tokens"),
		MaxOutputTokens: getN(item, "max_output_tokens"),
	}
	if s := getS(item, "window"); s != "" {
		var err error
		w.Fixed, err = limiter.ParseWindow(s)
		errs = append(errs, err)
	}
	if q := getS(item, "quota"); q != "" {
		var err error
		w.Quota, err = limiter.ParseQuota(q)
		errs = append(errs, err)
	}
	var l limiter.Limit
	switch _, bucket := item["capacity"]; {
	case bucket:
		b := limiter.Bucket{Capacity: getN(item, "capacity"), Tokens: getB(item, "bucket_tokens")}
		if v, ok := item["refill_per_second"].(*types.AttributeValueMemberN); ok {
			var err error
			b.RefillPerSecond, err = strconv.ParseFloat(v.Value, 64)
			errs = append(errs, err)
		}
		l = b
	case getS(item, "calendar") != "":
		b := limiter.Budget{MaxCost: getN(item, "max_cost")}
		var err error
		b.Calendar, err = limiter.ParseCalendar(getS(item, "calendar"))
		errs = append(errs, err)
		l = b
	case w.Period == 0:
		l = limiter.Gauge{MaxInFlight: w.MaxRequests}
	default:
		return w, errs
	}
	return l, append(errs, limiter.Misplaced(w, l)...)
}
