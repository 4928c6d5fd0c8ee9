package config

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Settings are the plain environment variables (everything but the rules).
type Settings struct {
	// Port is the local HTTP port (PORT, default 8080).
	Port int
	// MasterKey authenticates admin calls and may act as any user path
	// (TOLLGATE_MASTER_KEY). Empty runs a local process in dev mode.
	MasterKey string
	// MasterKeyParameter names an SSM parameter (SecureString) holding the
	// master key, read at start when MasterKey is empty
	// (TOLLGATE_MASTER_KEY_PARAMETER): how Lambda gets it, so that it is
	// never in the template or the function's configuration.
	MasterKeyParameter string
	// Store is "memory" or "dynamodb" (TOLLGATE_STORE, default memory).
	Store string
	// StoreFailure is what admission does when the store cannot answer:
	// "closed" refuses with 503, "open" admits and logs
	// (TOLLGATE_STORE_FAILURE, default closed).
	StoreFailure string
	// TablePrefix prefixes the DynamoDB table names
	// (TOLLGATE_TABLE_PREFIX, default "tollgate-").
	TablePrefix string
	// CreateTables makes a local process create missing tables at start
	// (TOLLGATE_CREATE_TABLES=true); ignored inside Lambda.
	CreateTables bool
	// ReconcileInterval is the period of the in-process reconciler of a
	// local process, and the reconciler's schedule inside Lambda (where
	// template.yaml sets it to its rate): how soon a budget's
	// reservations settle, which a refusal for reservations tells the
	// client (TOLLGATE_RECONCILE_INTERVAL, default 5s).
	ReconcileInterval time.Duration
	// MockLatency delays each answer of the mock provider (MOCK_LATENCY_MS).
	MockLatency time.Duration
	// InLambda is true when running inside AWS Lambda.
	InLambda bool
}

func loadSettings(env Env) (Settings, error) {
	s := Settings{
		Port:               8080,
		MasterKey:          env["TOLLGATE_MASTER_KEY"],
		MasterKeyParameter: env["TOLLGATE_MASTER_KEY_PARAMETER"],
		Store:              "memory",
		StoreFailure:       "closed",
		TablePrefix:        "tollgate-",
		ReconcileInterval:  5 * time.Second,
		InLambda:           env["AWS_LAMBDA_RUNTIME_API"] != "",
	}
	var errs []error
	if v := env["PORT"]; v != "" {
		p, err := strconv.Atoi(v)
		if err != nil || p < 0 || p > 65535 {
			errs = append(errs, fmt.Errorf("PORT: %q is not a port number", v))
		}
		s.Port = p
	}
	if v := env["TOLLGATE_STORE"]; v != "" {
		if v != "memory" && v != "dynamodb" {
			errs = append(errs, fmt.Errorf("TOLLGATE_STORE: %q is neither memory nor dynamodb", v))
		}
		s.Store = v
	}
	if v := env["TOLLGATE_STORE_FAILURE"]; v != "" {
		if v != "closed" && v != "open" {
			errs = append(errs, fmt.Errorf("TOLLGATE_STORE_FAILURE: %q is neither closed nor open", v))
		}
		s.StoreFailure = v
	}
	if v, ok := env["TOLLGATE_TABLE_PREFIX"]; ok {
		s.TablePrefix = v
	}
	if v := env["TOLLGATE_CREATE_TABLES"]; v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("TOLLGATE_CREATE_TABLES: %q is not true or false", v))
		}
		s.CreateTables = b
	}
	if v := env["TOLLGATE_RECONCILE_INTERVAL"]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("TOLLGATE_RECONCILE_INTERVAL: %q is not a positive Go duration (e.g. 5s)", v))
		}
		s.ReconcileInterval = d
	}
	if v := env["MOCK_LATENCY_MS"]; v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 {
			errs = append(errs, fmt.Errorf("MOCK_LATENCY_MS: %q is not a whole number of milliseconds", v))
		}
		s.MockLatency = time.Duration(ms) * time.Millisecond
	}
	return s, errors.Join(errs...)
}
