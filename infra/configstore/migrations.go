package configstore

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/limiter/learn"
)

// Migrations stand in items ("migration", name) {share, at, paused,
// rolled_back, holding, history, v} like ramps: stepped (and paused,
// resumed, rolled back) by one conditional write on v that bumps the
// store's version, so that of the instances that find a step due exactly
// one takes it and every instance draws with the new share within the
// watcher's interval. What the migration's target answered during an
// interval is added up, by every instance, in ("migstat", name|at): the
// instance that steps reads it to decide whether to hold or roll back.

const (
	pkMigration     = "migration"
	pkMigrationStat = "migstat"
	// maxMigrationHistory is how many steps a migration's item keeps.
	maxMigrationHistory = 20
)

// ErrMigrationMoved is StepMigration's answer when another instance (or
// the admin API) wrote first.
var ErrMigrationMoved = errors.New("the migration moved meanwhile")

// MigrationState is where a migration stands.
type MigrationState struct {
	// Share is the share of the scope's tenants that go to the
	// migration's target, in hundredths of a percent (0 to 10,000).
	Share int64
	// At is when the current interval began.
	At time.Time
	// Paused keeps the share where it is; RolledBack is a share of 0
	// that stays until resumed.
	Paused, RolledBack bool
	// Holding is why the last interval held the share ("" when it grew).
	Holding string
	// History is the migration's last steps, oldest first.
	History []MigrationStep
	// V counts the migration's writes (0: never written).
	V int64
}

// MigrationStep is one change of a migration's share.
type MigrationStep struct {
	At    time.Time `json:"at"`
	Share int64     `json:"share"`
	Why   string    `json:"why"`
}

// Then returns s moved on at at to share, for why: one more write, one
// more line of history.
func (s MigrationState) Then(at time.Time, share int64, why string) MigrationState {
	n := s
	n.Share, n.At, n.V = share, at.UTC(), s.V+1
	n.History = append(append([]MigrationStep(nil), s.History...), MigrationStep{At: at.UTC(), Share: share, Why: why})
	if len(n.History) > maxMigrationHistory {
		n.History = n.History[len(n.History)-maxMigrationHistory:]
	}
	return n
}

// MigrationCounts are what a migration's target answered over an
// interval, and how long it and the migrated-from model took (in
// milliseconds).
type MigrationCounts struct {
	Answers, RateLimited, Errors int64
	ToLatency, FromLatency       learn.Histogram
}

// Add adds o's counts.
func (c *MigrationCounts) Add(o *MigrationCounts) {
	c.Answers += o.Answers
	c.RateLimited += o.RateLimited
	c.Errors += o.Errors
	c.ToLatency.Merge(&o.ToLatency)
	c.FromLatency.Merge(&o.FromLatency)
}

// attrs are the counts as attribute names and values, non-zero ones only.
func (c *MigrationCounts) attrs() map[string]int64 {
	out := map[string]int64{}
	for k, v := range map[string]int64{"n": c.Answers, "r": c.RateLimited, "e": c.Errors} {
		if v != 0 {
			out[k] = v
		}
	}
	for i := range c.ToLatency {
		if c.ToLatency[i] != 0 {
			out["t"+strconv.Itoa(i)] = c.ToLatency[i]
		}
		if c.FromLatency[i] != 0 {
			out["f"+strconv.Itoa(i)] = c.FromLatency[i]
		}
	}
	return out
}

func migrationStatSK(name string, at time.Time) string {
	return name + "|" + strconv.FormatInt(at.UnixMilli(), 10)
}

// StepMigration moves migration name from (its state as read) to to.
func (d *Dynamo) StepMigration(ctx context.Context, name string, from, to MigrationState) error {
	item := key(pkMigration, name)
	hist, _ := json.Marshal(to.History)
	item["share"], item["at"], item["v"] = nv(to.Share), nv(to.At.UnixMilli()), nv(to.V)
	item["paused"], item["rolled_back"] = bv(to.Paused), bv(to.RolledBack)
	item["holding"], item["history"] = sv(to.Holding), sv(string(hist))
	put := &types.Put{TableName: aws.String(d.table), Item: item}
	if from.V == 0 {
		put.ConditionExpression = aws.String("attribute_not_exists(pk)")
	} else {
		put.ConditionExpression = aws.String("#v = :v")
		put.ExpressionAttributeNames = map[string]string{"#v": "v"}
		put.ExpressionAttributeValues = map[string]types.AttributeValue{":v": nv(from.V)}
	}
	err := d.transact(ctx, []types.TransactWriteItem{{Put: put}, d.bump()})
	if conditionFailedAt(err, 0) {
		return ErrMigrationMoved
	}
	return awserr.Classify("step migration", err)
}

func (d *Dynamo) migrations(ctx context.Context) (map[string]MigrationState, error) {
	items, err := d.query(ctx, pkMigration)
	if err != nil {
		return nil, err
	}
	out := make(map[string]MigrationState, len(items))
	for _, item := range items {
		s := MigrationState{Share: getN(item, "share"), At: time.UnixMilli(getN(item, "at")).UTC(), V: getN(item, "v"),
			Paused: getB(item, "paused"), RolledBack: getB(item, "rolled_back"), Holding: getS(item, "holding")}
		_ = json.Unmarshal([]byte(getS(item, "history")), &s.History)
		out[getS(item, "sk")] = s
	}
	return out, nil
}

// AddMigrationCounts adds c to what migration name's interval begun at at
// counted.
func (d *Dynamo) AddMigrationCounts(ctx context.Context, name string, at time.Time, c MigrationCounts) error {
	var adds []string
	names := map[string]string{"#ttl": "ttl"}
	values := map[string]types.AttributeValue{":ttl": nv(time.Now().Add(7 * 24 * time.Hour).Unix())}
	for k, v := range c.attrs() {
		adds = append(adds, "#"+k+" :"+k)
		names["#"+k], values[":"+k] = k, nv(v)
	}
	if len(adds) == 0 {
		return nil
	}
	_, err := d.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(d.table),
		Key:                       key(pkMigrationStat, migrationStatSK(name, at)),
		UpdateExpression:          aws.String("ADD " + strings.Join(adds, ", ") + " SET #ttl = :ttl"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	return awserr.Classify("add migration counts", err)
}

// MigrationCounts returns what migration name's interval begun at at
// counted.
func (d *Dynamo) MigrationCounts(ctx context.Context, name string, at time.Time) (MigrationCounts, error) {
	out, err := d.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(d.table),
		Key: key(pkMigrationStat, migrationStatSK(name, at)), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return MigrationCounts{}, awserr.Classify("read migration counts", err)
	}
	c := MigrationCounts{Answers: getN(out.Item, "n"), RateLimited: getN(out.Item, "r"), Errors: getN(out.Item, "e")}
	for i := range c.ToLatency {
		c.ToLatency[i] = getN(out.Item, "t"+strconv.Itoa(i))
		c.FromLatency[i] = getN(out.Item, "f"+strconv.Itoa(i))
	}
	return c, nil
}

// StepMigration moves migration name from (its state as read) to to.
func (m *Memory) StepMigration(_ context.Context, name string, from, to MigrationState) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.migrations == nil {
		m.migrations = map[string]MigrationState{}
	}
	if m.migrations[name].V != from.V {
		return ErrMigrationMoved
	}
	m.migrations[name] = to
	m.version++
	return nil
}

// AddMigrationCounts adds c to what migration name's interval begun at at
// counted.
func (m *Memory) AddMigrationCounts(_ context.Context, name string, at time.Time, c MigrationCounts) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.migrationCounts == nil {
		m.migrationCounts = map[string]*MigrationCounts{}
	}
	k := migrationStatSK(name, at)
	if m.migrationCounts[k] == nil {
		m.migrationCounts[k] = &MigrationCounts{}
	}
	m.migrationCounts[k].Add(&c)
	return nil
}

// MigrationCounts returns what migration name's interval begun at at
// counted.
func (m *Memory) MigrationCounts(_ context.Context, name string, at time.Time) (MigrationCounts, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.migrationCounts[migrationStatSK(name, at)]; c != nil {
		return *c, nil
	}
	return MigrationCounts{}, nil
}
