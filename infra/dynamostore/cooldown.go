package dynamostore

import (
	"context"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
)

// Cooldowns: when a provider answers 429 (or reports nothing left), the
// gateway stops calling that provider's model until the time it gave. The
// time is kept in the counters table so that every instance routes around
// it.

func cooldownKey(key string) string { return "cooldown|" + key }

// CooldownUntil returns, for each key, until when it cools down (absent:
// not cooling).
func (s *Store) CooldownUntil(ctx context.Context, keys []string) (map[string]time.Time, error) {
	pks := make([]string, len(keys))
	for i, k := range keys {
		pks[i] = cooldownKey(k)
	}
	items, err := s.getItems(ctx, s.tables.Counters, pks, attrPK, "until")
	if err != nil {
		return nil, err
	}
	out := map[string]time.Time{}
	for _, k := range keys {
		if item, ok := items[cooldownKey(k)]; ok {
			ms, _ := number(item, "until")
			out[k] = time.UnixMilli(ms)
		}
	}
	return out, nil
}

// SetCooldown extends a key's cooldown to until (never shortens it).
func (s *Store) SetCooldown(ctx context.Context, key string, until time.Time) error {
	s.roundTrips.Add(1)
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                &s.tables.Counters,
		Key:                      keyOf(cooldownKey(key)),
		UpdateExpression:         aws.String("SET #u = :u, #t = :t"),
		ConditionExpression:      aws.String("attribute_not_exists(#u) OR #u < :u"),
		ExpressionAttributeNames: map[string]string{"#u": "until", "#t": attrTTL},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":u": &types.AttributeValueMemberN{Value: strconv.FormatInt(until.UnixMilli(), 10)},
			":t": n(s.ttlAfter(until)),
		},
	})
	if awserr.IsConditionFailed(err) {
		return nil // a longer cooldown is already set
	}
	return awserr.Classify("set cooldown", err)
}
