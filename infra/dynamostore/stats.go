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
	"github.com/tollgate/tollgate/infra/metrics"
)

// Stats for the dashboard and the review report: per kind and period (a
// minute, or an hour for the report's kinds), one counters-table item
// "stats#<kind>#<unix minute of the period's start>" whose attributes
// "s:<name>" count, added to (or, for samples, set) by every instance;
// TTL removes them after metrics.StatsRetention(kind). The dashboard's
// last hour is one BatchGetItem per hundred items.

func statsKey(kind string, minute time.Time) string {
	return "stats#" + kind + "#" + strconv.FormatInt(minute.Unix()/60, 10)
}

// AddMinuteStats adds counts to kind's item of the minute.
func (s *Store) AddMinuteStats(ctx context.Context, kind string, minute time.Time, counts map[string]float64) error {
	if len(counts) == 0 {
		return nil
	}
	return s.updateStats(ctx, kind, minute, counts, "ADD", " ")
}

// SetStats sets values in kind's item of the period at: the last writer
// wins.
func (s *Store) SetStats(ctx context.Context, kind string, at time.Time, values map[string]float64) error {
	if len(values) == 0 {
		return nil
	}
	return s.updateStats(ctx, kind, at, values, "SET", " = ")
}

// updateStats writes one item's attributes in one UpdateItem: ADD a v or
// SET a = v.
func (s *Store) updateStats(ctx context.Context, kind string, minute time.Time, counts map[string]float64, verb, op string) error {
	names := map[string]string{"#t": attrTTL}
	values := map[string]types.AttributeValue{":t": n(minute.Add(metrics.StatsRetention(kind)).Unix())}
	var adds []string
	i := 0
	for name, v := range counts {
		k := strconv.Itoa(i)
		names["#a"+k] = "s:" + name
		values[":v"+k] = &types.AttributeValueMemberN{Value: strconv.FormatFloat(v, 'f', -1, 64)}
		adds = append(adds, "#a"+k+op+":v"+k)
		i++
	}
	expr := "ADD " + strings.Join(adds, ", ") + " SET #t = :t"
	if verb == "SET" {
		expr = "SET " + strings.Join(adds, ", ") + ", #t = :t"
	}
	s.roundTrips.Add(1)
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.tables.Counters),
		Key:                       keyOf(statsKey(kind, minute)),
		UpdateExpression:          aws.String(expr),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	return awserr.Classify("add stats", err)
}

// MinuteStats reads kind's counts for the minutes given, in BatchGetItems
// of at most 100 keys, eventually consistent.
func (s *Store) MinuteStats(ctx context.Context, kind string, minutes []time.Time) (map[time.Time]map[string]float64, error) {
	keys := make([]metrics.StatsKey, len(minutes))
	for i, m := range minutes {
		keys[i] = metrics.StatsKey{Kind: kind, At: m}
	}
	got, err := s.ReadStats(ctx, keys)
	if err != nil {
		return nil, err
	}
	out := map[time.Time]map[string]float64{}
	for k, v := range got {
		out[k.At] = v
	}
	return out, nil
}

// ReadStats reads the items of any kinds, in BatchGetItems of at most 100
// keys, eventually consistent.
func (s *Store) ReadStats(ctx context.Context, want []metrics.StatsKey) (map[metrics.StatsKey]map[string]float64, error) {
	keys := make([]map[string]types.AttributeValue, 0, len(want))
	byKey := map[string]metrics.StatsKey{}
	for _, m := range want {
		k := statsKey(m.Kind, m.At)
		if _, dup := byKey[k]; !dup {
			byKey[k] = m
			keys = append(keys, keyOf(k))
		}
	}
	out := map[metrics.StatsKey]map[string]float64{}
	for len(keys) > 0 {
		batch := keys[:min(len(keys), 100)]
		keys = keys[len(batch):]
		s.roundTrips.Add(1)
		res, err := s.api.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{
			RequestItems: map[string]types.KeysAndAttributes{s.tables.Counters: {Keys: batch}},
		})
		if err != nil {
			return nil, awserr.Classify("read stats", err)
		}
		for _, item := range res.Responses[s.tables.Counters] {
			counts := map[string]float64{}
			for a, v := range item {
				if name, ok := strings.CutPrefix(a, "s:"); ok {
					if nv, ok := v.(*types.AttributeValueMemberN); ok {
						counts[name], _ = strconv.ParseFloat(nv.Value, 64)
					}
				}
			}
			out[byKey[str(item, attrPK)]] = counts
		}
		u := res.UnprocessedKeys[s.tables.Counters]
		s.eventualItemReads.Add(int64(len(batch) - len(u.Keys)))
		if len(u.Keys) > 0 {
			keys = append(keys, u.Keys...) // throttled in part: ask again
		}
	}
	return out, nil
}
