package dynamostore

import (
	"context"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/limiter"
)

var _ limiter.Rosters = (*Store)(nil)

// The roster of a fair-share rule in a window is one counters-table item,
// "roster#<rule>#<window>", whose string set "m" holds the members that
// used it; each instance adds a member once per window.

func rosterKey(rule string, window int64) string {
	return "roster#" + rule + "#" + strconv.FormatInt(window, 10)
}

// JoinRoster implements limiter.Rosters.
func (s *Store) JoinRoster(ctx context.Context, rule string, window int64, member string, expires time.Time) error {
	s.roundTrips.Add(1)
	if member == "" {
		member = "-" // a string set holds no empty string
	}
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.tables.Counters),
		Key:                      keyOf(rosterKey(rule, window)),
		UpdateExpression:         aws.String("ADD #m :m SET #t = :t"),
		ExpressionAttributeNames: map[string]string{"#m": "m", "#t": attrTTL},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":m": &types.AttributeValueMemberSS{Value: []string{member}},
			":t": n(s.ttlAfter(expires)),
		},
	})
	return awserr.Classify("join roster", err)
}

// Roster implements limiter.Rosters.
func (s *Store) Roster(ctx context.Context, rule string, windows []int64) ([]string, error) {
	keys := make([]string, len(windows))
	for i, w := range windows {
		keys[i] = rosterKey(rule, w)
	}
	items, err := s.getItems(ctx, s.tables.Counters, keys, attrPK, "m")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, item := range items {
		ss, _ := item["m"].(*types.AttributeValueMemberSS)
		if ss == nil {
			continue
		}
		for _, m := range ss.Value {
			if m == "-" {
				m = ""
			}
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
	}
	return out, nil
}
