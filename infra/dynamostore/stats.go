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
)

// Stats for the dashboard: per kind ("refused", "estimate") and minute,
// one counters-table item "stats#<kind>#<unix minute>" whose attributes
// "s:<name>" count, added to by every instance; TTL removes them after a
// day. The dashboard's last hour is one BatchGetItem per kind.

func statsKey(kind string, minute time.Time) string {
	return "stats#" + kind + "#" + strconv.FormatInt(minute.Unix()/60, 10)
}

// AddMinuteStats adds counts to kind's item of the minute.
func (s *Store) AddMinuteStats(ctx context.Context, kind string, minute time.Time, counts map[string]float64) error {
	if len(counts) == 0 {
		return nil
	}
	names := map[string]string{"#t": attrTTL}
	values := map[string]types.AttributeValue{":t": n(minute.Add(24 * time.Hour).Unix())}
	var adds []string
	i := 0
	for name, v := range counts {
		k := strconv.Itoa(i)
		names["#a"+k] = "s:" + name
		values[":v"+k] = &types.AttributeValueMemberN{Value: strconv.FormatFloat(v, 'f', -1, 64)}
		adds = append(adds, "#a"+k+" :v"+k)
		i++
	}
	s.roundTrips.Add(1)
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.tables.Counters),
		Key:                       keyOf(statsKey(kind, minute)),
		UpdateExpression:          aws.String("ADD " + strings.Join(adds, ", ") + " SET #t = :t"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	return awserr.Classify("add stats", err)
}

// MinuteStats reads kind's counts for the minutes given, in BatchGetItems
// of at most 100 keys, eventually consistent.
func (s *Store) MinuteStats(ctx context.Context, kind string, minutes []time.Time) (map[time.Time]map[string]float64, error) {
	keys := make([]map[string]types.AttributeValue, 0, len(minutes))
	byKey := map[string]time.Time{}
	for _, m := range minutes {
		k := statsKey(kind, m)
		if _, dup := byKey[k]; !dup {
			byKey[k] = m
			keys = append(keys, keyOf(k))
		}
	}
	out := map[time.Time]map[string]float64{}
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
