// Package configstore keeps what the admin API manages: manual rate-limit
// rules (versioned, changed only by conditional writes), the generation of
// every rule's counters (a reset starts a new one), and managed API keys
// (stored hashed). Dynamo keeps them in the config table; Memory in the
// process, for a local process on the embedded store.
package configstore

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Rule is a manual rule as stored.
type Rule struct {
	limiter.Rule
	// Version counts the rule's writes; an update must name the version it
	// read.
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Snapshot is everything the gateway needs to build its rule set.
type Snapshot struct {
	Rules []Rule
	// Generations of rules' counters, by rule key (config rules' too).
	Generations map[limiter.RuleKey]string
	// Layouts are the recorded shard layouts, by rule key.
	Layouts map[limiter.RuleKey]Layout
	// Pauses are the pauses set through the admin API, lifted or not
	// (one whose Until has passed no longer holds).
	Pauses []limiter.Pause
	// Downgrades are the downgrades set through the admin API, oldest
	// first.
	Downgrades []Downgrade
	// Ramps are where the ramps of ramped rules stand, by rule key.
	Ramps map[limiter.RuleKey]limiter.RampState
	// Migrations are where the migrations stand, by name.
	Migrations map[string]MigrationState
	// Version changes with every write.
	Version int64
}

// Key is a managed API key. Only its hash is stored; the secret is shown
// once, when it is created.
type Key struct {
	ID       string // public, for listing and revoking
	Hash     string // hex SHA-256 of the secret
	Prefix   string // the secret's first characters, for telling keys apart
	Name     string
	UserPath string
	// Tags are fixed on the key: its requests carry them whatever they
	// send in X-Tollgate-Tags.
	Tags []limiter.Tag
	// Class is the traffic class of the key's requests ("" for the
	// default), which X-Tollgate-Class cannot change.
	Class string
	// MaxClass, when set, caps the class the key's requests may claim
	// with X-Tollgate-Class: one that waits longer is taken as it.
	MaxClass string
	// Admin makes the key a delegated administrator of its user path's
	// subtree: it may manage the keys, rules and budgets beneath its path
	// through the admin API, never anything else (see adminapi).
	Admin     bool
	CreatedAt time.Time
	ExpiresAt time.Time // zero: never
	Revoked   bool
}

// Live reports whether the key may be used at now.
func (k Key) Live(now time.Time) bool {
	return !k.Revoked && (k.ExpiresAt.IsZero() || now.Before(k.ExpiresAt))
}

// Errors.
var (
	ErrNotFound = errors.New("not found")
	// ErrKeyNotLive is a managed key that exists but is revoked or
	// expired: never taken for an unknown bearer.
	ErrKeyNotLive = errors.New("key revoked or expired")
	ErrExists     = errors.New("already exists")
)

// ConflictError is a write that lost a race or named a stale version; it
// carries the rule as it is now.
type ConflictError struct {
	Current Rule
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("rule %s is at version %d", e.Current.Key(), e.Current.Version)
}

// NewSecret makes a managed key's secret: "tg-" and 32 random bytes.
func NewSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return "tg-" + base64.RawURLEncoding.EncodeToString(b[:])
}

// Hash returns the stored form of a secret.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// KeyID derives a key's public id from its hash.
func KeyID(hash string) string { return "key_" + hash[:16] }

// NewGeneration names a fresh life of a rule's counters.
func NewGeneration() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
