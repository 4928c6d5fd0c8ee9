package notify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// SNS publishes notifications to a topic: the Publish call of SNS's query
// protocol, signed with the SDK's SigV4 signer (as infra/secrets speaks
// SSM, rather than link the generated client into every cold start).
type SNS struct {
	TopicARN string
	Config   aws.Config
	// Endpoint overrides the topic region's endpoint (AWS_ENDPOINT_URL_SNS
	// does too).
	Endpoint string
	signer   *v4.Signer
}

// NewSNS returns the topic's publisher.
func NewSNS(topicARN string, cfg aws.Config) (*SNS, error) {
	parts := strings.Split(topicARN, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sns" || parts[3] == "" || parts[5] == "" {
		return nil, fmt.Errorf("%q is not an SNS topic ARN (arn:aws:sns:<region>:<account>:<name>)", topicARN)
	}
	return &SNS{TopicARN: topicARN, Config: cfg, signer: v4.NewSigner()}, nil
}

// Name names the topic.
func (s *SNS) Name() string { return "sns " + s.TopicARN }

func (s *SNS) region() string { return strings.Split(s.TopicARN, ":")[3] }

func (s *SNS) endpoint() string {
	switch {
	case s.Endpoint != "":
		return s.Endpoint
	case os.Getenv("AWS_ENDPOINT_URL_SNS") != "":
		return os.Getenv("AWS_ENDPOINT_URL_SNS")
	}
	suffix := "amazonaws.com"
	if strings.HasPrefix(s.region(), "cn-") {
		suffix = "amazonaws.com.cn"
	}
	return "https://sns." + s.region() + "." + suffix
}

// Deliver publishes the body as the message, the subject as its subject.
func (s *SNS) Deliver(ctx context.Context, n Notification) (bool, error) {
	if s.Config.Credentials == nil {
		return false, errors.New("no AWS credentials")
	}
	creds, err := s.Config.Credentials.Retrieve(ctx)
	if err != nil {
		return true, fmt.Errorf("AWS credentials: %w", err)
	}
	subject := n.Subject
	if len(subject) > 100 {
		subject = subject[:97] + "..."
	}
	form := url.Values{"Action": {"Publish"}, "Version": {"2010-03-31"}, "TopicArn": {s.TopicARN}, "Message": {string(n.Body)}}
	if subject != "" {
		form.Set("Subject", subject)
	}
	body := form.Encode()
	sum := sha256.Sum256([]byte(body))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(s.endpoint(), "/")+"/", strings.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	if err := s.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "sns", s.region(), time.Now()); err != nil {
		return false, err
	}
	c := s.Config.HTTPClient
	if c == nil {
		c = &http.Client{Timeout: AttemptTimeout}
	}
	resp, err := c.Do(req)
	if err != nil {
		return true, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 2 {
		return false, nil
	}
	code := between(string(data), "<Code>", "</Code>")
	return resp.StatusCode >= 500 || strings.Contains(code, "Throttl"), fmt.Errorf("SNS Publish: HTTP %d %s", resp.StatusCode, code)
}

func between(s, open, close string) string {
	_, rest, ok := strings.Cut(s, open)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, close)
	return v
}
