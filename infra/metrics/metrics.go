// Package metrics counts what the gateway and the reconciler decide, for
// dashboards and alarms: as CloudWatch Embedded Metric Format lines on the
// function's log inside Lambda (CloudWatch turns them into metrics, no
// API call), and as Prometheus counters a local process serves on
// GET /metrics.
package metrics

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Namespace is the CloudWatch namespace of every metric.
const Namespace = "Tollgate"

// The metrics, by name, as CloudWatch and (snake-cased, with _total for
// counters) Prometheus know them.
const (
	Admitted            = "Admitted"            // requests admitted, by Route and Provider
	Refused             = "Refused"             // requests refused, by Rule and Reason
	NearLimit           = "NearLimit"           // admissions that left a rule at 80 % or more of its limit, by Rule
	UpstreamRateLimited = "UpstreamRateLimited" // upstream 429s after admission, by Provider
	StoreFailures       = "StoreFailures"       // admissions the store could not answer
	FailOpenAdmissions  = "FailOpenAdmissions"  // admitted without limits (failure mode open)
	AdmissionLatency    = "AdmissionLatency"    // milliseconds an admission took (the store's round trips)
	EstimateError       = "EstimateError"       // used over reserved tokens, by Route, per reconciler run
	ReconcilerLag       = "ReconcilerLag"       // milliseconds behind the newest record read
	ReconcilerRecords   = "ReconcilerRecords"   // records read by a run
	BatchesGivenUp      = "BatchesGivenUp"      // batches given up uncharged (polls failing too long, never ending)
	FellBack            = "FellBack"            // requests admitted on a target other than their first choice, by From and To
	Downgraded          = "Downgraded"          // requests admitted on a downgrade's model, by From and To
	Incompatible        = "Incompatible"        // targets skipped as incompatible with a request, by Target
)

// Sink receives measurements. Dimensions are name, value pairs.
type Sink interface {
	Count(name string, n float64, dims ...string)
	Observe(name string, v float64, unit string, dims ...string)
}

// Discard is a Sink that keeps nothing.
type Discard struct{}

func (Discard) Count(string, float64, ...string)           {}
func (Discard) Observe(string, float64, string, ...string) {}

// EMF writes each measurement as one Embedded Metric Format line:
//
//	{"_aws":{"Timestamp":…,"CloudWatchMetrics":[{"Namespace":"Tollgate",
//	 "Dimensions":[["Function","Rule","Reason"]],"Metrics":[{"Name":"Refused","Unit":"Count"}]}]},
//	 "Function":"gateway","Rule":"user_path:/demo:minute","Reason":"rate_limit","Refused":1}
type EMF struct {
	W        io.Writer
	Function string // the Function dimension of every metric
	Now      func() time.Time
	mu       sync.Mutex
}

type emfMetric struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

type emfDirective struct {
	Namespace  string      `json:"Namespace"`
	Dimensions [][]string  `json:"Dimensions"`
	Metrics    []emfMetric `json:"Metrics"`
}

type emfMeta struct {
	Timestamp         int64          `json:"Timestamp"`
	CloudWatchMetrics []emfDirective `json:"CloudWatchMetrics"`
}

// Count implements Sink.
func (e *EMF) Count(name string, n float64, dims ...string) { e.write(name, n, "Count", dims) }

// Observe implements Sink.
func (e *EMF) Observe(name string, v float64, unit string, dims ...string) {
	e.write(name, v, unit, dims)
}

func (e *EMF) write(name string, v float64, unit string, dims []string) {
	now := time.Now
	if e.Now != nil {
		now = e.Now
	}
	keys := []string{"Function"}
	doc := map[string]any{"Function": e.Function, name: v}
	for i := 0; i+1 < len(dims); i += 2 {
		if dims[i+1] == "" {
			continue
		}
		keys = append(keys, dims[i])
		doc[dims[i]] = dims[i+1]
	}
	doc["_aws"] = emfMeta{
		Timestamp: now().UnixMilli(),
		CloudWatchMetrics: []emfDirective{{
			Namespace: Namespace, Dimensions: [][]string{keys}, Metrics: []emfMetric{{Name: name, Unit: unit}},
		}},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return
	}
	b = append(b, '\n')
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = e.W.Write(b)
}
