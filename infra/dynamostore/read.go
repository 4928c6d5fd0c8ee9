package dynamostore

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/limiter"
)

// Read implements limiter.Store with strongly consistent reads, bypassing
// the closed-window cache. A gauge counts the slots whose expiry is after
// now, as an admission would once it reclaimed the others.
func (s *Store) Read(ctx context.Context, now time.Time, charges []limiter.Charge) ([]limiter.State, error) {
	keys := make([]string, 0, 2*len(charges))
	for i := range charges {
		c := &charges[i]
		if c.IsGauge() {
			keys = append(keys, gaugeKey(CounterKey(c.Counter)))
			continue
		}
		keys = append(keys, CounterKey(c.Counter))
		if c.Sliding() {
			keys = append(keys, prevSources(c)...)
		}
	}
	got, reserved, err := s.getStates(ctx, now, keys)
	if err != nil {
		return nil, err
	}
	out := make([]limiter.State, len(charges))
	for i := range charges {
		c := &charges[i]
		k := CounterKey(c.Counter)
		if c.IsGauge() {
			out[i].Cur = got[gaugeKey(k)]
			continue
		}
		out[i].Cur = got[k]
		out[i].Reserved = min(max(reserved[k], 0), max(out[i].Cur, 0))
		if c.Sliding() {
			out[i].Prev = prevFrom(c, got)
		}
	}
	return out, nil
}

// getCounts reads window counter items consistently; absent items are 0.
func (s *Store) getCounts(ctx context.Context, keys []string) (map[string]int64, error) {
	got, _, err := s.getStates(ctx, time.Time{}, keys)
	return got, err
}

// getStates reads counter items consistently: a window's n, a gauge's
// slots live at now; absent items are 0. For budgets it also returns what
// their counts hold in reservations.
func (s *Store) getStates(ctx context.Context, now time.Time, keys []string) (counts, reserved map[string]int64, err error) {
	items, err := s.getItems(ctx, s.tables.Counters, keys, attrPK, attrN, attrSlotSet, attrReserved)
	if err != nil {
		return nil, nil, err
	}
	counts = make(map[string]int64, len(keys))
	reserved = map[string]int64{}
	for k, item := range items {
		if _, isGauge := item[attrSlotSet]; isGauge {
			counts[k] = liveSlots(binarySet(item, attrSlotSet), now)
			continue
		}
		v, err := number(item, attrN)
		if err != nil {
			return nil, nil, err
		}
		counts[k] = v
		if _, ok := item[attrReserved]; ok {
			if reserved[k], err = number(item, attrReserved); err != nil {
				return nil, nil, err
			}
		}
	}
	return counts, reserved, nil
}

// getItems reads items by their string hash key with BatchGetItem, 100 at
// a time, consistently, retrying unprocessed keys with backoff.
func (s *Store) getItems(ctx context.Context, table string, keys []string, keyAttr string, attrs ...string) (map[string]map[string]types.AttributeValue, error) {
	out := make(map[string]map[string]types.AttributeValue, len(keys))
	seen := make(map[string]bool, len(keys))
	var pending []map[string]types.AttributeValue
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			pending = append(pending, map[string]types.AttributeValue{keyAttr: sv(k)})
		}
	}
	names := map[string]string{}
	proj := ""
	for i, a := range append([]string{keyAttr}, attrs...) {
		p := "#p" + strconv.Itoa(i)
		names[p] = a
		if proj != "" {
			proj += ", "
		}
		proj += p
	}
	for stalls := 0; len(pending) > 0; {
		batch := pending[:min(len(pending), 100)]
		pending = pending[len(batch):]
		s.roundTrips.Add(1)
		res, err := s.api.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{
			RequestItems: map[string]types.KeysAndAttributes{table: {
				Keys:                     batch,
				ConsistentRead:           aws.Bool(true),
				ProjectionExpression:     aws.String(proj),
				ExpressionAttributeNames: names,
			}},
		})
		if err != nil {
			return nil, awserr.Classify("batch get", err)
		}
		s.itemReads.Add(int64(len(batch) - len(res.UnprocessedKeys[table].Keys)))
		for _, item := range res.Responses[table] {
			out[str(item, keyAttr)] = item
		}
		if u := res.UnprocessedKeys[table]; len(u.Keys) > 0 {
			// Throttled in part: back off, then ask again for the rest.
			pending = append(pending, u.Keys...)
			if stalls++; stalls > 8 {
				return nil, awserr.Classify("batch get", errors.New("keys still unprocessed after retries"))
			}
			if err := sleep(ctx, backoff(stalls)); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}
