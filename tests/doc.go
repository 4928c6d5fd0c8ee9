// Package tests holds tollgate's end-to-end tests and the benchmarks that
// need the whole stack: real gateway processes and the built binaries, a
// DynamoDB-compatible engine (DynamoDB Local, which `make test` starts
// through tests/ddblocal), fake upstreams speaking each provider's wire
// format, the official OpenAI, Anthropic and Google SDKs (Go, and Node
// through tests/node), and headless Chromium for the dashboard. It also
// checks what the code and the documentation promise of each other: every
// shell block of README.md and docs/ runs, the reference pages list every
// route, Make target, metric, benchmark and fuzz target, and the functions
// ARCHITECTURE.md names exist. It has no code outside its tests.
package tests
