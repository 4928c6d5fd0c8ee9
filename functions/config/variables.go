package config

// Variable is one environment variable tollgate reads.
type Variable struct {
	Name string
	// Prefix marks a family (SET_RATE_LIMIT_<PATH>): Name is its prefix.
	Prefix bool
}

// Variables lists every environment variable tollgate reads; the README
// documents each (a test checks).
var Variables = []Variable{
	{Name: "PORT"},
	{Name: "TOLLGATE_CONFIG"},
	{Name: "TOLLGATE_MASTER_KEY"},
	{Name: "TOLLGATE_MASTER_KEY_PARAMETER"},
	{Name: "TOLLGATE_STORE"},
	{Name: "TOLLGATE_STORE_FAILURE"},
	{Name: "TOLLGATE_TABLE_PREFIX"},
	{Name: "TOLLGATE_CREATE_TABLES"},
	{Name: "TOLLGATE_RECONCILE_INTERVAL"},
	{Name: "TOLLGATE_LOG_LEVEL"},
	{Name: "MOCK_LATENCY_MS"},
	{Name: "OPENAI_API_KEY"},
	{Name: "ANTHROPIC_API_KEY"},
	{Name: "GEMINI_API_KEY"},
	{Name: "SET_RATE_LIMIT_", Prefix: true},
	{Name: "SET_PROVIDER_RATE_LIMIT_", Prefix: true},
	{Name: "SET_BUDGET_", Prefix: true},
	{Name: "TOLLGATE_BUDGET_TIMEZONE"},
	{Name: "AWS_REGION"},
	{Name: "AWS_ENDPOINT_URL_DYNAMODB"},
	{Name: "AWS_ENDPOINT_URL_DYNAMODB_STREAMS"},
	{Name: "TOLLGATE_ALERT_TOPIC_ARN"},
}

// LambdaVariables are the variables each function must have set inside
// Lambda (template.yaml sets them; a test checks).
var LambdaVariables = map[string][]string{
	"gateway":    {"TOLLGATE_STORE", "TOLLGATE_TABLE_PREFIX", "TOLLGATE_STORE_FAILURE", "TOLLGATE_CONFIG", "TOLLGATE_MASTER_KEY_PARAMETER", "OPENAI_API_KEY_PARAMETER", "ANTHROPIC_API_KEY_PARAMETER", "GEMINI_API_KEY_PARAMETER"},
	"admin":      {"TOLLGATE_STORE", "TOLLGATE_TABLE_PREFIX", "TOLLGATE_CONFIG", "TOLLGATE_MASTER_KEY_PARAMETER"},
	"reconciler": {"TOLLGATE_STORE", "TOLLGATE_TABLE_PREFIX", "TOLLGATE_CONFIG", "OPENAI_API_KEY_PARAMETER", "ANTHROPIC_API_KEY_PARAMETER", "GEMINI_API_KEY_PARAMETER"},
}
