package config

// Variable is one environment variable tollgate reads.
type Variable struct {
	Name string
	// Prefix marks a family (SET_RATE_LIMIT_<PATH>): Name is its prefix.
	Prefix bool
	// Suffix marks a family (<NAME>_API_KEY): Name is its suffix.
	Suffix bool
}

// Variables lists every environment variable tollgate reads (the Go
// code's reads, found by TestVariablesListEveryRead), and
// docs/reference/environment.md documents each and no other
// (TestReferenceListsEveryVariable).
var Variables = []Variable{
	{Name: "PORT"},
	{Name: "TOLLGATE_CONFIG"},
	{Name: "TOLLGATE_MASTER_KEY"},
	{Name: "TOLLGATE_MASTER_KEY_PARAMETER"},
	{Name: "TOLLGATE_STORE"},
	{Name: "TOLLGATE_STORE_FAILURE"},
	{Name: "TOLLGATE_STORE_TIMEOUT"},
	{Name: "TOLLGATE_TABLE_PREFIX"},
	{Name: "TOLLGATE_CREATE_TABLES"},
	{Name: "TOLLGATE_RECONCILE_INTERVAL"},
	{Name: "TOLLGATE_LOG_LEVEL"},
	{Name: "MOCK_LATENCY_MS"},
	{Name: "OPENAI_API_KEY"},
	{Name: "ANTHROPIC_API_KEY"},
	{Name: "GEMINI_API_KEY"},
	{Name: "_API_KEY", Suffix: true},
	{Name: "_API_KEY_PARAMETER", Suffix: true},
	{Name: "_BASE_URL", Suffix: true},
	{Name: "SET_RATE_LIMIT_", Prefix: true},
	{Name: "SET_PROVIDER_RATE_LIMIT_", Prefix: true},
	{Name: "SET_BUDGET_", Prefix: true},
	{Name: "TOLLGATE_BUDGET_TIMEZONE"},
	// The AWS SDK's own, which tollgate reads too (for defaults, local
	// engines and its own signed calls), and Lambda's.
	{Name: "AWS_REGION"},
	{Name: "AWS_DEFAULT_REGION"},
	{Name: "AWS_ENDPOINT_URL"},
	{Name: "AWS_ENDPOINT_URL_DYNAMODB"},
	{Name: "AWS_ENDPOINT_URL_BEDROCK_RUNTIME"},
	{Name: "AWS_ENDPOINT_URL_SNS"},
	{Name: "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"},
	{Name: "AWS_ENDPOINT_URL_DYNAMODB_STREAMS"},
	{Name: "AWS_ENDPOINT_URL_", Prefix: true},
	{Name: "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"},
	{Name: "AWS_ACCESS_KEY_ID"},
	{Name: "AWS_PROFILE"},
	{Name: "AWS_LAMBDA_FUNCTION_NAME"},
	{Name: "AWS_LAMBDA_RUNTIME_API"},
	{Name: "TOLLGATE_ALERT_TOPIC_ARN"},
	// Go's own, which the upstream clients honour; tollgate reads the
	// first two to know whether plain-HTTP upstreams are reached through
	// a proxy.
	{Name: "HTTP_PROXY"},
	{Name: "http_proxy"},
	{Name: "HTTPS_PROXY"},
	{Name: "NO_PROXY"},
}

// LambdaVariables are the variables each function must have set inside
// Lambda (template.yaml sets them; a test checks).
var LambdaVariables = map[string][]string{
	"gateway":    {"TOLLGATE_STORE", "TOLLGATE_TABLE_PREFIX", "TOLLGATE_STORE_FAILURE", "TOLLGATE_CONFIG", "TOLLGATE_MASTER_KEY_PARAMETER", "OPENAI_API_KEY_PARAMETER", "ANTHROPIC_API_KEY_PARAMETER", "GEMINI_API_KEY_PARAMETER"},
	"admin":      {"TOLLGATE_STORE", "TOLLGATE_TABLE_PREFIX", "TOLLGATE_CONFIG", "TOLLGATE_MASTER_KEY_PARAMETER"},
	"reconciler": {"TOLLGATE_STORE", "TOLLGATE_TABLE_PREFIX", "TOLLGATE_CONFIG", "OPENAI_API_KEY_PARAMETER", "ANTHROPIC_API_KEY_PARAMETER", "GEMINI_API_KEY_PARAMETER"},
}
