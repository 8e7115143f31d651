// Vercel AI SDK spans (experimental_telemetry) against the simulator, for tests/data/spans/vercel/.
//
//   npm install ai @ai-sdk/openai @opentelemetry/api @opentelemetry/sdk-trace-base \
//       @opentelemetry/otlp-transformer @opentelemetry/resources @opentelemetry/context-async-hooks zod
//   node generate.mjs SIMULATOR_URL        (e.g. http://127.0.0.1:8765/v1)
//
// Writes text.otlp.json and tools.otlp.json (OTLP/JSON export requests, as the OTLP
// exporters' JSON serializer writes them) and tools.spans.json (the SDK's ReadableSpan
// records as JSON: spanContext, parentSpanContext, [seconds, nanos] times).
import { writeFileSync } from "node:fs";
import { generateText, tool, stepCountIs } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { JsonTraceSerializer } from "@opentelemetry/otlp-transformer";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { context } from "@opentelemetry/api";
import { z } from "zod";

context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());  // parents across awaits

const url = process.argv[2];
const here = new URL(".", import.meta.url).pathname;
const provider = createOpenAI({ baseURL: url, apiKey: "sk-test" });

async function record(name, run) {
  const exporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({
    resource: resourceFromAttributes({ "service.name": "span-fixtures" }),
    spanProcessors: [new SimpleSpanProcessor(exporter)],
  });
  const tracer = tracerProvider.getTracer("ai");
  await run({ isEnabled: true, tracer, functionId: name, metadata: { fixture: name } });
  await tracerProvider.forceFlush();
  return exporter.getFinishedSpans();
}

function otlp(spans) {
  return JSON.parse(new TextDecoder().decode(JsonTraceSerializer.serializeRequest(spans)));
}

function plain(span) {
  return {
    name: span.name, kind: span.kind, spanContext: span.spanContext(),
    parentSpanContext: span.parentSpanContext, startTime: span.startTime, endTime: span.endTime,
    attributes: span.attributes, status: span.status, events: span.events, links: span.links,
    instrumentationScope: span.instrumentationScope,
  };
}

const text = await record("capital", (telemetry) => generateText({
  model: provider.chat("fixture-chat"), temperature: 0, system: "Answer in one sentence.",
  prompt: "What is the capital of France?", experimental_telemetry: telemetry,
}));
writeFileSync(here + "text.otlp.json", JSON.stringify(otlp(text), null, 2) + "\n");

const tools = await record("weather", (telemetry) => generateText({
  model: provider.chat("fixture-chat"), prompt: "How is the weather in Lyon?", stopWhen: stepCountIs(3),
  tools: {
    get_weather: tool({
      description: "The weather in a city.", inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => ({ city, sky: "sunny", temp_c: 19 }),
    }),
  },
  experimental_telemetry: telemetry,
}));
writeFileSync(here + "tools.otlp.json", JSON.stringify(otlp(tools), null, 2) + "\n");
writeFileSync(here + "tools.spans.json", JSON.stringify(tools.map(plain), null, 2) + "\n");
console.log(`wrote text.otlp.json (${text.length} spans), tools.otlp.json and tools.spans.json (${tools.length} spans)`);
