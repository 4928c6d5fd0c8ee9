package metrics

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// emfUnits are the units the Embedded Metric Format specification allows.
var emfUnits = map[string]bool{
	"Seconds": true, "Microseconds": true, "Milliseconds": true, "Bytes": true, "Kilobytes": true, "Megabytes": true,
	"Gigabytes": true, "Terabytes": true, "Bits": true, "Kilobits": true, "Megabits": true, "Gigabits": true,
	"Terabits": true, "Percent": true, "Count": true, "Bytes/Second": true, "Kilobytes/Second": true,
	"Megabytes/Second": true, "Gigabytes/Second": true, "Terabytes/Second": true, "Bits/Second": true,
	"Kilobits/Second": true, "Megabits/Second": true, "Gigabits/Second": true, "Terabits/Second": true,
	"Count/Second": true, "None": true,
}

// validateEMF checks one log line against the Embedded Metric Format
// specification's schema
// (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html):
// a root object with _aws {Timestamp: a non-negative integer of
// milliseconds, CloudWatchMetrics: 1+ directives of {Namespace: 1–1024
// characters, Dimensions: dimension sets of 0–30 unique names, Metrics: 1–100
// of {Name: 1–1024 characters, Unit: an allowed unit}}}; every dimension a
// top-level string member, every metric a top-level number (or array of
// up to 100 numbers).
func validateEMF(line []byte) error {
	var root map[string]json.RawMessage
	if err := json.Unmarshal(line, &root); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	var meta struct {
		Timestamp         *json.Number `json:"Timestamp"`
		CloudWatchMetrics []struct {
			Namespace  *string    `json:"Namespace"`
			Dimensions [][]string `json:"Dimensions"`
			Metrics    []struct {
				Name *string `json:"Name"`
				Unit *string `json:"Unit"`
			} `json:"Metrics"`
		} `json:"CloudWatchMetrics"`
	}
	raw, ok := root["_aws"]
	if !ok {
		return fmt.Errorf("no _aws member")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&meta); err != nil {
		return fmt.Errorf("_aws: %w", err)
	}
	if meta.Timestamp == nil {
		return fmt.Errorf("_aws.Timestamp missing")
	}
	if ts, err := meta.Timestamp.Int64(); err != nil || ts < 0 {
		return fmt.Errorf("_aws.Timestamp %s is not a non-negative integer", *meta.Timestamp)
	}
	if len(meta.CloudWatchMetrics) == 0 {
		return fmt.Errorf("_aws.CloudWatchMetrics is empty")
	}
	for _, d := range meta.CloudWatchMetrics {
		if d.Namespace == nil || len(*d.Namespace) < 1 || len(*d.Namespace) > 1024 {
			return fmt.Errorf("bad Namespace")
		}
		if d.Dimensions == nil {
			return fmt.Errorf("Dimensions missing")
		}
		for _, set := range d.Dimensions {
			if len(set) > 30 {
				return fmt.Errorf("a dimension set of %d", len(set))
			}
			seen := map[string]bool{}
			for _, name := range set {
				var v string
				if seen[name] || json.Unmarshal(root[name], &v) != nil {
					return fmt.Errorf("dimension %q is repeated or not a top-level string", name)
				}
				seen[name] = true
			}
		}
		if len(d.Metrics) < 1 || len(d.Metrics) > 100 {
			return fmt.Errorf("%d metrics in a directive", len(d.Metrics))
		}
		for _, m := range d.Metrics {
			if m.Name == nil || len(*m.Name) < 1 || len(*m.Name) > 1024 {
				return fmt.Errorf("bad metric name")
			}
			if m.Unit != nil && !emfUnits[*m.Unit] {
				return fmt.Errorf("unit %q is not one CloudWatch knows", *m.Unit)
			}
			var v float64
			var vs []float64
			if json.Unmarshal(root[*m.Name], &v) != nil && (json.Unmarshal(root[*m.Name], &vs) != nil || len(vs) > 100) {
				return fmt.Errorf("metric %q has no number at the top level", *m.Name)
			}
		}
	}
	return nil
}

func TestEMFLinesFollowTheSpecification(t *testing.T) {
	var buf bytes.Buffer
	e := &EMF{W: &buf, Function: "tollgate-GatewayFunction-x", Now: func() time.Time { return time.UnixMilli(1796120587000) }}
	e.Count(Refused, 1, "Rule", "user_path:/demo:minute", "Reason", "rate_limit")
	e.Count(Admitted, 1, "Route", "chat", "Provider", "openai")
	e.Count(StoreFailures, 1)
	e.Observe(AdmissionLatency, 4.25, "Milliseconds")
	e.Observe(EstimateError, 0.22, "None", "Route", "chat")
	e.Count(NearLimit, 1, "Route", "chat", "Dimension", "") // an empty dimension is left out
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d lines", len(lines))
	}
	for _, l := range lines {
		if err := validateEMF([]byte(l)); err != nil {
			t.Errorf("%v:\n%s", err, l)
		}
	}
	if !strings.Contains(lines[0], `"Dimensions":[["Function","Rule","Reason"]]`) || !strings.Contains(lines[0], `"Refused":1`) {
		t.Fatalf("refusal line %s", lines[0])
	}
	for _, bad := range []string{`{}`, `{"_aws":{"Timestamp":-1,"CloudWatchMetrics":[]}}`,
		`{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"N","Dimensions":[["D"]],"Metrics":[{"Name":"M"}]}]},"M":1}`,
		`{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"N","Dimensions":[[]],"Metrics":[{"Name":"M","Unit":"Parsecs"}]}]},"M":1}`} {
		if validateEMF([]byte(bad)) == nil {
			t.Errorf("the validator accepted %s", bad)
		}
	}
}

// The Prometheus output parses with the official text parser, counters
// and histograms with their labels.
func TestPrometheusOutputParses(t *testing.T) {
	p := NewPrometheus()
	p.Count(Refused, 1, "Rule", "user_path:/demo:minute", "Reason", "rate_limit")
	p.Count(Refused, 2, "Rule", "user_path:/demo:minute", "Reason", "rate_limit")
	p.Count(Admitted, 1, "Route", "chat", "Provider", "mock")
	p.Observe(AdmissionLatency, 4, "Milliseconds")
	w := httptest.NewRecorder()
	p.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(w.Body.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, w.Body)
	}
	refused := families["tollgate_refused_total"]
	if refused == nil || refused.GetMetric()[0].GetCounter().GetValue() != 3 {
		t.Fatalf("refused: %v\n%s", refused, w.Body)
	}
	lat := families["tollgate_admission_latency_seconds"]
	if lat == nil || lat.GetMetric()[0].GetHistogram().GetSampleCount() != 1 {
		t.Fatalf("latency: %v", lat)
	}
	if families["tollgate_admitted_total"].GetMetric()[0].GetLabel()[0].GetName() == "" {
		t.Fatal("no labels")
	}
	// What alarms watch is there before its first event, at 0.
	for _, name := range []string{"tollgate_store_failures_total", "tollgate_fail_open_admissions_total", "tollgate_batches_given_up_total"} {
		if f := families[name]; f == nil || f.GetMetric()[0].GetCounter().GetValue() != 0 {
			t.Errorf("%s: %v, want 0 from the start", name, f)
		}
	}
}
