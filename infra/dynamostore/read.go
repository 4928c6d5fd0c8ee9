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
// the closed-window cache. Gauges count only leases not yet expired, as in
// Charge.
func (s *Store) Read(ctx context.Context, now time.Time, charges []limiter.Charge) ([]limiter.State, error) {
	keys := make([]string, 0, 2*len(charges))
	gauges := false
	for i := range charges {
		c := &charges[i]
		keys = append(keys, CounterKey(c.Counter))
		if c.Period == limiter.Concurrent {
			gauges = true
		} else {
			keys = append(keys, prevSources(c)...)
		}
	}
	if gauges {
		if _, err := s.reclaim(ctx, now, reclaimOnAdmission); err != nil {
			return nil, err
		}
	}
	got, err := s.getCounts(ctx, keys)
	if err != nil {
		return nil, err
	}
	out := make([]limiter.State, len(charges))
	for i := range charges {
		c := &charges[i]
		out[i].Cur = got[CounterKey(c.Counter)]
		if c.Period != limiter.Concurrent {
			out[i].Prev = prevFrom(c, got)
		}
	}
	return out, nil
}

// getCounts reads counter items consistently: a window's n, a gauge's
// number of slots; absent items are 0.
func (s *Store) getCounts(ctx context.Context, keys []string) (map[string]int64, error) {
	items, err := s.getItems(ctx, s.tables.Counters, keys, attrPK, attrN, attrSlots)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(keys))
	for k, item := range items {
		if _, isGauge := item[attrSlots]; isGauge {
			out[k] = int64(len(stringSet(item, attrSlots)))
			continue
		}
		v, err := number(item, attrN)
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
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
