package configstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/limiter"
)

// API is the part of the DynamoDB client the store calls.
type API interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// Dynamo keeps the admin's state in the config table: items ("rule", key),
// ("gen", key), ("key", hash) and the version item ("meta", "version"),
// which every change increments in the same transaction.
type Dynamo struct {
	api   API
	table string
	now   func() time.Time
	calls *atomic.Int64
}

// NewDynamo returns a store on the config table.
func NewDynamo(api API, table string) *Dynamo {
	calls := new(atomic.Int64)
	return &Dynamo{api: counted{api, calls}, table: table, now: time.Now, calls: calls}
}

// RoundTrips is the number of API calls the store has made.
func (d *Dynamo) RoundTrips() int64 { return d.calls.Load() }

// counted counts the calls made through an API.
type counted struct {
	API
	n *atomic.Int64
}

func (c counted) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.n.Add(1)
	return c.API.GetItem(ctx, in, o...)
}

func (c counted) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.n.Add(1)
	return c.API.PutItem(ctx, in, o...)
}

func (c counted) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.n.Add(1)
	return c.API.UpdateItem(ctx, in, o...)
}

func (c counted) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.n.Add(1)
	return c.API.Query(ctx, in, o...)
}

func (c counted) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.n.Add(1)
	return c.API.TransactWriteItems(ctx, in, o...)
}

func (c counted) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	c.n.Add(1)
	return c.API.DeleteItem(ctx, in, o...)
}

const (
	pkRule   = "rule"
	pkGen    = "gen"
	pkKey    = "key"
	pkMeta   = "meta"
	pkLayout = "layout"
)

func sv(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func nv(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func bv(v bool) types.AttributeValue { return &types.AttributeValueMemberBOOL{Value: v} }

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": sv(pk), "sk": sv(sk)}
}

func getS(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func getN(item map[string]types.AttributeValue, name string) int64 {
	if v, ok := item[name].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		return n
	}
	return 0
}

func getB(item map[string]types.AttributeValue, name string) bool {
	v, ok := item[name].(*types.AttributeValueMemberBOOL)
	return ok && v.Value
}

func (d *Dynamo) query(ctx context.Context, pk string) ([]map[string]types.AttributeValue, error) {
	var out []map[string]types.AttributeValue
	var start map[string]types.AttributeValue
	for {
		page, err := d.api.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(d.table),
			KeyConditionExpression:    aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": sv(pk)},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, awserr.Classify("query "+pk, err)
		}
		out = append(out, page.Items...)
		if page.LastEvaluatedKey == nil {
			return out, nil
		}
		start = page.LastEvaluatedKey
	}
}

// Snapshot returns the rules, generations and version.
func (d *Dynamo) Snapshot(ctx context.Context) (Snapshot, error) {
	v, err := d.Version(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	s := Snapshot{Version: v, Generations: map[limiter.RuleKey]string{}}
	rules, err := d.query(ctx, pkRule)
	if err != nil {
		return Snapshot{}, err
	}
	for _, item := range rules {
		r, err := decodeRule(item)
		if err != nil {
			return Snapshot{}, fmt.Errorf("rule %s: %w", getS(item, "sk"), err)
		}
		s.Rules = append(s.Rules, r)
	}
	gens, err := d.query(ctx, pkGen)
	if err != nil {
		return Snapshot{}, err
	}
	for _, item := range gens {
		s.Generations[limiter.RuleKey(getS(item, "sk"))] = getS(item, "g")
	}
	layouts, err := d.query(ctx, pkLayout)
	if err != nil {
		return Snapshot{}, err
	}
	s.Layouts = map[limiter.RuleKey]Layout{}
	for _, item := range layouts {
		s.Layouts[limiter.RuleKey(getS(item, "sk"))] = decodeLayout(item)
	}
	if s.Pauses, err = d.pauses(ctx); err != nil {
		return Snapshot{}, err
	}
	if s.Ramps, err = d.ramps(ctx); err != nil {
		return Snapshot{}, err
	}
	if s.Migrations, err = d.migrations(ctx); err != nil {
		return Snapshot{}, err
	}
	if s.Downgrades, err = d.downgrades(ctx); err != nil {
		return Snapshot{}, err
	}
	return s, nil
}

func decodeLayout(item map[string]types.AttributeValue) Layout {
	l := Layout{Generation: getS(item, "gen"), Writer: time.UnixMilli(getN(item, "writer")).UTC(), Version: getN(item, "lv")}
	if list, ok := item["history"].(*types.AttributeValueMemberL); ok {
		for _, v := range list.Value {
			m, ok := v.(*types.AttributeValueMemberM)
			if !ok {
				continue
			}
			h := limiter.ShardLayout{Shards: int(getN(m.Value, "shards"))}
			if ms := getN(m.Value, "since"); ms != 0 {
				h.Since = time.UnixMilli(ms).UTC()
			}
			l.History = append(l.History, h)
		}
	}
	return l
}

// SetLayout implements Layouts: a conditional write of the rule's layout
// record, at its version, with the store's version bumped so every
// gateway reads it.
func (d *Dynamo) SetLayout(ctx context.Context, k limiter.RuleKey, l Layout, version int64) error {
	item := key(pkLayout, string(k))
	hist := make([]types.AttributeValue, len(l.History))
	for i, h := range l.History {
		since := int64(0)
		if !h.Since.IsZero() {
			since = h.Since.UnixMilli()
		}
		hist[i] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"shards": nv(int64(h.Shards)), "since": nv(since)}}
	}
	item["history"] = &types.AttributeValueMemberL{Value: hist}
	item["gen"] = sv(l.Generation)
	item["writer"] = nv(l.Writer.UnixMilli())
	item["lv"] = nv(version + 1)
	put := &types.Put{TableName: aws.String(d.table), Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)")}
	if version != 0 {
		put.ConditionExpression = aws.String("lv = :v")
		put.ExpressionAttributeValues = map[string]types.AttributeValue{":v": nv(version)}
	}
	err := d.transact(ctx, []types.TransactWriteItem{{Put: put}, d.bump()})
	if conditionFailedAt(err, 0) {
		return ErrLayoutChanged
	}
	return awserr.Classify("record shard layout", err)
}

// Version returns the store's version: one strongly consistent read of a
// small item, the gateway's cheap check for changes.
func (d *Dynamo) Version(ctx context.Context) (int64, error) {
	out, err := d.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(d.table), Key: key(pkMeta, "version"), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return 0, awserr.Classify("config version", err)
	}
	return getN(out.Item, "n"), nil
}

func (d *Dynamo) bump() types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(d.table),
		Key:                       key(pkMeta, "version"),
		UpdateExpression:          aws.String("ADD n :one"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": nv(1)},
	}}
}

func (d *Dynamo) putGen(k limiter.RuleKey) types.TransactWriteItem {
	item := key(pkGen, string(k))
	item["g"] = sv(NewGeneration())
	return types.TransactWriteItem{Put: &types.Put{TableName: aws.String(d.table), Item: item}}
}

func (d *Dynamo) transact(ctx context.Context, items []types.TransactWriteItem) error {
	_, err := d.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	return err
}

// conditionFailedAt reports whether a cancelled transaction failed the
// condition of item i.
func conditionFailedAt(err error, i int) bool {
	r := awserr.CancellationReasons(err)
	return i < len(r) && r[i].Code != nil && *r[i].Code == "ConditionalCheckFailed"
}

func (d *Dynamo) current(ctx context.Context, k limiter.RuleKey) (Rule, error) {
	out, err := d.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(d.table), Key: key(pkRule, string(k)), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Rule{}, awserr.Classify("get rule", err)
	}
	if out.Item == nil {
		return Rule{}, ErrNotFound
	}
	return decodeRule(out.Item)
}

// conflict turns a lost condition into a ConflictError carrying the rule
// as it is now (or ErrNotFound).
func (d *Dynamo) conflict(ctx context.Context, k limiter.RuleKey) error {
	cur, err := d.current(ctx, k)
	if err != nil {
		return err
	}
	return &ConflictError{Current: cur}
}

// PutRule creates r (version 0) or updates the rule at from to r, if it is
// still at version. Moving a rule (a new key) gives it new counters.
func (d *Dynamo) PutRule(ctx context.Context, r Rule, from limiter.RuleKey, version int64) (Rule, error) {
	now := d.now()
	k := r.Key()
	notExists := aws.String("attribute_not_exists(pk)")
	if version == 0 {
		r.Version, r.CreatedAt, r.UpdatedAt = 1, now, now
		err := d.transact(ctx, []types.TransactWriteItem{
			{Put: &types.Put{TableName: aws.String(d.table), Item: ruleItem(r), ConditionExpression: notExists}},
			d.putGen(k), d.bump(),
		})
		if conditionFailedAt(err, 0) {
			return Rule{}, d.conflict(ctx, k)
		}
		return r, awserr.Classify("create rule", err)
	}
	cur, err := d.current(ctx, from)
	if err != nil {
		return Rule{}, err
	}
	if cur.Version != version {
		return Rule{}, &ConflictError{Current: cur}
	}
	r.Version, r.CreatedAt, r.UpdatedAt = version+1, cur.CreatedAt, now
	atVersion := &types.Put{
		TableName: aws.String(d.table), Item: ruleItem(r),
		ConditionExpression:       aws.String("version = :v"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": nv(version)},
	}
	if k == from {
		err = d.transact(ctx, []types.TransactWriteItem{{Put: atVersion}, d.bump()})
		if conditionFailedAt(err, 0) {
			return Rule{}, d.conflict(ctx, k)
		}
		return r, awserr.Classify("update rule", err)
	}
	err = d.transact(ctx, []types.TransactWriteItem{
		{Delete: &types.Delete{TableName: aws.String(d.table), Key: key(pkRule, string(from)),
			ConditionExpression:       aws.String("version = :v"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":v": nv(version)}}},
		{Put: &types.Put{TableName: aws.String(d.table), Item: ruleItem(r), ConditionExpression: notExists}},
		d.putGen(k), d.bump(),
	})
	switch {
	case conditionFailedAt(err, 0):
		return Rule{}, d.conflict(ctx, from)
	case conditionFailedAt(err, 1):
		return Rule{}, d.conflict(ctx, k)
	}
	return r, awserr.Classify("move rule", err)
}

// DeleteRule deletes a rule, if at version (0: any).
func (d *Dynamo) DeleteRule(ctx context.Context, k limiter.RuleKey, version int64) error {
	del := &types.Delete{TableName: aws.String(d.table), Key: key(pkRule, string(k)), ConditionExpression: aws.String("attribute_exists(pk)")}
	if version != 0 {
		del.ConditionExpression = aws.String("version = :v")
		del.ExpressionAttributeValues = map[string]types.AttributeValue{":v": nv(version)}
	}
	err := d.transact(ctx, []types.TransactWriteItem{{Delete: del}, d.bump()})
	if conditionFailedAt(err, 0) {
		return d.conflict(ctx, k)
	}
	return awserr.Classify("delete rule", err)
}

// Regenerate starts new counters for the rules with the given keys.
func (d *Dynamo) Regenerate(ctx context.Context, keys []limiter.RuleKey) error {
	for len(keys) > 0 {
		n := min(len(keys), 99)
		items := []types.TransactWriteItem{d.bump()}
		for _, k := range keys[:n] {
			items = append(items, d.putGen(k))
		}
		if err := d.transact(ctx, items); err != nil {
			return awserr.Classify("reset counters", err)
		}
		keys = keys[n:]
	}
	return nil
}

func keyItem(k Key) map[string]types.AttributeValue {
	item := key(pkKey, k.Hash)
	item["id"] = sv(k.ID)
	item["prefix"] = sv(k.Prefix)
	item["name"] = sv(k.Name)
	item["user_path"] = sv(k.UserPath)
	item["created_at"] = nv(k.CreatedAt.UnixMilli())
	item["revoked"] = bv(k.Revoked)
	if len(k.Tags) > 0 {
		item["tags"] = sv(limiter.FormatTags(k.Tags))
	}
	if k.Class != "" {
		item["class"] = sv(k.Class)
	}
	if k.MaxClass != "" {
		item["max_class"] = sv(k.MaxClass)
	}
	if k.Admin {
		item["admin"] = bv(true)
	}
	if !k.ExpiresAt.IsZero() {
		item["expires_at"] = nv(k.ExpiresAt.UnixMilli())
	}
	return item
}

func decodeKey(item map[string]types.AttributeValue) Key {
	k := Key{
		ID: getS(item, "id"), Hash: getS(item, "sk"), Prefix: getS(item, "prefix"), Name: getS(item, "name"),
		UserPath: getS(item, "user_path"), CreatedAt: time.UnixMilli(getN(item, "created_at")).UTC(), Revoked: getB(item, "revoked"),
	}
	if ms := getN(item, "expires_at"); ms > 0 {
		k.ExpiresAt = time.UnixMilli(ms).UTC()
	}
	k.Tags, _ = limiter.ParseTags(getS(item, "tags")) // written valid by PutKey
	k.Class = getS(item, "class")
	k.MaxClass = getS(item, "max_class")
	k.Admin = getB(item, "admin")
	return k
}

// PutKey stores a new key.
func (d *Dynamo) PutKey(ctx context.Context, k Key) error {
	_, err := d.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(d.table), Item: keyItem(k), ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	if awserr.IsConditionFailed(err) {
		return ErrExists
	}
	return awserr.Classify("create key", err)
}

// KeyByHash returns the key with that hash.
func (d *Dynamo) KeyByHash(ctx context.Context, hash string) (Key, error) {
	out, err := d.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(d.table), Key: key(pkKey, hash), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Key{}, awserr.Classify("get key", err)
	}
	if out.Item == nil {
		return Key{}, ErrNotFound
	}
	return decodeKey(out.Item), nil
}

// Keys lists the keys.
func (d *Dynamo) Keys(ctx context.Context) ([]Key, error) {
	items, err := d.query(ctx, pkKey)
	if err != nil {
		return nil, err
	}
	out := make([]Key, len(items))
	for i, item := range items {
		out[i] = decodeKey(item)
	}
	return out, nil
}

// KeyByID returns the key with that id: one query of the hashes that
// begin with the id's 16 hex digits.
func (d *Dynamo) KeyByID(ctx context.Context, id string) (Key, error) {
	prefix, ok := strings.CutPrefix(id, "key_")
	if !ok || len(prefix) != 16 {
		return Key{}, ErrNotFound
	}
	page, err := d.api.Query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(d.table),
		KeyConditionExpression:    aws.String("pk = :pk AND begins_with(sk, :h)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": sv(pkKey), ":h": sv(prefix)},
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		return Key{}, awserr.Classify("find key", err)
	}
	if len(page.Items) == 0 {
		return Key{}, ErrNotFound
	}
	return decodeKey(page.Items[0]), nil
}

// RevokeKey revokes the key with that id.
func (d *Dynamo) RevokeKey(ctx context.Context, id string) (Key, error) {
	k, err := d.KeyByID(ctx, id)
	if err != nil {
		return Key{}, err
	}
	_, err = d.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(d.table), Key: key(pkKey, k.Hash),
		UpdateExpression:          aws.String("SET revoked = :t"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": bv(true)},
	})
	if err != nil {
		return Key{}, awserr.Classify("revoke key", err)
	}
	k.Revoked = true
	return k, nil
}
