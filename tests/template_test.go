package tests

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/dynamostore"
)

// cfn reads a CloudFormation/SAM template into plain values, turning the
// short-form tags into their long forms (!Ref x → {"Ref": x},
// !GetAtt a.b → {"Fn::GetAtt": "a.b"}, !Sub s → {"Fn::Sub": s}, …).
func cfn(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		t.Fatal(err)
	}
	v := nodeValue(root.Content[0])
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatal("template is not a mapping")
	}
	return m
}

func nodeValue(n *yaml.Node) any {
	var v any
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			m[n.Content[i].Value] = nodeValue(n.Content[i+1])
		}
		v = m
	case yaml.SequenceNode:
		l := []any{}
		for _, c := range n.Content {
			l = append(l, nodeValue(c))
		}
		v = l
	case yaml.AliasNode:
		return nodeValue(n.Alias)
	default:
		var s any
		_ = n.Decode(&s)
		if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
			s = n.Value
		}
		v = s
	}
	if tag, ok := strings.CutPrefix(n.Tag, "!"); ok && !strings.HasPrefix(n.Tag, "!!") {
		name := "Fn::" + tag
		if tag == "Ref" {
			name = "Ref"
		}
		return map[string]any{name: v}
	}
	return v
}

func get(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func resources(tpl map[string]any, typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for name, r := range get(tpl, "Resources").(map[string]any) {
		if get(r, "Type") == typ {
			out[name] = r.(map[string]any)
		}
	}
	return out
}

func functionName(codeURI string) string {
	return strings.TrimSuffix(strings.TrimPrefix(codeURI, "bin/"), "/")
}

func TestTemplateFunctions(t *testing.T) {
	tpl := cfn(t, "../template.yaml")
	globals := get(tpl, "Globals", "Function")
	if get(globals, "Runtime") != "provided.al2023" || get(globals, "Handler") != "bootstrap" ||
		fmt.Sprint(get(globals, "Architectures")) != "[arm64]" {
		t.Fatalf("functions must be provided.al2023, arm64, bootstrap: %v", globals)
	}
	fns := resources(tpl, "AWS::Serverless::Function")
	seen := map[string]bool{}
	for res, f := range fns {
		uri, _ := get(f, "Properties", "CodeUri").(string)
		name := functionName(uri)
		seen[name] = true
		if _, err := os.Stat(filepath.Join("..", "functions", name, "main.go")); err != nil {
			t.Errorf("%s: CodeUri %q names no function folder", res, uri)
			continue
		}
		// Every function builds for Lambda's arm64.
		cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", filepath.Join(t.TempDir(), "bootstrap"), "../functions/"+name)
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s does not build for linux/arm64: %v\n%s", name, err, out)
		}
		// Every variable the function needs inside Lambda is set.
		vars := map[string]bool{}
		for _, src := range []any{get(globals, "Environment", "Variables"), get(f, "Properties", "Environment", "Variables")} {
			if m, ok := src.(map[string]any); ok {
				for k := range m {
					vars[k] = true
				}
			}
		}
		for _, v := range config.LambdaVariables[name] {
			if !vars[v] {
				t.Errorf("%s: %s is not set in the template", name, v)
			}
		}
		for v := range vars {
			if !knownVariable(v) {
				t.Errorf("%s: the template sets %s, which tollgate does not read", name, v)
			}
		}
	}
	for _, want := range []string{"gateway", "admin", "reconciler"} {
		if !seen[want] {
			t.Errorf("no %s function in the template", want)
		}
	}
	// Either front door: the REST API, or a function URL on the gateway
	// and the admin function.
	frontDoors(t, tpl, fns)

	// Memory is chosen from the measured peak RSS (BenchmarkPeakRSS, about
	// 20 MB): 128 MB everywhere, the gateway's a parameter to raise for CPU.
	if m := fmt.Sprint(get(globals, "MemorySize")); m != "128" {
		t.Errorf("functions' MemorySize %s, want 128", m)
	}
	if ref := get(fns["GatewayFunction"], "Properties", "MemorySize", "Ref"); ref != "GatewayMemorySize" ||
		fmt.Sprint(get(tpl, "Parameters", "GatewayMemorySize", "Default")) != "128" {
		t.Errorf("gateway MemorySize %v: want the GatewayMemorySize parameter, default 128", get(fns["GatewayFunction"], "Properties", "MemorySize"))
	}
	if s := get(fns["ReconcilerFunction"], "Properties", "Events", "EveryMinute", "Properties", "Schedule"); s != "rate(1 minute)" {
		t.Errorf("reconciler schedule %v", s)
	}
}

// frontDoors checks the FrontDoor parameter's two front doors. RestApi
// (the default): the REST API streams the gateway's answers, with the
// function's timeout, and sends /admin to the admin function, each allowed
// to invoke its function. FunctionUrl: a public URL on each function
// (tollgate authenticates every call), the gateway's streamed, each with
// both permissions a new function URL needs, for calls through it only.
// The outputs follow: the OpenAI base URL is the endpoint plus /v1 either
// way, behind the REST API the endpoint is the stage's.
func frontDoors(t *testing.T, tpl map[string]any, fns map[string]map[string]any) {
	t.Helper()
	p := get(tpl, "Parameters", "FrontDoor")
	if get(p, "Default") != "RestApi" || fmt.Sprint(get(p, "AllowedValues")) != "[RestApi FunctionUrl]" {
		t.Errorf("FrontDoor parameter %v: want RestApi (default) or FunctionUrl", p)
	}
	for _, f := range fns {
		if ev := get(f, "Properties", "Events"); ev != nil {
			for name, e := range ev.(map[string]any) {
				if get(e, "Type") == "Api" {
					t.Errorf("event %s is an Api event: the REST API's routes are in its definition, under its condition", name)
				}
			}
		}
	}
	res := get(tpl, "Resources").(map[string]any)
	api := res["Api"]
	if get(api, "Condition") != "UseRestApi" {
		t.Errorf("the REST API exists unless FrontDoor=RestApi: condition %v", get(api, "Condition"))
	}
	route := get(api, "Properties", "DefinitionBody", "paths", "/{proxy+}", "x-amazon-apigateway-any-method", "x-amazon-apigateway-integration")
	uri := fmt.Sprint(get(route, "uri", "Fn::Sub"))
	if get(route, "responseTransferMode") != "STREAM" || !strings.Contains(uri, "/2021-11-15/functions/${GatewayFunction.Arn}/response-streaming-invocations") {
		t.Errorf("the gateway route is not streamed: %v", route)
	}
	// A streamed integration may run up to 15 minutes; the route's timeout
	// must be the function's, not API Gateway's default 29 s.
	if fmt.Sprint(get(route, "timeoutInMillis")) != fmt.Sprint(get(fns["GatewayFunction"], "Properties", "Timeout"))+"000" {
		t.Errorf("gateway route timeout %v ms, function timeout %v s", get(route, "timeoutInMillis"), get(fns["GatewayFunction"], "Properties", "Timeout"))
	}
	admin := get(api, "Properties", "DefinitionBody", "paths", "/admin/{proxy+}", "x-amazon-apigateway-any-method", "x-amazon-apigateway-integration")
	if !strings.Contains(fmt.Sprint(get(admin, "uri", "Fn::Sub")), "${AdminFunction.Arn}/invocations") {
		t.Errorf("/admin does not reach the admin function: %v", admin)
	}
	permits := map[string][]string{} // function → what may invoke it, and how
	for _, r := range res {
		if get(r, "Type") != "AWS::Lambda::Permission" {
			continue
		}
		pp := get(r, "Properties")
		fn := fmt.Sprint(get(pp, "FunctionName", "Ref"))
		permits[fn] = append(permits[fn], fmt.Sprintf("%v %v %v url:%v via:%v",
			get(r, "Condition"), get(pp, "Action"), get(pp, "Principal"), get(pp, "FunctionUrlAuthType"), get(pp, "InvokedViaFunctionUrl")))
	}
	for fn, mode := range map[string]string{"GatewayFunction": "RESPONSE_STREAM", "AdminFunction": "BUFFERED"} {
		u := res[strings.TrimSuffix(fn, "Function")+"FunctionUrl"]
		if get(u, "Type") != "AWS::Lambda::Url" || get(u, "Condition") != "UseFunctionUrl" || get(u, "Properties", "AuthType") != "NONE" ||
			get(u, "Properties", "InvokeMode") != mode || get(u, "Properties", "TargetFunctionArn", "Fn::GetAtt") != fn+".Arn" {
			t.Errorf("%s's function URL %v: want one under UseFunctionUrl, AuthType NONE, InvokeMode %s", fn, u, mode)
		}
		got := permits[fn]
		slices.Sort(got)
		want := []string{
			"UseFunctionUrl lambda:InvokeFunction * url:<nil> via:true",
			"UseFunctionUrl lambda:InvokeFunctionUrl * url:NONE via:<nil>",
			"UseRestApi lambda:InvokeFunction apigateway.amazonaws.com url:<nil> via:<nil>",
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s may be invoked by %v, want %v", fn, got, want)
		}
	}
	outputs := map[string][]string{}
	for _, name := range []string{"Endpoint", "OpenAIBaseURL", "AdminEndpoint"} {
		branches, _ := get(tpl, "Outputs", name, "Value", "Fn::If").([]any)
		if len(branches) != 3 || branches[0] != "UseFunctionUrl" {
			t.Fatalf("output %s is not chosen by the front door: %v", name, get(tpl, "Outputs", name, "Value"))
		}
		url := get(branches[1], "Fn::Sub").([]any)
		outputs[name] = []string{fmt.Sprint(url[0]), fmt.Sprint(get(branches[2], "Fn::Sub"))}
	}
	// API Gateway strips the stage from the path: the OpenAI base URL must
	// be <stage>/v1 for /v1/chat/completions to reach the gateway's routes.
	stage := get(api, "Properties", "StageName")
	for i, door := range []string{"FunctionUrl", "RestApi"} {
		endpoint, openai, adminURL := outputs["Endpoint"][i], outputs["OpenAIBaseURL"][i], outputs["AdminEndpoint"][i]
		if openai != endpoint+"/v1" || !strings.HasSuffix(adminURL, "/admin") || (door == "RestApi" && (!strings.HasSuffix(endpoint, fmt.Sprintf("/%v", stage)) || adminURL != endpoint+"/admin")) {
			t.Errorf("%s: outputs Endpoint %q, OpenAIBaseURL %q, AdminEndpoint %q do not match", door, endpoint, openai, adminURL)
		}
	}
}

// knownVariable reports whether tollgate reads v (a _PARAMETER form names
// an SSM parameter holding a key).
func knownVariable(v string) bool {
	for _, k := range config.Variables {
		if k.Name == v || (k.Prefix && strings.HasPrefix(v, k.Name)) {
			return true
		}
	}
	return strings.HasSuffix(v, "_API_KEY_PARAMETER")
}

func TestTemplateTablesMatchSchema(t *testing.T) {
	tpl := cfn(t, "../template.yaml")
	tables := resources(tpl, "AWS::DynamoDB::Table")
	if len(tables) != len(dynamostore.Specs) {
		t.Fatalf("%d tables in the template, %d in the schema", len(tables), len(dynamostore.Specs))
	}
	byName := map[string]map[string]any{}
	for _, tb := range tables {
		byName[fmt.Sprint(get(tb, "Properties", "TableName", "Fn::Sub"))] = tb
	}
	for _, spec := range dynamostore.Specs {
		tb := byName["${TablePrefix}"+spec.Suffix]
		if tb == nil {
			t.Errorf("no table ${TablePrefix}%s in the template", spec.Suffix)
			continue
		}
		p := get(tb, "Properties")
		want := tableShape(spec.CreateInput(""))
		got := tableShape(p)
		if got != want {
			t.Errorf("table %s differs from the schema:\n template %s\n schema   %s", spec.Suffix, got, want)
		}
		if get(p, "BillingMode") != "PAY_PER_REQUEST" || get(p, "PointInTimeRecoverySpecification", "PointInTimeRecoveryEnabled") != true {
			t.Errorf("table %s: want PAY_PER_REQUEST and point-in-time recovery", spec.Suffix)
		}
		if get(p, "TimeToLiveSpecification", "AttributeName") != spec.TTLAttribute || get(p, "TimeToLiveSpecification", "Enabled") != true {
			t.Errorf("table %s: TTL must be on %q", spec.Suffix, spec.TTLAttribute)
		}
	}
}

// tableShape renders the schema-relevant part of a table (from the
// template's properties or a CreateTable input) comparably.
func tableShape(v any) string {
	b, _ := json.Marshal(v)
	var t struct {
		AttributeDefinitions   []struct{ AttributeName, AttributeType string }
		KeySchema              []struct{ AttributeName, KeyType string }
		StreamSpecification    *struct{ StreamViewType string }
		GlobalSecondaryIndexes []struct {
			IndexName  string
			KeySchema  []struct{ AttributeName, KeyType string }
			Projection struct{ ProjectionType string }
		}
	}
	_ = json.Unmarshal(b, &t)
	var parts []string
	for _, a := range t.AttributeDefinitions {
		parts = append(parts, "attr "+a.AttributeName+":"+a.AttributeType)
	}
	sort.Strings(parts)
	for _, k := range t.KeySchema {
		parts = append(parts, "key "+k.AttributeName+":"+k.KeyType)
	}
	if t.StreamSpecification != nil {
		parts = append(parts, "stream "+t.StreamSpecification.StreamViewType)
	}
	for _, g := range t.GlobalSecondaryIndexes {
		s := "index " + g.IndexName + " " + g.Projection.ProjectionType
		for _, k := range g.KeySchema {
			s += " " + k.AttributeName + ":" + k.KeyType
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// Every IAM statement names only the project's own tables, stream and SSM
// path; nothing is granted on "*".
func TestTemplateIAMIsScoped(t *testing.T) {
	tpl := cfn(t, "../template.yaml")
	allowed := regexp.MustCompile(`^(\{"Fn::GetAtt":"(CountersTable|LeasesTable|ConfigTable)\.(Arn|StreamArn)"\}|\{"Ref":"BedrockModelArns"\}|` +
		`\{"Fn::Sub":"\$\{LeasesTable\.Arn\}/stream/\*"\}|` +
		`\{"Fn::Sub":"arn:\$\{AWS::Partition\}:(ssm|secretsmanager):\$\{AWS::Region\}:\$\{AWS::AccountId\}:(parameter/|secret:)\$\{ParameterPath\}/\*"\})$`)
	// The alert topic is the one resource named by a parameter: only
	// sns:Publish on it, only when it is given.
	topic := `{"Ref":"AlertTopicArn"}`
	n := 0
	for name, f := range resources(tpl, "AWS::Serverless::Function") {
		for _, pol := range get(f, "Properties", "Policies").([]any) {
			// A conditional policy: the branch that grants, when given.
			if branches, ok := get(pol, "Fn::If").([]any); ok && len(branches) == 3 {
				if branches[0] != "HasAlertTopic" || fmt.Sprint(get(branches[2], "Ref")) != "AWS::NoValue" {
					t.Errorf("%s: a conditional policy other than the alert topic's: %v", name, pol)
				}
				pol = branches[1]
			}
			for _, st := range statements(get(pol, "Statement").([]any)) {
				actions := get(st, "Action").([]any)
				for _, r := range resourceList(get(st, "Resource")) {
					b, _ := json.Marshal(r)
					switch {
					case string(b) == topic:
						if fmt.Sprint(actions) != "[sns:Publish]" || name != "ReconcilerFunction" {
							t.Errorf("%s grants %v on the alert topic: want sns:Publish, for the reconciler only", name, actions)
						}
					case !allowed.Match(b):
						t.Errorf("%s grants %v on %s: not one of the project's own resources", name, actions, b)
					}
					n++
				}
				for _, a := range actions {
					if s := a.(string); strings.Contains(s, "*") {
						t.Errorf("%s grants a wildcard action %s", name, s)
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no IAM statements found")
	}
}

// statements returns a policy's statements, those granted under a
// condition (!If [cond, statement, !Ref AWS::NoValue]) included.
func statements(sts []any) []any {
	var out []any
	for _, st := range sts {
		if alt, ok := get(st, "Fn::If").([]any); ok && len(alt) == 3 {
			out = append(out, alt[1])
			continue
		}
		out = append(out, st)
	}
	return out
}

// resourceList is a statement's resources: a list, or one value (a
// parameter that is a list).
func resourceList(v any) []any {
	if l, ok := v.([]any); ok {
		return l
	}
	return []any{v}
}

// The gateway may invoke Bedrock models only as the BedrockModelArns
// parameter names them, and by default none: the statement is granted
// under a condition that the parameter is not empty, its only two actions
// the ones Bedrock providers call (Converse and ConverseStream are
// authorised as InvokeModel and InvokeModelWithResponseStream).
func TestTemplateBedrockAccess(t *testing.T) {
	tpl := cfn(t, "../template.yaml")
	param := get(tpl, "Parameters", "BedrockModelArns")
	if get(param, "Type") != "CommaDelimitedList" || get(param, "Default") != "" {
		t.Fatalf("BedrockModelArns parameter %v", param)
	}
	cond, _ := json.Marshal(get(tpl, "Conditions", "HasBedrockModels"))
	if string(cond) != `{"Fn::Not":[{"Fn::Equals":[{"Fn::Join":[",",{"Ref":"BedrockModelArns"}]},""]}]}` {
		t.Fatalf("HasBedrockModels is %s", cond)
	}
	var granted []string
	for name, f := range resources(tpl, "AWS::Serverless::Function") {
		for _, pol := range get(f, "Properties", "Policies").([]any) {
			if branches, ok := get(pol, "Fn::If").([]any); ok && len(branches) == 3 {
				pol = branches[1] // the alert topic's policy, under its condition
			}
			for _, st := range get(pol, "Statement").([]any) {
				b, _ := json.Marshal(st)
				if !strings.Contains(string(b), "bedrock:") {
					continue
				}
				granted = append(granted, name)
				alt, _ := get(st, "Fn::If").([]any)
				if len(alt) != 3 || alt[0] != "HasBedrockModels" || get(alt[2], "Ref") != "AWS::NoValue" {
					t.Fatalf("%s grants Bedrock unconditionally: %s", name, b)
				}
				grant := alt[1]
				actions, _ := json.Marshal(get(grant, "Action"))
				res, _ := json.Marshal(get(grant, "Resource"))
				if get(grant, "Effect") != "Allow" || string(actions) != `["bedrock:InvokeModel","bedrock:InvokeModelWithResponseStream"]` ||
					string(res) != `{"Ref":"BedrockModelArns"}` {
					t.Fatalf("%s's Bedrock grant: %s", name, b)
				}
			}
		}
	}
	if !slices.Equal(granted, []string{"GatewayFunction"}) {
		t.Fatalf("Bedrock granted to %v, want the gateway alone", granted)
	}
}

// No key or secret value is written in the template: keys come from SSM
// parameters named by *_PARAMETER variables.
func TestTemplateHasNoSecrets(t *testing.T) {
	b, err := os.ReadFile("../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`sk-[A-Za-z0-9_-]{12,}`), regexp.MustCompile(`tg-[A-Za-z0-9_-]{20,}`),
		regexp.MustCompile(`AKIA[0-9A-Z]{16}`), regexp.MustCompile(`AIza[0-9A-Za-z_-]{20,}`),
		regexp.MustCompile(`(?m)^\s*(TOLLGATE_MASTER_KEY|[A-Z_]*_API_KEY):`),
	} {
		if m := re.Find(b); m != nil {
			t.Errorf("the template holds what looks like a secret: %q", m)
		}
	}
}

// The LocalStack init hook creates exactly the tables of the schema.
func TestLocalStackTablesMatchSchema(t *testing.T) {
	hook, err := os.ReadFile("../localstack/init/ready.d/01-tollgate.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range dynamostore.Specs {
		path := filepath.Join("..", "localstack", "tables", spec.Suffix+".json")
		want := cliInput(t, spec.CreateInput("tollgate-"))
		if os.Getenv("TOLLGATE_UPDATE") != "" {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil || tableShape(jsonValue(got)) != tableShape(jsonValue(want)) || string(got) != string(want) {
			t.Errorf("%s differs from the schema (regenerate: TOLLGATE_UPDATE=1 go test ./tests -run LocalStack)", path)
		}
		if !strings.Contains(string(hook), spec.Suffix) || spec.TTLAttribute != "ttl" || !strings.Contains(string(hook), "AttributeName=ttl") {
			t.Errorf("the init hook does not create %s with TTL on %s", spec.Suffix, spec.TTLAttribute)
		}
	}
}

// cliInput renders a CreateTable input as the AWS CLI's --cli-input-json
// takes it: the SDK's unset fields (null, "", empty lists) left out, as
// the CLI refuses them.
func cliInput(t *testing.T, in any) []byte {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.MarshalIndent(prune(jsonValue(b)), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}

// prune drops null, empty-string and empty-collection values, recursively.
func prune(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if x = prune(x); x == nil {
				delete(v, k)
			} else {
				v[k] = x
			}
		}
		if len(v) == 0 {
			return nil
		}
		return v
	case []any:
		var l []any
		for _, x := range v {
			if x = prune(x); x != nil {
				l = append(l, x)
			}
		}
		if len(l) == 0 {
			return nil
		}
		return l
	case string:
		if v == "" {
			return nil
		}
	}
	return v
}

func jsonValue(b []byte) any {
	var v any
	_ = json.Unmarshal(b, &v)
	return v
}

// make build produces a linux/arm64 bootstrap per function.
func TestMakeBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every function")
	}
	bin := t.TempDir()
	cmd := exec.Command("make", "-C", "..", "build", "BIN="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	var found []string
	for _, fn := range []string{"admin", "gateway", "reconciler"} {
		f, err := elf.Open(filepath.Join(bin, fn, "bootstrap"))
		if err != nil {
			t.Errorf("%s: %v", fn, err)
			continue
		}
		if f.Machine != elf.EM_AARCH64 || f.FileHeader.OSABI != elf.ELFOSABI_NONE && f.FileHeader.OSABI != elf.ELFOSABI_LINUX {
			t.Errorf("%s is %v, not linux/arm64", fn, f.Machine)
		}
		f.Close()
		found = append(found, fn)
	}
	if !slices.Equal(found, []string{"admin", "gateway", "reconciler"}) {
		t.Fatalf("built %v", found)
	}
}
