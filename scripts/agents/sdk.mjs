// The Agents SDK and the AI SDK against turnpike, each feature a check.
import OpenAI from 'openai';
import { ResponsesWS } from 'openai/resources/responses/ws';
import { z } from 'zod';
import {
  Agent, MemorySession, OpenAIConversationsSession, OpenAIResponsesCompactionSession,
  run, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled, tool, withResponsesWebSocketSession,
} from '@openai/agents';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, stepCountIs, streamText, tool as aiTool } from 'ai';
import { BASE, MODEL, Skip, assert, check, codesSince, diffCodes, metrics, responsesByCode } from './lib.mjs';

const client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: 'unused', maxRetries: 0 });

// weather is the tool both SDKs are given; calls counts its runs.
let calls = 0;
const weatherParams = z.object({ city: z.string(), days: z.number().int().min(1).max(7) });
function weather({ city, days }) {
  calls++;
  return `${city}: sunny for ${days} days`;
}

async function agentsChecks() {
  setTracingDisabled(true);
  setDefaultOpenAIClient(client);
  setOpenAIAPI('responses');
  const weatherTool = tool({
    name: 'get_weather',
    description: 'The forecast for a city.',
    parameters: weatherParams,
    execute: weather,
  });
  const agent = new Agent({ name: 'Forecaster', instructions: 'Answer with the forecast.', model: MODEL, tools: [weatherTool] });
  const plain = new Agent({ name: 'Chat', instructions: 'Be brief.', model: MODEL });

  await check('agents: tools', async () => {
    const before = calls;
    const result = await run(agent, 'What is the weather in Paris this week?');
    assert(calls > before, 'the tool was not called');
    assert(typeof result.finalOutput === 'string' && result.finalOutput.trim() !== '', `final output ${JSON.stringify(result.finalOutput)}`);
    const items = result.newItems.map((i) => i.type);
    assert(items.includes('tool_call_item') && items.includes('tool_call_output_item'), `items ${items}`);
    return `${calls - before} tool calls, items ${items.join(',')}`;
  });

  await check('agents: streaming', async () => {
    const result = await run(agent, 'And in Rome?', { stream: true });
    let deltas = 0;
    let types = new Set();
    for await (const ev of result) {
      types.add(ev.type);
      if (ev.type === 'raw_model_stream_event' && ev.data?.type === 'output_text_delta') deltas++;
    }
    await result.completed;
    assert(!result.error, `stream error ${result.error}`);
    assert(deltas > 0, `no text deltas; events ${[...types]}`);
    assert(typeof result.finalOutput === 'string' && result.finalOutput !== '', 'no final output');
    return `${deltas} text deltas`;
  });

  await check('agents: previousResponseId', async () => {
    const first = await run(plain, 'Remember the word pelican.');
    assert(first.lastResponseId?.startsWith('resp_'), `lastResponseId ${first.lastResponseId}`);
    const second = await run(plain, 'Which word?', { previousResponseId: first.lastResponseId });
    const r = await client.responses.retrieve(second.lastResponseId);
    assert(r.previous_response_id === first.lastResponseId, `previous_response_id ${r.previous_response_id}`);
    const items = await client.responses.inputItems.list(second.lastResponseId);
    const texts = JSON.stringify(items.data);
    assert(texts.includes('Which word?'), `input items ${texts}`);
    return `${first.lastResponseId} → ${second.lastResponseId}`;
  });

  await check('agents: conversation session', async () => {
    const sessionStore = new OpenAIConversationsSession({ client });
    await run(plain, 'My name is Ada.', { session: sessionStore });
    await run(plain, 'What is my name?', { session: sessionStore });
    const id = await sessionStore.getSessionId();
    assert(id.startsWith('conv_'), `conversation id ${id}`);
    const items = await sessionStore.getItems();
    const text = JSON.stringify(items);
    assert(text.includes('My name is Ada.') && text.includes('What is my name?'), `conversation items ${text}`);
    const roles = items.map((i) => i.role).filter(Boolean);
    assert(roles.filter((r) => r === 'assistant').length >= 2, `roles ${roles}`);
    return `${id}: ${items.length} items`;
  });

  await check('agents: conversationId', async () => {
    const conv = await client.conversations.create({});
    await run(plain, 'The colour is teal.', { conversationId: conv.id });
    await run(plain, 'Which colour?', { conversationId: conv.id });
    const items = await client.conversations.items.list(conv.id);
    assert(items.data.length >= 4, `conversation has ${items.data.length} items`);
    return `${conv.id}: ${items.data.length} items`;
  });

  await check('agents: compaction session', async () => {
    const probe = await fetch(`${BASE}/v1/responses/compact`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, input: 'probe' }),
    });
    if (probe.status === 404 || probe.status === 405) {
      throw new Skip(`POST /v1/responses/compact answers ${probe.status}: the gateway has no compaction endpoint`);
    }
    const session = new OpenAIResponsesCompactionSession({
      client,
      model: MODEL,
      underlyingSession: new MemorySession(),
      shouldTriggerCompaction: () => false,
    });
    await run(plain, 'First, the plan: build a bridge.', { session });
    await run(plain, 'Second, the budget: small.', { session });
    const result = await session.runCompaction({ force: true });
    assert(result, 'runCompaction returned nothing');
    const items = await session.getItems();
    assert(items.some((i) => i.type === 'compaction'), `after compaction: ${JSON.stringify(items).slice(0, 500)}`);
    const after = await run(plain, 'What was the plan?', { session });
    assert(after.finalOutput, 'no answer after compaction');
    return `${items.length} items after compaction`;
  });

  await check('agents: websocket transport', async () => {
    const before = responsesByCode(await metrics());
    const before101 = before['101'] ?? 0;
    const out = await withResponsesWebSocketSession(
      async ({ run: wsRun }) => {
        const first = await wsRun(agent, 'Weather in Oslo?');
        const second = await wsRun(plain, 'Thanks.', { previousResponseId: first.lastResponseId });
        return [first, second];
      },
      { providerOptions: { baseURL: `${BASE}/v1`, apiKey: 'unused', useResponses: true } },
    );
    const codes = await codesSince(before, (c) => c['101'] >= 1);
    assert(codes['101'] >= 1, `no WebSocket upgrade answered: ${JSON.stringify(codes)}`);
    assert(!codes['200'], `turns went over HTTP: ${JSON.stringify(codes)}`);
    assert(out[0].finalOutput && out[1].finalOutput, 'missing answers');
    const toolItems = out[0].newItems.filter((i) => i.type === 'tool_call_output_item').length;
    assert(toolItems > 0, 'no tool call over the WebSocket');
    return `${codes['101']} connection(s) (${before101} before), tool outputs ${toolItems}`;
  });

  await check('agents: outputType', async () => {
    const Report = z.object({ city: z.string(), temperature: z.number().int(), conditions: z.enum(['sunny', 'rain', 'snow']) });
    const typed = new Agent({ name: 'Reporter', instructions: 'Report the weather.', model: MODEL, outputType: Report });
    const result = await run(typed, 'Report the weather in Lima.');
    const parsed = Report.safeParse(result.finalOutput);
    assert(parsed.success, `final output ${JSON.stringify(result.finalOutput)} does not satisfy the schema: ${parsed.error}`);
    return JSON.stringify(result.finalOutput);
  });
}

async function aiSDKChecks() {
  const provider = createOpenAI({ baseURL: `${BASE}/v1`, apiKey: 'unused' });
  const model = provider.responses(MODEL);

  await check('ai-sdk: generateText', async () => {
    const r = await generateText({ model, prompt: 'Say hello.', maxRetries: 0 });
    assert(r.text.trim() !== '', 'empty text');
    assert(r.usage.inputTokens > 0 && r.usage.outputTokens > 0, `usage ${JSON.stringify(r.usage)}`);
    return `${r.usage.outputTokens} output tokens, finish ${r.finishReason}`;
  });

  await check('ai-sdk: streamText', async () => {
    const r = streamText({ model, prompt: 'Tell a short story.', maxRetries: 0 });
    let chunks = 0;
    let text = '';
    for await (const part of r.textStream) {
      chunks++;
      text += part;
    }
    assert(chunks > 1 && text.trim() !== '', `${chunks} chunks`);
    const finish = await r.finishReason;
    return `${chunks} chunks, finish ${finish}`;
  });

  await check('ai-sdk: tools', async () => {
    const before = calls;
    const r = await generateText({
      model,
      prompt: 'What is the weather in Lisbon?',
      tools: { get_weather: aiTool({ description: 'The forecast for a city.', inputSchema: weatherParams, execute: weather }) },
      stopWhen: stepCountIs(3),
      maxRetries: 0,
    });
    assert(calls > before, 'the tool was not called');
    assert(r.steps.length >= 2 && r.steps[0].toolCalls.length > 0, `steps ${r.steps.length}`);
    assert(r.text.trim() !== '', 'no final text');
    return `${r.steps.length} steps, ${calls - before} tool calls`;
  });

  await check('ai-sdk: message history and previousResponseId', async () => {
    const first = await generateText({ model, prompt: 'Remember: the code is 42.', maxRetries: 0 });
    const messages = [
      { role: 'user', content: 'Remember: the code is 42.' },
      ...first.response.messages,
      { role: 'user', content: 'What is the code?' },
    ];
    const second = await generateText({ model, messages, maxRetries: 0 });
    assert(second.text.trim() !== '', 'empty answer with history');
    const id1 = first.providerMetadata?.openai?.responseId ?? first.response.id;
    const third = await generateText({
      model,
      prompt: 'And again?',
      providerOptions: { openai: { previousResponseId: id1 } },
      maxRetries: 0,
    });
    const id3 = third.providerMetadata?.openai?.responseId ?? third.response.id;
    const r = await client.responses.retrieve(id3);
    assert(r.previous_response_id === id1, `previous_response_id ${r.previous_response_id}, want ${id1}`);
    assert(third.usage.inputTokens > first.usage.inputTokens, `chained input ${third.usage.inputTokens} ≤ ${first.usage.inputTokens}`);
    return `history of ${messages.length} messages; ${id1} → ${id3}`;
  });
}

// openaiWSChecks drives the openai package's own ResponsesWS client: two
// chained store:false responses and a warmup on one connection.
async function openaiWSChecks() {
  await check('openai: ResponsesWS', async () => {
    const before = responsesByCode(await metrics());
    const ws = new ResponsesWS(client);
    const ended = [];
    try {
      const create = (extra) => ws.send({ type: 'response.create', model: MODEL, store: false, max_output_tokens: 16, ...extra });
      create({ input: 'The secret word is pelican.', generate: false });
      for await (const ev of ws.stream()) {
        if (ev.type === 'close') throw new Error(`closed: ${ev.code} ${ev.reason}`);
        if (ev.type !== 'message') continue;
        const m = ev.message;
        if (m.type === 'error') throw new Error(`error event: ${JSON.stringify(m.error)}`);
        if (m.type !== 'response.completed' && m.type !== 'response.incomplete') continue;
        ended.push(m.response);
        if (ended.length === 3) break;
        create({ input: ended.length === 1 ? 'What is the secret word?' : 'Again?', previous_response_id: m.response.id });
      }
    } finally {
      ws.close();
    }
    assert(ended[0].output.length === 0, `the warmup had output ${JSON.stringify(ended[0].output)}`);
    assert(ended[2].usage.input_tokens > ended[1].usage.input_tokens, `chained input ${ended[1].usage.input_tokens} → ${ended[2].usage.input_tokens}`);
    const codes = await codesSince(before, (c) => c['101'] >= 1);
    assert(codes['101'] === 1 && !codes['200'], `gateway answers by code: ${JSON.stringify(codes)}`);
    return ended.map((r) => `${r.id} (${r.usage.input_tokens} in)`).join(' → ');
  });
}

export async function sdkChecks() {
  await agentsChecks();
  await aiSDKChecks();
  await openaiWSChecks();
}

