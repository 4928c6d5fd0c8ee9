package configstore

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/limiter"
)

// Session records the lease a Realtime session holds, from the minting of
// its credentials until the client ends it or the lease expires: items
// ("session", "<id>"), removed by TTL after the lease's expiry. Session ids
// are the providers' ("sess_…"), unique enough to key on alone: the client
// that ends one names only the id.
type Session struct {
	Provider string
	ID       string
	UserPath string
	Lease    limiter.Lease
}

const pkSession = "session"

// PutSession records a session's lease.
func (d *Dynamo) PutSession(ctx context.Context, s Session) error {
	lease, err := json.Marshal(s.Lease)
	if err != nil {
		return err
	}
	item := key(pkSession, s.ID)
	item["user_path"] = sv(s.UserPath)
	item["path_key"] = sv(strings.ToLower(s.UserPath)) // what TakeSession's condition compares
	item["provider"] = sv(s.Provider)
	item["lease"] = sv(string(lease))
	item["ttl"] = nv(s.Lease.ExpiresAt.Add(time.Hour).Unix())
	_, err = d.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(d.table), Item: item})
	return awserr.Classify("put session", err)
}

// TakeSession removes a session held by a caller at or below within and
// returns it, once: of two concurrent takes one gets ErrNotFound. A session
// another caller holds is ErrNotFound too, and is left as it was: one
// conditional delete, on the session's user path (case folded) being
// within or below it.
func (d *Dynamo) TakeSession(ctx context.Context, id, within string) (Session, error) {
	in := &dynamodb.DeleteItemInput{
		TableName:                aws.String(d.table),
		Key:                      key(pkSession, id),
		ConditionExpression:      aws.String("attribute_exists(pk)"),
		ExpressionAttributeNames: map[string]string{},
		ReturnValues:             types.ReturnValueAllOld,
	}
	if within != "/" {
		lc := strings.ToLower(within)
		in.ConditionExpression = aws.String("#p = :p OR begins_with(#p, :below)")
		in.ExpressionAttributeNames["#p"] = "path_key"
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":p": sv(lc), ":below": sv(lc + "/")}
	} else {
		in.ExpressionAttributeNames = nil
	}
	out, err := d.api.DeleteItem(ctx, in)
	switch {
	case awserr.IsConditionFailed(err):
		return Session{}, ErrNotFound
	case err != nil:
		return Session{}, awserr.Classify("take session", err)
	}
	if len(out.Attributes) == 0 {
		return Session{}, ErrNotFound
	}
	s := Session{Provider: getS(out.Attributes, "provider"), ID: id, UserPath: getS(out.Attributes, "user_path")}
	if err := json.Unmarshal([]byte(getS(out.Attributes, "lease")), &s.Lease); err != nil {
		return Session{}, errors.New("session " + id + ": unreadable lease: " + err.Error())
	}
	return s, nil
}

// PutSession records a session's lease.
func (m *Memory) PutSession(_ context.Context, s Session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sessions == nil {
		m.sessions = map[string]Session{}
	}
	m.sessions[s.ID] = s
	return nil
}

// TakeSession removes a session held by a caller at or below within and
// returns it, once; another caller's is left as it was.
func (m *Memory) TakeSession(_ context.Context, id, within string) (Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok || !limiter.PathWithin(s.UserPath, within) {
		return Session{}, ErrNotFound
	}
	delete(m.sessions, id)
	return s, nil
}
