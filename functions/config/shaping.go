package config

import (
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

type shapingSpec struct {
	Classes      map[string]classSpec `yaml:"classes"`
	DefaultClass string               `yaml:"default_class"`
}

type classSpec struct {
	MaxWait           string `yaml:"max_wait"`
	Fallback          string `yaml:"fallback"`
	MaxStreamDuration string `yaml:"max_stream_duration"`
	CutAtReservation  bool   `yaml:"cut_at_reservation"`
}

// StreamSpec bounds the streams of a class, or of the requests a rule
// matches: MaxDuration (0: none) ends a stream that runs longer with the
// protocol's own error event; CutAtReservation ends one at its output
// reservation.
type StreamSpec struct {
	MaxDuration      time.Duration
	CutAtReservation bool
}

// maxStreamDuration bounds max_stream_duration: a day, longer than any
// function or connection lives.
const maxStreamDuration = 24 * time.Hour

// loadShaping reads the shaping section: the classes (a class named
// without max_wait keeps its default, or waits for nothing when it is
// new), what they fall back to and how their streams are bounded, and
// the default class.
func (cfg *Config) loadShaping(sh *shapingSpec, at func(...any) string) error {
	var errs []error
	for name, c := range sh.Classes {
		if !validClassName(name) {
			errs = append(errs, fmt.Errorf("%s: a class name is lower-case letters, digits, '-' and '_'", at("shaping", "classes", name)))
			continue
		}
		wait := cfg.Shaping.Classes[name]
		if c.MaxWait != "" {
			d, err := time.ParseDuration(c.MaxWait)
			if err != nil || d < 0 || d > 15*time.Minute {
				errs = append(errs, fmt.Errorf("%s: %q is not a duration from 0s to 15m", at("shaping", "classes", name, "max_wait"), c.MaxWait))
			}
			wait = d
		}
		cfg.Shaping.Classes[name] = wait
		switch c.Fallback {
		case "", "any":
		case "same_family", "none":
			if cfg.Shaping.Fallbacks == nil {
				cfg.Shaping.Fallbacks = map[string]string{}
			}
			cfg.Shaping.Fallbacks[name] = c.Fallback
		default:
			errs = append(errs, fmt.Errorf("%s: %q is not any, same_family or none", at("shaping", "classes", name, "fallback"), c.Fallback))
		}
		spec, err := streamSpecOf(c.MaxStreamDuration, c.CutAtReservation)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", at("shaping", "classes", name, "max_stream_duration"), err))
		}
		if spec != (StreamSpec{}) {
			if cfg.Shaping.Streams == nil {
				cfg.Shaping.Streams = map[string]StreamSpec{}
			}
			cfg.Shaping.Streams[name] = spec
		}
	}
	if sh.DefaultClass != "" {
		if _, ok := cfg.Shaping.Classes[sh.DefaultClass]; !ok {
			errs = append(errs, fmt.Errorf("%s: %q is not a class", at("shaping", "default_class"), sh.DefaultClass))
		}
		cfg.Shaping.DefaultClass = sh.DefaultClass
	}
	return errors.Join(errs...)
}

// streamSpecOf reads a max_stream_duration (empty: none) and a
// cut_at_reservation.
func streamSpecOf(duration string, cut bool) (StreamSpec, error) {
	spec := StreamSpec{CutAtReservation: cut}
	if duration == "" {
		return spec, nil
	}
	d, err := time.ParseDuration(duration)
	if err != nil || d < time.Second || d > maxStreamDuration {
		return spec, fmt.Errorf("%q is not a duration from 1s to 24h", duration)
	}
	spec.MaxDuration = d
	return spec, nil
}

// streams returns the gauge of a max_streams entry: the streaming
// requests in flight, each for at most its max_stream_duration. It is a
// limit of its own, in an entry of its own.
func (l limitSpec) streams() (limiter.Gauge, []error) {
	g := limiter.Gauge{MaxInFlight: l.MaxStreams, Streams: true}
	var errs []error
	if l.MaxStreams <= 0 {
		errs = append(errs, errors.New("max_streams: the streams in flight, at least 1 (max_stream_duration goes with it)"))
	}
	if l.MaxStreamDuration != "" {
		spec, err := streamSpecOf(l.MaxStreamDuration, false)
		if err != nil {
			errs = append(errs, fmt.Errorf("max_stream_duration: %w", err))
		}
		g.MaxDuration = spec.MaxDuration
	}
	if l.Period != "" || l.PeriodSeconds != 0 || l.MaxRequests != 0 || l.MaxTokens != 0 || l.MaxInputTokens != 0 || l.MaxOutputTokens != 0 ||
		l.Capacity != 0 || l.RefillPerSecond != 0 || l.Window != "" || l.Ramp != nil || l.Quota != "" {
		errs = append(errs, errors.New("max_streams: a limit of its own, in an entry of its own (with max_stream_duration, shards, priority, shadow, fair_share)"))
	}
	return g, errs
}
