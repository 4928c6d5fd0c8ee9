package configstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/limiter"
)

// The audit trail: one item ("audit", "<unix ms, 13 digits>-<random>")
// per applied admin write, newest last by sort key, removed by TTL after
// the retention the writer gives (DefaultAuditRetention).

// AuditEntry is one admin write that was applied.
type AuditEntry struct {
	// ID is the entry's sort key: its instant in Unix milliseconds and a
	// random suffix, so entries sort by time and never collide.
	ID string
	At time.Time
	// Actor is who wrote: "master", or the delegated key's id; ActorPath
	// the delegated key's user path ("" for the master).
	Actor, ActorPath string
	// Action is the route: "PUT /admin/rate-limits".
	Action string
	// Target is what was written: a rule's or budget's id, a key's id, a
	// pause's id; UserPath the user path it concerns, when it has one.
	Target, UserPath string
	// Before and After are the target as it was and as it is (JSON; null
	// for none).
	Before, After json.RawMessage
}

// DefaultAuditRetention is how long the audit trail keeps an entry.
const DefaultAuditRetention = 90 * 24 * time.Hour

// AuditQuery selects entries, newest first.
type AuditQuery struct {
	// Since bounds how far back (zero: as far as kept).
	Since time.Time
	// Subject, when set, keeps the entries whose target is it, or whose
	// user path is within it (a user path).
	Subject string
	// Within, when set, keeps the entries whose user path is within it or
	// whose actor's path is (a delegated key's view).
	Within string
	// Cursor continues a listing: the Next of the page before.
	Cursor string
	// Limit bounds the page (default and at most MaxAuditPage).
	Limit int
}

// AuditPage is one page of entries, newest first; Next continues it (""
// when there is no more).
type AuditPage struct {
	Entries []AuditEntry
	Next    string
}

// MaxAuditPage bounds a page of the audit trail; auditScan bounds the
// entries one call reads looking for a filtered page's entries.
const (
	MaxAuditPage = 100
	auditScan    = 1000
)

// NewAuditID names an entry made at t.
func NewAuditID(t time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%013d-%s", max(t.UnixMilli(), 0), hex.EncodeToString(b[:]))
}

// matches reports whether e is selected by q's filters.
func (q AuditQuery) matches(e AuditEntry) bool {
	within := func(p, ancestor string) bool {
		return p != "" && limiter.PathWithin(p, ancestor)
	}
	if q.Subject != "" && !strings.EqualFold(e.Target, q.Subject) && !(strings.HasPrefix(q.Subject, "/") && within(e.UserPath, q.Subject)) {
		return false
	}
	if q.Within != "" && !within(e.UserPath, q.Within) && !within(e.ActorPath, q.Within) {
		return false
	}
	return true
}

func (q AuditQuery) limit() int {
	if q.Limit <= 0 || q.Limit > MaxAuditPage {
		return MaxAuditPage
	}
	return q.Limit
}

const pkAudit = "audit"

// PutAudit records an applied write, kept for retention.
func (d *Dynamo) PutAudit(ctx context.Context, e AuditEntry, retention time.Duration) error {
	item := key(pkAudit, e.ID)
	item["at"] = nv(e.At.UnixMilli())
	item["actor"] = sv(e.Actor)
	item["action"] = sv(e.Action)
	item["target"] = sv(e.Target)
	if e.ActorPath != "" {
		item["actor_path"] = sv(e.ActorPath)
	}
	if e.UserPath != "" {
		item["user_path"] = sv(e.UserPath)
	}
	item["before"] = sv(string(orNull(e.Before)))
	item["after"] = sv(string(orNull(e.After)))
	item["ttl"] = nv(e.At.Add(retention).Unix())
	_, err := d.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(d.table), Item: item})
	return awserr.Classify("record audit entry", err)
}

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// Audit reads a page of the trail, newest first: queries of at most 100
// items, for at most 1,000 items a call, so that a filter that selects
// few entries ends its page early with a cursor rather than reading the
// whole trail.
func (d *Dynamo) Audit(ctx context.Context, q AuditQuery) (AuditPage, error) {
	cond := "pk = :pk"
	values := map[string]types.AttributeValue{":pk": sv(pkAudit)}
	if !q.Since.IsZero() {
		cond += " AND sk >= :since"
		values[":since"] = sv(fmt.Sprintf("%013d", max(q.Since.UnixMilli(), 0)))
	}
	var start map[string]types.AttributeValue
	if q.Cursor != "" {
		if _, err := strconv.ParseInt(strings.SplitN(q.Cursor, "-", 2)[0], 10, 64); err != nil {
			return AuditPage{}, fmt.Errorf("%w: the cursor is not one a page gave", ErrBadCursor)
		}
		start = key(pkAudit, q.Cursor)
	}
	var page AuditPage
	for scanned := 0; scanned < auditScan; {
		out, err := d.api.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(d.table),
			KeyConditionExpression:    aws.String(cond),
			ExpressionAttributeValues: values,
			ExclusiveStartKey:         start,
			ScanIndexForward:          aws.Bool(false),
			Limit:                     aws.Int32(int32(min(q.limit()-len(page.Entries), 100))),
		})
		if err != nil {
			return AuditPage{}, awserr.Classify("read audit trail", err)
		}
		scanned += len(out.Items)
		for _, item := range out.Items {
			e := decodeAudit(item)
			page.Next = e.ID
			if q.matches(e) {
				page.Entries = append(page.Entries, e)
			}
		}
		if out.LastEvaluatedKey == nil {
			page.Next = ""
			return page, nil
		}
		if len(page.Entries) >= q.limit() {
			return page, nil
		}
		start = out.LastEvaluatedKey
		page.Next = getS(start, "sk")
	}
	return page, nil
}

func decodeAudit(item map[string]types.AttributeValue) AuditEntry {
	return AuditEntry{
		ID: getS(item, "sk"), At: time.UnixMilli(getN(item, "at")).UTC(),
		Actor: getS(item, "actor"), ActorPath: getS(item, "actor_path"), Action: getS(item, "action"),
		Target: getS(item, "target"), UserPath: getS(item, "user_path"),
		Before: json.RawMessage(getS(item, "before")), After: json.RawMessage(getS(item, "after")),
	}
}

// ErrBadCursor is Audit's answer for a cursor no page gave.
var ErrBadCursor = fmt.Errorf("bad cursor")

// PutAudit records an applied write; the memory store keeps at most
// memAuditEntries, oldest dropped first.
func (m *Memory) PutAudit(_ context.Context, e AuditEntry, retention time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cut := e.At.Add(-retention)
	m.audit = slices.DeleteFunc(m.audit, func(x AuditEntry) bool { return x.At.Before(cut) })
	if len(m.audit) >= memAuditEntries {
		m.audit = m.audit[1:]
	}
	i, _ := slices.BinarySearchFunc(m.audit, e.ID, func(x AuditEntry, id string) int { return strings.Compare(x.ID, id) })
	m.audit = slices.Insert(m.audit, i, e)
	return nil
}

// memAuditEntries bounds the memory store's trail.
const memAuditEntries = 10_000

// Audit reads a page of the trail, newest first.
func (m *Memory) Audit(_ context.Context, q AuditQuery) (AuditPage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if q.Cursor != "" {
		if _, err := strconv.ParseInt(strings.SplitN(q.Cursor, "-", 2)[0], 10, 64); err != nil {
			return AuditPage{}, fmt.Errorf("%w: the cursor is not one a page gave", ErrBadCursor)
		}
	}
	since := ""
	if !q.Since.IsZero() {
		since = fmt.Sprintf("%013d", max(q.Since.UnixMilli(), 0))
	}
	var page AuditPage
	scanned := 0
	for i := len(m.audit) - 1; i >= 0; i-- {
		e := m.audit[i]
		if q.Cursor != "" && e.ID >= q.Cursor {
			continue
		}
		if e.ID < since {
			break
		}
		if scanned == auditScan || len(page.Entries) == q.limit() {
			return page, nil
		}
		scanned++
		page.Next = e.ID
		if q.matches(e) {
			page.Entries = append(page.Entries, e)
		}
	}
	page.Next = ""
	return page, nil
}
