package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/tollgate/tollgate/limiter/alert"
)

// Alerts is the alerts section: what to watch, where to deliver, and how
// often to look.
type Alerts struct {
	Watch    alert.Config
	Webhooks []Webhook
	// Every is how often alerts are evaluated where the reconciler runs
	// (alerts.every, 30s; inside Lambda each reconciler run evaluates).
	Every time.Duration
	// TopicARN is an SNS topic every alert is published to as well
	// (TOLLGATE_ALERT_TOPIC_ARN; template.yaml's AlertTopicArn).
	TopicARN string
}

// Webhook is one receiver of alerts. Its secret signs each body; it is
// given in the file, or named: an environment variable (secret_env) or an
// SSM parameter (secret_parameter), read at start.
type Webhook struct {
	URL             string
	Secret          string
	SecretEnv       string
	SecretParameter string
}

// Audit is the audit section.
type Audit struct {
	// Retention is how long the audit trail keeps an entry
	// (audit.retention, 2160h: 90 days).
	Retention time.Duration
}

type alertsSpec struct {
	Rules []struct {
		On string    `yaml:"on"`
		At []float64 `yaml:"at"`
	} `yaml:"rules"`
	Forecast     bool `yaml:"forecast"`
	RefusalSpike *struct {
		PerMinute float64 `yaml:"per_minute"`
	} `yaml:"refusal_spike"`
	Upstream429 *struct {
		Rate float64 `yaml:"rate"`
	} `yaml:"upstream_429_after_admission"`
	EstimateError *struct {
		Factor float64 `yaml:"factor"`
	} `yaml:"estimate_error"`
	ClassWaits *struct {
		Factor    float64 `yaml:"factor"`
		PerMinute float64 `yaml:"per_minute"`
	} `yaml:"class_waits"`
	Webhooks []struct {
		URL             string `yaml:"url"`
		Secret          string `yaml:"secret"`
		SecretEnv       string `yaml:"secret_env"`
		SecretParameter string `yaml:"secret_parameter"`
	} `yaml:"webhooks"`
	Every string `yaml:"every"`
}

type auditSpec struct {
	Retention string `yaml:"retention"`
}

// loadAlerts reads the alerts section.
func (cfg *Config) loadAlerts(s *alertsSpec, at func(keys ...any) string) []error {
	var errs []error
	w := &cfg.Alerts.Watch
	for _, r := range s.Rules {
		w.Rules = append(w.Rules, alert.Rule{On: strings.TrimSpace(r.On), At: r.At})
	}
	w.Forecast = s.Forecast
	if s.RefusalSpike != nil {
		w.RefusalSpike = s.RefusalSpike.PerMinute
	}
	if s.Upstream429 != nil {
		w.Upstream429Rate = s.Upstream429.Rate
	}
	if s.EstimateError != nil {
		w.EstimateFactor = s.EstimateError.Factor
	}
	if s.ClassWaits != nil {
		w.ClassWaits = alert.ClassWaits{Factor: s.ClassWaits.Factor, PerMinute: s.ClassWaits.PerMinute}
	}
	for _, p := range w.Problems() {
		field, msg, _ := strings.Cut(p, ": ")
		keys := []any{"alerts"}
		for _, part := range strings.Split(field, ".") {
			name, index, isIndex := strings.Cut(strings.TrimSuffix(part, "]"), "[")
			keys = append(keys, name)
			if isIndex {
				var i int
				_, _ = fmt.Sscan(index, &i)
				keys = append(keys, i)
			}
		}
		errs = append(errs, fmt.Errorf("%s: %s", at(keys...), msg))
	}
	for i, h := range s.Webhooks {
		u, err := url.Parse(h.URL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, fmt.Errorf("%s: %q is not an http(s) URL", at("alerts", "webhooks", i, "url"), h.URL))
		}
		given := 0
		for _, v := range []string{h.Secret, h.SecretEnv, h.SecretParameter} {
			if v != "" {
				given++
			}
		}
		if given > 1 {
			errs = append(errs, fmt.Errorf("%s: give the secret by one of secret, secret_env or secret_parameter", at("alerts", "webhooks", i)))
		}
		cfg.Alerts.Webhooks = append(cfg.Alerts.Webhooks, Webhook{URL: h.URL, Secret: h.Secret, SecretEnv: h.SecretEnv, SecretParameter: h.SecretParameter})
	}
	if s.Every != "" {
		d, err := time.ParseDuration(s.Every)
		if err != nil || d < time.Second || d > time.Hour {
			errs = append(errs, fmt.Errorf("%s: %q is not a duration from 1s to 1h", at("alerts", "every"), s.Every))
		}
		cfg.Alerts.Every = d
	}
	if len(cfg.Alerts.Webhooks) > 0 && !w.Enabled() {
		errs = append(errs, fmt.Errorf("%s: webhooks but nothing to watch: add rules, forecast, refusal_spike, upstream_429_after_admission, estimate_error or class_waits", at("alerts")))
	}
	return errs
}

// finishAlerts resolves what the environment gives the alerts.
func (cfg *Config) finishAlerts(env Env) error {
	var errs []error
	for i := range cfg.Alerts.Webhooks {
		h := &cfg.Alerts.Webhooks[i]
		if h.SecretEnv != "" {
			h.Secret = env[h.SecretEnv]
			if h.Secret == "" {
				errs = append(errs, fmt.Errorf("alerts.webhooks[%d].secret_env: %s is not set", i, h.SecretEnv))
			}
		}
	}
	if v := env["TOLLGATE_ALERT_TOPIC_ARN"]; v != "" {
		if p := strings.Split(v, ":"); len(p) != 6 || p[0] != "arn" || p[2] != "sns" {
			errs = append(errs, fmt.Errorf("TOLLGATE_ALERT_TOPIC_ARN: %q is not an SNS topic ARN", v))
		}
		cfg.Alerts.TopicARN = v
	}
	return errors.Join(errs...)
}

func (cfg *Config) loadAudit(s *auditSpec, at func(keys ...any) string) []error {
	if s.Retention == "" {
		return nil
	}
	d, err := time.ParseDuration(s.Retention)
	if err != nil || d < time.Hour {
		return []error{fmt.Errorf("%s: %q is not a duration of at least 1h (2160h is 90 days)", at("audit", "retention"), s.Retention)}
	}
	cfg.Audit.Retention = d
	return nil
}
