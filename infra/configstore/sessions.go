package configstore

import (
	"context"
	"encoding/json"
	"errors"
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
	item["provider"] = sv(s.Provider)
	item["lease"] = sv(string(lease))
	item["ttl"] = nv(s.Lease.ExpiresAt.Add(time.Hour).Unix())
	_, err = d.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(d.table), Item: item})
	return awserr.Classify("put session", err)
}

// TakeSession removes a session and returns it, once: of two concurrent
// takes one gets ErrNotFound.
func (d *Dynamo) TakeSession(ctx context.Context, id string) (Session, error) {
	out, err := d.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:    aws.String(d.table),
		Key:          key(pkSession, id),
		ReturnValues: types.ReturnValueAllOld,
	})
	if err != nil {
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

// TakeSession removes a session and returns it, once.
func (m *Memory) TakeSession(_ context.Context, id string) (Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok {
		return Session{}, ErrNotFound
	}
	delete(m.sessions, id)
	return s, nil
}
