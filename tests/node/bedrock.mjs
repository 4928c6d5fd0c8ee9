// The official OpenAI and Anthropic clients against tollgate with a
// Bedrock provider behind it (tests/bedrock_test.go runs the gateway and
// a fake Bedrock Runtime): chat, a stream (each chunk's arrival time
// kept), a tool round trip, embeddings from Titan and Cohere, and
// Anthropic messages plain and streamed. TOLLGATE_URL is the gateway,
// CHAT_MODEL the chat model, CLAUDE the Bedrock model id of Claude.
// Prints one JSON object of results; exits non-zero when a call fails.
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const base = process.env.TOLLGATE_URL;
const model = process.env.CHAT_MODEL;
const openai = new OpenAI({ baseURL: base + '/v1', apiKey: 'tg-bedrock', maxRetries: 0,
  defaultHeaders: { 'X-Tollgate-User-Path': '/node' } });
const anthropic = new Anthropic({ baseURL: base, apiKey: 'tg-bedrock', maxRetries: 0,
  defaultHeaders: { 'X-Tollgate-User-Path': '/node' } });
const out = {};

try {
  const c = await openai.chat.completions.create({ model, max_tokens: 100,
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello' }] });
  out.chat = { text: c.choices[0].message.content, finish: c.choices[0].finish_reason, usage: c.usage };

  const stream = await openai.chat.completions.create({ model, max_tokens: 100, stream: true,
    stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'Tell me something' }] });
  const s = { text: '', times: [], usage: null, usage_last: false, chunks: 0 };
  for await (const chunk of stream) {
    s.chunks++;
    s.usage_last = false;
    const delta = chunk.choices[0]?.delta?.content;
    if (delta) {
      s.text += delta;
      s.times.push(Date.now());
    }
    if (chunk.usage) {
      s.usage = chunk.usage;
      s.usage_last = chunk.choices.length === 0;
    }
  }
  out.stream = s;

  const tools = [{ type: 'function', function: { name: 'weather', description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const first = await openai.chat.completions.create({ model, max_tokens: 100, messages: ask, tools });
  const call = first.choices[0].message.tool_calls[0];
  const second = await openai.chat.completions.create({ model, max_tokens: 100, tools, messages: [...ask,
    first.choices[0].message,
    { role: 'tool', tool_call_id: call.id, content: '18 degrees and sunny' }] });
  out.tools = { finish: first.choices[0].finish_reason, name: call.function.name,
    arguments: JSON.parse(call.function.arguments), answer: second.choices[0].message.content };

  const titan = await openai.embeddings.create({ model: 'bedrock/amazon.titan-embed-text-v2:0', input: ['hello world', 'good bye'] });
  const titanFloat = await openai.embeddings.create({ model: 'bedrock/amazon.titan-embed-text-v2:0', input: 'hello world',
    encoding_format: 'float' });
  const cohere = await openai.embeddings.create({ model: 'bedrock/cohere.embed-english-v3', input: ['hello world', 'good bye'] });
  out.embeddings = { titan: titan.data.map((d) => Array.from(d.embedding)), titan_float: titanFloat.data[0].embedding,
    titan_tokens: titan.usage.prompt_tokens, cohere: cohere.data.map((d) => Array.from(d.embedding)) };

  const claude = 'bedrock/' + process.env.CLAUDE;
  const m = await anthropic.messages.create({ model: claude, max_tokens: 64, messages: [{ role: 'user', content: 'Hello' }] });
  out.messages = { text: m.content[0].text, usage: m.usage };
  const ms = anthropic.messages.stream({ model: claude, max_tokens: 64, messages: [{ role: 'user', content: 'Hello' }] });
  const events = [];
  ms.on('streamEvent', (e) => events.push(e.type));
  const final = await ms.finalMessage();
  out.messages_stream = { text: final.content[0].text, usage: final.usage, events };
  out.ok = true;
  console.log(JSON.stringify(out));
} catch (err) {
  out.ok = false;
  out.error = String(err && err.stack || err);
  console.log(JSON.stringify(out));
  process.exit(1);
}
