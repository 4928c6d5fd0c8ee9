package dynamostore

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/limiter"
)

// Upstream reports: the limits a provider's model reported of its own,
// kept in the counters table for every instance, one item per provider
// and model, written at most once per interval by the whole fleet (the
// write is conditional on the last one's time).

func upstreamKey(key string) string { return "upstream|" + strings.ToLower(key) }

// RecordUpstream records rep under key unless a report was recorded
// within every before rep.At; it reports whether it wrote.
func (s *Store) RecordUpstream(ctx context.Context, key string, rep limiter.UpstreamReport, every time.Duration) (bool, error) {
	s.roundTrips.Add(1)
	ms := func(t time.Time) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(t.UnixMilli(), 10)}
	}
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                &s.tables.Counters,
		Key:                      keyOf(upstreamKey(key)),
		UpdateExpression:         aws.String("SET #at = :at, lr = :lr, lt = :lt, rr = :rr, rt = :rt, #t = :t"),
		ConditionExpression:      aws.String("attribute_not_exists(#at) OR #at <= :cutoff"),
		ExpressionAttributeNames: map[string]string{"#at": "at", "#t": attrTTL},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":at": ms(rep.At), ":cutoff": ms(rep.At.Add(-every)),
			":lr": n(rep.LimitRequests), ":lt": n(rep.LimitTokens),
			":rr": n(rep.RemainingRequests), ":rt": n(rep.RemainingTokens),
			":t": n(s.ttlAfter(rep.At.Add(24 * time.Hour))),
		},
	})
	if awserr.IsConditionFailed(err) {
		return false, nil // another instance reported within the interval
	}
	if err != nil {
		return false, awserr.Classify("record an upstream report", err)
	}
	return true, nil
}

// UpstreamReports returns the reports recorded under keys (absent: none).
func (s *Store) UpstreamReports(ctx context.Context, keys []string) (map[string]limiter.UpstreamReport, error) {
	pks := make([]string, len(keys))
	for i, k := range keys {
		pks[i] = upstreamKey(k)
	}
	items, err := s.getItems(ctx, s.tables.Counters, pks, attrPK, "at", "lr", "lt", "rr", "rt")
	if err != nil {
		return nil, err
	}
	out := map[string]limiter.UpstreamReport{}
	for _, k := range keys {
		item, ok := items[upstreamKey(k)]
		if !ok {
			continue
		}
		at, _ := number(item, "at")
		var rep limiter.UpstreamReport
		rep.At = time.UnixMilli(at)
		rep.LimitRequests, _ = number(item, "lr")
		rep.LimitTokens, _ = number(item, "lt")
		rep.RemainingRequests, _ = number(item, "rr")
		rep.RemainingTokens, _ = number(item, "rt")
		out[k] = rep
	}
	return out, nil
}
