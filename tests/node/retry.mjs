// Two chat completions through tollgate with the official openai package,
// its own retries on (the default 2, here 3). The second is refused with
// 429 and the client, honouring the gateway's retry-after-ms, retries on its
// own and succeeds. Prints one JSON line; exits non-zero on failure.
import OpenAI from 'openai';

const client = new OpenAI({
  baseURL: process.env.TOLLGATE_URL + '/v1',
  apiKey: 'sk-node-test',
  maxRetries: 3,
  defaultHeaders: { 'X-Tollgate-User-Path': process.env.TOLLGATE_USER_PATH },
});

const calls = [];
try {
  for (let i = 0; i < 2; i++) {
    const start = Date.now();
    const r = await client.chat.completions.create({
      model: 'gpt-4o',
      messages: [{ role: 'user', content: `request ${i}` }],
      max_tokens: 4,
    });
    calls.push({ start, end: Date.now(), completion_tokens: r.usage.completion_tokens });
  }
  console.log(JSON.stringify({ ok: true, calls }));
} catch (err) {
  console.log(JSON.stringify({ ok: false, error: String(err), status: err.status, calls }));
  process.exit(1);
}
