package configstore

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
)

// Downgrade is a downgrade set through the admin API: requests of
// Classes that From would refuse (Refused), or whose tightest budget at
// From is below BudgetBelow of its limit, go to To instead. Downgrades
// are items ("downgrade", "<from>><to>"), written with the store's
// version bumped, so every instance sees one as it sees a rule change.
type Downgrade struct {
	From, To    string
	Refused     bool
	BudgetBelow float64
	Classes     []string
	CreatedAt   time.Time
}

// Key names a downgrade: its two models, case ignored.
func (d Downgrade) Key() string { return strings.ToLower(d.From) + ">" + strings.ToLower(d.To) }

const pkDowngrade = "downgrade"

// PutDowngrade sets (or replaces) the downgrade of its two models.
func (d *Dynamo) PutDowngrade(ctx context.Context, dg Downgrade) error {
	item := key(pkDowngrade, dg.Key())
	spec, err := json.Marshal(dg)
	if err != nil {
		return err
	}
	item["spec"] = sv(string(spec))
	err = d.transact(ctx, []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String(d.table), Item: item}}, d.bump()})
	return awserr.Classify("put downgrade", err)
}

// DeleteDowngrade removes the downgrade with key k; ErrNotFound when
// there is none.
func (d *Dynamo) DeleteDowngrade(ctx context.Context, k string) error {
	del := &types.Delete{TableName: aws.String(d.table), Key: key(pkDowngrade, k), ConditionExpression: aws.String("attribute_exists(pk)")}
	err := d.transact(ctx, []types.TransactWriteItem{{Delete: del}, d.bump()})
	if conditionFailedAt(err, 0) {
		return ErrNotFound
	}
	return awserr.Classify("delete downgrade", err)
}

func (d *Dynamo) downgrades(ctx context.Context) ([]Downgrade, error) {
	items, err := d.query(ctx, pkDowngrade)
	if err != nil {
		return nil, err
	}
	out := make([]Downgrade, 0, len(items))
	for _, item := range items {
		var dg Downgrade
		if json.Unmarshal([]byte(getS(item, "spec")), &dg) == nil && dg.From != "" && dg.To != "" {
			out = append(out, dg)
		}
	}
	sortDowngrades(out)
	return out, nil
}

// sortDowngrades orders downgrades as they are tried: oldest first, so
// that one added later never takes precedence over one in use.
func sortDowngrades(ds []Downgrade) {
	slices.SortFunc(ds, func(a, b Downgrade) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Key(), b.Key())
	})
}

// PutDowngrade sets (or replaces) the downgrade of its two models.
func (m *Memory) PutDowngrade(_ context.Context, dg Downgrade) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.downgrades == nil {
		m.downgrades = map[string]Downgrade{}
	}
	dg.Classes = slices.Clone(dg.Classes)
	m.downgrades[dg.Key()] = dg
	m.version++
	return nil
}

// DeleteDowngrade removes the downgrade with key k.
func (m *Memory) DeleteDowngrade(_ context.Context, k string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.downgrades[k]; !ok {
		return ErrNotFound
	}
	delete(m.downgrades, k)
	m.version++
	return nil
}

// Downgrades returns the admin API's downgrades as last loaded, which
// Refresh keeps as fresh as the rules.
func (w *Watcher) Downgrades() []Downgrade {
	if s := w.snap.Load(); s != nil {
		return s.Downgrades
	}
	return nil
}
