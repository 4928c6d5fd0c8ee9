// The official OpenAI, Anthropic and Google clients against tollgate (the
// mock behind it): the calls a new user makes first, and a 429 in each
// client's own error type. TOLLGATE_URL is the gateway; requests under
// /free are unlimited, those under /limited get one request a minute.
// Prints one JSON object of results; exits non-zero when a call fails.
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { GoogleGenAI, ApiError } from '@google/genai';

const base = process.env.TOLLGATE_URL;
const key = 'tg-node-sdks';
const out = {};

function openai(path) {
  return new OpenAI({ baseURL: base + '/v1', apiKey: key, maxRetries: 0,
    defaultHeaders: { 'X-Tollgate-User-Path': path } });
}
function anthropic(path) {
  return new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0,
    defaultHeaders: { 'X-Tollgate-User-Path': path } });
}
function genai(path) {
  return new GoogleGenAI({ apiKey: key,
    httpOptions: { baseUrl: base, headers: { 'X-Tollgate-User-Path': path }, retryOptions: { attempts: 1 } } });
}

// refusal runs call twice under a one-a-minute path and returns what the
// second one threw.
async function refusal(call) {
  await call();
  try {
    await call();
  } catch (err) {
    return err;
  }
  throw new Error('the second call under /limited was not refused');
}

try {
  // OpenAI: embeddings as the SDK asks for them (base64 by default).
  const e = await openai('/free/node').embeddings.create({ model: 'text-embedding-3-small', input: ['hello', 'world'] });
  out.openai_embeddings = e.data.map((d) => Array.from(d.embedding));
  const f = await openai('/free/node').embeddings.create({ model: 'text-embedding-3-small', input: 'hi', encoding_format: 'float' });
  out.openai_embeddings_float = f.data[0].embedding;
  const oerr = await refusal(() => openai('/limited/openai').chat.completions.create({
    model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }));
  out.openai_429 = { rate_limit_error: oerr instanceof OpenAI.RateLimitError, status: oerr.status };

  // Anthropic: count_tokens, a message, and a 429.
  const c = await anthropic('/free/node').messages.countTokens({
    model: 'claude-sonnet-4-5', messages: [{ role: 'user', content: 'How many tokens is this sentence?' }] });
  out.anthropic_count_tokens = c.input_tokens;
  const m = await anthropic('/free/node').messages.create({
    model: 'claude-sonnet-4-5', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });
  out.anthropic_message_tokens = m.usage.output_tokens;
  const aerr = await refusal(() => anthropic('/limited/anthropic').messages.create({
    model: 'claude-sonnet-4-5', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }));
  out.anthropic_429 = { rate_limit_error: aerr instanceof Anthropic.RateLimitError, status: aerr.status };

  // Gemini: countTokens, embeddings (the SDK sends batchEmbedContents), a
  // generation, and a 429.
  const g = genai('/free/node');
  const t = await g.models.countTokens({ model: 'gemini-2.5-flash', contents: 'How many tokens is this sentence?' });
  out.gemini_count_tokens = t.totalTokens;
  const ge = await g.models.embedContent({ model: 'gemini-embedding-001', contents: ['hello', 'world', 'again'] });
  out.gemini_embeddings = ge.embeddings.map((x) => x.values);
  const gen = await g.models.generateContent({ model: 'gemini-2.5-flash', contents: 'hi', config: { maxOutputTokens: 8 } });
  out.gemini_text = gen.text;
  const gerr = await refusal(() => genai('/limited/gemini').models.generateContent({
    model: 'gemini-2.5-flash', contents: 'hi', config: { maxOutputTokens: 8 } }));
  out.gemini_429 = { api_error: gerr instanceof ApiError, status: gerr.status };
  out.ok = true;
  console.log(JSON.stringify(out));
} catch (err) {
  out.ok = false;
  out.error = String(err && err.stack || err);
  console.log(JSON.stringify(out));
  process.exit(1);
}
