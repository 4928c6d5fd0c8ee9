#!/bin/bash
# LocalStack init hook (ready stage): tollgate's tables under the default
# prefix "tollgate-", each with TTL on "ttl", and the master key in SSM.
# The table definitions are generated from infra/dynamostore/schema.go;
# tests/template_test.go fails when they drift.
set -euo pipefail
dir=/etc/localstack/tollgate-tables
for table in counters leases config; do
  if awslocal dynamodb describe-table --table-name "tollgate-$table" >/dev/null 2>&1; then
    echo "tollgate: table tollgate-$table exists"
    continue
  fi
  awslocal dynamodb create-table --cli-input-json "file://$dir/$table.json" >/dev/null
  awslocal dynamodb wait table-exists --table-name "tollgate-$table"
  awslocal dynamodb update-time-to-live --table-name "tollgate-$table" \
    --time-to-live-specification "Enabled=true,AttributeName=ttl" >/dev/null
  echo "tollgate: created tollgate-$table"
done
awslocal ssm put-parameter --name /tollgate/master-key --type SecureString \
  --value "${TOLLGATE_MASTER_KEY:-sk-tollgate-local-master}" --overwrite >/dev/null
echo "tollgate: master key parameter /tollgate/master-key written"
